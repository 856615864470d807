#!/usr/bin/env python3
"""Markdown report from bench_model's JSON (and, optionally, bench/torch_train_peer.py's JSON):
inference time per 1,000 sequences against L with the vanilla and the learned kernel and exact
softmax attention, the fitted slope of log time in log L, the Phase B training throughput, and
the ratios to PyTorch, each checked against the goals of issue 5; bf16 inference against fp32
(Inference/vanilla_bf16, Product/forward/bf16) against the goal of issue 24.

    build/bench/bench_model --benchmark_format=json --benchmark_repetitions=5 \\
        --benchmark_enable_random_interleaving=true > model.json
    python3 bench/report_model.py model.json [--torch torch_model.json] [--cpu-time]

Times are medians over the repetitions (of all files given, per benchmark). The spread of a
benchmark is the median absolute deviation of its repetitions scaled to a standard deviation
(1.4826 · MAD), from the individual repetitions when the file has them (run without
--benchmark_report_aggregates_only), else from the stddev aggregate. "Within noise" for the
learned kernel means |learned/vanilla − 1| ≤ 2·√(s_v² + s_l²) relative, or ≤ 2%.
"""
import argparse
import json
import math
import statistics
from collections import defaultdict

UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def parse_name(name):
    parts = name.split("/")
    args = dict(p.split(":") for p in parts[2:] if ":" in p)
    return (parts[0], parts[1], int(args["L"]), int(args["threads"]))


def load_coulomb(paths, field):
    samples = defaultdict(list)
    medians = defaultdict(list)
    stddevs = defaultdict(list)
    batch = {}
    contexts = []
    products = defaultdict(list)
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        for b in data["benchmarks"]:
            name = b.get("run_name", b["name"])
            if name.startswith("Product/"):
                if b.get("run_type") != "aggregate":
                    products[name].append(b[field] * UNIT_MS[b.get("time_unit", "ms")])
                continue
            key = parse_name(name)
            value = b[field] * UNIT_MS[b.get("time_unit", "ms")]
            if "B" in b and b.get("aggregate_name") in (None, "mean", "median"):
                batch[key] = int(round(b["B"]))
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    medians[key].append(value)
                elif b.get("aggregate_name") == "stddev":
                    stddevs[key].append(value)
            else:
                samples[key].append(value)
    times, spread = {}, {}
    for key in set(samples) | set(medians):
        if samples[key]:
            times[key] = statistics.median(samples[key])
            if len(samples[key]) >= 3:
                mad = statistics.median(abs(x - times[key]) for x in samples[key])
                spread[key] = 1.4826 * mad / times[key]
        else:
            times[key] = statistics.median(medians[key])
        if key not in spread and stddevs[key]:
            spread[key] = statistics.median(stddevs[key]) / times[key]
    return times, spread, batch, contexts, products


def load_torch(path, cpu_time):
    with open(path) as f:
        data = json.load(f)
    field = "median_cpu_ms" if cpu_time else "median_ms"
    records = {}
    for r in data["records"]:
        if r.get(field) is not None:
            records[(r["kind"], r["attention"], r["L"], r["threads"])] = r | {"ms": r[field]}
    return records, data


