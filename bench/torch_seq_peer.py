#!/usr/bin/env python3
"""PyTorch peer of bench_sequence: the sequence model of examples/sequence_tasks (its default
configuration) in PyTorch on the CPU, timing one training step (tokens/s) and the evaluation
forward at the shapes of bench_sequence, with 1 and 2 threads.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=68719476736 \\
        /usr/bin/python3 bench/torch_seq_peer.py --threads 1 2 --json torch_sequence.json
    /usr/bin/python3 bench/torch_seq_peer.py --parameters   # = bench_sequence --parameters

Model (docs/model.md, "The sequence model"; nn/sequence_model.hpp): token embedding (V × 64),
dropout 0.1; 2 pre-norm encoder layers x ← x + Dropout(MHA(LN₁(x))), x ← x + Dropout(W₂
GELU_tanh(W₁ LN₂(x) + b₁) + b₂) with d = 64, 2 heads of d_head = 32, d_ff = 128; rotary
positions on queries and keys (the "half" pairing: columns i and i + 16 of each head rotated by
t·10000^{−2i/32}); final LayerNorm; then either mean pooling and a linear classifier to 10
classes (ListOps, V = 19) or a linear head to the 8,192 tokens at the query rows only (MQAR, causal
attention). Attention is linear attention with FAVOR+ positive features, one frozen Ω (64 × 32,
a buffer) per layer shared by the heads, or exact softmax attention. FAVOR+ as coulomb computes
it: x = d_head^{-1/4} q, φ(x) = m^{-1/2} exp(Ωx − ‖x‖²/2 − shift), a shift per query row and one
per sequence and head over the keys (detached: they cancel in the ratio), out = φ(Q)[φ(K)ᵀV] /
φ(Q)[φ(K)ᵀ1]. Causal linear attention is computed by chunks of 64 positions (within a chunk the
masked C × C products, across chunks the running sums φ(K)ᵀV and φ(K)ᵀ1), PyTorch's fastest
form here; causal softmax masks the scores above the diagonal.

Training step: forward with dropout, F.cross_entropy, backward, clip_grad_norm_(…, 1.0) and
AdamW (lr 1e-3, β = (0.9, 0.999), ε = 1e-8, weight decay 0.01 on the weight matrices and the
embedding, none on biases and LayerNorms, as in coulomb); gradients set to None between steps.
Both AdamW implementations of torch 1.13 (foreach False and True) are timed at the shortest L of
each model and the faster is kept for its other lengths. Batches as bench_sequence's: B = 32
sequences of L tokens (all real: the mask ops are left out, which only helps PyTorch); MQAR with
64 query rows per sequence. Inference: model.eval() under torch.inference_mode(), ListOps, B = 32.

Configuration: one process per thread count, with OMP_NUM_THREADS, OPENBLAS_NUM_THREADS and
MKL_NUM_THREADS set to it before torch is imported, torch.set_num_threads(T) and one inter-op
thread; glibc's allocator told never to return memory to the system (the MALLOC_* variables
above, set for the children when missing).
"""
import argparse
import json
import math
import statistics
import sys
import time

from peer_common import child_config, count_parameters, encoder_layer_class, run_children, set_threads

D_MODEL = 64
HEADS = 2
D_FF = 128
LAYERS = 2
M = 64
DROPOUT = 0.1
BATCH = 32
CHUNK = 64
LISTOPS_VOCAB = 19
LISTOPS_CLASSES = 10
MQAR_VOCAB = 8192
MQAR_PAIRS = 64
LR = 1e-3
LISTOPS_LENGTHS = [64, 128, 256, 512, 1024, 2000, 4096]
MQAR_LENGTHS = [512, 2000]
SOFTMAX_LONGEST = 2000


