#!/usr/bin/env bash
# Full local check:
#   1. build/           Release, -Werror: build everything, run all CTest tests
#                       (unit tests + installed-package consumer test);
#   2. build-sanitize/  Debug, ASan+UBSan: build and run the unit tests.
# Exits non-zero on the first failure and always prints a summary line.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

njobs() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2; }
JOBS="$(njobs)"

step="start"
start_time=${SECONDS}
finish() {
  local rc=$?
  local elapsed=$((SECONDS - start_time))
  if [[ ${rc} -eq 0 ]]; then
    echo "test.sh: SUMMARY: all steps passed (Release + sanitizer builds) in ${elapsed}s"
  else
    echo "test.sh: SUMMARY: FAILED during '${step}' (exit status ${rc}) after ${elapsed}s" >&2
  fi
}
trap finish EXIT

step="install dependencies"
scripts/install_deps.sh

# --- 1. Release build with warnings as errors ------------------------------
step="configure build/ (Release)"
echo "==> ${step}"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOULOMB_WERROR=ON

step="build build/"
echo "==> ${step}"
cmake --build build -j"${JOBS}"

step="ctest build/"
echo "==> ${step}"
ctest --test-dir build --output-on-failure -j2

# --- 2. Debug build with AddressSanitizer + UndefinedBehaviorSanitizer ------
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

step="configure build-sanitize/ (Debug, ASan+UBSan)"
echo "==> ${step}"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCOULOMB_SANITIZE=ON \
  -DCOULOMB_BUILD_BENCHMARKS=OFF -DCOULOMB_BUILD_EXAMPLES=OFF

step="build build-sanitize/"
echo "==> ${step}"
cmake --build build-sanitize -j"${JOBS}"

step="ctest build-sanitize/"
echo "==> ${step}"
ctest --test-dir build-sanitize --output-on-failure -j2 -E "consumer_package|api_docs_complete"

step="done"
