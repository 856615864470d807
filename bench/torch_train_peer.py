#!/usr/bin/env python3
"""PyTorch peer of bench_model: the Transformer text classifier of docs/model.md in PyTorch on
the CPU, with the same architecture, sizes and FAVOR+ maths as coulomb's, timing the Phase B
training step (tokens/s) and inference (time per 1,000 sequences) at the same shapes, in
PyTorch's best CPU configuration.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \\
        /usr/bin/python3 bench/torch_train_peer.py --threads 1 2 --json torch_model.json

Model (docs/model.md; the sizes of bench_model): token embedding (16,384 × 64) + learned
absolute position embedding (max_length × 64), dropout 0.1; 2 pre-norm encoder layers
x ← x + Dropout(MHA(LN₁(x))), x ← x + Dropout(W₂ GELU_tanh(W₁ LN₂(x) + b₁) + b₂) with d = 64,
4 heads of d_head = 16, d_ff = 256; final LayerNorm; masked mean pooling; linear classifier to
2 classes. Attention is either linear attention with FAVOR+ features, one frozen Ω (m = 64 ×
d_head, a buffer) per layer shared by the heads, or exact softmax attention. FAVOR+ as in
coulomb (and bench/torch_peer.py): x = d_head^{-1/4} q, φ(x) = m^{-1/2} exp(Ωx − ‖x‖²/2 −
shift), with the per-row shift max_j ω_jᵀx for queries (the −‖x‖²/2 term cancels in it) and
one shift per sequence and head over its real keys for the keys; padded keys are left out of
the sums, padded queries get a zero output; shifts are detached (they cancel in the ratio).
out = φ(Q)[φ(K)ᵀV] / φ(Q)[φ(K)ᵀ1].

Training step: forward with dropout, F.cross_entropy, backward, clip_grad_norm_(…, 1.0) and
AdamW (lr 1e-4, β = (0.9, 0.999), ε = 1e-8, weight decay 0.01 on the weight matrices and
embeddings, none on biases and LayerNorms, as in coulomb), gradients set to None between
steps. Both AdamW implementations of torch 1.13 (foreach=False and foreach=True) are timed and
the faster is reported. Batches: B = 32, L ∈ {64, 256}, lengths uniform in [L/2, L]; tokens/s
counts B·L per step. Inference: model.eval() under torch.inference_mode(), B·L = 8192
(B = 8192 / L), every sequence of full length; for softmax attention the faster of torch's
fused F._scaled_dot_product_attention (1.13's name) and the explicit softmax(QKᵀ/√d)V.

Configuration (printed with the results): one process per thread count, with OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS set to that count before torch is imported,
torch.set_num_threads(T) and one inter-op thread; glibc's allocator told never to return
memory to the system (the MALLOC_* variables above, which the script sets for its children if
they are missing). Run it with Debian's /usr/bin/python3 (python3-torch) and OpenBLAS as
libblas.so.3 (docs/benchmarks.md).
"""
import argparse
import json
import math
import statistics
import sys
import time

from peer_common import child_config, count_parameters, encoder_layer_class, run_children, set_threads

VOCAB = 16384
D_MODEL = 64
HEADS = 4
D_FF = 256
LAYERS = 2
CLASSES = 2
M = 64
DROPOUT = 0.1
TRAIN_BATCH = 32
TRAIN_MAX_LENGTH = 256
INFERENCE_MAX_LENGTH = 4096
INFERENCE_TOKENS = 8192


