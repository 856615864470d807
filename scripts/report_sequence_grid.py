#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarizes a grid of sequence_tasks runs (one runs.csv): per task cell, feature map and
feature budget m, the test accuracy of the vanilla and the learned kernel over the seeds
(mean ± sd), and the paired difference learned − vanilla over the seeds both have, with its
95 % t-interval. Writes the table as Markdown on stdout, the summary as CSV, and with --png a
figure of accuracy against m (one panel per cell, gnuplot).

    python3 scripts/report_sequence_grid.py OUT/runs.csv --csv OUT/summary.csv --png OUT/accuracy_vs_m.png
"""
import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom.
T95 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
       2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
       2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def interval(diffs):
    """Mean and half-width of the 95 % t-interval (nan half-width for fewer than 2 values)."""
    mean = statistics.fmean(diffs)
    if len(diffs) < 2:
        return mean, math.nan
    sd = statistics.stdev(diffs)
    return mean, T95[min(len(diffs) - 1, len(T95)) - 1] * sd / math.sqrt(len(diffs))


def cell_key(cell):
    """Sort key of a cell name such as L64-P4-V64: its numbers in order."""
    parts = []
    for token in cell.split("-"):
        digits = "".join(c for c in token if c.isdigit())
        parts.append((token.rstrip("0123456789"), int(digits) if digits else 0))
    return parts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", help="runs.csv of sequence_tasks")
    parser.add_argument("--csv", help="write the summary here")
    parser.add_argument("--png", help="draw accuracy against m here (gnuplot)")
    args = parser.parse_args()

    acc = defaultdict(dict)  # (task, cell, attention, map, m, kernel) -> {seed: accuracy}
    with open(args.runs, newline="") as f:
        for row in csv.DictReader(f):
            key = (row["task"], row["cell"], row["attention"], row["feature_map"],
                   int(row["features"]), row["kernel"])
            acc[key][int(row["seed"])] = 100.0 * float(row["test_accuracy"])

    groups = sorted({k[:5] for k in acc}, key=lambda g: (g[0], cell_key(g[1]), g[2], g[3], g[4]))
    summary = []
    print("| task | cell | map | m | vanilla | learned | learned − vanilla [95 % CI] | seeds |")
    print("|---|---|---|---:|---:|---:|---|---:|")
    for g in groups:
        van = acc.get(g + ("vanilla",), {})
        lea = acc.get(g + ("learned",), {})

        def stat(d):
            v = list(d.values())
            if not v:
                return math.nan, math.nan, "—"
            sd = statistics.stdev(v) if len(v) > 1 else math.nan
            return statistics.fmean(v), sd, f"{statistics.fmean(v):.1f} ± {sd:.1f}"

        vm, vs, vt = stat(van)
        lm, ls, lt = stat(lea)
        seeds = sorted(set(van) & set(lea))
        if seeds:
            mean, half = interval([lea[s] - van[s] for s in seeds])
            dt = f"{mean:+.1f} [{mean - half:+.1f}, {mean + half:+.1f}]"
        else:
            mean, half, dt = math.nan, math.nan, "—"
        name = g[3] if g[2] == "linear" else g[2]
        print(f"| {g[0]} | {g[1]} | {name} | {g[4]} | {vt} | {lt} | {dt} | {len(seeds)} |")
        summary.append([g[0], g[1], name, g[4], vm, vs, lm, ls, mean, half, len(seeds)])

    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["task", "cell", "map", "m", "vanilla_mean", "vanilla_sd", "learned_mean",
                        "learned_sd", "difference", "half_width", "paired_seeds"])
            w.writerows(summary)
    if args.png:
        draw(summary, args.png)


def draw(summary, png):
    """Accuracy against m, vanilla and learned with ±sd bars, one panel per (task, cell, map)."""
    panels = []
    for row in summary:
        if (row[0], row[1], row[2]) not in panels:
            panels.append((row[0], row[1], row[2]))
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, p in enumerate(panels):
            data = os.path.join(tmp, f"panel{i}.dat")
            with open(data, "w") as f:
                for row in summary:
                    if (row[0], row[1], row[2]) == p:
                        f.write(" ".join(str(x) for x in row[3:8]) + "\n")
            plots.append((data, f"{p[0]} {p[1]}, {p[2]}"))
        script = os.path.join(tmp, "plot.gp")
        cols = min(len(plots), 2)
        rows = (len(plots) + cols - 1) // cols
        with open(script, "w") as f:
            f.write(f"set terminal pngcairo size {520 * cols},{380 * rows} font ',10'\n")
            f.write(f"set output ARG1\nset multiplot layout {rows},{cols}\n")
            f.write("set logscale x 2\nset xlabel 'features m'\nset ylabel 'test accuracy (%)'\n")
            f.write("set key bottom right\nset grid\nset yrange [*:100.5]\n")
            for k, (_, title) in enumerate(plots):
                f.write(f"set title ARG{2 * k + 3}\n")
                f.write(f"plot ARG{2 * k + 2} using 1:2:3 with yerrorlines title 'vanilla', "
                        f"'' using ($1*1.04):4:5 with yerrorlines title 'learned (Phase A)'\n")
            f.write("unset multiplot\n")
        argv = ["gnuplot", "-c", script, png]
        for data, title in plots:
            argv += [data, title]
        result = subprocess.run(argv, capture_output=True, text=True)
        if result.returncode != 0:
            sys.exit("gnuplot failed: " + result.stderr.strip())


if __name__ == "__main__":
    main()
