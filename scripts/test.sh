#!/usr/bin/env bash
# Full local check (what CI runs through .ci/run):
#   1. build-check/     unoptimized (-O0), -Werror, clang when it is installed (COULOMB_CHECK_CXX
#                       chooses another compiler, for example g++): the examples, the benchmarks
#                       (only checked, -fsyntax-only), the examples' command-line tests, the
#                       installed-package consumer test, the getting-started test and the
#                       API-docs completeness test;
#   2. build-sanitize/  Debug (-O1, no -march=native), AddressSanitizer + UndefinedBehaviorSanitizer,
#                       -Werror: every unit test (the quick areas at -O0, tests/CMakeLists.txt).
#                       Clang when it is installed (it compiles the sanitized, template-heavy
#                       tests about twice as fast as GCC; set COULOMB_SANITIZE_CXX to choose
#                       another compiler).
#   3. fuzzing          the libFuzzer targets of fuzz/ (clang; built in build-sanitize/, or in
#                       build-fuzz/ when step 2 does not use clang) run for COULOMB_FUZZ_SECONDS
#                       (45) each, all three at once (COULOMB_FUZZ_JOBS; each is bounded by
#                       time, so this divides the step's wall time), from copies of the seed
#                       corpora (scripts/run_fuzzers.sh); any crash, leak or sanitizer report
#                       fails. COULOMB_FUZZ_SECONDS=0 skips the step.
# Steps 1 and 2 are configured at the same time, and built at the same time in one pool of as many
# jobs as cores (scripts/parallel_builds.mk; their logs go to build-check/build.log and
# build-sanitize/build.log; a failing build prints the end of its log), and step 1's ctest as
# soon as its build ends: on CI's two cores the check is bound by CPU, and this keeps both cores
# busy without oversubscribing them (see the comment above the builds).
# The unit tests are compiled once, in step 2: a second, unsanitized build of them would double
# the time of the whole check. COULOMB_RELEASE_TESTS=1 also builds and runs them in step 1, which is then a Release build.
# build/ is left alone: it is the optimized tree of scripts/demo.sh and of the benchmarks.
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
    echo "test.sh: SUMMARY: all steps passed (check build + sanitized unit tests${fuzz_dir:+ + fuzzing}) in ${elapsed}s"
  else
    echo "test.sh: SUMMARY: FAILED during '${step}' (exit status ${rc}) after ${elapsed}s" >&2
  fi
}
trap finish EXIT

step="install dependencies"
scripts/install_deps.sh

# --- 1 and 2: configure both builds -------------------------------------------
# A configure that changes the compiler of an existing tree makes CMake delete its cache and
# configure again with nothing but its defaults: every -D option below would be lost (a Release
# build without -Werror, say). Such a tree is therefore started afresh.
reset_if_other_compiler() {
  local dir="$1" cxx="$2" cached want
  [[ -n "${cxx}" && -f "${dir}/CMakeCache.txt" ]] || return 0
  cached="$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "${dir}/CMakeCache.txt")"
  cached="$(command -v "${cached}" 2>/dev/null || echo "${cached}")"
  want="$(command -v "${cxx}" 2>/dev/null || echo "${cxx}")"
  if [[ "$(realpath -m "${cached}")" != "$(realpath -m "${want}")" ]]; then
    echo "    ${dir}/ was configured with ${cached}; configuring it afresh with ${want}"
    rm -rf "${dir}/CMakeCache.txt" "${dir}/CMakeFiles"
  fi
}

clang_cxx="$(command -v clang++ 2>/dev/null || true)"
check_cxx="${COULOMB_CHECK_CXX:-${clang_cxx}}"
release_tests=OFF
[[ "${COULOMB_RELEASE_TESTS:-0}" == "1" ]] && release_tests=ON
# Unoptimized (-O0, no debug information) unless the unit tests are built here too: this tree
# is compiled to check the code and its warnings, and its programs only run their command-line
# tests, so optimizing it would cost about 2.7 times the compilation for nothing (evaluate.cpp:
# 25 s of CPU at -O0, 66 s at -O2). The benchmark figures come from build/ (-O3 -march=native).
# Nothing runs the benchmarks here: they are only checked (-fsyntax-only,
# COULOMB_BENCH_SYNTAX_ONLY), at 0.6 of the CPU of compiling them.
check_flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0"
  -DCOULOMB_BENCH_SYNTAX_ONLY=ON)
[[ "${release_tests}" == ON ]] &&
  check_flags=(-DCMAKE_BUILD_TYPE=Release -DCOULOMB_BENCH_SYNTAX_ONLY=OFF)
# The two trees are configured at the same time (a configure runs one process at a time):
# build-check/'s output goes to build-check/configure.log, printed when both are done.
step="configure build-check/ (${check_flags[0]#-DCMAKE_BUILD_TYPE=}${check_cxx:+, ${check_cxx}})"
echo "==> ${step} (build-check/configure.log)"
reset_if_other_compiler build-check "${check_cxx}"
mkdir -p build-check
cmake -S . -B build-check "${check_flags[@]}" \
  -DCOULOMB_WERROR=ON -DCOULOMB_BUILD_UNIT_TESTS="${release_tests}" \
  ${check_cxx:+-DCMAKE_CXX_COMPILER="${check_cxx}"} >build-check/configure.log 2>&1 &
