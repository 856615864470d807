#!/usr/bin/env python3
"""Markdown table from bench_features' JSON output: each map's time beside the Eigen GEMM of
the same shape measured in the same run, and the fraction of the GEMM rate the map keeps.

    build/bench/bench_features --benchmark_format=json --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true > features.json
    python3 bench/report_features.py features.json            # medians
    python3 bench/report_features.py --stat min features.json # fastest repetitions

On a machine shared with other work, the fastest of several repetitions (--stat min) is the
least disturbed estimate of both the map and its reference.
"""
import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", help="bench_features JSON (default: stdin)")
    parser.add_argument("--stat", default="median", choices=["median", "mean", "min"],
                        help="which aggregate of the repetitions to report")
    args = parser.parse_args()
    source = open(args.json) if args.json else sys.stdin
    data = json.load(source)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != args.stat:
            continue
        name = b.get("run_name", b["name"])
        # name = "<label>/<n>/<d>/<m>"
        parts = name.split("/")
        label, shape = "/".join(parts[:-3]), tuple(int(p) for p in parts[-3:])
        unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b.get("time_unit", "us")]
        rows[(label, shape)] = b["real_time"] * unit
    ctx = data.get("context", {})
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"run {ctx.get('date', '?')}; times are {args.stat}s (µs) of the repetitions when repetitions were requested.\n")
    print("| benchmark | n | d | m | time (µs) | reference | reference (µs) | fraction of reference rate |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for (label, shape), t in rows.items():
        if label.startswith("EigenGemm"):
            continue
        scalar = "double" if "double" in label else "float"
        ref = f"EigenGemmBackward<{scalar}>" if label.startswith("Backward") else f"EigenGemm<{scalar}>"
        rt = rows.get((ref, shape))
        frac = f"{rt / t:.2f}" if rt else "n/a"
        rt_text = f"{rt:.0f}" if rt else "not run"
        n, d, m = shape
        print(f"| {label} | {n} | {d} | {m} | {t:.0f} | {ref} | {rt_text} | {frac} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
