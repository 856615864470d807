#!/usr/bin/env bash
# Full local check (what CI runs through .ci/run):
#   1. build/           GCC (the default compiler), Release, -Werror: the benchmarks, the
#                       examples, the installed-package consumer test and the API-docs
#                       completeness test;
#   2. build-sanitize/  Debug (-O1), AddressSanitizer + UndefinedBehaviorSanitizer, -Werror:
#                       build and run every unit test. Clang when it is installed (it compiles
#                       the sanitized, template-heavy tests about twice as fast as GCC; set
#                       COULOMB_SANITIZE_CXX to choose another compiler).
# The unit tests are compiled once, in step 2: a second, unsanitized build of them would double
# the time of the whole check. COULOMB_RELEASE_TESTS=1 also builds and runs them in step 1
# (optimized, with the default compiler).
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
    echo "test.sh: SUMMARY: all steps passed (Release build + sanitized unit tests) in ${elapsed}s"
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
release_tests=OFF
[[ "${COULOMB_RELEASE_TESTS:-0}" == "1" ]] && release_tests=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCOULOMB_WERROR=ON \
  -DCOULOMB_BUILD_UNIT_TESTS="${release_tests}"

step="build build/"
echo "==> ${step}"
cmake --build build -j"${JOBS}"

step="ctest build/"
echo "==> ${step}"
ctest --test-dir build --output-on-failure -j2

# --- 2. Debug build with AddressSanitizer + UndefinedBehaviorSanitizer ------
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

sanitize_cxx="${COULOMB_SANITIZE_CXX:-}"
if [[ -z "${sanitize_cxx}" ]] && command -v clang++ >/dev/null 2>&1; then
  sanitize_cxx="$(command -v clang++)"
fi
step="configure build-sanitize/ (Debug, ASan+UBSan${sanitize_cxx:+, ${sanitize_cxx}})"
echo "==> ${step}"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCOULOMB_SANITIZE=ON -DCOULOMB_WERROR=ON \
  -DCOULOMB_BUILD_BENCHMARKS=OFF -DCOULOMB_BUILD_EXAMPLES=OFF \
  ${sanitize_cxx:+-DCMAKE_CXX_COMPILER="${sanitize_cxx}"}

step="build build-sanitize/"
echo "==> ${step}"
cmake --build build-sanitize -j"${JOBS}"

step="ctest build-sanitize/"
echo "==> ${step}"
ctest --test-dir build-sanitize --output-on-failure -j2 -E "consumer_package|api_docs_complete"

step="done"
