# Runs sequence_tasks plainly and under mpirun with the same arguments (the mpi command-line
# tests of sequence_tasks in CMakeLists.txt).
#   MPIEXEC  mpirun;  NP  the number of processes;  MPIFLAGS  its flags, separated by '|'
#   EXE      sequence_tasks;  ARGS  its arguments, separated by '|';  DIR  the runs write
#            DIR/plain and DIR/np<NP> (emptied first)
# Both runs must exit with 0. Under mpirun each task's result line ("<task> <cell>: test
# accuracy …") must appear exactly once (rank 0 alone prints), with the accuracies and the epoch
# of the plain run's line; and the rows of runs.csv must equal the plain run's but for the
# timing columns (train_s, tokens_per_s, eval_s, phase_a_s).
string(REPLACE "|" ";" _args "${ARGS}")
string(REPLACE "|" ";" _mpiflags "${MPIFLAGS}")
set(_mpirun "${MPIEXEC}" -np ${NP} ${_mpiflags})
string(REPLACE ";" " " _shown "${_mpirun} ${EXE} ${_args}")
file(REMOVE_RECURSE "${DIR}/plain" "${DIR}/np${NP}")

execute_process(COMMAND "${EXE}" ${_args} --out "${DIR}/plain" RESULT_VARIABLE _plain_status
                OUTPUT_VARIABLE _plain_out ERROR_VARIABLE _plain_err TIMEOUT 100)
if(NOT _plain_status STREQUAL "0")
  message(FATAL_ERROR "the plain run exited with ${_plain_status}:\n${_plain_out}${_plain_err}")
endif()
execute_process(COMMAND ${_mpirun} "${EXE}" ${_args} --out "${DIR}/np${NP}"
                RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 100)
set(_all "${_out}${_err}")
if(NOT _status STREQUAL "0")
  message(FATAL_ERROR "`${_shown}` exited with '${_status}', expected 0; output:\n${_all}")
endif()

# The result lines without their timings: "<task> <cell>: test accuracy A % (dev D % at epoch E)".
set(_result "sequence_tasks: [a-z]+ [^:\n]+: test accuracy [^\n]* at epoch [0-9]+\\)")
string(REGEX MATCHALL "${_result}" _plain_lines "${_plain_err}")
string(REGEX MATCHALL "${_result}" _lines "${_all}")
list(LENGTH _plain_lines _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "the plain run printed no result line:\n${_plain_err}")
endif()
foreach(_line IN LISTS _plain_lines)
  # The occurrences of the plain run's line, as text.
  set(_hit_count 0)
  set(_rest "${_all}")
  string(LENGTH "${_line}" _line_length)
  string(FIND "${_rest}" "${_line}" _at)
  while(_at GREATER -1)
    math(EXPR _hit_count "${_hit_count} + 1")
    math(EXPR _at "${_at} + ${_line_length}")
    string(SUBSTRING "${_rest}" ${_at} -1 _rest)
    string(FIND "${_rest}" "${_line}" _at)
  endwhile()
  if(NOT _hit_count EQUAL 1)
    message(FATAL_ERROR "`${_shown}`: '${_line}' (the plain run's) appears ${_hit_count} times, "
                        "expected once; output:\n${_all}")
  endif()
endforeach()
list(LENGTH _lines _mpi_count)
if(NOT _mpi_count EQUAL _count)
  message(FATAL_ERROR "`${_shown}` printed ${_mpi_count} result lines, the plain run ${_count}:\n"
                      "${_all}")
endif()

# runs.csv without the timing columns (values 7 to 10: fields 14 to 17).
function(_untimed_rows file out)
  file(STRINGS "${file}" _rows)
  set(_kept "")
  foreach(_row IN LISTS _rows)
    string(REPLACE "," ";" _fields "${_row}")
    list(REMOVE_AT _fields 14 15 16 17)
    list(JOIN _fields "," _joined)
    string(APPEND _kept "${_joined}\n")
  endforeach()
  set(${out} "${_kept}" PARENT_SCOPE)
endfunction()
_untimed_rows("${DIR}/plain/runs.csv" _plain_rows)
_untimed_rows("${DIR}/np${NP}/runs.csv" _rows)
if(NOT _rows STREQUAL _plain_rows)
  message(FATAL_ERROR "`${_shown}` wrote\n${_rows}the plain run\n${_plain_rows}")
endif()
message(STATUS "`${_shown}`: exit status 0, the plain run's results, printed once")
