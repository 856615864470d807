# Runs a tool under mpirun (see the mpi command-line tests in CMakeLists.txt).
#   MPIEXEC  mpirun;  NP  the number of processes;  MPIFLAGS  its flags, separated by '|'
#   EXE      the tool;  ARGS  its arguments, separated by '|'
#   MODE     PASS (exit status 0), FAIL (a non-zero exit status), or SAME_AS_PLAIN: the tool is
#            also run plainly (without mpirun) first, and both runs must exit with 0 and print
#            the same standard output, except the timing line ("phase A … s, phase B … s"), and
#            write the same "metrics" in the JSON report JSON
#   ONCE     a regex that must match exactly once in stdout + stderr (optional)
#   ABSENT   a regex that must not match stdout + stderr (optional)
#   JSON     the report the runs write (SAME_AS_PLAIN)
string(REPLACE "|" ";" _args "${ARGS}")
string(REPLACE "|" ";" _mpiflags "${MPIFLAGS}")
set(_mpirun "${MPIEXEC}" -np ${NP} ${_mpiflags})
string(REPLACE ";" " " _shown "${_mpirun} ${EXE} ${_args}")

include("${CMAKE_CURRENT_LIST_DIR}/mpi_cli_common.cmake")

if(MODE STREQUAL "SAME_AS_PLAIN")
  execute_process(COMMAND "${EXE}" ${_args} RESULT_VARIABLE _plain_status
                  OUTPUT_VARIABLE _plain_out ERROR_VARIABLE _plain_err TIMEOUT 100)
  if(NOT _plain_status STREQUAL "0")
    message(FATAL_ERROR "the plain run exited with ${_plain_status}:\n${_plain_out}${_plain_err}")
  endif()
  _metrics_of("${JSON}" _plain_metrics)
endif()

execute_process(COMMAND ${_mpirun} "${EXE}" ${_args} RESULT_VARIABLE _status
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 100)
set(_all "${_out}${_err}")
if(MODE STREQUAL "FAIL")
  if(_status STREQUAL "0" OR NOT _status MATCHES "^[0-9]+$")
    message(FATAL_ERROR "`${_shown}` exited with '${_status}', expected a non-zero exit status "
                        "(and no timeout); output:\n${_all}")
  endif()
elseif(NOT _status STREQUAL "0")
  message(FATAL_ERROR "`${_shown}` exited with '${_status}', expected 0; output:\n${_all}")
endif()
if(DEFINED ONCE)
  string(REGEX MATCHALL "${ONCE}" _hits "${_all}")
  list(LENGTH _hits _count)
  if(NOT _count EQUAL 1)
    message(FATAL_ERROR "`${_shown}`: '${ONCE}' appears ${_count} times, expected once; "
                        "output:\n${_all}")
  endif()
endif()
if(DEFINED ABSENT AND _all MATCHES "${ABSENT}")
  message(FATAL_ERROR "`${_shown}`: '${ABSENT}' appears in the output:\n${_all}")
endif()
if(MODE STREQUAL "SAME_AS_PLAIN")
  _stable_stdout("${_plain_out}" _plain_stable)
  _stable_stdout("${_out}" _stable)
  if(NOT _stable STREQUAL _plain_stable)
    message(FATAL_ERROR "`${_shown}` printed\n${_stable}\nthe plain run printed\n${_plain_stable}")
  endif()
  _metrics_of("${JSON}" _metrics)
  if(NOT _metrics STREQUAL _plain_metrics)
    message(FATAL_ERROR "`${_shown}`: the report's metrics differ from the plain run's:\n"
                        "${_metrics}\nplain:\n${_plain_metrics}")
  endif()
endif()
message(STATUS "`${_shown}`: exit status ${_status}, output as expected")
