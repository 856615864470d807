#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reduced MQAR grid of docs/results.md (issue 22, item 5): FAVOR+ with a vanilla kernel and a
# learned one (Phase A, pooled) on the model at initialization and after the first epoch
# (--phase-a-after 1), feature budgets m = 16..128, 4 and 8 key-value pairs, seeds 1-3; L = 64,
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
      for variant in vanilla learned learned-after1; do
        kernel=${variant%-after1}
        after=()
        [[ ${variant} == learned-after1 ]] && after=(--phase-a-after 1)
        "$tool" --task mqar --mqar-vocabulary 64 --mqar-pairs "$pairs" --key-conv 2 --lr 3e-3 \
          --epochs 4 --threads 1 --features "$m" --kernel "$kernel" "${after[@]}" --seed "$seed" \
          --progress off "$out"
      done
    done
  done
done