def build(torch, task, attention):
    nn = torch.nn
    F = torch.nn.functional
    d_head = D_MODEL // HEADS
    causal = task == "mqar"
    vocab = MQAR_VOCAB if task == "mqar" else LISTOPS_VOCAB
    outputs = MQAR_VOCAB if task == "mqar" else LISTOPS_CLASSES

    def rotate(x, cos, sin):  # x: B × H × L × d_head; the halves (i, i + d_head/2) as a pair
        x1, x2 = x[..., : d_head // 2], x[..., d_head // 2:]
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)

    def favor(xq, xk, omega):
        s, c = d_head ** -0.25, M ** -0.5
        xq, xk = s * xq, s * xk
        zq = xq @ omega.t()  # B × H × L × m
        phi_q = c * torch.exp(zq - zq.amax(dim=-1, keepdim=True).detach())
        ek = xk @ omega.t() - 0.5 * (xk * xk).sum(dim=-1, keepdim=True)
        shift = ek.amax(dim=(-2, -1), keepdim=True).detach()
        return phi_q, c * torch.exp(ek - shift)

    def linear_attention(phi_q, phi_k, v):
        kv = phi_k.transpose(-2, -1) @ v  # B × H × m × d_head
        z = phi_k.sum(dim=-2).unsqueeze(-1)  # B × H × m × 1
        return (phi_q @ kv) / (phi_q @ z)

    def causal_linear_attention(phi_q, phi_k, v):
        B, H, L, m = phi_q.shape
        pad = (-L) % CHUNK
        if pad:
            phi_q = F.pad(phi_q, (0, 0, 0, pad))
            phi_k = F.pad(phi_k, (0, 0, 0, pad))
            v = F.pad(v, (0, 0, 0, pad))
        n = (L + pad) // CHUNK
        q = phi_q.view(B, H, n, CHUNK, m)
        k = phi_k.view(B, H, n, CHUNK, m)
        vc = v.view(B, H, n, CHUNK, -1)
        tril = torch.ones(CHUNK, CHUNK, dtype=torch.bool).tril()
        a = (q @ k.transpose(-2, -1)).masked_fill(~tril, 0.0)  # within the chunk, t' ≤ t
        kv = k.transpose(-2, -1) @ vc  # B × H × n × m × d_head
        ks = k.sum(dim=-2)  # B × H × n × m
        state = torch.cumsum(kv, dim=2) - kv  # the chunks before
        kstate = torch.cumsum(ks, dim=2) - ks
        num = a @ vc + q @ state
        den = a.sum(dim=-1) + (q @ kstate.unsqueeze(-1)).squeeze(-1)
        out = num / den.unsqueeze(-1)
        return out.reshape(B, H, n * CHUNK, -1)[:, :, :L]

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q = nn.Linear(D_MODEL, D_MODEL)
            self.w_k = nn.Linear(D_MODEL, D_MODEL)
            self.w_v = nn.Linear(D_MODEL, D_MODEL)
            self.w_o = nn.Linear(D_MODEL, D_MODEL)
            if attention == "linear":
                self.register_buffer("omega", torch.randn(M, d_head))  # frozen, as in Phase B

        def forward(self, x, cos, sin):
            B, L, _ = x.shape
            split = lambda t: t.view(B, L, HEADS, d_head).transpose(1, 2)  # B × H × L × d_head
            q = rotate(split(self.w_q(x)), cos, sin)
            k = rotate(split(self.w_k(x)), cos, sin)
            v = split(self.w_v(x))
            if attention == "linear":
                phi_q, phi_k = favor(q, k, self.omega)
                out = (causal_linear_attention if causal else linear_attention)(phi_q, phi_k, v)
            else:
                scores = (q @ k.transpose(-2, -1)) * (d_head ** -0.5)
                if causal:
                    above = torch.ones(L, L, dtype=torch.bool).triu(1)
                    scores = scores.masked_fill(above, -math.inf)
                out = torch.softmax(scores, dim=-1) @ v
            return self.w_o(out.transpose(1, 2).reshape(B, L, D_MODEL))

    EncoderLayer = encoder_layer_class(torch, Attention, D_MODEL, D_FF, DROPOUT)

    class SequenceModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.token = nn.Embedding(vocab, D_MODEL)
            nn.init.normal_(self.token.weight, std=0.02)
            self.drop = nn.Dropout(DROPOUT)
            self.layers = nn.ModuleList([EncoderLayer() for _ in range(LAYERS)])
            self.final_norm = nn.LayerNorm(D_MODEL, eps=1e-5)
            self.head = nn.Linear(D_MODEL, outputs)
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

        def forward(self, ids, cos, sin, rows=None):  # ids: B × L; rows: flat b·L + t
            x = self.drop(self.token(ids))
            for layer in self.layers:
                x = layer(x, cos, sin)
            h = self.final_norm(x)
            if task == "listops":
                return self.head(h.mean(dim=1))
            return self.head(h.reshape(-1, D_MODEL)[rows])

    return SequenceModel()


