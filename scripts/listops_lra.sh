#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# ListOps under LRA's protocol (issue 22): 96,000 / 2,000 / 2,000 sequences of 501-1,999 tokens
# (data::ListOpsOptions::lra()'s sizes, mean pooling instead of [CLS]), 5,000 steps of 32
# sequences as LRA trains (1.7 epochs, so --epochs 2 --max-steps 5000; the development accuracy
# is measured after epoch 1 and at the end), the model of the reduced protocol (d = 64, 2 layers,
# 2 heads, m = 64) for softmax, FAVOR+ and Kernel-FAVOR+ (Phase A at initialization), seed 1.
# Each variant writes OUT/<variant>/runs.csv (a restart skips a finished one). THREADS threads a
# run (default 1), JOBS runs at a time (default 2); LAUNCH prefixes each run; options after the
# binary go to every run (for example --bucket-batches 100). Then:
#   python3 scripts/report_sequence_grid.py OUT/*/runs.csv
#
#   scripts/listops_lra.sh [OUT=listops_lra_out] [sequence_tasks binary=build/examples/sequence_tasks] [options...]
set -euo pipefail
out=${1:-listops_lra_out}
tool=${2:-build/examples/sequence_tasks}
shift $(($# < 2 ? $# : 2))
extra="$*"
# softmax, the longest, first
printf '%s\n' "softmax --attention softmax" "favor-vanilla --map favor" \
  "favor-learned --map favor --kernel learned" |
  JOBS=${JOBS:-2} "$(dirname "$0")/run_grid.sh" "$out" "$tool" --task listops --listops-train 96000 \
    --listops-dev 2000 --listops-test 2000 --listops-min-length 501 --listops-max-length 1999 \
    --epochs 2 --max-steps 5000 --threads "${THREADS:-1}" --features 64 --seed 1 --progress lines \
    $extra
