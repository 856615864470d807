#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Summarizes a grid of sequence_tasks runs (one runs.csv or several): per task cell, feature
map and feature budget m, the test accuracy of the vanilla kernel and of each learned variant
(Phase A at initialization: "learned"; other --phase-a choices, such as pooled+after1:
"learned:<choice>") over the seeds (mean ± sd), and the paired difference learned − vanilla
over the seeds both have, with its 95 % t-interval, per cell and over all pairs (of the test
accuracy, or with --metric dev_accuracy of the development accuracy). Writes the table as
Markdown on stdout, the summary as CSV, with --png a figure of accuracy against m (one panel per
cell and map, exact softmax of the cell dashed; gnuplot), with --pairs-png one of MQAR's
accuracy against the number of key-value pairs, with --bars a bar figure, and with --combined
every input row in one CSV, which this script reads back like a runs.csv (the committed source
of a table).

    python3 scripts/report_sequence_grid.py OUT/runs.csv [MORE/runs.csv ...] --csv OUT/summary.csv --png OUT/accuracy_vs_m.png
"""
import argparse
import contextlib
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


def variant_name(row):
    """vanilla, learned (Phase A at initialization with the default representations) or
    learned:<phase_a> for the other Phase A choices (for example learned:pooled+after1)."""
    if row["kernel"] != "learned":
        return row["kernel"]
    phase_a = row.get("phase_a", "pooled")
    return "learned" if phase_a in ("pooled", "") else "learned:" + phase_a


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+",
                        help="runs.csv of sequence_tasks (several: their rows together)")
    parser.add_argument("--csv", help="write the summary here")
    parser.add_argument("--png", help="draw accuracy against m here (gnuplot)")
    parser.add_argument("--metric", default="test_accuracy",
                        choices=["test_accuracy", "dev_accuracy"],
                        help="the accuracy reported (default: test_accuracy)")
    parser.add_argument("--combined", help="write every row of the runs.csv files here, in one "
                        "CSV (a file this script reads back like a runs.csv)")
    parser.add_argument("--pairs-png", help="MQAR: draw accuracy against the number of "
                        "key-value pairs here, one panel per map (gnuplot)")
    parser.add_argument("--bars", help="draw the accuracy of every map and variant here, one "
                        "panel per task cell (gnuplot; for a grid at one m, such as ListOps)")
    args = parser.parse_args()

    acc = defaultdict(dict)  # (task, cell, attention, map, m, variant) -> {seed: accuracy}
    rows, fields = [], []
    for path in sorted(args.runs):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            fields += [c for c in reader.fieldnames or [] if c not in fields]
            for row in reader:
                rows.append(row)
    for row in rows:
        key = (row["task"], row["cell"], row["attention"], row["feature_map"],
               int(row["features"]), variant_name(row))
        acc[key][int(row["seed"])] = 100.0 * float(row[args.metric])
    if args.combined:
        with atomic_csv(args.combined) as f:
            w = csv.DictWriter(f, fieldnames=fields, restval="", lineterminator="\n")
            w.writeheader()
            w.writerows(rows)

    groups = sorted({k[:5] for k in acc}, key=lambda g: (g[0], cell_key(g[1]), g[2], g[3], g[4]))
    learned = sorted({k[5] for k in acc if k[5] != "vanilla"})

    def stat(d):
        v = list(d.values())
        if not v:
            return math.nan, math.nan, "—"
        sd = statistics.stdev(v) if len(v) > 1 else math.nan
        return statistics.fmean(v), sd, f"{statistics.fmean(v):.1f} ± {sd:.1f}"

    head = "| task | cell | map | m | vanilla |"
    rule = "|---|---|---|---:|---:|"
    for v in learned:
        head += f" {v} | {v} − vanilla [95 % CI] |"
        rule += "---:|---|"
    print(head + " seeds |")
    print(rule + "---:|")
    summary = []
    pooled = defaultdict(list)  # variant -> paired differences over every group and seed
    for g in groups:
        van = acc.get(g + ("vanilla",), {})
        vm, vs, vt = stat(van)
        name = g[3] if g[2] == "linear" else g[2]
        line = f"| {g[0]} | {g[1]} | {name} | {g[4]} | {vt} |"
        paired_seeds = 0
        for v in learned:
            lea = acc.get(g + (v,), {})
            lm, ls, lt = stat(lea)
            seeds = sorted(set(van) & set(lea))
            if seeds:
                diffs = [lea[s] - van[s] for s in seeds]
                pooled[v] += diffs
                mean, half = interval(diffs)
                dt = f"{mean:+.1f} [{mean - half:+.1f}, {mean + half:+.1f}]"
            else:
                mean, half, dt = math.nan, math.nan, "—"
            paired_seeds = max(paired_seeds, len(seeds))
            line += f" {lt} | {dt} |"
            summary.append([g[0], g[1], name, g[4], v, vm, vs, lm, ls, mean, half, len(seeds)])
        print(line + f" {paired_seeds} |")
    print()
    for v in learned:
        d = pooled[v]
        if len(d) > 1:
            mean = statistics.fmean(d)
            half = (T95[min(len(d) - 1, len(T95)) - 1] if len(d) <= len(T95) else 1.96) * \
                statistics.stdev(d) / math.sqrt(len(d))
            wins = sum(x > 0 for x in d)
            losses = sum(x < 0 for x in d)
            print(f"{v} − vanilla over all {len(d)} pairs: {mean:+.1f} "
                  f"[{mean - half:+.1f}, {mean + half:+.1f}] ({wins} wins, {losses} losses)")

    if args.csv:
        with atomic_csv(args.csv) as f:
            w = csv.writer(f)
            w.writerow(["task", "cell", "map", "m", "variant", "vanilla_mean", "vanilla_sd",
                        "learned_mean", "learned_sd", "difference", "half_width",
                        "paired_seeds"])
            w.writerows(summary)
    if args.png:
        draw(summary, learned, args.png, softmax_means(acc))
    if args.pairs_png:
        draw_pairs(summary, learned, args.pairs_png)
    if args.bars:
        draw_bars(acc, groups, learned, args.bars)


@contextlib.contextmanager
def atomic_csv(path):
    """A file to write `path` through: a temporary file beside it, renamed over it on success."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run_gnuplot(script, png, plots):
    """Runs a gnuplot script with the PNG as ARG1, then each panel's data file and title."""
    argv = ["gnuplot", "-c", script, png]
    for data, title in plots:
        argv += [data, title]
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("gnuplot failed: " + result.stderr.strip())


