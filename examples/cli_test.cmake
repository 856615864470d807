# Runs one command-line test of an example binary (see coulomb_cli_test in CMakeLists.txt).
#   EXE     the binary
#   ARGS    its arguments, separated by '|'
#   EXPECT  PASS (exit status 0) or FAIL (non-zero exit status)
#   REGEX   must match stdout + stderr
string(REPLACE "|" ";" _args "${ARGS}")
execute_process(COMMAND "${EXE}" ${_args}
                RESULT_VARIABLE _status
                OUTPUT_VARIABLE _out
                ERROR_VARIABLE _err
                TIMEOUT 50)
set(_all "${_out}${_err}")
string(REPLACE ";" " " _shown_args "${_args}")
if(EXPECT STREQUAL "PASS" AND NOT _status STREQUAL "0")
  message(FATAL_ERROR "`${EXE} ${_shown_args}` exited with ${_status}, expected 0; output:\n${_all}")
endif()
if(EXPECT STREQUAL "FAIL" AND (_status STREQUAL "0" OR NOT _status MATCHES "^[0-9]+$"))
  message(FATAL_ERROR
            "`${EXE} ${_shown_args}` exited with '${_status}', expected a non-zero exit status "
            "(and no crash); output:\n${_all}")
endif()
if(NOT _all MATCHES "${REGEX}")
  message(FATAL_ERROR "`${EXE} ${_shown_args}`: output does not match '${REGEX}':\n${_all}")
endif()
message(STATUS "`${EXE} ${_shown_args}`: exit status ${_status}, output matches '${REGEX}'")
