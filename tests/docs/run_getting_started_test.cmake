# The code of docs/getting_started.md, compiled and run (CTest test `docs_getting_started`).
#
#   cmake -DPAGE=<docs/getting_started.md> -DSOURCE_DIR=<coulomb source tree>
#         -DCOULOMB_BUILD_DIR=<coulomb build tree> -DWORK_DIR=<scratch directory, wiped first>
#         [-DCONFIG=<config of the build tree>] [-DGENERATOR=<generator>] [-DMAKE_PROGRAM=<make>]
#         [-DCXX_COMPILER=<compiler>] [-DEIGEN3_DIR=<dir>] [-DEXE_SUFFIX=.exe]
#         -P run_getting_started_test.cmake
#
# The page marks each code block that belongs to a file with an HTML comment (invisible on the
# rendered page) at the start of the line before the block's opening fence:
#
#   <!-- file: project/main.cpp -->
#
# Blocks with the same file name are joined in page order. The test writes the files under
# WORK_DIR, so what is compiled is the text of the page itself and the two cannot drift apart.
# Then it
#   1. installs the coulomb build tree into WORK_DIR/prefix;
#   2. configures project/ (the page's find_package project) against that prefix only, with
#      -Wall -Wextra -Wpedantic -Werror, builds it and runs the program, which must exit with 0;
#   3. configures vendored/ (the page's add_subdirectory project) with the source tree in
#      vendored/external/coulomb, which checks that its target names exist.
# It fails if a file the page should hold is missing, or at the first failing step.

cmake_minimum_required(VERSION 3.20)

foreach(var IN ITEMS PAGE SOURCE_DIR COULOMB_BUILD_DIR WORK_DIR)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_getting_started_test.cmake: -D${var}=... is required")
  endif()
endforeach()
if(NOT DEFINED CONFIG OR "${CONFIG}" STREQUAL "")
  set(CONFIG Release)
endif()

# The files the page must define, and the program its CMake project builds.
set(expected_files project/CMakeLists.txt project/main.cpp vendored/CMakeLists.txt)
set(program first_steps)

function(run_step what)
  string(REPLACE ";" " " pretty "${ARGN}")
  message(STATUS "[docs_getting_started] ${what}: ${pretty}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[docs_getting_started] ${what} FAILED (exit status: ${rc})")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# --- extract the marked code blocks ---------------------------------------------------------
file(READ "${PAGE}" rest)
set(rest "\n${rest}")  # a marker counts only at the start of a line
set(marker "\n<!-- file: ")
string(LENGTH "${marker}" marker_length)
set(found_files "")
while(TRUE)
  string(FIND "${rest}" "${marker}" at)
  if(at EQUAL -1)
    break()
  endif()
  math(EXPR at "${at} + ${marker_length}")
  string(SUBSTRING "${rest}" ${at} -1 rest)
  string(FIND "${rest}" " -->" end)
  if(end EQUAL -1)
    message(FATAL_ERROR "[docs_getting_started] ${PAGE}: unterminated '<!-- file: ' comment")
  endif()
  string(SUBSTRING "${rest}" 0 ${end} name)
  string(SUBSTRING "${rest}" ${end} -1 rest)
  # The block must open on the next line: " -->\n```lang\n".
  string(REGEX MATCH "^ -->\r?\n```[^\n]*\n" opening "${rest}")
  if(opening STREQUAL "")
    message(FATAL_ERROR "[docs_getting_started] ${PAGE}: the line after '<!-- file: ${name} -->' "
                        "must open a code block (```)")
  endif()
  string(LENGTH "${opening}" opening_length)
  string(SUBSTRING "${rest}" ${opening_length} -1 rest)
  string(FIND "${rest}" "\n```" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "[docs_getting_started] ${PAGE}: the code block of '${name}' is not closed")
  endif()
  math(EXPR block_length "${close} + 1")  # keep the block's last newline
  string(SUBSTRING "${rest}" 0 ${block_length} block)
  string(SUBSTRING "${rest}" ${block_length} -1 rest)
  file(APPEND "${WORK_DIR}/${name}" "${block}")
  list(APPEND found_files "${name}")
endwhile()
list(REMOVE_DUPLICATES found_files)
foreach(name IN LISTS expected_files)
  if(NOT name IN_LIST found_files)
    message(FATAL_ERROR "[docs_getting_started] ${PAGE} has no code block marked "
                        "'<!-- file: ${name} -->' (found: ${found_files})")
  endif()
endforeach()
message(STATUS "[docs_getting_started] extracted from ${PAGE}: ${found_files}")

# --- 1. install coulomb into a scratch prefix -----------------------------------------------
set(prefix "${WORK_DIR}/prefix")
run_step("install coulomb" "${CMAKE_COMMAND}" --install "${COULOMB_BUILD_DIR}" --config "${CONFIG}"
         --prefix "${prefix}")

# The page's projects are built in Release, as the page tells its reader to: unoptimized, the
# program's Eigen code ran 18 s of the test's 43 (clang, 2026-12-06); optimized, 0.4 s.
set(page_config Release)
set(common_args "-DCMAKE_BUILD_TYPE=${page_config}" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(MAKE_PROGRAM)
  list(APPEND common_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(EIGEN3_DIR)
  list(APPEND common_args "-DEigen3_DIR=${EIGEN3_DIR}")
endif()

# --- 2. the find_package project: configure, build (warnings are errors), run ---------------
set(project_build "${WORK_DIR}/project-build")
run_step("configure the page's project" "${CMAKE_COMMAND}" -S "${WORK_DIR}/project"
         -B "${project_build}" ${common_args} "-DCMAKE_PREFIX_PATH=${prefix}"
         "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Werror")
file(STRINGS "${project_build}/CMakeCache.txt" coulomb_dir_line REGEX "^coulomb_DIR:")
string(REGEX REPLACE "^coulomb_DIR:[A-Z]+=" "" coulomb_dir "${coulomb_dir_line}")
file(REAL_PATH "${prefix}" real_prefix)
if(EXISTS "${coulomb_dir}")
  file(REAL_PATH "${coulomb_dir}" coulomb_dir)
endif()
string(FIND "${coulomb_dir}" "${real_prefix}/" pos)
if(NOT pos EQUAL 0)
  message(FATAL_ERROR "[docs_getting_started] coulomb was found in '${coulomb_dir}', "
                      "not in the scratch prefix '${real_prefix}'")
endif()
run_step("build the page's project" "${CMAKE_COMMAND}" --build "${project_build}"
         --config "${page_config}")
set(exe "${project_build}/${program}${EXE_SUFFIX}")
if(NOT EXISTS "${exe}")
  file(GLOB_RECURSE exe "${project_build}/${program}${EXE_SUFFIX}")
endif()
if(NOT exe)
  message(FATAL_ERROR "[docs_getting_started] the page's project built no '${program}'")
endif()
run_step("run ${program}" "${exe}")

# --- 3. the add_subdirectory project: configure only ----------------------------------------
file(MAKE_DIRECTORY "${WORK_DIR}/vendored/external")
file(CREATE_LINK "${SOURCE_DIR}" "${WORK_DIR}/vendored/external/coulomb" SYMBOLIC)
file(COPY "${WORK_DIR}/project/main.cpp" DESTINATION "${WORK_DIR}/vendored")
run_step("configure the page's add_subdirectory project" "${CMAKE_COMMAND}"
         -S "${WORK_DIR}/vendored" -B "${WORK_DIR}/vendored-build" ${common_args})

message(STATUS "[docs_getting_started] OK")