def build(torch, attention, max_length, softmax_impl="explicit"):
    nn = torch.nn
    F = torch.nn.functional
    d_head = D_MODEL // HEADS
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    sdpa_private = sdpa is None
    if sdpa is None:
        sdpa = getattr(F, "_scaled_dot_product_attention", None)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q = nn.Linear(D_MODEL, D_MODEL)
            self.w_k = nn.Linear(D_MODEL, D_MODEL)
            self.w_v = nn.Linear(D_MODEL, D_MODEL)
            self.w_o = nn.Linear(D_MODEL, D_MODEL)
            if attention == "linear":
                self.register_buffer("omega", torch.randn(M, d_head))  # frozen (Phase B)

        def forward(self, x, mask):
            B, L, _ = x.shape
            split = lambda t: t.view(B, L, HEADS, d_head).transpose(1, 2)  # B × H × L × d_head
            q, k, v = split(self.w_q(x)), split(self.w_k(x)), split(self.w_v(x))
            if attention == "linear":
                s = d_head ** -0.25
                c = M ** -0.5
                xq, xk = s * q, s * k
                zq = xq @ self.omega.t()  # B × H × L × m
                phi_q = c * torch.exp(zq - zq.amax(dim=-1, keepdim=True).detach())
                ek = xk @ self.omega.t() - 0.5 * (xk * xk).sum(dim=-1, keepdim=True)
                keep = mask[:, None, :, None]  # B × 1 × L × 1
                shift = ek.masked_fill(~keep, -math.inf).amax(dim=(-2, -1), keepdim=True)
                phi_k = c * torch.exp(ek - shift.detach()) * keep
                kv = phi_k.transpose(-2, -1) @ v  # B × H × m × d_head
                z = phi_k.sum(dim=-2).unsqueeze(-1)  # B × H × m × 1
                out = (phi_q @ kv) / (phi_q @ z) * keep
            elif softmax_impl == "sdpa":
                keep = mask[:, None, None, :]  # B × 1 × 1 × L (keys)
                if sdpa_private:
                    out = sdpa(q, k, v, keep, 0.0, False, False)[0]
                else:
                    out = sdpa(q, k, v, attn_mask=keep)
            else:
                scores = (q @ k.transpose(-2, -1)) * (d_head ** -0.5)
                scores = scores.masked_fill(~mask[:, None, None, :], -math.inf)
                out = torch.softmax(scores, dim=-1) @ v
            return self.w_o(out.transpose(1, 2).reshape(B, L, D_MODEL))

    EncoderLayer = encoder_layer_class(torch, Attention, D_MODEL, D_FF, DROPOUT)

    class TextClassifier(nn.Module):
        def __init__(self):
            super().__init__()
            self.token = nn.Embedding(VOCAB, D_MODEL)
            self.position = nn.Embedding(max_length, D_MODEL)
            nn.init.normal_(self.token.weight, std=0.02)
            nn.init.normal_(self.position.weight, std=0.02)
            self.drop = nn.Dropout(DROPOUT)
            self.layers = nn.ModuleList([EncoderLayer() for _ in range(LAYERS)])
            self.final_norm = nn.LayerNorm(D_MODEL, eps=1e-5)
            self.classifier = nn.Linear(D_MODEL, CLASSES)
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

        def forward(self, ids, mask):  # ids, mask: B × L
            L = ids.shape[1]
            x = self.drop(self.token(ids) + self.position.weight[:L])
            for layer in self.layers:
                x = layer(x, mask)
            h = self.final_norm(x)
            m = mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1.0)
            return self.classifier(pooled)

    return TextClassifier()


def make_batch(torch, gen, B, L, min_length):
    lengths = torch.randint(min_length, L + 1, (B,), generator=gen)
    mask = torch.arange(L).unsqueeze(0) < lengths.unsqueeze(1)  # B × L
    ids = torch.randint(1, VOCAB, (B, L), generator=gen) * mask
    labels = torch.randint(0, CLASSES, (B,), generator=gen)
    return ids, mask, labels


