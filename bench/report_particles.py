#!/usr/bin/env python3
"""Markdown table from bench_particles' JSON output: the time of one Langevin step (and of its
parts) beside the Eigen GEMMs of the same shapes measured in the same run, and the fraction of
the GEMM rate the step keeps.

    build/bench/bench_particles --benchmark_format=json --benchmark_repetitions=5 \
        --benchmark_report_aggregates_only=true > particles.json
    python3 bench/report_particles.py --stat min particles.json

Times are the benchmark's `step_us` counter: CPU time per Langevin step (per call for the
parts and the reference), which on a machine shared with other work is less disturbed than
wall-clock time. The reference, GemmReference<scalar>, runs the four GEMMs of a step
(X_b Ωᵀ, dZᵀ X_b, Ω Ωᵀ, C Ω) and nothing else.
"""
import argparse
import json
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", nargs="?", help="bench_particles JSON (default: stdin)")
    parser.add_argument("--stat", default="median", choices=["median", "mean", "min"],
                        help="which aggregate of the repetitions to report")
    args = parser.parse_args()
    data = json.load(open(args.json) if args.json else sys.stdin)
    rows = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != args.stat:
            continue
        name = b.get("run_name", b["name"])
        # name = "<label>/N:<N>/d:<d>/n:<n>/samples:<S>"
        parts = name.split("/")
        label = "/".join(parts[:-4])
        shape = tuple(int(p.split(":")[1]) for p in parts[-4:])
        rows[(label, shape)] = b["step_us"]
    ctx = data.get("context", {})
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz, "
          f"load average {ctx.get('load_avg', '?')}, run {ctx.get('date', '?')}; "
          f"CPU time per step ({args.stat} of the repetitions when repetitions were requested).\n")
    print("| benchmark | N | d | n | time per step (µs) | reference | reference (µs) "
          "| fraction of GEMM rate |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for (label, shape), t in rows.items():
        if label.startswith("GemmReference"):
            continue
        scalar = "double" if "double" in label else "float"
        ref = f"GemmReference<{scalar}>"
        rt = rows.get((ref, shape))
        frac = f"{rt / t:.2f}" if rt and label.startswith("LangevinStep") else "—"
        rt_text = f"{rt:.0f}" if rt else "not run"
        n_particles, d, n, _ = shape
        print(f"| {label} | {n_particles} | {d} | {n} | {t:.0f} | {ref} | {rt_text} | {frac} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
