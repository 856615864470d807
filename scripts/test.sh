#!/usr/bin/env bash
# Full local check (what CI runs through .ci/run):
#   1. build/           GCC (the default compiler), Release, -Werror: the benchmarks, the
#                       examples, the installed-package consumer test and the API-docs
#                       completeness test;
#   2. build-sanitize/  Debug (-O1), AddressSanitizer + UndefinedBehaviorSanitizer, -Werror:
#                       build and run every unit test. Clang when it is installed (it compiles
#                       the sanitized, template-heavy tests about twice as fast as GCC; set
#                       COULOMB_SANITIZE_CXX to choose another compiler).
#   3. fuzzing          the libFuzzer targets of fuzz/ (clang; built in build-sanitize/, or in
#                       build-fuzz/ when step 2 does not use clang) run for COULOMB_FUZZ_SECONDS
#                       (45) each, all three at once (COULOMB_FUZZ_JOBS; each is bounded by
#                       time, so this halves the step's wall time), from copies of the seed corpora
#                       (scripts/run_fuzzers.sh); any crash, leak or sanitizer report fails.
#                       COULOMB_FUZZ_SECONDS=0 skips the step.
# The unit tests are compiled once, in step 2: a second, unsanitized build of them would double
# the time of the whole check. COULOMB_RELEASE_TESTS=1 also builds and runs them in step 1
# (optimized, with the default compiler).
# Exits non-zero on the first failure and always prints a summary line.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

njobs() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2; }
JOBS="$(njobs)"

step="start"
fuzz_dir=""
start_time=${SECONDS}
finish() {
  local rc=$?
  local elapsed=$((SECONDS - start_time))
  if [[ ${rc} -eq 0 ]]; then
    echo "test.sh: SUMMARY: all steps passed (Release build + sanitized unit tests${fuzz_dir:+ + fuzzing}) in ${elapsed}s"
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
# The fuzzers (step 3) need clang; when step 2 uses it, they are built there.
fuzz_seconds="${COULOMB_FUZZ_SECONDS:-45}"
fuzz_dir=""
if [[ "${fuzz_seconds}" != "0" ]]; then
  if [[ -n "${sanitize_cxx}" && "$(basename "${sanitize_cxx}")" == clang* ]]; then
    fuzz_dir="build-sanitize"
  else
    fuzz_dir="build-fuzz"
  fi
fi
step="configure build-sanitize/ (Debug, ASan+UBSan${sanitize_cxx:+, ${sanitize_cxx}})"
echo "==> ${step}"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCOULOMB_SANITIZE=ON -DCOULOMB_WERROR=ON \
  -DCOULOMB_BUILD_BENCHMARKS=OFF -DCOULOMB_BUILD_EXAMPLES=OFF \
  -DCOULOMB_BUILD_FUZZERS="$([[ "${fuzz_dir}" == build-sanitize ]] && echo ON || echo OFF)" \
  ${sanitize_cxx:+-DCMAKE_CXX_COMPILER="${sanitize_cxx}"}

step="build build-sanitize/"
echo "==> ${step}"
cmake --build build-sanitize -j"${JOBS}"

step="ctest build-sanitize/"
echo "==> ${step}"
ctest --test-dir build-sanitize --output-on-failure -j2 -LE fuzz \
  -E "consumer_package|api_docs_complete|docs_getting_started"

# --- 3. Fuzzing ---------------------------------------------------------------
if [[ "${fuzz_dir}" == "build-fuzz" ]]; then
  step="configure build-fuzz/ (clang, libFuzzer)"
  echo "==> ${step}"
  if ! command -v clang++ >/dev/null 2>&1; then
    echo "test.sh: the fuzzers need clang++ (scripts/install_deps.sh installs it);" \
      "COULOMB_FUZZ_SECONDS=0 skips them" >&2
    exit 1
  fi
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DCOULOMB_WERROR=ON \
    -DCMAKE_CXX_COMPILER="$(command -v clang++)" -DCOULOMB_BUILD_FUZZERS=ON \
    -DCOULOMB_BUILD_TESTS=OFF -DCOULOMB_BUILD_BENCHMARKS=OFF -DCOULOMB_BUILD_EXAMPLES=OFF
  step="build build-fuzz/"
  echo "==> ${step}"
  cmake --build build-fuzz -j"${JOBS}" --target fuzz_model_file fuzz_tsv fuzz_text
fi
if [[ -n "${fuzz_dir}" ]]; then
  step="fuzz (${fuzz_dir}/fuzz, ${fuzz_seconds} s per fuzzer)"
  echo "==> ${step}"
  COULOMB_FUZZ_SECONDS="${fuzz_seconds}" COULOMB_FUZZ_JOBS="${COULOMB_FUZZ_JOBS:-3}" \
    scripts/run_fuzzers.sh "${fuzz_dir}"
fi

step="done"
