#!/usr/bin/env bash
# Hostile and unlucky use of the command-line tools (issue 19): odd names, outputs that are
# devices, FIFOs or inputs, read-only folders, a file system that takes no more bytes, pipes as
# inputs, empty and one-class data. Each case runs a tool on tiny data and checks its exit
# status, its message and what is left on the disk. Run by CTest (cli_hostile_use):
#   hostile_use_test.sh <dir of the example binaries> <source dir>
# Every case is bounded by `timeout`; a hang is a failure. Cases that need gnuplot, /dev/full or
# a second user are skipped (and say so) where those do not exist.
set -uo pipefail

BIN="$1"
SRC="$2"
T="$(mktemp -d "${TMPDIR:-/tmp}/coulomb_hostile.XXXXXX")"
chmod 755 "${T}"
cleanup() {
  chmod -R u+rwx "${T}" 2>/dev/null
  rm -rf "${T}"
}
trap cleanup EXIT

passed=0
failed=0
skipped=0
fail() {
  echo "FAIL - $1"
  shift
  for line in "$@"; do echo "       ${line}"; done
  failed=$((failed + 1))
}
ok() {
  echo "ok   - $1"
  passed=$((passed + 1))
}
skip() {
  echo "skip - $1"
  skipped=$((skipped + 1))
}

# run NAME STATUS REGEX CMD...: runs CMD (at most 120 s), stdout to ${T}/out, stderr to ${T}/err;
# passes when the exit status is STATUS and stdout + stderr match the extended regex REGEX.
# Sets ${status}. Returns 0 when the case passed.
run() {
  local name="$1" want="$2" regex="$3"
  shift 3
  timeout 120 "$@" >"${T}/out" 2>"${T}/err"
  status=$?
  if [[ ${status} -ne ${want} ]]; then
    fail "${name}" "exit status ${status}, expected ${want}: $*" "stdout: $(head -c 600 "${T}/out")" \
      "stderr: $(head -c 600 "${T}/err")"
    return 1
  fi
  if ! grep -Eq -- "${regex}" "${T}/out" "${T}/err"; then
    fail "${name}" "output does not match '${regex}': $*" "stdout: $(head -c 600 "${T}/out")" \
      "stderr: $(head -c 600 "${T}/err")"
    return 1
  fi
  return 0
}

# ---- fixtures: a tiny two-class dataset and a trained tiny model --------------------------
words=(good bad fine awful great dull superb boring warm cold)
make_split() {  # make_split FILE N [only_class]
  local file="$1" n="$2" only="${3:-}"
  printf 'label\tsentence\n' >"${file}"
  for ((i = 0; i < n; ++i)); do
    local label=$((i % 2))
    [[ -n "${only}" ]] && label="${only}"
    local w="${words[$(((i * 7 + label) % 10))]}"
    printf '%d\tthe film is %s and %s\n' "${label}" "${w}" "${words[$(((i * 3 + label) % 10))]}" >>"${file}"
  done
}
mkdir -p "${T}/data"
make_split "${T}/data/train.tsv" 60
make_split "${T}/data/validation.tsv" 20
TINYF=(--d-model 8 --heads 1 --layers 1 --d-ff 8 --features 4 --epochs 1 --batch-size 8
  --max-length 16 --min-frequency 1 --progress off)
TINY=("${TINYF[@]}" --figures off)
TC="${BIN}/text_classification"
EV="${BIN}/evaluate"

if ! run "fixture: train a tiny model" 0 "accuracy" "${TC}" --data "${T}/data" --out "${T}/fixture" \
  --model "${T}/model.clmb" "${TINY[@]}"; then
  echo "hostile_use_test: the fixture model could not be trained; stopping"
  exit 1
fi
cp "${T}/model.clmb" "${T}/model.orig"
cp "${T}/data/train.tsv" "${T}/train.copy"

# ---- 1. No shell ------------------------------------------------------------------------
name="no system(), popen(), os.system or shell=True in the sources"
hits="$(grep -rnE '(std::|[^_a-zA-Z])(system|popen)[[:space:]]*\(' "${SRC}/include" "${SRC}/examples" \
  "${SRC}/bench" "${SRC}/tests" "${SRC}/fuzz" --include='*.hpp' --include='*.cpp' | grep -v '^\s*//' |
  grep -vE ':[0-9]+:\s*(//|///)')"
