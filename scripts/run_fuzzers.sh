#!/usr/bin/env bash
# Runs the libFuzzer targets of fuzz/ for a bounded time each, from copies of their seed corpora
# (the repository is never written to), and fails on any crash, leak, sanitizer report or
# timeout. scripts/test.sh calls it after building the fuzzers (COULOMB_BUILD_FUZZERS=ON, clang).
#
#   scripts/run_fuzzers.sh <build directory> [fuzzer ...]
#
# Environment:
#   COULOMB_FUZZ_SECONDS  run time of each fuzzer (default 45)
#   COULOMB_FUZZ_JOBS     fuzzers run at the same time (default 2, one per core in CI)
#
# For each fuzzer it prints one line: executions, and libFuzzer's coverage (cov: edges, ft:
# features, corpus size) when the seed corpus is loaded and at the end. On a failure it prints
# the end of the fuzzer's output and the crashing input (base64), and copies the input to
# <build directory>/fuzz/artifacts/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:?usage: scripts/run_fuzzers.sh <build directory> [fuzzer ...]}"
shift
build="$(cd "${build}" && pwd)"
fuzzers=("$@")
[[ ${#fuzzers[@]} -eq 0 ]] && fuzzers=(fuzz_model_file fuzz_tsv fuzz_text)
seconds="${COULOMB_FUZZ_SECONDS:-45}"
max_jobs="${COULOMB_FUZZ_JOBS:-2}"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

for name in "${fuzzers[@]}"; do
  if [[ ! -x "${build}/fuzz/${name}" ]]; then
    echo "run_fuzzers: ${build}/fuzz/${name} not found (configure with -DCOULOMB_BUILD_FUZZERS=ON" \
      "and clang, and build it)" >&2
    exit 1
  fi
  if [[ ! -d "${root}/fuzz/corpus/${name#fuzz_}" ]]; then
    echo "run_fuzzers: no seed corpus fuzz/corpus/${name#fuzz_}" >&2
    exit 1
  fi
done

work="$(mktemp -d "${TMPDIR:-/tmp}/coulomb-fuzz.XXXXXX")"
trap 'rm -rf "${work}"' EXIT

# Runs one fuzzer in ${work}/<name>/ (its corpus copy, its log, its crash files) and writes its
# exit status to ${work}/<name>/rc.
run_one() {
  local name="$1"
  local dir="${work}/${name}"
  mkdir -p "${dir}/corpus"
  cp -R "${root}/fuzz/corpus/${name#fuzz_}/." "${dir}/corpus/"
  local rc=0
  (cd "${dir}" && "${build}/fuzz/${name}" -max_total_time="${seconds}" -print_final_stats=1 \
    -timeout=25 -artifact_prefix="${dir}/" corpus >"${dir}/log" 2>&1) || rc=$?
  echo "${rc}" >"${dir}/rc"
}

echo "run_fuzzers: ${fuzzers[*]} for ${seconds} s each, ${max_jobs} at a time"
start=${SECONDS}
for name in "${fuzzers[@]}"; do
  while [[ $(jobs -rp | wc -l) -ge ${max_jobs} ]]; do
    wait -n || true
  done
  run_one "${name}" &
done
wait

# "#N INITED cov: A ft: B corp: C/..." and the last "cov:" line (DONE) give the coverage.
field() { sed -n "s/.* $1: \([0-9]*\).*/\1/p" <<<"$2"; }
failed=0
for name in "${fuzzers[@]}"; do
  dir="${work}/${name}"
  log="${dir}/log"
  rc="$(cat "${dir}/rc" 2>/dev/null || echo 1)"
  inited="$(grep -m1 'INITED' "${log}" || true)"
  last="$(grep ' cov: ' "${log}" | tail -n 1 || true)"
  runs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "${log}")"
  rate="$(sed -n 's/^stat::average_exec_per_sec: *\([0-9]*\).*/\1/p' "${log}")"
  rss="$(sed -n 's/^stat::peak_rss_mb: *\([0-9]*\).*/\1/p' "${log}")"
  corp_start="$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"${inited}")"
  corp_end="$(sed -n 's/.* corp: \([0-9]*\)\/.*/\1/p' <<<"${last}")"
  if [[ "${rc}" != "0" || -z "${runs}" ]] ||
    grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:|deadly signal' "${log}"; then
    failed=1
    echo "run_fuzzers: ${name} FAILED (exit status ${rc}); end of its output:" >&2
    tail -n 60 "${log}" >&2
    mkdir -p "${build}/fuzz/artifacts"
    for artifact in "${dir}"/crash-* "${dir}"/leak-* "${dir}"/timeout-* "${dir}"/oom-* \
      "${dir}"/slow-unit-*; do
      [[ -e "${artifact}" ]] || continue
      cp "${artifact}" "${build}/fuzz/artifacts/${name}-$(basename "${artifact}")"
      echo "run_fuzzers: input saved as ${build}/fuzz/artifacts/${name}-$(basename "${artifact}");" \
        "base64:" >&2
      head -c 4096 "${artifact}" | base64 >&2
    done
    continue
  fi
  echo "run_fuzzers: ${name}: ${runs} executions in ${seconds} s (${rate}/s), cov" \
    "$(field cov "${inited}") -> $(field cov "${last}") edges, ft $(field ft "${inited}") ->" \
    "$(field ft "${last}"), corpus ${corp_start} -> ${corp_end} inputs, peak RSS ${rss} MB"
done
echo "run_fuzzers: wall time $((SECONDS - start)) s"
exit "${failed}"
