# Kill-and-resume of a data-parallel run of text_classification (see the mpi command-line tests
# in CMakeLists.txt):
#   1. an uninterrupted run of NP processes, saving its model;
#   2. the same run with checkpoints every EVERY steps, where process KILL_RANK kills itself
#      (SIGKILL) after Phase B's step KILL_STEP (the tool's test hook
#      COULOMB_TEST_KILL_RANK_AT_STEP): mpirun must exit non-zero, saying that a process was
#      killed, with the checkpoints written and no model saved;
#   3. the same command with --resume (the hook armed at step 1, which a run that started afresh
#      would reach): exit status 0, the same standard output as run 1 (the
#      timing line aside), the same metrics in the report and the same model file, byte for byte.
#   MPIEXEC  mpirun;  NP  the number of processes;  MPIFLAGS  its flags, separated by '|'
#   EXE      the tool;  ARGS  its arguments, separated by '|';  DIR  a scratch directory
#   KILL_RANK, KILL_STEP, EVERY  as above;  JSON_NAME  the report's file name in --out
string(REPLACE "|" ";" _args "${ARGS}")
string(REPLACE "|" ";" _mpiflags "${MPIFLAGS}")
set(_mpirun "${MPIEXEC}" -np ${NP} ${_mpiflags} "${EXE}")
file(REMOVE_RECURSE "${DIR}")
file(MAKE_DIRECTORY "${DIR}")

include("${CMAKE_CURRENT_LIST_DIR}/mpi_cli_common.cmake")

# 1. Uninterrupted.
execute_process(COMMAND ${_mpirun} ${_args} --out "${DIR}/full" --model "${DIR}/full.model"
                RESULT_VARIABLE _status OUTPUT_VARIABLE _full_out ERROR_VARIABLE _err
                TIMEOUT 100)
if(NOT _status STREQUAL "0")
  message(FATAL_ERROR "the uninterrupted run exited with '${_status}':\n${_full_out}${_err}")
endif()

# 2. Killed after Phase B's step KILL_STEP.
set(_checkpointed ${_args} --checkpoint "${DIR}/run" --checkpoint-every ${EVERY}
                  --out "${DIR}/resumed" --model "${DIR}/resumed.model")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env
                        "COULOMB_TEST_KILL_RANK_AT_STEP=${KILL_RANK}:${KILL_STEP}"
                        ${_mpirun} ${_checkpointed}
                RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 100)
set(_all "${_out}${_err}")
if(_status STREQUAL "0" OR NOT _status MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the killed run exited with '${_status}', expected a non-zero exit status "
                      "(and no timeout); output:\n${_all}")
endif()
if(NOT _all MATCHES "signal 9|Killed|KILLED")
  message(FATAL_ERROR "the killed run does not say that a process was killed:\n${_all}")
endif()
if(NOT EXISTS "${DIR}/run.phase_b.ckpt" OR NOT EXISTS "${DIR}/run.phase_a.ckpt")
  message(FATAL_ERROR "the killed run left no checkpoints in ${DIR}:\n${_all}")
endif()
if(EXISTS "${DIR}/resumed.model")
  message(FATAL_ERROR "the killed run saved a model")
endif()
message(STATUS "killed run: exit status ${_status}")

# 3. Resumed. The kill hook is armed at Phase B's step 1: a run that started afresh instead of
#    continuing from the checkpoint would be killed there.
execute_process(COMMAND "${CMAKE_COMMAND}" -E env "COULOMB_TEST_KILL_RANK_AT_STEP=${KILL_RANK}:1"
                        ${_mpirun} ${_checkpointed} --resume
                RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 100)
if(NOT _status STREQUAL "0")
  message(FATAL_ERROR "the resumed run exited with '${_status}':\n${_out}${_err}")
endif()
_stable_stdout("${_full_out}" _full_stable)
_stable_stdout("${_out}" _stable)
if(NOT _stable STREQUAL _full_stable)
  message(FATAL_ERROR "the resumed run printed\n${_stable}\nthe uninterrupted run\n${_full_stable}")
endif()
_metrics_of("${DIR}/full/${JSON_NAME}" _full_metrics)
_metrics_of("${DIR}/resumed/${JSON_NAME}" _metrics)
if(NOT _metrics STREQUAL _full_metrics)
  message(FATAL_ERROR "the resumed run's metrics differ from the uninterrupted run's:\n"
                      "${_metrics}\nuninterrupted:\n${_full_metrics}")
endif()
file(SHA256 "${DIR}/full.model" _full_hash)
file(SHA256 "${DIR}/resumed.model" _hash)
if(NOT _hash STREQUAL _full_hash)
  message(FATAL_ERROR "the resumed run's model file differs from the uninterrupted run's")
endif()
message(STATUS "resumed run: the uninterrupted run's output, metrics and model (sha256 ${_hash})")