hits+="$(grep -rnE 'os\.system|os\.popen|shell[[:space:]]*=[[:space:]]*True' "${SRC}/bench" "${SRC}/scripts" \
  "${SRC}/examples" "${SRC}/tests" --include='*.py')"
if [[ -z "${hits}" ]]; then ok "${name}"; else fail "${name}" "${hits}"; fi

if command -v gnuplot >/dev/null 2>&1; then
  weird="${T}/out 'q' \"d\" \$(touch ${T}/INJECTED) \`touch ${T}/INJECTED2\`"
  if run "quotes and \$(…) in --out: the figure is drawn, nothing runs" 0 "figure: " \
    "${TC}" --data "${T}/data" --out "${weird}" "${TINYF[@]}" --figures on; then
    if [[ -e "${T}/INJECTED" || -e "${T}/INJECTED2" ]]; then
      fail "quotes in --out" "a command in the folder name was run"
    elif ! ls "${weird}"/*_reliability.png >/dev/null 2>&1; then
      fail "quotes in --out" "no PNG in '${weird}'"
    else
      ok "quotes and \$(…) in --out: the figure is drawn, nothing runs"
    fi
  fi
  mkdir -p "${T}/bob's \"data\""
  cp "${T}/data/"*.tsv "${T}/bob's \"data\"/"
  if run "a data folder named bob's \"data\": its figure is drawn" 0 "figure: .*reliability.png" \
    "${TC}" --data "${T}/bob's \"data\"" --out "${T}/bob_out" "${TINYF[@]}" --figures on &&
    ls "${T}/bob_out/"*_reliability.png >/dev/null 2>&1; then
    ok "a data folder named bob's \"data\": its figure is drawn"
  fi
else
  skip "figures with odd names (gnuplot is not installed)"
fi
if run "--figures on without gnuplot: an error and exit status 1, the results kept" 1 \
  "error: gnuplot is not installed" env PATH=/nonexistent "${TC}" --data "${T}/data" \
  --out "${T}/nognuplot" "${TINYF[@]}" --figures on; then
  if ls "${T}/nognuplot/"*.json >/dev/null 2>&1; then
    ok "--figures on without gnuplot: an error and exit status 1, the results kept"
  else
    fail "--figures on without gnuplot" "the JSON report is missing"
  fi
fi
if run "--figures auto without gnuplot: a warning, exit status 0" 0 "warning: gnuplot is not installed" \
  env PATH=/nonexistent "${TC}" --data "${T}/data" --out "${T}/nognuplot2" "${TINYF[@]}" \
  --figures auto; then
  ok "--figures auto without gnuplot: a warning, exit status 0"
fi

# ---- 2. Replacing what is not ours ---------------------------------------------------------
# The device cases use private device nodes where they can be made (as root, where a broken
# tool could replace /dev/null itself), and the system's otherwise.
devnull=/dev/null
devfull=/dev/full
if mknod -m 666 "${T}/nulldev" c 1 3 2>/dev/null; then devnull="${T}/nulldev"; fi
if mknod -m 666 "${T}/fulldev" c 1 7 2>/dev/null; then devfull="${T}/fulldev"; fi
ln -s /proc/self/fd/1 "${T}/stdout"  # what /dev/stdout is, without touching /dev
for target in "${devnull}" "${T}/fifo"; do
  [[ "${target}" == "${T}/fifo" ]] && mkfifo "${T}/fifo"
  if run "--model ${target##*/}: refused before the training" 105 \
    "^--model: '${target}': is a (character device|FIFO)" \
    "${TC}" --data "${T}/data" --out "${T}/o" --model "${target}" "${TINY[@]}"; then
    if grep -q "accuracy" "${T}/out"; then
      fail "--model ${target##*/}" "the training ran"
    elif [[ "${target}" == "${devnull}" && ! -c "${devnull}" ]]; then
      fail "--model ${devnull}" "it is no longer a character device"
    else
      ok "--model ${target##*/}: refused before the training"
    fi
  fi
