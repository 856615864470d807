# Installed-package test for coulomb (run by CTest as `consumer_package`).
#
#   cmake -DCOULOMB_BUILD_DIR=<coulomb build tree>
#         -DCONSUMER_SOURCE_DIR=<this directory>
#         -DWORK_DIR=<scratch directory, wiped first>
#         [-DCONFIG=<build config>] [-DGENERATOR=<generator>]
#         [-DGENERATOR_PLATFORM=...] [-DGENERATOR_TOOLSET=...]
#         [-DMAKE_PROGRAM=...] [-DTOOLCHAIN_FILE=...]
#         [-DCXX_COMPILER=<compiler>] [-DEIGEN3_DIR=<dir>] [-DEXE_SUFFIX=.exe]
#         -P run_consumer_test.cmake
#
# Steps: install the build tree into WORK_DIR/prefix, configure + build the
# consumer project with CMAKE_PREFIX_PATH=WORK_DIR/prefix, run its executable.
# Any failure is fatal (non-zero exit status).

cmake_minimum_required(VERSION 3.20)

foreach(var IN ITEMS COULOMB_BUILD_DIR CONSUMER_SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

if(NOT DEFINED CONFIG OR "${CONFIG}" STREQUAL "")
  set(CONFIG Release)
endif()

set(prefix "${WORK_DIR}/prefix")
set(consumer_build "${WORK_DIR}/build")

# Runs a command, echoing it first; aborts on a non-zero exit status.
function(run_step what)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "[consumer_package] ${what}: ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[consumer_package] ${what} FAILED (exit status: ${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# 1. Install the coulomb build tree into a scratch prefix.
run_step("install coulomb" "${CMAKE_COMMAND}" --install "${COULOMB_BUILD_DIR}"
         --config "${CONFIG}" --prefix "${prefix}")

if(NOT EXISTS "${prefix}/include/coulomb/coulomb.hpp")
  message(FATAL_ERROR "[consumer_package] include/coulomb/coulomb.hpp was not installed")
endif()
file(GLOB_RECURSE config_files "${prefix}/*/coulombConfig.cmake")
file(GLOB_RECURSE version_files "${prefix}/*/coulombConfigVersion.cmake")
file(GLOB_RECURSE targets_files "${prefix}/*/coulombTargets.cmake")
if(NOT config_files OR NOT version_files OR NOT targets_files)
  message(FATAL_ERROR "[consumer_package] coulombConfig/ConfigVersion/Targets.cmake not installed")
endif()

# 2. Configure the consumer against the installed package only.
set(configure_cmd "${CMAKE_COMMAND}" -S "${CONSUMER_SOURCE_DIR}" -B "${consumer_build}"
                  "-DCMAKE_PREFIX_PATH=${prefix}" "-DCMAKE_BUILD_TYPE=${CONFIG}"
                  -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_cmd -G "${GENERATOR}")
endif()
if(GENERATOR_PLATFORM)
  list(APPEND configure_cmd -A "${GENERATOR_PLATFORM}")
endif()
if(GENERATOR_TOOLSET)
  list(APPEND configure_cmd -T "${GENERATOR_TOOLSET}")
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_cmd "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(TOOLCHAIN_FILE)
  list(APPEND configure_cmd "-DCMAKE_TOOLCHAIN_FILE=${TOOLCHAIN_FILE}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_cmd "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(EIGEN3_DIR)
  list(APPEND configure_cmd "-DEigen3_DIR=${EIGEN3_DIR}")
endif()
run_step("configure consumer" ${configure_cmd})

# The package must have been found in the scratch prefix, not elsewhere.
file(STRINGS "${consumer_build}/CMakeCache.txt" coulomb_dir_line REGEX "^coulomb_DIR:")
string(REGEX REPLACE "^coulomb_DIR:[A-Z]+=" "" coulomb_dir "${coulomb_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${coulomb_dir}")
  file(REAL_PATH "${coulomb_dir}" coulomb_dir)
endif()
string(FIND "${coulomb_dir}" "${real_prefix}/" pos)
if(NOT pos EQUAL 0)
  message(FATAL_ERROR "[consumer_package] coulomb was found in '${coulomb_dir}', "
                      "not in the scratch prefix '${real_prefix}'")
endif()

# 3. Build it.
run_step("build consumer" "${CMAKE_COMMAND}" --build "${consumer_build}" --config "${CONFIG}")

# 4. Run it (the consumer puts its executable in <build>/bin for every config).
set(exe "${consumer_build}/bin/coulomb_consumer${EXE_SUFFIX}")
if(NOT EXISTS "${exe}")
  message(FATAL_ERROR "[consumer_package] consumer executable not found: ${exe}")
endif()
run_step("run consumer" "${exe}")

message(STATUS "[consumer_package] OK")