def draw_bars(acc, groups, learned, png):
    """Test accuracy (mean ± sd over the seeds) of every map, softmax first, one cluster per map
    and a bar per variant (vanilla, then each learned one); one panel per (task, cell), the
    feature budgets of a cell side by side."""
    variants = ["vanilla"] + learned
    cells = []
    for g in groups:
        if (g[0], g[1]) not in cells:
            cells.append((g[0], g[1]))
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, cell in enumerate(cells):
            data = os.path.join(tmp, f"bars{i}.dat")
            members = sorted((g for g in groups if (g[0], g[1]) == cell),
                             key=lambda g: (g[2] != "softmax", g[4]))
            with open(data, "w") as f:
                for g in members:
                    label = "softmax" if g[2] == "softmax" else f"{g[3]} m={g[4]}"
                    values = []
                    for v in variants:
                        d = list(acc.get(g + (v,), {}).values())
                        mean = statistics.fmean(d) if d else math.nan
                        sd = statistics.stdev(d) if len(d) > 1 else (0.0 if d else math.nan)
                        values.append(f"{mean} {sd}")
                    f.write(f'"{label}" ' + " ".join(values) + "\n")
            plots.append((data, f"{cell[0]} {cell[1]}"))
        script = os.path.join(tmp, "bars.gp")
        with open(script, "w") as f:
            f.write(f"set terminal pngcairo size 900,{380 * len(plots)} font ',10'\n")
            f.write(f"set output ARG1\nset multiplot layout {len(plots)},1\n")
            f.write("set style data histograms\nset style histogram errorbars gap 2 lw 1\n")
            f.write("set style fill solid 0.6 border -1\nset ylabel 'test accuracy (%)'\n")
            f.write("set key outside right\nset grid ytics\nset datafile missing 'nan'\n")
            f.write("set yrange [0:*]\nset xtics rotate by -20\n")
            for k, (_, title) in enumerate(plots):
                f.write(f"set title ARG{2 * k + 3}\n")
                curves = []
                for j, v in enumerate(variants):
                    source = f"ARG{2 * k + 2}" if j == 0 else "''"
                    xtic = ":xtic(1)" if j == 0 else ""
                    curves.append(f"{source} using {2 + 2 * j}:{3 + 2 * j}{xtic} "
                                  f"title '{variant_label(v)}'")
                f.write("plot " + ", ".join(curves) + "\n")
            f.write("unset multiplot\n")
        run_gnuplot(script, png, plots)