done
[[ -p "${T}/fifo" ]] || fail "the FIFO survives" "${T}/fifo is no longer a FIFO"

if run "evaluate --json /dev/stdout on a pipe: streamed" 0 '"rows"' \
  bash -c "'${EV}' --model '${T}/model.clmb' --data '${T}/data/validation.tsv' --json '${T}/stdout' | cat"; then
  if [[ -L "${T}/stdout" ]]; then ok "evaluate --json /dev/stdout on a pipe: streamed"; else
    fail "evaluate --json /dev/stdout" "the link to /proc/self/fd/1 was replaced"
  fi
fi
"${EV}" --model "${T}/model.clmb" --data "${T}/data/validation.tsv" --json "${T}/stdout" \
  >"${T}/stdout_file.txt" 2>"${T}/err"
status=$?
if [[ ${status} -eq 0 ]] && grep -q "accuracy" "${T}/stdout_file.txt" &&
  grep -q '"rows"' "${T}/stdout_file.txt"; then
  ok "evaluate --json /dev/stdout with stdout in a file: table and report both kept"
else
  fail "evaluate --json /dev/stdout with stdout in a file" "exit ${status}" \
    "$(head -c 400 "${T}/stdout_file.txt")"
fi
if run "evaluate --json -: stdout holds the JSON alone" 0 '"rows"' \
  "${EV}" --model "${T}/model.clmb" --data "${T}/data/validation.tsv" --json -; then
  if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import json,sys; json.load(sys.stdin)' \
    <"${T}/out"; then
    fail "evaluate --json -" "stdout is not valid JSON"
  elif ! grep -q "accuracy" "${T}/err"; then
    fail "evaluate --json -" "the table is not on stderr"
  else
    ok "evaluate --json -: stdout holds the JSON alone"
  fi
fi
if run "evaluate --json = --model: refused, the model intact" 105 \
  "^--json: .* is the same file as the input of --model" \
  "${EV}" --model "${T}/model.clmb" --data "${T}/data/validation.tsv" --json "${T}/model.clmb" &&
  cmp -s "${T}/model.clmb" "${T}/model.orig"; then
  ok "evaluate --json = --model: refused, the model intact"
fi
cp "${T}/data/validation.tsv" "${T}/validation.copy"
if run "evaluate --reliability-csv = --data (through a link): refused, the data intact" 105 \
  "^--reliability-csv: .* is the same file as the input of --data" \
  bash -c "ln -sf '${T}/data/validation.tsv' '${T}/link.csv' && '${EV}' --model '${T}/model.clmb' \
    --data '${T}/data/validation.tsv' --reliability-csv '${T}/link.csv'" &&
  cmp -s "${T}/data/validation.tsv" "${T}/validation.copy"; then
  ok "evaluate --reliability-csv = --data (through a link): refused, the data intact"
fi
if run "text_classification --model = the training file: refused" 105 \
  "^--model: .* is the same file as the input of --data" \
  "${TC}" --data "${T}/data" --out "${T}/o" --model "${T}/data/train.tsv" "${TINY[@]}" &&
  cmp -s "${T}/data/train.tsv" "${T}/train.copy"; then
  ok "text_classification --model = the training file: refused"
fi
if run "--model = --progress-json: refused" 105 "^--progress-json: .* is the same file as the output of --model" \
  "${TC}" --data "${T}/data" --out "${T}/o" --model "${T}/m2.clmb" --progress-json "${T}/m2.clmb" \
  "${TINY[@]}"; then
  ok "--model = --progress-json: refused"
fi
ln -s "real_report.json" "${T}/report_link.json"
if run "evaluate --json through a symbolic link: the link kept, its file written" 0 "accuracy" \
  "${EV}" --model "${T}/model.clmb" --data "${T}/data/validation.tsv" --json "${T}/report_link.json" &&
  [[ -L "${T}/report_link.json" ]] && grep -q '"rows"' "${T}/real_report.json"; then
  ok "evaluate --json through a symbolic link: the link kept, its file written"