def run_one(threads, train_lengths, inference_lengths, repeats, min_time, attentions):
    import torch
    import torch.nn.functional as F

    set_threads(torch, threads)
    torch.manual_seed(1)
    gen = torch.Generator().manual_seed(1)

    def timeit(fn):
        fn()  # warm-up (allocations, thread pool, optimizer state)
        fn()
        times, cpu = [], []
        start = time.perf_counter()
        while len(times) < repeats or (time.perf_counter() - start < min_time and len(times) < 200):
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        return statistics.median(times) * 1e3, statistics.median(cpu) * 1e3, len(times)

    records = []
    params = {}
    # ---- Phase B training step -------------------------------------------------------------
    for attention in attentions:
        for L in train_lengths:
            best = None
            for foreach in (False, True):
                torch.manual_seed(1)
                model = build(torch, attention, TRAIN_MAX_LENGTH)
                params[f"train {attention}"] = count_parameters(model)
                model.train()
                decay = [p for n, p in model.named_parameters()
                         if n.endswith("weight") and "norm" not in n]
                no_decay = [p for n, p in model.named_parameters()
                            if not (n.endswith("weight") and "norm" not in n)]
                opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.01),
                                         dict(params=no_decay, weight_decay=0.0)],
                                        lr=1e-4, betas=(0.9, 0.999), eps=1e-8, foreach=foreach)
                ids, mask, labels = make_batch(torch, gen, TRAIN_BATCH, L, L // 2)
                trainable = [p for p in model.parameters() if p.requires_grad]

                def step():
                    opt.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(model(ids, mask), labels)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                    opt.step()

                ms, cpu_ms, n = timeit(step)
                if best is None or ms < best[0]:
                    best = (ms, cpu_ms, n, f"foreach={foreach}")
            ms, cpu_ms, n, variant = best
            records.append(dict(kind="train", attention=attention, L=L, B=TRAIN_BATCH,
                                threads=threads, median_ms=ms, median_cpu_ms=cpu_ms, samples=n,
                                tokens_per_s=TRAIN_BATCH * L / (ms * 1e-3), variant=variant))
            print(f"# threads {threads} train {attention} L {L}: {ms:.2f} ms ({variant})",
                  file=sys.stderr, flush=True)

    # ---- inference ---------------------------------------------------------------------------
    for attention in attentions:
        impls = ["explicit", "sdpa"] if attention == "softmax" else ["favor+"]
        models = {}
        for impl in impls:
            torch.manual_seed(1)
            models[impl] = build(torch, attention, INFERENCE_MAX_LENGTH, softmax_impl=impl).eval()
        params[f"inference {attention}"] = count_parameters(models[impls[0]])
        for L in inference_lengths:
            B = max(1, INFERENCE_TOKENS // L)
            ids, mask, _ = make_batch(torch, gen, B, L, L)
            best = None
            for impl, model in models.items():
                def run():
                    with torch.inference_mode():
                        model(ids, mask)
                try:
                    ms, cpu_ms, n = timeit(run)
                except RuntimeError as e:  # a fused kernel that refuses the mask
                    print(f"# {impl} failed: {e}", file=sys.stderr)
                    continue
                if best is None or ms < best[0]:
                    best = (ms, cpu_ms, n, impl)
            ms, cpu_ms, n, variant = best
            records.append(dict(kind="inference", attention=attention, L=L, B=B, threads=threads,
                                median_ms=ms, median_cpu_ms=cpu_ms, samples=n,
                                tokens_per_s=B * L / (ms * 1e-3),
                                ms_per_1000_seq=ms * 1000.0 / B, variant=variant))
            print(f"# threads {threads} inference {attention} L {L}: {ms:.2f} ms ({variant})",
                  file=sys.stderr, flush=True)

    info = child_config(torch, threads,
                        blas=[line.strip() for line in torch.__config__.show().splitlines()
                              if "BLAS" in line][:2],
                        parameters=params)
    return dict(config=info, records=records)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--train-lengths", type=int, nargs="*", default=[64, 256])
    ap.add_argument("--inference-lengths", type=int, nargs="*", default=[64, 256, 1024, 4096])
    ap.add_argument("--attention", nargs="+", default=["linear", "softmax"],
                    choices=["linear", "softmax"])
    ap.add_argument("--repeats", type=int, default=5, help="at least this many timed runs")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--parameters", action="store_true",
                    help="print the parameter counts of the models and exit")
    ap.add_argument("--json", help="write the results here (default: stdout)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.parameters:
        import torch
        for name, attention, max_length in (("inference linear", "linear", INFERENCE_MAX_LENGTH),
                                            ("inference softmax", "softmax", INFERENCE_MAX_LENGTH),
                                            ("train linear", "linear", TRAIN_MAX_LENGTH),
                                            ("train softmax", "softmax", TRAIN_MAX_LENGTH)):
            c = count_parameters(build(torch, attention, max_length))
            print(f"{name:<20} max_length {max_length:5d}: {c['total']} parameters "
                  f"({c['trainable']} trainable, {c['frozen_omega']} frozen: Omega)")
        return 0

    if args.child:
        out = run_one(args.threads[0], args.train_lengths, args.inference_lengths, args.repeats,
                      args.min_time, args.attention)
        json.dump(out, sys.stdout)
        return 0

    merged = run_children(__file__, args.threads,
                           ["--repeats", str(args.repeats), "--min-time", str(args.min_time),
                            "--train-lengths", *map(str, args.train_lengths),
                            "--inference-lengths", *map(str, args.inference_lengths),
                            "--attention", *args.attention], args.json)
    print("parameters:", json.dumps(merged["configs"][0]["parameters"]), file=sys.stderr)
    print("| kind | attention | L | B | threads | median (ms) | tokens/s | variant |",
          file=sys.stderr)
    print("|---|---|---:|---:|---:|---:|---:|---|", file=sys.stderr)
    for r in merged["records"]:
        print(f"| {r['kind']} | {r['attention']} | {r['L']} | {r['B']} | {r['threads']} | "
              f"{r['median_ms']:.2f} | {r['tokens_per_s']:.0f} | {r['variant']} |",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