def errorbar(mean, sd):
    """The ± of a point: its sd, 0 for a single seed (so the point is still drawn)."""
    return 0.0 if math.isnan(sd) and not math.isnan(mean) else sd


def quote(text):
    """A gnuplot string literal."""
    return "'" + text.replace("'", "''") + "'"


def variant_label(v):
    """A variant's name in a figure's key."""
    return ("learned (Phase A at initialization)" if v == "learned"
            else v.replace("learned:", "learned, Phase A ").replace("+after", " after epoch "))


def softmax_means(acc):
    """(task, cell) -> mean accuracy of exact softmax attention over its seeds."""
    return {(k[0], k[1]): statistics.fmean(d.values())
            for k, d in acc.items() if k[2] == "softmax" and d}


def draw(summary, learned, png, reference):
    """Accuracy against m, vanilla and each learned variant with ±sd bars, one panel per
    (task, cell, map): a row of panels per map, a column per cell when there are several maps,
    and exact softmax attention of the same cell as a dashed line (`reference`)."""
    panels = []
    for row in summary:
        if row[3] > 0 and (row[0], row[1], row[2]) not in panels:
            panels.append((row[0], row[1], row[2]))
    maps = sorted({p[2] for p in panels})
    cells = sorted({(p[0], p[1]) for p in panels}, key=lambda c: (c[0], cell_key(c[1])))
    if len(maps) > 1:
        panels.sort(key=lambda p: (maps.index(p[2]), cells.index((p[0], p[1]))))
        cols = len(cells)
    else:
        cols = min(len(panels), 2)
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, p in enumerate(panels):
            data = os.path.join(tmp, f"panel{i}.dat")
            with open(data, "w") as f:
                # m, vanilla mean, sd, then mean and sd of each learned variant, then softmax
                by_m = defaultdict(dict)
                for row in summary:
                    if (row[0], row[1], row[2]) == p:
                        by_m[row[3]]["vanilla"] = row[5:7]
                        by_m[row[3]][row[4]] = row[7:9]
                for m in sorted(by_m):
                    values = [by_m[m].get("vanilla", [math.nan, math.nan])]
                    values += [by_m[m].get(v, [math.nan, math.nan]) for v in learned]
                    f.write(f"{m} " + " ".join(f"{a} {errorbar(a, b)}" for a, b in values) +
                            f" {reference.get((p[0], p[1]), math.nan)}\n")
            plots.append((data, f"{p[0]} {p[1]}, {p[2]}"))
        script = os.path.join(tmp, "plot.gp")
        rows = (len(plots) + cols - 1) // cols
        softmax_column = 4 + 2 * len(learned)
        with open(script, "w") as f:
            f.write(f"set terminal pngcairo size {520 * cols},{380 * rows} font ',10'\n")
            f.write(f"set output ARG1\nset multiplot layout {rows},{cols}\n")
            f.write("set logscale x 2\nset xlabel 'features m'\nset ylabel 'test accuracy (%)'\n")
            f.write("set key bottom right\nset grid\nset yrange [0:101]\n")
            f.write("set datafile missing 'nan'\n")
            for data, title in plots:
                f.write(f"set title {quote(title)}\n")
                curves = [f"{quote(data)} using 1:2:3 with yerrorlines title 'vanilla'"]
                for j, v in enumerate(learned):
                    curves.append(f"'' using ($1*{1.0 + 0.04 * (j + 1):.2f}):{4 + 2 * j}:"
                                  f"{5 + 2 * j} with yerrorlines title '{variant_label(v)}'")
                if any(q[:2] in reference for q in panels):
                    curves.append(f"'' using 1:{softmax_column} with lines dt 2 lc 'black' "
                                  "title 'softmax attention'")
                f.write("plot " + ", ".join(curves) + "\n")
            f.write("unset multiplot\n")
        run_gnuplot(script, png, [])


