#!/usr/bin/env python3
"""Markdown report from bench_attention's JSON (and, optionally, bench/torch_peer.py's JSON):
time of linear attention beside the Eigen GEMM reference of the same FLOP count, the fitted
scaling exponent in L, the crossover L against exact softmax attention, the speed-up of two
threads over one, and the ratio to PyTorch, each checked against the goals of issue 4.

    build/bench/bench_attention --benchmark_format=json --benchmark_repetitions=3 \\
        --benchmark_report_aggregates_only=true > attention.json
    python3 bench/report_attention.py attention.json [--torch torch.json]

Times are medians when the run has repetitions. Several coulomb JSON files may be given; for
every benchmark the median over all of them is used.
"""
import argparse
import json
import math
import statistics
from collections import defaultdict

UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def load_coulomb(paths, field="real_time"):
    samples = defaultdict(list)
    contexts = []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            name = b.get("run_name", b["name"])
            parts = name.split("/")
            impl, pass_ = parts[0], parts[1]
            args = dict(p.split(":") for p in parts[2:] if ":" in p)
            key = (impl, pass_, int(args["L"]), int(args["heads"]), int(args["threads"]))
            samples[key].append(b[field] * UNIT_MS[b.get("time_unit", "ms")])
    return {k: statistics.median(v) for k, v in samples.items()}, contexts


def load_torch(path, cpu_time=False):
    with open(path) as f:
        data = json.load(f)
    times = {}
    field = "median_cpu_ms" if cpu_time else "median_ms"
    for r in data["records"]:
        if r.get(field) is not None:
            times[(r["impl"], r["pass_"], r["L"], r["heads"], r["threads"])] = r[field]
    return times, data


def slope(xs, ys):
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    sxx = sum((a - mx) ** 2 for a in lx)
    return sxy / sxx


