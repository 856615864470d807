#!/usr/bin/env python3
"""PyTorch peer of bench_attention: the same FAVOR+ linear attention maths and exact softmax
attention on the CPU, forward and forward+backward, for the same shapes (one sequence, H heads
of width d = 64, m = 256 features, float32), timed in PyTorch's best CPU configuration.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \\
        /usr/bin/python3 bench/torch_peer.py --threads 1 2 --json torch.json

Configuration (printed with the results): one process per thread count, with OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set to that count before torch is imported,
torch.set_num_threads(T) and one inter-op thread; glibc's allocator told never to return
memory to the system (the MALLOC_* variables above, which the script sets for its children if
they are missing); torch.inference_mode() for forward-only runs; for softmax attention the
faster of torch's fused scaled_dot_product_attention (F._scaled_dot_product_attention in
torch 1.13, F.scaled_dot_product_attention from 2.0) and the explicit softmax(QKᵀ/√d)V.

The FAVOR+ maths is coulomb's: x = d^{-1/4} q, φ(x) = m^{-1/2} exp(Ωx − shift), with the
per-row shift max_j ω_jᵀx for queries (the −‖x‖²/2 term cancels in it) and one shift over all
keys for keys (max_{i,j} ω_jᵀx_i − ‖x_i‖²/2), out = φ(Q)[φ(K)ᵀV] / φ(Q)[φ(K)ᵀ1]. The shifts
are detached (they cancel in the ratio, as in coulomb's backward), and the backward computes
gradients for Q, K, V and Ω with autograd. With --causal, causal FAVOR+ too (the same features;
out_i over the keys j <= i), in the strongest form written with PyTorch's own operations: chunks
of C rows, inside a chunk the masked product (Φ_Q Φ_Kᵀ ⊙ lower) [V, 1], across chunks the running
key sums Φ_Kᵀ [V, 1], the faster of C = 64, 128, 256 per shape (performer-pytorch's CPU path instead forms the
prefix sums of the outer products φ(k_j) v_jᵀ, L·m·d numbers per head).
"""
import argparse
import json
import statistics
import sys
import time

from peer_common import child_config, run_children, set_threads

D_HEAD = 64
M = 256