fi

# ---- 3. Failing before the work -----------------------------------------------------------
printf 'x' >"${T}/a_file"
if run "--out under a file: refused before the training" 105 "^--out: cannot create the directory" \
  "${TC}" --data "${T}/data" --out "${T}/a_file/sub" "${TINY[@]}"; then
  ok "--out under a file: refused before the training"
fi
if run "--checkpoint in a missing folder: refused" 105 "^--checkpoint: .* the directory .* does not exist" \
  "${TC}" --data "${T}/data" --out "${T}/o" --checkpoint "${T}/missing/run" "${TINY[@]}"; then
  ok "--checkpoint in a missing folder: refused"
fi
if run "--resume without --checkpoint: refused" 105 "^--resume: needs --checkpoint" \
  "${TC}" --data "${T}/data" --out "${T}/o" --resume "${TINY[@]}"; then
  ok "--resume without --checkpoint: refused"
fi
mkdir -p "${T}/ro"
chmod 555 "${T}/ro"
as_user=()
if [[ "$(id -u)" -eq 0 ]]; then
  if command -v setpriv >/dev/null 2>&1 && setpriv --reuid=65534 --regid=65534 --clear-groups true \
    2>/dev/null; then
    as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  fi
fi
if [[ "$(id -u)" -ne 0 || ${#as_user[@]} -gt 0 ]]; then
  chmod -R a+rX "${T}/data" "${T}/model.clmb"
  mkdir -p "${T}/user_out"
  chmod 777 "${T}/user_out"
  if run "--model in a read-only folder (not root): refused before the training" 105 \
    "^--model: .*cannot create a file in the directory .*Permission denied" \
    "${as_user[@]}" "${TC}" --data "${T}/data" --out "${T}/user_out" --model "${T}/ro/m.clmb" \
    "${TINY[@]}"; then
    ok "--model in a read-only folder (not root): refused before the training"
  fi
else
  skip "read-only folder as another user (no setpriv)"
fi
if [[ "$(id -u)" -eq 0 ]]; then
  # root writes into a 555 folder: the check must agree with the write.
  if run "--model in a 555 folder as root: written" 0 "accuracy" \
    "${TC}" --data "${T}/data" --out "${T}/o" --model "${T}/ro/m.clmb" "${TINY[@]}" &&
    [[ -s "${T}/ro/m.clmb" ]]; then
    ok "--model in a 555 folder as root: written"
  fi
fi
# A file system that takes no more bytes: RLIMIT_FSIZE = 0 (SIGXFSZ ignored) makes every write
# to a regular file fail, as a full disk does, without privileges. The tool's own output goes
# through a pipe, which the limit does not concern.
if run "a full file system: refused before the training" 105 "cannot write (a file in|into) the directory" \
  bash -c "trap '' XFSZ; (ulimit -f 0; exec '${TC}' --data '${T}/data' --out '${T}/full' \
    --model '${T}/full_model.clmb' ${TINY[*]}) 2>&1 | cat; exit \${PIPESTATUS[0]}"; then
  if grep -q "accuracy" "${T}/out"; then fail "a full file system" "the training ran"; else
    ok "a full file system: refused before the training"
  fi
fi
# The disk fills up during the training: the model (about 0.1 MB here) no longer fits in the
# 32 kB left; the results are printed and the other files written, the previous model intact.
BIG=(--d-model 64 --heads 1 --layers 1 --d-ff 64 --features 4 --epochs 1 --batch-size 8
  --max-length 16 --min-frequency 1 --progress off --figures off)
cp "${T}/model.orig" "${T}/fills.clmb"
if run "the disk fills during the training: results printed, the old model intact, exit 1" 1 \
  "the model was not saved: .*fills.clmb.*(File too large|No space)" \
  bash -c "trap '' XFSZ; (ulimit -f 32; exec '${TC}' --data '${T}/data' --out '${T}/fills' \
    --model '${T}/fills.clmb' ${BIG[*]}) 2>&1 | cat; exit \${PIPESTATUS[0]}"; then
  if ! grep -q "validation" "${T}/out"; then fail "disk fills" "the metric table is missing"
  elif ! cmp -s "${T}/fills.clmb" "${T}/model.orig"; then fail "disk fills" "the old model changed"
  elif ! ls "${T}/fills/"*.json >/dev/null 2>&1; then fail "disk fills" "the report is missing"
  else ok "the disk fills during the training: results printed, the old model intact, exit 1"; fi
fi
if [[ -c "${devfull}" ]]; then
  if run "--progress-json on a full device: exit status 1 naming the log" 1 \
    "--progress-json '${devfull}': write error" \
    "${TC}" --data "${T}/data" --out "${T}/o" --progress-json "${devfull}" "${TINY[@]}"; then
    ok "--progress-json on a full device: exit status 1 naming the log"
  fi
else
  skip "--progress-json on /dev/full (no /dev/full)"
fi

# ---- 4. Bad data, found before the training ---------------------------------------------
mkdir -p "${T}/empty_valid" "${T}/one_class"
cp "${T}/data/train.tsv" "${T}/empty_valid/"
printf 'label\tsentence\n' >"${T}/empty_valid/validation.tsv"
cp "${T}/model.orig" "${T}/keep.clmb"
if run "an empty validation split: refused, the model file untouched" 105 \
  "^--data: '.*validation.tsv' holds no examples" \
  "${TC}" --data "${T}/empty_valid" --out "${T}/o" --model "${T}/keep.clmb" "${TINY[@]}" &&
  cmp -s "${T}/keep.clmb" "${T}/model.orig"; then
  ok "an empty validation split: refused, the model file untouched"
fi
make_split "${T}/one_class/train.tsv" 40 1
cp "${T}/data/validation.tsv" "${T}/one_class/"
if run "a one-class training split: refused with the class counts" 105 \
  "^--data: the training split .* one class only \(class 0: 0, class 1: 40\)" \
  "${TC}" --data "${T}/one_class" --out "${T}/o" "${TINY[@]}"; then
  ok "a one-class training split: refused with the class counts"
fi

# ---- 5. Inputs read once: pipes, FIFOs, /dev/stdin; gzip by content ---------------------
"${EV}" --model "${T}/model.clmb" --data "${T}/data/validation.tsv" >"${T}/reference.txt" 2>&1
reference_row="$(grep -E '^clean ' "${T}/reference.txt")"
check_same_row() {  # NAME: the clean row of ${T}/out equals the reference
  if [[ "$(grep -E '^clean ' "${T}/out")" == "${reference_row}" && -n "${reference_row}" ]]; then
    ok "$1"
  else
    fail "$1" "clean row '$(grep -E '^clean ' "${T}/out")', expected '${reference_row}'"
  fi
}
if run "evaluate with <(…) for the model and the data" 0 "clean " \
  bash -c "'${EV}' --model <(cat '${T}/model.clmb') --data <(cat '${T}/data/validation.tsv')"; then
  check_same_row "evaluate with <(…) for the model and the data"
fi
if run "evaluate --data /dev/stdin" 0 "clean " \
  bash -c "'${EV}' --model '${T}/model.clmb' --data /dev/stdin < '${T}/data/validation.tsv'"; then
  check_same_row "evaluate --data /dev/stdin"
fi
mkfifo "${T}/model_fifo"
(cat "${T}/model.clmb" >"${T}/model_fifo" &)
if run "evaluate --model FIFO: no hang" 0 "clean " \
  "${EV}" --model "${T}/model_fifo" --data "${T}/data/validation.tsv"; then
  check_same_row "evaluate --model FIFO: no hang"
fi
gzip -c "${T}/data/validation.tsv" >"${T}/gz_named_plain.tsv"
if run "evaluate: a gzip file named .tsv is read by content" 0 "clean " \
  "${EV}" --model "${T}/model.clmb" --data "${T}/gz_named_plain.tsv"; then
  check_same_row "evaluate: a gzip file named .tsv is read by content"
fi
mkdir -p "${T}/fifo_data" "${T}/gz_data"
mkfifo "${T}/fifo_data/train.tsv"
cp "${T}/data/validation.tsv" "${T}/fifo_data/"
(cat "${T}/data/train.tsv" >"${T}/fifo_data/train.tsv" &)
gzip -c "${T}/data/train.tsv" >"${T}/gz_data/train.tsv"
cp "${T}/data/validation.tsv" "${T}/gz_data/"
"${TC}" --data "${T}/data" --out "${T}/ref_tc" "${TINY[@]}" >"${T}/ref_tc.txt" 2>&1
for d in fifo_data gz_data; do
  if run "text_classification --data with train.tsv as ${d%_data}: the same results" 0 "validation" \
    "${TC}" --data "${T}/${d}" --out "${T}/o_${d}" "${TINY[@]}"; then
    if [[ "$(grep -E '^validation ' "${T}/out")" == "$(grep -E '^validation ' "${T}/ref_tc.txt")" ]]; then
      ok "text_classification --data with train.tsv as ${d%_data}: the same results"
    else
      fail "text_classification --data ${d}" "the validation row differs from the plain file's"
    fi
  fi
done

# ---- 6. Smaller things --------------------------------------------------------------------
if run "-q: nothing on stderr" 0 "validation" \
  "${TC}" --data "${T}/data" --out "${T}/o" -q "${TINY[@]}"; then
  if [[ -s "${T}/err" ]]; then fail "-q" "stderr: $(head -c 300 "${T}/err")"; else ok "-q: nothing on stderr"; fi
fi
if run "--radius-factor nan: refused" 105 "^--radius-factor: must be a number in \[1, 1000\], got 'nan'" \
  "${TC}" --radius-factor nan; then
  ok "--radius-factor nan: refused"
fi
if run "synthetic_benchmark --noise 0.1,0.1: refused" 105 "^--noise: .* is listed twice" \
  "${BIN}/synthetic_benchmark" --noise 0.1,0.1; then
  ok "synthetic_benchmark --noise 0.1,0.1: refused"
fi
if run "reproduce_paper --data a=X --data a=X: refused" 105 "^--data: 'a' is given twice" \
  "${BIN}/reproduce_paper" --data "a=${T}/data" --data "a=${T}/data" --out "${T}/rp"; then
  ok "reproduce_paper --data a=X --data a=X: refused"
fi
if run "reproduce_paper: an invalid --data exits 105 with one prefix" 105 "^--data: 'x' is not NAME=DIR" \
  "${BIN}/reproduce_paper" --data x --out "${T}/rp"; then
  ok "reproduce_paper: an invalid --data exits 105 with one prefix"
fi
# Resume: a finished run resumed from its checkpoints reports times that add up.
if run "resume from finished checkpoints: phase times within the total" 0 "validation" \
  "${TC}" --data "${T}/data" --out "${T}/res" --kernel learned --phase-a-steps 5 \
  --checkpoint "${T}/ck" "${TINY[@]}" &&
  run "resume from finished checkpoints: phase times within the total" 0 "validation" \
    "${TC}" --data "${T}/data" --out "${T}/res" --kernel learned --phase-a-steps 5 \
    --checkpoint "${T}/ck" --resume "${TINY[@]}"; then
  json="$(ls "${T}/res/"*.json | head -n 1)"
  a="$(sed -n 's/.*"phase_a_seconds": *\([0-9.eE+-]*\).*/\1/p' "${json}")"
  b="$(sed -n 's/.*"phase_b_seconds": *\([0-9.eE+-]*\).*/\1/p' "${json}")"
  total="$(sed -n 's/.*"total_seconds": *\([0-9.eE+-]*\).*/\1/p' "${json}")"
  if [[ -n "${a}" && -n "${b}" && -n "${total}" ]] &&
    awk -v a="${a}" -v b="${b}" -v t="${total}" 'BEGIN { exit !(a + b <= t && a > 0 && b > 0) }'; then
    ok "resume from finished checkpoints: phase times within the total"
  else
    fail "resume times" "phase A ${a} s + phase B ${b} s against a total of ${total} s"
  fi
fi

echo "hostile_use_test: ${passed} passed, ${failed} failed, ${skipped} skipped"
[[ ${failed} -eq 0 ]]
