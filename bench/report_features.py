#!/usr/bin/env python3
"""Markdown table from bench_features' JSON output: each map's time beside the Eigen GEMM of
the same shape measured in the same run, and the fraction of the GEMM rate the map keeps.

    build/bench/bench_features --benchmark_format=json --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true > features.json
    python3 bench/report_features.py features.json
"""
import json
import sys


def main() -> int:
    source = open(sys.argv[1]) if len(sys.argv) > 1 else sys.stdin
    data = json.load(source)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        name = b.get("run_name", b["name"])
        # name = "<label>/<n>/<d>/<m>"
        parts = name.split("/")
        label, shape = "/".join(parts[:-3]), tuple(int(p) for p in parts[-3:])
        unit = {"ns": 1e-3, "us": 1.0, "ms": 1e3}[b.get("time_unit", "us")]
        rows[(label, shape)] = b["real_time"] * unit
    ctx = data.get("context", {})
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"run {ctx.get('date', '?')}; times are medians (µs) when repetitions were requested.\n")
    print("| benchmark | n | d | m | time (µs) | reference | reference (µs) | fraction of reference rate |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for (label, shape), t in rows.items():
        if label.startswith("EigenGemm"):
            continue
        scalar = "double" if "double" in label else "float"
        ref = f"EigenGemmBackward<{scalar}>" if label.startswith("Backward") else f"EigenGemm<{scalar}>"
        rt = rows.get((ref, shape))
        frac = f"{rt / t:.2f}" if rt else "n/a"
        n, d, m = shape
        print(f"| {label} | {n} | {d} | {m} | {t:.0f} | {ref} | {rt:.0f} | {frac} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
