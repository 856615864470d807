#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reduced MQAR grid of docs/results.md (issue 22, item 5): FAVOR+ with a vanilla and a learned
# kernel (Phase A, pooled), feature budgets m = 16..128, 4 and 8 key-value pairs, seeds 1-3; L = 64,
# vocabulary 64, a key convolution of width 2, 4 epochs. One run after another on one thread
# (about a minute each); runs.csv makes a restart skip what is done. Then:
#   python3 scripts/report_sequence_grid.py OUT/runs.csv --csv OUT/summary.csv --png OUT/accuracy_vs_m.png
#
#   scripts/mqar_grid.sh [OUT=mqar_grid_out] [sequence_tasks binary=build/examples/sequence_tasks]
set -euo pipefail
out=${1:-mqar_grid_out}
tool=${2:-build/examples/sequence_tasks}
for seed in 1 2 3; do
  for pairs in 4 8; do
    for m in 16 32 64 128; do
      for kernel in vanilla learned; do
        "$tool" --task mqar --mqar-vocabulary 64 --mqar-pairs "$pairs" --key-conv 2 --lr 3e-3 \
          --epochs 4 --threads 1 --features "$m" --kernel "$kernel" --seed "$seed" \
          --progress off "$out"
      done
    done
  done
done
