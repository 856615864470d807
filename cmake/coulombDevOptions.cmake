# Developer-only build settings for coulomb's own tests, benchmarks and examples.
#
# Defines two INTERFACE helper targets that are linked PRIVATEly into the
# project's own executables and are never installed or exported:
#
#   coulomb_warnings     -Wall -Wextra -Wpedantic (+ -Werror if COULOMB_WERROR)
#   coulomb_dev_options  -march=native (COULOMB_NATIVE) and sanitizers
#                        (COULOMB_SANITIZE)
#
# and the function coulomb_add_dev_target(<target>) that links both.

include_guard(GLOBAL)
include(CheckCXXCompilerFlag)
include(CheckCXXSourceCompiles)

# --- warnings ---------------------------------------------------------------
add_library(coulomb_warnings INTERFACE)
if(MSVC)
  target_compile_options(coulomb_warnings INTERFACE /W4 /permissive-
                                                    $<$<BOOL:${COULOMB_WERROR}>:/WX>)
else()
  target_compile_options(coulomb_warnings INTERFACE -Wall -Wextra -Wpedantic
                                                    $<$<BOOL:${COULOMB_WERROR}>:-Werror>)
endif()

# --- -march=native and sanitizers ---------------------------------------------
add_library(coulomb_dev_options INTERFACE)

if(COULOMB_NATIVE)
  if(MSVC)
    message(STATUS "coulomb: COULOMB_NATIVE has no effect with MSVC")
  else()
    check_cxx_compiler_flag("-march=native" COULOMB_HAVE_MARCH_NATIVE)
    if(COULOMB_HAVE_MARCH_NATIVE)
      target_compile_options(coulomb_dev_options INTERFACE -march=native)
      # GCC < 13 with AVX-512: the intrinsic headers (`__m512d __Y = __Y;`, GCC
      # bug 105593) produce bogus -W(maybe-)uninitialized warnings once inlined
      # into Eigen kernels, which would break -Werror builds. Silence them only
      # in that configuration.
      if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
        set(CMAKE_REQUIRED_FLAGS "-march=native")
        check_cxx_source_compiles(
          "#ifndef __AVX512F__\n#error no AVX-512\n#endif\nint main() { return 0; }"
          COULOMB_NATIVE_HAS_AVX512)
        unset(CMAKE_REQUIRED_FLAGS)
        if(COULOMB_NATIVE_HAS_AVX512)
          target_compile_options(coulomb_dev_options INTERFACE -Wno-uninitialized
                                                               -Wno-maybe-uninitialized)
        endif()
      endif()
    else()
      message(STATUS "coulomb: compiler does not accept -march=native; COULOMB_NATIVE ignored")
    endif()
  endif()
endif()

# Clang 13 and later: UBSan checks only in coulomb's own code, not in Eigen's and Catch2's
# functions (cmake/sanitize_ignorelist.txt says why); also used by the fuzzers (fuzz/).
set(COULOMB_SANITIZE_IGNORELIST_OPTIONS "")
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  set(COULOMB_SANITIZE_IGNORELIST_OPTIONS
      "-fsanitize-ignorelist=${PROJECT_SOURCE_DIR}/cmake/sanitize_ignorelist.txt")
endif()

if(COULOMB_SANITIZE)
  if(MSVC)
    message(FATAL_ERROR "coulomb: COULOMB_SANITIZE is only supported with GCC/Clang")
  endif()
  set(_coulomb_san_flags -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=all)
  target_compile_options(coulomb_dev_options INTERFACE ${_coulomb_san_flags}
                                                       ${COULOMB_SANITIZE_IGNORELIST_OPTIONS})
  target_link_options(coulomb_dev_options INTERFACE ${_coulomb_san_flags})
  unset(_coulomb_san_flags)
endif()

# LLVM's fast instruction selector (-mllvm -fast-isel) instead of SelectionDAG, for compile time
# only: the sanitizers instrument the IR before instruction selection, so they check the same
# code. scripts/test.sh turns it on for its sanitized clang build (about 0.85 of the build time,
# tests about 1.1 of theirs). Compile options only: as a link option clang warns it is unused.
set(COULOMB_FAST_ISEL_OPTIONS "")
if(COULOMB_FAST_ISEL)
  if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    set(COULOMB_FAST_ISEL_OPTIONS "SHELL:-mllvm -fast-isel")
    target_compile_options(coulomb_dev_options INTERFACE ${COULOMB_FAST_ISEL_OPTIONS})
  else()
    message(STATUS "coulomb: COULOMB_FAST_ISEL needs clang; ignored")
  endif()
endif()

function(coulomb_add_dev_target target)
  target_link_libraries(${target} PRIVATE coulomb_warnings coulomb_dev_options)
endfunction()