def run_one(threads, lengths, heads_list, repeats, min_time, max_softmax_gib, causal):
    import torch
    import torch.nn.functional as F

    set_threads(torch, threads)
    gen = torch.Generator().manual_seed(1)
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    sdpa_private = sdpa is None and hasattr(F, "_scaled_dot_product_attention")
    if sdpa is None:
        sdpa = getattr(F, "_scaled_dot_product_attention", None)

    def features(q, k, omega):
        s = D_HEAD ** -0.25
        xq, xk = s * q, s * k
        zq = xq @ omega.t()  # H × L × m
        zk = xk @ omega.t()
        c = M ** -0.5
        phi_q = c * torch.exp(zq - zq.amax(dim=-1, keepdim=True).detach())
        ek = zk - 0.5 * (xk * xk).sum(dim=-1, keepdim=True)
        phi_k = c * torch.exp(ek - ek.amax(dim=(-2, -1), keepdim=True).detach())
        return phi_q, phi_k

    def favor(q, k, v, omega):
        phi_q, phi_k = features(q, k, omega)
        kv = phi_k.transpose(-2, -1) @ v  # H × m × d
        z = phi_k.sum(dim=-2)  # H × m
        num = phi_q @ kv
        den = (phi_q @ z.unsqueeze(-1))
        return num / den

    def favor_causal(q, k, v, omega, chunk):
        # Chunked prefix sums: within a chunk the masked products (Φ_Q Φ_Kᵀ ⊙ lower) [V, 1],
        # across chunks the running key sums S = Σ φ(k_j) [v_jᵀ, 1] (all GEMMs).
        phi_q, phi_k = features(q, k, omega)
        heads, length = q.shape[0], q.shape[1]
        vx = torch.cat([v, torch.ones(heads, length, 1)], dim=-1)
        state = torch.zeros(heads, M, D_HEAD + 1)
        lower = torch.ones(chunk, chunk).tril()
        outs = []
        for i in range(0, length, chunk):
            pq, pk, vc = phi_q[:, i:i + chunk], phi_k[:, i:i + chunk], vx[:, i:i + chunk]
            n = pq.shape[1]
            a = (pq @ pk.transpose(-2, -1)) * lower[:n, :n]
            nd = pq @ state + a @ vc
            state = state + pk.transpose(-2, -1) @ vc
            outs.append(nd[..., :D_HEAD] / nd[..., D_HEAD:])
        return torch.cat(outs, dim=1)

    def softmax_explicit(q, k, v):
        scores = (q @ k.transpose(-2, -1)) * (D_HEAD ** -0.5)
        return torch.softmax(scores, dim=-1) @ v

    def softmax_fused(q, k, v):
        if sdpa_private:
            return sdpa(q, k, v, None, 0.0, False, False)[0]
        return sdpa(q, k, v)

    def timeit(fn):
        fn()  # warm-up (allocations, thread pool)
        fn()
        times, cpu = [], []
        start = time.perf_counter()
        while len(times) < repeats or (time.perf_counter() - start < min_time and len(times) < 50):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        timeit.cpu_ms = statistics.median(cpu) * 1e3
        return statistics.median(times) * 1e3, len(times)

    records = []
    for heads in heads_list:
        for L in lengths:
            q = torch.randn(heads, L, D_HEAD, generator=gen)
            k = torch.randn(heads, L, D_HEAD, generator=gen)
            v = torch.randn(heads, L, D_HEAD, generator=gen)
            g = torch.randn(heads, L, D_HEAD, generator=gen)
            omega = torch.randn(M, D_HEAD, generator=gen)

            def linear_fwd():
                with torch.inference_mode():
                    favor(q, k, v, omega)

            def linear_fwd_bwd():
                qq, kk, vv, oo = (t.detach().requires_grad_() for t in (q, k, v, omega))
                favor(qq, kk, vv, oo).backward(g)

            if causal:
                # The best chunk per shape: PyTorch's best configuration.
                for name in ("forward", "forward_backward"):
                    best = None
                    for chunk in (64, 128, 256):
                        if chunk > L:
                            continue
                        if name == "forward":
                            def run(chunk=chunk):
                                with torch.inference_mode():
                                    favor_causal(q, k, v, omega, chunk)
                        else:
                            def run(chunk=chunk):
                                qq, kk, vv, oo = (t.detach().requires_grad_()
                                                  for t in (q, k, v, omega))
                                favor_causal(qq, kk, vv, oo, chunk).backward(g)
                        ms, n = timeit(run)
                        if best is None or ms < best[1]:
                            best = (f"chunk {chunk}", ms, n, timeit.cpu_ms)
                    records.append(dict(impl="torch_linear_causal", variant=best[0], pass_=name,
                                        L=L, heads=heads, threads=threads, median_ms=best[1],
                                        median_cpu_ms=best[3], samples=best[2]))

            candidates = {"explicit": softmax_explicit}
            if sdpa is not None:
                candidates["sdpa"] = softmax_fused

            def soft_fwd(f):
                def run():
                    with torch.inference_mode():
                        f(q, k, v)
                return run

            def soft_fwd_bwd(f):
                def run():
                    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
                    f(qq, kk, vv).backward(g)
                return run

            for name, fn in (("forward", linear_fwd), ("forward_backward", linear_fwd_bwd)):
                ms, n = timeit(fn)
                records.append(dict(impl="torch_linear", variant="favor+", pass_=name, L=L,
                                    heads=heads, threads=threads, median_ms=ms,
                                    median_cpu_ms=timeit.cpu_ms, samples=n))
            # PyTorch's CPU softmax attention materializes the H×L×L scores (and, with the
            # backward, probabilities and their gradient): skip shapes that would not fit.
            score_gib = heads * L * L * 4 / 2**30
            for pass_name, wrap in (("forward", soft_fwd), ("forward_backward", soft_fwd_bwd)):
                if 3 * score_gib > max_softmax_gib:
                    records.append(dict(impl="torch_softmax", variant="skipped", pass_=pass_name,
                                        L=L, heads=heads, threads=threads, median_ms=None,
                                        samples=0, note=f"needs ~{3 * score_gib:.0f} GiB"))
                    continue
                best = None
                for variant, f in candidates.items():
                    ms, n = timeit(wrap(f))
                    if best is None or ms < best[1]:
                        best = (variant, ms, n, timeit.cpu_ms)
                records.append(dict(impl="torch_softmax", variant=best[0], pass_=pass_name, L=L,
                                    heads=heads, threads=threads, median_ms=best[1],
                                    median_cpu_ms=best[3], samples=best[2]))
            print(f"# threads {threads} heads {heads} L {L} done", file=sys.stderr, flush=True)
    info = child_config(torch, threads,
                        sdpa=("F.scaled_dot_product_attention" if not sdpa_private else
                              "F._scaled_dot_product_attention") if sdpa is not None else "none")
    return dict(config=info, records=records)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 16384])
    ap.add_argument("--heads", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=5, help="at least this many timed runs")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--max-softmax-gib", type=float, default=6.0,
                    help="skip softmax shapes whose L×L tensors would need more memory")
    ap.add_argument("--causal", action="store_true",
                    help="also causal FAVOR+ by chunked prefix sums (torch_linear_causal)")
    ap.add_argument("--json", help="write the results here (default: stdout)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        out = run_one(args.threads[0], args.lengths, args.heads, args.repeats, args.min_time,
                      args.max_softmax_gib, args.causal)
        json.dump(out, sys.stdout)
        return 0

    merged = run_children(__file__, args.threads,
                          ["--repeats", str(args.repeats), "--min-time", str(args.min_time),
                           "--max-softmax-gib", str(args.max_softmax_gib),
                           "--lengths", *map(str, args.lengths),
                           "--heads", *map(str, args.heads),
                           *(["--causal"] if args.causal else [])], args.json)
    print("| impl | pass | L | heads | threads | median (ms) | variant |", file=sys.stderr)
    print("|---|---|---:|---:|---:|---:|---|", file=sys.stderr)
    for r in merged["records"]:
        ms = f"{r['median_ms']:.2f}" if r["median_ms"] is not None else r.get("note", "n/a")
        print(f"| {r['impl']} | {r['pass_']} | {r['L']} | {r['heads']} | {r['threads']} | "
              f"{ms} | {r['variant']} |", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