def rotary_tables(torch, L):
    d_head = D_MODEL // HEADS
    freq = 10000.0 ** (-2.0 * torch.arange(d_head // 2, dtype=torch.float64) / d_head)
    angle = torch.arange(L, dtype=torch.float64).unsqueeze(1) * freq  # L × d_head/2
    return angle.cos().float(), angle.sin().float()


def make_batch(torch, gen, task, L):
    if task == "listops":
        ids = torch.randint(1, LISTOPS_VOCAB, (BATCH, L), generator=gen)
        return ids, None, torch.randint(0, LISTOPS_CLASSES, (BATCH,), generator=gen)
    ids = torch.randint(1, MQAR_VOCAB, (BATCH, L), generator=gen)
    # 64 query positions per sequence in the second half (where MQAR puts them), sorted.
    pos = torch.stack([torch.randperm(L // 2, generator=gen)[:MQAR_PAIRS].sort().values + L // 2
                       for _ in range(BATCH)])
    rows = (torch.arange(BATCH).unsqueeze(1) * L + pos).reshape(-1)
    return ids, rows, torch.randint(0, MQAR_VOCAB, (rows.numel(),), generator=gen)


def run_one(threads, tasks, attentions, repeats, min_time, inference):
    import torch
    import torch.nn.functional as F

    set_threads(torch, threads)
    gen = torch.Generator().manual_seed(1)

    def timeit(fn, repeats_here):
        fn()  # warm-up: allocations, thread pool, optimizer state
        fn()
        times = []
        start = time.perf_counter()
        while len(times) < repeats_here or (time.perf_counter() - start < min_time
                                             and len(times) < 100):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e3, len(times)

    records, params = [], {}
    for task in tasks:
        lengths = LISTOPS_LENGTHS if task == "listops" else MQAR_LENGTHS
        for attention in attentions:
            chosen = None  # the AdamW variant, chosen at the shortest length
            for L in lengths:
                if attention == "softmax" and L > SOFTMAX_LONGEST:
                    continue
                cos, sin = rotary_tables(torch, L)
                ids, rows, targets = make_batch(torch, gen, task, L)
                best = None
                for foreach in ([False, True] if chosen is None else [chosen]):
                    torch.manual_seed(1)
                    model = build(torch, task, attention).train()
                    params[f"{task} {attention}"] = count_parameters(model)
                    named = list(model.named_parameters())
                    decay = [p for n, p in named if n.endswith("weight") and "norm" not in n]
                    no_decay = [p for n, p in named if not (n.endswith("weight")
                                                            and "norm" not in n)]
                    opt = torch.optim.AdamW([dict(params=decay, weight_decay=0.01),
                                             dict(params=no_decay, weight_decay=0.0)],
                                            lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=foreach)
                    trainable = [p for p in model.parameters()]

                    def step():
                        opt.zero_grad(set_to_none=True)
                        loss = F.cross_entropy(model(ids, cos, sin, rows), targets)
                        loss.backward()
                        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
                        opt.step()

                    ms, n = timeit(step, repeats)
                    if best is None or ms < best[0]:
                        best = (ms, n, foreach)
                ms, n, chosen = best
                records.append(dict(kind="train", task=task, attention=attention, L=L, B=BATCH,
                                    threads=threads, median_ms=ms, samples=n,
                                    tokens_per_s=BATCH * L / (ms * 1e-3),
                                    variant=f"foreach={chosen}"))
                print(f"# threads {threads} train {task} {attention} L {L}: {ms:.1f} ms "
                      f"(foreach={chosen})", file=sys.stderr, flush=True)
    if inference:
        for attention in attentions:
            torch.manual_seed(1)
            model = build(torch, "listops", attention).eval()
            for L in LISTOPS_LENGTHS:
                if attention == "softmax" and L > SOFTMAX_LONGEST:
                    continue
                cos, sin = rotary_tables(torch, L)
                ids, _, _ = make_batch(torch, gen, "listops", L)

                def run():
                    with torch.inference_mode():
                        model(ids, cos, sin)

                ms, n = timeit(run, repeats)
                records.append(dict(kind="inference", task="listops", attention=attention, L=L,
                                    B=BATCH, threads=threads, median_ms=ms, samples=n,
                                    tokens_per_s=BATCH * L / (ms * 1e-3), variant=""))
                print(f"# threads {threads} inference listops {attention} L {L}: {ms:.1f} ms",
                      file=sys.stderr, flush=True)

    info = child_config(torch, threads, parameters=params)
    return dict(config=info, records=records)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--task", nargs="+", default=["listops", "mqar"], choices=["listops", "mqar"])
    ap.add_argument("--attention", nargs="+", default=["linear", "softmax"],
                    choices=["linear", "softmax"])
    ap.add_argument("--no-inference", action="store_true", help="training steps only")
    ap.add_argument("--repeats", type=int, default=3, help="at least this many timed runs")
    ap.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--parameters", action="store_true",
                    help="print the parameter counts of the models and exit")
    ap.add_argument("--json", help="write the results here (default: stdout)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.parameters:
        import torch
        for task in ("listops", "mqar"):
            for attention in ("linear", "softmax"):
                c = count_parameters(build(torch, task, attention))
                print(f"{task:<7} {attention:<7}: {c['total']} parameters ({c['trainable']} "
                      f"trainable, {c['frozen_omega']} frozen: Omega)")
        return 0

    if args.child:
        out = run_one(args.threads[0], args.task, args.attention, args.repeats, args.min_time,
                      not args.no_inference)
        json.dump(out, sys.stdout)
        return 0

    merged = run_children(__file__, args.threads,
                          ["--repeats", str(args.repeats), "--min-time", str(args.min_time),
                           "--task", *args.task, "--attention", *args.attention,
                           *(["--no-inference"] if args.no_inference else [])], args.json)
    print("parameters:", json.dumps(merged["configs"][0]["parameters"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
