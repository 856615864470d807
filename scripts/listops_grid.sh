#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The reduced ListOps table of docs/results.md (issue 22): the tool's defaults (10,000 / 1,000 /
# 1,000 sequences of 100-500 tokens, d = 64, 2 layers, 2 heads, 10 epochs, m = 64) for softmax
# and for FAVOR+, PORF-softplus, PORF-relu and softmax-feat, each with a vanilla kernel, a learned
# one (Phase A, pooled, at initialization) and a learned one after the first epoch
# (--phase-a-after 1); seeds 1-3, seed after seed, so a stopped grid has whole seeds. JOBS runs
# at a time (default 2), each on one thread (about 11 minutes a run) in its own directory
# OUT/<variant>-s<seed> (runs.csv skips a finished run on a restart). LAUNCH prefixes each run
# (for example LAUNCH="nice -n 5"); options after the binary go to every run (for example
# --bucket-batches 100). Then:
#   python3 scripts/report_sequence_grid.py OUT/*/runs.csv --csv OUT/summary.csv
#
#   scripts/listops_grid.sh [OUT=listops_grid_out] [sequence_tasks binary=build/examples/sequence_tasks] [options...]
set -euo pipefail
out=${1:-listops_grid_out}
tool=${2:-build/examples/sequence_tasks}
shift $(($# < 2 ? $# : 2))
extra="$*"
{
  for seed in 1 2 3; do
    echo "softmax-s${seed} --attention softmax --seed ${seed}"
    for map in favor porf-softplus porf-relu softmax-feat; do
      echo "${map}-vanilla-s${seed} --map ${map} --seed ${seed}"
      echo "${map}-learned-s${seed} --map ${map} --kernel learned --seed ${seed}"
      echo "${map}-learned-after1-s${seed} --map ${map} --kernel learned --phase-a-after 1 --seed ${seed}"
    done
  done
} | JOBS=${JOBS:-2} "$(dirname "$0")/run_grid.sh" "$out" "$tool" --task listops --threads 1 \
  --features 64 --progress off $extra
