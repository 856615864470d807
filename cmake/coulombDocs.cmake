# The Doxygen API reference: target coulomb_docs (HTML in <build>/docs/html), and, when tests
# are built, the CTest test api_docs_complete, which fails if a public entity in one of the
# COULOMB_DOCUMENTED_AREAS (folders of include/coulomb/) has no documentation comment.
option(COULOMB_BUILD_DOCS "Add the coulomb_docs target when Doxygen is found" ${PROJECT_IS_TOP_LEVEL})
set(COULOMB_DOCUMENTED_AREAS "core;features;text;metrics;attention;nn;particles;baselines;train;io;data;mpi"
    CACHE STRING "Folders of include/coulomb/ whose public API must be fully documented")

if(COULOMB_BUILD_DOCS)
  find_package(Doxygen QUIET)
  if(DOXYGEN_FOUND)
    set(COULOMB_DOCS_OUTPUT "${PROJECT_BINARY_DIR}/docs")
    set(COULOMB_DOCS_WARN_AS_ERROR NO)
    file(MAKE_DIRECTORY "${COULOMB_DOCS_OUTPUT}")
    configure_file("${PROJECT_SOURCE_DIR}/docs/Doxyfile.in" "${COULOMB_DOCS_OUTPUT}/Doxyfile" @ONLY)
    add_custom_target(
      coulomb_docs
      COMMAND Doxygen::doxygen "${COULOMB_DOCS_OUTPUT}/Doxyfile"
      WORKING_DIRECTORY "${COULOMB_DOCS_OUTPUT}"
      COMMENT "Doxygen API reference in ${COULOMB_DOCS_OUTPUT}/html"
      VERBATIM)
    if(COULOMB_BUILD_TESTS)
      add_test(NAME api_docs_complete
               COMMAND "${CMAKE_COMMAND}" "-DDOXYGEN=$<TARGET_FILE:Doxygen::doxygen>"
                       "-DDOXYFILE=${COULOMB_DOCS_OUTPUT}/Doxyfile"
                       "-DLOG=${COULOMB_DOCS_OUTPUT}/warnings.log"
                       "-DAREAS=${COULOMB_DOCUMENTED_AREAS}"
                       -P "${PROJECT_SOURCE_DIR}/cmake/check_api_docs.cmake"
               WORKING_DIRECTORY "${COULOMB_DOCS_OUTPUT}")
      set_tests_properties(api_docs_complete PROPERTIES TIMEOUT 600 LABELS "docs")
    endif()
  else()
    message(STATUS "coulomb: Doxygen not found; no coulomb_docs target (apt install doxygen)")
  endif()
endif()
