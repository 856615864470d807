#!/usr/bin/env python3
"""Markdown report of bench_sequence against bench/torch_seq_peer.py (issue 22, items 5 and 6):
the training tokens/s of coulomb and PyTorch and their ratio (goal: coulomb ≥ 2 × PyTorch with
linear attention at L = 512 and 2000, one and two threads), inference, the length at which
linear attention becomes cheaper than softmax attention (training step and inference), and the
peak memory of one training step against L with its fitted slope.

    build/bench/bench_sequence --benchmark_format=json > sequence.json
    build/bench/bench_sequence --peak-memory > memory.txt
    python3 bench/report_sequence.py sequence.json --torch torch_sequence.json \\
        --memory memory.txt

Times are medians over the repetitions of all files given (per row); tokens/s counts B·L per
step, as both programs do. The crossover is interpolated linearly in log L between the two
lengths of the grid where time(linear) / time(softmax) passes 1 (log of the ratio).
"""
import argparse
import json
import math
import statistics
from collections import defaultdict

UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
GOAL_LENGTHS = (512, 2000)


def parse_name(name):
    """("Train", "listops", "linear", L, threads) from a row name of bench_sequence."""
    parts = name.split("/")
    args = dict(p.split(":") for p in parts[3:] if ":" in p)
    return parts[0], parts[1], parts[2], int(args["L"]), int(args["threads"])


def load_coulomb(paths):
    samples, medians, contexts = defaultdict(list), defaultdict(list), []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            key = parse_name(b.get("run_name", b["name"]))
            ms = b["real_time"] * UNIT_MS[b.get("time_unit", "ms")]
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    medians[key].append(ms)
            else:
                samples[key].append(ms)
    return {k: statistics.median(samples[k] or medians[k]) for k in set(samples) | set(medians)
            }, contexts


def load_torch(path):
    with open(path) as f:
        data = json.load(f)
    times = {}
    for r in data["records"]:
        kind = "Train" if r["kind"] == "train" else "Inference"
        times[(kind, r["task"], r["attention"], r["L"], r["threads"])] = r["median_ms"]
    return times, data


def crossover(times, kind, task, threads):
    """Length where the linear step becomes cheaper than the softmax step, or a bound."""
    Ls = sorted(k[3] for k in times if k[:3] == (kind, task, "linear") and k[4] == threads
                and (kind, task, "softmax", k[3], threads) in times)
    if len(Ls) < 2:
        return None
    r = [math.log(times[(kind, task, "linear", L, threads)] /
                  times[(kind, task, "softmax", L, threads)]) for L in Ls]
    if r[0] <= 0:
        return f"< {Ls[0]} (linear faster at every length)"
    for i in range(1, len(Ls)):
        if r[i] <= 0:
            a, b = math.log(Ls[i - 1]), math.log(Ls[i])
            return f"{math.exp(a + (b - a) * r[i - 1] / (r[i - 1] - r[i])):.0f}"
    return f"> {Ls[-1]} (softmax faster at every length)"


def slope(xs, ys):
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return (sum((a - mx) * (b - my) for a, b in zip(lx, ly)) /
            sum((a - mx) ** 2 for a in lx))


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}g}"


def print_table(kind, t, tt, title):
    rows = sorted({k[1:] for k in t if k[0] == kind},
                  key=lambda k: (k[0], k[1], k[3], k[2]))
    if not rows:
        return
    print(f"### {title}\n")
    print("| task | attention | threads | L | coulomb (ms) | coulomb tokens/s | PyTorch (ms) | "
          "PyTorch tokens/s | coulomb / PyTorch | goal (≥ 2) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for task, attention, L, threads in rows:
        ms = t[(kind, task, attention, L, threads)]
        pt = tt.get((kind, task, attention, L, threads))
        ratio = pt / ms if pt else None
        goal = ""
        if kind == "Train" and attention == "linear" and L in GOAL_LENGTHS and ratio:
            goal = "met" if ratio >= 2 else "**not met**"
        print(f"| {task} | {attention} | {threads} | {L} | {ms:.4g} | {32 * L / (ms * 1e-3):,.0f}"
              f" | {fmt(pt, 4)} | {f'{32 * L / (pt * 1e-3):,.0f}' if pt else 'n/a'} | "
              f"{fmt(ratio)} | {goal} |")
    print()


def print_memory(path):
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            task, attention, L, hwm, before = line.split()[:5]
            rows.append((task, attention, int(L), float(hwm), float(before)))
    print("### Peak memory of one training step (ListOps, one thread, fresh process per row)\n")
    print("VmHWM of the process (MiB), and its growth over the resident memory before the model "
          "and batch were built.\n")
    print("| L | linear VmHWM | linear growth | softmax VmHWM | softmax growth |")
    print("|---:|---:|---:|---:|---:|")
    by = {(r[1], r[2]): r for r in rows}
    for L in sorted({r[2] for r in rows}):
        cells = []
        for attention in ("linear", "softmax"):
            r = by.get((attention, L))
            cells += [f"{r[3]:.1f}", f"{r[3] - r[4]:.1f}"] if r else ["n/a", "n/a"]
        print(f"| {L} | " + " | ".join(cells) + " |")
    print()
    for attention in ("linear", "softmax"):
        pts = sorted((r[2], r[3], r[3] - r[4]) for r in rows if r[1] == attention and r[2] >= 256)
        if len(pts) >= 2:
            Ls = [p[0] for p in pts]
            print(f"- {attention}: slope of log VmHWM in log L over L = {Ls[0]}–{Ls[-1]}: "
                  f"{slope(Ls, [p[1] for p in pts]):.2f} (growth: "
                  f"{slope(Ls, [p[2] for p in pts]):.2f}); {pts[0][1]:.1f} → {pts[-1][1]:.1f} MiB")
    print()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coulomb", nargs="+", help="bench_sequence JSON file(s)")
    ap.add_argument("--torch", help="torch_seq_peer.py JSON file")
    ap.add_argument("--memory", help="the output of bench_sequence --peak-memory")
    args = ap.parse_args()
    t, contexts = load_coulomb(args.coulomb)
    tt, torch_data = load_torch(args.torch) if args.torch else ({}, None)
    ctx = contexts[0]
    print(f"coulomb: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"runs {', '.join(c.get('date', '?') for c in contexts)}, load at the start "
          f"{', '.join(str([round(x, 2) for x in c.get('load_avg', [])]) for c in contexts)}.")
    if torch_data:
        print(f"PyTorch {torch_data['configs'][0]['torch']} ({torch_data['date']}, load at the "
              f"end {[round(x, 2) for x in torch_data['load']]}); parameters "
              f"{json.dumps(torch_data['configs'][0]['parameters'])}.")
    print()
    print_table("Train", t, tt, "Training step (forward, cross-entropy, backward, clipping, "
                "AdamW), B = 32")
    print_table("Inference", t, tt, "Inference (evaluation forward), B = 32")
    print("### Crossover: the shortest L at which linear attention is cheaper than softmax\n")
    print("| program | step | task | threads | crossover L |")
    print("|---|---|---|---:|---|")
    for name, times in (("coulomb", t), ("PyTorch", tt)):
        for kind in ("Train", "Inference"):
            for task in sorted({k[1] for k in times if k[0] == kind}):
                for threads in sorted({k[4] for k in times if k[0] == kind}):
                    c = crossover(times, kind, task, threads)
                    if c:
                        print(f"| {name} | {kind.lower()} | {task} | {threads} | {c} |")
    print()
    if args.memory:
        print_memory(args.memory)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