check_configure_pid=$!

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

sanitize_cxx="${COULOMB_SANITIZE_CXX:-${clang_cxx}}"
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
# No -march=native (COULOMB_NATIVE=OFF): Eigen's AVX-512 paths cost a fifth of this build's
# compilation (measured on the attention unit: 129.6 s -> 101.3 s of CPU), and the tests then
# also cover the SSE2 code paths that a portable build of the library takes.
# COULOMB_FAST_ISEL=ON (-mllvm -fast-isel; ignored by compilers other than clang): LLVM's fast
# instruction selector instead of SelectionDAG. The sanitizers instrument the IR before it, so they check the same; the
# instrumented code is large and its instruction selection was a third of the compile time
# (clang -ftime-trace on the attention unit: 64 of 192 s in code generation). Measured on the
# particles and features units: the build takes 0.85–0.91 of the time, the tests 1.1 of theirs.
step="configure build-sanitize/ (Debug, ASan+UBSan${sanitize_cxx:+, ${sanitize_cxx}})"
echo "==> ${step}"
reset_if_other_compiler build-sanitize "${sanitize_cxx}"
cmake -S . -B build-sanitize -DCMAKE_BUILD_TYPE=Debug -DCOULOMB_SANITIZE=ON -DCOULOMB_WERROR=ON \
  -DCOULOMB_NATIVE=OFF -DCOULOMB_BUILD_BENCHMARKS=OFF -DCOULOMB_BUILD_EXAMPLES=OFF \
  -DCOULOMB_TEST_SHARDS=ON -DCOULOMB_FAST_ISEL=ON \
  -DCOULOMB_BUILD_FUZZERS="$([[ "${fuzz_dir}" == build-sanitize ]] && echo ON || echo OFF)" \
  ${sanitize_cxx:+-DCMAKE_CXX_COMPILER="${sanitize_cxx}"}
step="configure build-check/ (build-check/configure.log)"
check_configure_rc=0
wait "${check_configure_pid}" || check_configure_rc=$?
cat build-check/configure.log
[[ ${check_configure_rc} -eq 0 ]] || exit "${check_configure_rc}"

# --- 1 and 2: build both at once, then test -----------------------------------------------
# On 2 cores the check is bound by CPU: both builds share one pool of ${JOBS} jobs (GNU make's
# jobserver, scripts/parallel_builds.mk), so that whatever one build leaves idle (its end, a
# link) the other fills, without running more compilers than cores. build-check/ runs its ctest
# as soon as it is built, while build-sanitize/ still compiles.
step="build build-check/ and build-sanitize/ (logs: <dir>/build.log; build-check/ctest.log)"
echo "==> ${step}"
rm -f build-check/build.status build-check/ctest.status build-sanitize/build.status
make --no-print-directory -j"${JOBS}" -f scripts/parallel_builds.mk START="$(date +%s)" || true
status_of() { cat "$1" 2>/dev/null || echo 1; }
sanitize_rc="$(status_of build-sanitize/build.status)"
check_rc=0
if [[ "$(status_of build-check/build.status)" != 0 ]]; then
  check_rc=10
elif [[ "$(status_of build-check/ctest.status)" != 0 ]]; then
  check_rc=20
fi

show_build_failure() {
  echo "test.sh: the build of $1/ failed; its errors and the end of $1/build.log:" >&2
  grep -n -m 20 -E "error|Error" "$1/build.log" >&2 || true
  tail -n 60 "$1/build.log" >&2
}
if [[ ${sanitize_rc} -ne 0 ]]; then
  show_build_failure build-sanitize
  step="build build-sanitize/"
  exit 1
fi

# --- 3. Fuzzing (build) ----------------------------------------------------------
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
step="ctest build-sanitize/"
echo "==> ${step}"
sanitize_test_rc=0
ctest --test-dir build-sanitize --output-on-failure -j2 -LE fuzz \
  -E "consumer_package|api_docs_complete|docs_getting_started" || sanitize_test_rc=$?

echo "==> ctest build-check/ (build-check/ctest.log)"
if [[ ${check_rc} -eq 10 ]]; then
  show_build_failure build-check
else
  cat build-check/ctest.log
fi
if [[ ${check_rc} -ne 0 ]]; then
  step="$([[ ${check_rc} -eq 10 ]] && echo "build build-check/" || echo "ctest build-check/")"
  exit 1
fi
if [[ ${sanitize_test_rc} -ne 0 ]]; then
  step="ctest build-sanitize/"
  exit 1
fi

# The fuzzers last and alone: they are bounded by time, so anything running beside them would
# take executions from them (measured: half as many beside the sanitized unit tests).
if [[ -n "${fuzz_dir}" ]]; then
  step="fuzz (${fuzz_dir}/fuzz, ${fuzz_seconds} s per fuzzer)"
  echo "==> ${step}"
  COULOMB_FUZZ_SECONDS="${fuzz_seconds}" COULOMB_FUZZ_JOBS="${COULOMB_FUZZ_JOBS:-3}" \
    scripts/run_fuzzers.sh "${fuzz_dir}"
fi

step="done"
