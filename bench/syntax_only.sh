#!/bin/sh
# Compiler launcher of the benchmarks under COULOMB_BENCH_SYNTAX_ONLY (bench/CMakeLists.txt): runs
# the compile command, which has -fsyntax-only, then creates the object file it names (-o), empty,
# so that make finds the benchmark up to date until its sources change.
out=""
prev=""
for arg in "$@"; do
  [ "${prev}" = "-o" ] && out="${arg}"
  prev="${arg}"
done
"$@" || exit $?
if [ -n "${out}" ]; then
  : >"${out}"
fi
