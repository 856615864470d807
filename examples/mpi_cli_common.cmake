# Functions shared by the MPI command-line test scripts (mpi_cli_test.cmake,
# mpi_kill_resume_test.cmake).

# `text` without what differs from run to run: the timing line, and the lines naming the report
# files (runs compared with each other may write into different folders).
function(_stable_stdout text out)
  string(REGEX REPLACE "phase A [^\n]* ms per 1,000 sequences\n" "" _text "${text}")
  string(REGEX REPLACE "report: [^\n]*\nreliability diagram: [^\n]*\n" "" _text "${_text}")
  set(${out} "${_text}" PARENT_SCOPE)
endfunction()

# The "metrics" object of the JSON report `file`.
function(_metrics_of file out)
  file(READ "${file}" _json)
  string(JSON _metrics GET "${_json}" metrics)
  set(${out} "${_metrics}" PARENT_SCOPE)
endfunction()