def slope(xs, ys):
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    sxy = sum((a - mx) * (b - my) for a, b in zip(lx, ly))
    sxx = sum((a - mx) ** 2 for a in lx)
    return sxy / sxx


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:.{digits}g}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("coulomb", nargs="+", help="bench_model JSON file(s)")
    ap.add_argument("--torch", help="torch_train_peer.py JSON file")
    ap.add_argument("--cpu-time", action="store_true",
                    help="CPU time instead of wall time (for one-thread figures on a loaded "
                         "machine; meaningless for two threads)")
    args = ap.parse_args()
    t, spread, batch, contexts, products = load_coulomb(
        args.coulomb, "cpu_time" if args.cpu_time else "real_time")
    torch_t, torch_data = load_torch(args.torch, args.cpu_time) if args.torch else ({}, None)
    kind = "CPU" if args.cpu_time else "wall"

    ctx = contexts[0]
    print(f"Machine: {ctx.get('num_cpus', '?')} CPUs at {ctx.get('mhz_per_cpu', '?')} MHz; "
          f"runs: {', '.join(c.get('date', '?') for c in contexts)}; load averages at the start: "
          f"{', '.join(str([round(x, 2) for x in c.get('load_avg', [])]) for c in contexts)}; "
          f"parameters: {ctx.get('train_model_parameters', '?')} (training model), "
          f"{ctx.get('inference_model_parameters', '?')} (inference model). Medians of {kind} "
          f"time.")
    if torch_data:
        cfg = torch_data["configs"][0]
        print(f"PyTorch {cfg['torch']} ({torch_data['date']}, load at the end "
              f"{[round(x, 2) for x in torch_data['load']]}; parameters "
              f"{json.dumps(cfg.get('parameters', {}))}).")
    print()

    lengths = sorted({k[2] for k in t if k[0] == "Inference"})
    threads_list = sorted({k[3] for k in t if k[0] == "Inference"})

    if lengths:
        print("### Inference: time per 1,000 sequences (ms), B·L = 8192 tokens per batch\n")
        print("| threads | L | B | vanilla | learned | learned / vanilla | noise (2σ) | "
              "within noise | softmax | softmax / vanilla | vanilla tokens/s | PyTorch linear "
              "| PyTorch / coulomb | PyTorch softmax | PyTorch / coulomb (softmax) |")
        print("|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for th in threads_list:
            for L in lengths:
                kv = ("Inference", "vanilla", L, th)
                kl = ("Inference", "learned", L, th)
                ks = ("Inference", "softmax", L, th)
                if kv not in t:
                    continue
                B = batch.get(kv, 8192 // L)
                per = lambda k: t[k] * 1000.0 / B if k in t else None
                v, lr, s = per(kv), per(kl), per(ks)
                ratio = lr / v if lr else None
                noise = 2 * math.sqrt(spread.get(kv, 0) ** 2 + spread.get(kl, 0) ** 2)
                within = ("yes" if abs(ratio - 1) <= max(noise, 0.02) else "no") if ratio else ""
                tl = torch_t.get(("inference", "linear", L, th))
                ts = torch_t.get(("inference", "softmax", L, th))
                tl_ms = tl["ms"] * 1000.0 / tl["B"] if tl else None
                ts_ms = ts["ms"] * 1000.0 / ts["B"] if ts else None
                print(f"| {th} | {L} | {B} | {fmt(v)} | {fmt(lr)} | {fmt(ratio, 4)} | "
                      f"{noise:.3f} | {within} | {fmt(s)} | {fmt(s / v if s else None)} | "
                      f"{B * L / (t[kv] * 1e-3):.3g} | {fmt(tl_ms)} | "
                      f"{fmt(tl_ms / v if tl_ms else None)} | {fmt(ts_ms)} | "
                      f"{fmt(ts_ms / s if ts_ms and s else None)} |")

        print("\n### Slope of log(time per sequence) in log L (least squares over L = "
              f"{', '.join(map(str, lengths))})\n")
        print("| implementation | threads | slope | goal (linear attention: 0.9–1.1) |")
        print("|---|---:|---:|---|")
        for th in threads_list:
            for variant in ("vanilla", "learned", "softmax"):
                keys = [("Inference", variant, L, th) for L in lengths]
                if any(k not in t for k in keys):
                    continue
                ys = [t[k] / batch.get(k, 8192 // k[2]) for k in keys]
                s = slope(lengths, ys)
                goal = "" if variant == "softmax" else ("met" if 0.9 <= s <= 1.1 else "not met")
                print(f"| coulomb {variant} | {th} | {s:.3f} | {goal} |")
            for attention in ("linear", "softmax"):
                recs = [torch_t.get(("inference", attention, L, th)) for L in lengths]
                if None in recs:
                    continue
                s = slope(lengths, [r["ms"] / r["B"] for r in recs])
                print(f"| PyTorch {attention} | {th} | {s:.3f} | |")

    bf16_keys = [k for k in sorted(t) if k[0] == "Inference" and k[1] == "vanilla_bf16"]
    if bf16_keys:
        print("\n### bf16 inference (InferencePrecision::bf16) against fp32: ms per batch\n")
        print("| threads | L | fp32 | bf16 | fp32 / bf16 | goal (≥ 1.6 at L = 64, 256) |")
        print("|---:|---:|---:|---:|---:|---|")
        for k in sorted(bf16_keys, key=lambda k: (k[3], k[2])):
            kv = ("Inference", "vanilla", k[2], k[3])
            if kv not in t:
                continue
            ratio = t[kv] / t[k]
            goal = ("met" if ratio >= 1.6 else "not met") if k[2] in (64, 256) else ""
            print(f"| {k[3]} | {k[2]} | {fmt(t[kv])} | {fmt(t[k])} | {ratio:.2f} | {goal} |")

    train_lengths = sorted({k[2] for k in t if k[0] == "Train"})
    train_threads = sorted({k[3] for k in t if k[0] == "Train"})
    if train_lengths:
        print("\n### Phase B training step (forward, cross-entropy, backward, clipping, AdamW; "
              "Ω frozen), B = 32\n")
        print("| attention | threads | L | coulomb (ms/step) | coulomb tokens/s | PyTorch "
              "(ms/step) | PyTorch tokens/s | coulomb / PyTorch tokens/s | goal (≥ 2, linear) "
              "| PyTorch AdamW |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---|---|")
        for attention in ("linear", "softmax"):
            for th in train_threads:
                for L in train_lengths:
                    k = ("Train", attention, L, th)
                    if k not in t:
                        continue
                    B = batch.get(k, 32)
                    ms = t[k]
                    tr = torch_t.get(("train", attention, L, th))
                    ratio = tr["ms"] / ms if tr else None
                    goal = ""
                    if ratio is not None and attention == "linear":
                        goal = "met" if ratio >= 2 else "not met"
                    print(f"| {attention} | {th} | {L} | {fmt(ms)} | {B * L / (ms * 1e-3):.0f} | "
                          f"{fmt(tr['ms'] if tr else None)} | "
                          f"{(str(round(tr['B'] * L / (tr['ms'] * 1e-3))) if tr else 'n/a')} | "
                          f"{fmt(ratio)} | {goal} | {tr['variant'] if tr else ''} |")
        if len(train_threads) > 1:
            print("\nTwo threads against one (time(1) / time(2)): " + ", ".join(
                f"{a} L={L}: coulomb {t[('Train', a, L, 1)] / t[('Train', a, L, 2)]:.2f}" +
                (f", PyTorch {torch_t[('train', a, L, 1)]['ms'] / torch_t[('train', a, L, 2)]['ms']:.2f}"
                 if ('train', a, L, 1) in torch_t and ('train', a, L, 2) in torch_t else "")
                for a in ("linear", "softmax") for L in train_lengths
                if ("Train", a, L, 1) in t and ("Train", a, L, 2) in t) + ".")
    if products:
        print_products(products)
    return 0


def print_products(products):
    """The Product/ rows: Linear's products against Eigen's GEMM of the same shape."""
    print("\n### Products of Linear against Eigen's GEMM (n = 8192 rows, one thread; "
          "medians, µs)\n")
    print("| product | in | out | coulomb | Eigen | Eigen / coulomb |")
    print("|---|---:|---:|---:|---:|---:|")
    pairs = (("forward", "coulomb", "eigen", "Y = X W + b"),
             ("input_grad", "coulomb", "eigen", "dX = dY Wᵀ"),
             ("weight_grad", "coulomb", "eigen", "∂W += Xᵀ dY"))
    shapes = sorted({tuple(int(p.split(":")[1]) for p in n.split("/")[3:5])
                     for n in products})
    for kind, ours, ref, label in pairs:
        for shape in shapes:
            a = products.get(f"Product/{kind}/{ours}/in:{shape[0]}/out:{shape[1]}/real_time")
            b = products.get(f"Product/{kind}/{ref}/in:{shape[0]}/out:{shape[1]}/real_time")
            if not a or not b:
                continue
            ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
            print(f"| {label} | {shape[0]} | {shape[1]} | {ma:.0f} | {mb:.0f} | {mb / ma:.2f} |")
    bf16 = [s for s in shapes
            if products.get(f"Product/forward/bf16/in:{s[0]}/out:{s[1]}/real_time")]
    if bf16:
        print("\n| Y = X W + b | in | out | fp32 kernel | bf16 kernel | fp32 / bf16 |")
        print("|---|---:|---:|---:|---:|---:|")
        for shape in bf16:
            a = products.get(f"Product/forward/coulomb/in:{shape[0]}/out:{shape[1]}/real_time")
            b = products[f"Product/forward/bf16/in:{shape[0]}/out:{shape[1]}/real_time"]
            if not a:
                continue
            ma, mb = statistics.median(a) * 1e3, statistics.median(b) * 1e3
            print(f"| bf16 | {shape[0]} | {shape[1]} | {ma:.0f} | {mb:.0f} | {ma / mb:.2f} |")


if __name__ == "__main__":
    raise SystemExit(main())