def draw_pairs(summary, learned, png):
    """MQAR: accuracy against the number of key-value pairs (the P of a cell named L64-P8-V64),
    one panel per map, a line per m for vanilla (solid) and each learned variant (dashed; the
    key names only the learned lines' variant)."""
    def pairs_of(cell):
        for token in cell.split("-"):
            if token.startswith("P") and token[1:].isdigit():
                return int(token[1:])
        return None
    points = defaultdict(dict)  # map -> {(m, variant): {pairs: (mean, sd)}}
    for row in summary:
        pairs = pairs_of(row[1])
        if pairs is None or row[3] <= 0:
            continue
        points[row[2]].setdefault((row[3], "vanilla"), {})[pairs] = row[5:7]
        points[row[2]].setdefault((row[3], row[4]), {})[pairs] = row[7:9]
    maps = sorted(points)
    if not maps:
        sys.exit("--pairs-png: no cell with a number of pairs (such as L64-P8-V64)")
    with tempfile.TemporaryDirectory() as tmp:
        plots, curves_of = [], []
        for i, name in enumerate(maps):
            data = os.path.join(tmp, f"pairs{i}.dat")
            lines = sorted(points[name], key=lambda k: (k[0], k[1] != "vanilla", k[1]))
            pairs = sorted({p for k in lines for p in points[name][k]})
            with open(data, "w") as f:
                for p in pairs:
                    values = [points[name][k].get(p, [math.nan, math.nan]) for k in lines]
                    f.write(f"{p} " + " ".join(f"{a} {errorbar(a, b)}" for a, b in values) +
                            "\n")
            plots.append((data, name))
            curves_of.append(lines)
        script = os.path.join(tmp, "pairs.gp")
        cols = min(len(plots), 2)
        rows = (len(plots) + cols - 1) // cols
        with open(script, "w") as f:
            f.write(f"set terminal pngcairo size {520 * cols},{380 * rows} font ',10'\n")
            f.write(f"set output ARG1\nset multiplot layout {rows},{cols}\n")
            f.write("set logscale x 2\nset xlabel 'key-value pairs'\n")
            f.write("set ylabel 'test accuracy (%)'\nset key bottom left font ',8'\nset grid\n")
            f.write("set yrange [0:101]\nset datafile missing 'nan'\n")
            for (data, title), lines in zip(plots, curves_of):
                f.write(f"set title {quote(title)}\n")
                ms = sorted({m for m, _ in lines})
                curves = []
                for j, (m, v) in enumerate(lines):
                    source = quote(data) if j == 0 else "''"
                    dash = 1 if v == "vanilla" else 2
                    title = f"m = {m}" + ("" if v == "vanilla" else f", {variant_label(v)}")
                    curves.append(f"{source} using 1:{2 + 2 * j}:{3 + 2 * j} with yerrorlines "
                                  f"lc {ms.index(m) + 1} dt {dash} title '{title}'")
                f.write("plot " + ", ".join(curves) + "\n")
            f.write("unset multiplot\n")
        run_gnuplot(script, png, [])


if __name__ == "__main__":
    main()
