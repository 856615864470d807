#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reduced MQAR grid of docs/results.md (issue 22, item 5): a vanilla kernel and learned ones
# (Phase A, pooled, on the model at initialization and after the first epoch: --phase-a-after 1)
# over feature maps, feature budgets m and key-value pairs, seeds 1-3; L = 64, vocabulary 64, a
# key convolution of width 2, 4 epochs, one thread a run (about a minute each). MAPS may name
# softmax: exact attention, one run per pairs and seed. Each run writes
# OUT/<map>-m<m>-p<pairs>-<variant>-s<seed>/runs.csv, so JOBS runs can go at a time and a
# restart skips what is done. The axes are variables: MAPS (default favor), MS (16 32 64 128),
# PAIRS (4 8), VARIANTS (vanilla learned learned-after1), SEEDS (1 2 3); JOBS (default 1);
# LAUNCH prefixes each run. Then:
#   python3 scripts/report_sequence_grid.py OUT/*/runs.csv --csv OUT/summary.csv --png OUT/accuracy_vs_m.png
#
#   scripts/mqar_grid.sh [OUT=mqar_grid_out] [sequence_tasks binary=build/examples/sequence_tasks]
set -euo pipefail
out=${1:-mqar_grid_out}
tool=${2:-build/examples/sequence_tasks}
for seed in ${SEEDS:-1 2 3}; do
  for pairs in ${PAIRS:-4 8}; do
    for map in ${MAPS:-favor}; do
      if [[ $map == softmax ]]; then # exact softmax attention: no m, no Phase A
        echo "softmax-p${pairs}-s${seed} --attention softmax --mqar-pairs ${pairs} --seed ${seed}"
        continue
      fi
      for m in ${MS:-16 32 64 128}; do
        for variant in ${VARIANTS:-vanilla learned learned-after1}; do
          case $variant in
            vanilla) options="--kernel vanilla" ;;
            learned) options="--kernel learned" ;;
            learned-after1) options="--kernel learned --phase-a-after 1" ;;
            *) echo "mqar_grid.sh: unknown variant '$variant'" >&2; exit 2 ;;
          esac
          echo "${map}-m${m}-p${pairs}-${variant}-s${seed} --map ${map} --features ${m}" \
            "--mqar-pairs ${pairs} ${options} --seed ${seed}"
        done
      done
    done
  done
done | "$(dirname "$0")/run_grid.sh" "$out" "$tool" --task mqar --mqar-vocabulary 64 --key-conv 2 \
  --lr 3e-3 --epochs 4 --threads 1 --progress off