def crossover(lengths, lin, soft):
    """L where linear attention becomes faster than softmax (log-log interpolation)."""
    r = [math.log(a / b) for a, b in zip(lin, soft)]  # < 0: linear faster
    if r[0] < 0:
        return f"≤ {lengths[0]} (linear already faster)"
    for i in range(1, len(r)):
        if r[i] < 0:
            x0, x1 = math.log(lengths[i - 1]), math.log(lengths[i])
            x = x0 + (x1 - x0) * r[i - 1] / (r[i - 1] - r[i])
            return f"{math.exp(x):.0f}"
    return f"> {lengths[-1]}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coulomb", nargs="+", help="bench_attention JSON file(s)")
    ap.add_argument("--torch", help="torch_peer.py JSON file")
    ap.add_argument("--cpu-time", action="store_true",
                    help="use CPU time instead of wall time (for one-thread runs on a loaded "
                         "machine: time spent descheduled is not counted; meaningless for the "
                         "two-thread speed-ups)")
    args = ap.parse_args()
    t, contexts = load_coulomb(args.coulomb, "cpu_time" if args.cpu_time else "real_time")
    torch_t, torch_data = load_torch(args.torch, args.cpu_time) if args.torch else ({}, None)

    ctx = contexts[0]
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz; "
          f"runs: {', '.join(c.get('date', '?') for c in contexts)}; load averages at the "
          f"start: {', '.join(str([round(x, 2) for x in c.get('load_avg', [])]) for c in contexts)}."
          f" Times in ms (medians of {'CPU' if args.cpu_time else 'wall'} time).\n")

    lengths = sorted({k[2] for k in t})
    heads_list = sorted({k[3] for k in t})
    threads_list = sorted({k[4] for k in t})
    passes = ["forward", "forward_backward"]

    print("### Linear attention against the Eigen GEMM reference (same GEMMs, same FLOPs)\n")
    print("| pass | heads | threads | L | linear | causal | GEMM ref. | fraction of GEMM rate "
          "| softmax | softmax / linear |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p in passes:
        for h in heads_list:
            for th in threads_list:
                for L in lengths:
                    lin = t.get(("Linear", p, L, h, th))
                    cau = t.get(("LinearCausal", p, L, h, th))
                    ref = t.get(("EigenGemm", p, L, h, th))
                    soft = t.get(("Softmax", p, L, h, th))
                    if lin is None:
                        continue
                    f = lambda x: f"{x:.3g}" if x is not None else "n/a"
                    frac = f"{ref / lin:.2f}" if ref else "n/a"
                    ratio = f"{soft / lin:.2f}" if soft else "n/a"
                    print(f"| {p} | {h} | {th} | {L} | {f(lin)} | {f(cau)} | {f(ref)} | {frac} "
                          f"| {f(soft)} | {ratio} |")

    print("\n### Scaling exponent (least-squares slope of log time against log L)\n")
    print("| impl | pass | heads | threads | slope | goal |")
    print("|---|---|---:|---:|---:|---|")
    for impl in ("Linear", "LinearCausal", "Softmax"):
        for p in passes:
            for h in heads_list:
                for th in threads_list:
                    ys = [t.get((impl, p, L, h, th)) for L in lengths]
                    if None in ys:
                        continue
                    s = slope(lengths, ys)
                    goal = ("met" if 0.9 <= s <= 1.1 else "not met") if impl != "Softmax" else ""
                    print(f"| {impl} | {p} | {h} | {th} | {s:.3f} | {goal} |")

    print("\n### Crossover: smallest L at which linear attention beats exact softmax\n")
    print("| pass | heads | threads | crossover L | goal (≤ 512, one head) |")
    print("|---|---:|---:|---|---|")
    for p in passes:
        for h in heads_list:
            for th in threads_list:
                lin = [t.get(("Linear", p, L, h, th)) for L in lengths]
                soft = [t.get(("Softmax", p, L, h, th)) for L in lengths]
                if None in lin or None in soft:
                    continue
                c = crossover(lengths, lin, soft)
                goal = ""
                if h == 1:
                    try:
                        goal = "met" if float(c) <= 512 else "not met"
                    except ValueError:
                        goal = "met" if c.startswith("≤") else "not met"
                print(f"| {p} | {h} | {th} | {c} | {goal} |")

    if len(threads_list) > 1:
        print("\n### Two threads against one (time(1 thread) / time(2 threads))\n")
        print("| impl | pass | heads | L | speed-up | goal (≥ 1.7 at L ≥ 4096) |")
        print("|---|---|---:|---:|---:|---|")
        for impl in ("Linear", "LinearCausal", "EigenGemm", "Softmax"):
            for p in passes:
                for h in heads_list:
                    for L in lengths:
                        a = t.get((impl, p, L, h, 1))
                        b = t.get((impl, p, L, h, 2))
                        if a is None or b is None:
                            continue
                        goal = ""
                        if impl.startswith("Linear") and L >= 4096:
                            goal = "met" if a / b >= 1.7 else "not met"
                        print(f"| {impl} | {p} | {h} | {L} | {a / b:.2f} | {goal} |")

    if torch_t:
        cfg = torch_data["configs"][0]
        kind = "CPU" if args.cpu_time else "wall"
        print(f"\n### Against PyTorch {cfg['torch']} (same maths, {kind} time; {torch_data['date']}, "
              f"load {[round(x, 2) for x in torch_data['load']]}; softmax via the faster of "
              f"{cfg['sdpa']} and the explicit form)\n")
        print("| impl | pass | heads | threads | L | PyTorch | coulomb | PyTorch / coulomb "
              "| goal (≥ 2, one thread) |")
        print("|---|---|---:|---:|---:|---:|---:|---:|---|")
        for impl, mine in (("torch_linear", "Linear"), ("torch_softmax", "Softmax")):
            for p in passes:
                for h in heads_list:
                    for th in threads_list:
                        for L in lengths:
                            a = torch_t.get((impl, p, L, h, th))
                            b = t.get((mine, p, L, h, th))
                            if a is None or b is None:
                                continue
                            goal = ("met" if a / b >= 2 else "not met") if th == 1 else ""
                            print(f"| {mine} | {p} | {h} | {th} | {L} | {a:.3g} | {b:.3g} | "
                                  f"{a / b:.2f} | {goal} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
