#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The runner of the grid scripts (listops_grid.sh, listops_lra.sh, mqar_grid.sh). Each line of
# standard input is "<name> <options...>"; it runs
#   LAUNCH TOOL <common options> <options> --out OUT/<name>
# JOBS at a time (default 1), and appends the run's output to OUT/<name>.log, so a restart, whose
# runs.csv skips a finished run, keeps the earlier log. Options are split at spaces.
#
#   ... | scripts/run_grid.sh OUT TOOL [common options...]
set -euo pipefail
if (($# < 2)); then
  echo "usage: ... | scripts/run_grid.sh OUT TOOL [common options...]" >&2
  exit 2
fi
export GRID_OUT=$1 GRID_TOOL=$2
shift 2
export GRID_COMMON="$*"
mkdir -p "$GRID_OUT"
xargs -P "${JOBS:-1}" -L 1 bash -c '
  name=$1; shift
  # shellcheck disable=SC2086 # LAUNCH and the common options are meant to split
  ${LAUNCH:-} "$GRID_TOOL" ${GRID_COMMON} "$@" --out "$GRID_OUT/$name" \
    >> "$GRID_OUT/$name.log" 2>&1 || echo "failed: $name" >&2' _
