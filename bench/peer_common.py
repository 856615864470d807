"""What the PyTorch peers of the benchmarks (torch_peer.py, torch_train_peer.py,
torch_seq_peer.py) share: one child process per thread count with the thread and allocator
settings of docs/benchmarks.md, the merged JSON of their results, the parameter count, and the
pre-norm encoder layer of coulomb's models."""
import json
import os
import subprocess
import sys
import time


def set_threads(torch, threads):
    """T intra-op threads and one inter-op thread (the latter can be set once per process)."""
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def run_children(script, threads_list, child_args, json_path):
    """Runs `script --child --threads T child_args` once per T, each with OMP/OpenBLAS/MKL set to
    T threads before torch is imported and glibc told to keep freed memory (unless the caller set
    the MALLOC_* variables), reads the JSON each prints, and writes the merged results to
    json_path (stdout when None). Returns the merged results."""
    results = []
    for t in threads_list:
        env = dict(os.environ)
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            env[var] = str(t)
        env.setdefault("MALLOC_MMAP_MAX_", "0")
        env.setdefault("MALLOC_TRIM_THRESHOLD_", "68719476736")
        cmd = [sys.executable, os.path.abspath(script), "--child", "--threads", str(t),
               *child_args]
        load_before = os.getloadavg()
        res = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True)
        out = json.loads(res.stdout)
        out["config"]["load_before"] = load_before
        out["config"]["load_after"] = os.getloadavg()
        results.append(out)
    merged = dict(configs=[r["config"] for r in results],
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  load=os.getloadavg(),
                  records=[rec for r in results for rec in r["records"]])
    text = json.dumps(merged, indent=1)
    if json_path:
        with open(json_path, "w") as f:
            f.write(text)
    else:
        print(text)
    return merged


def count_parameters(model):
    """Trainable parameters, plus the frozen Ω buffers (named ...omega), as coulomb counts them."""
    trainable = sum(p.numel() for p in model.parameters())
    frozen = sum(b.numel() for name, b in model.named_buffers() if name.endswith("omega"))
    return dict(total=trainable + frozen, trainable=trainable, frozen_omega=frozen)


def encoder_layer_class(torch, attention_class, d_model, d_ff, dropout):
    """coulomb's pre-norm encoder layer: x + drop(attention(norm1(x), *context)), then
    x + drop(W2 gelu_tanh(W1 norm2(x))). `context` is what the attention takes besides its
    input (a mask, or the rotary tables)."""
    nn = torch.nn
    F = torch.nn.functional

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(d_model, eps=1e-5)
            self.attention = attention_class()
            self.drop1 = nn.Dropout(dropout)
            self.norm2 = nn.LayerNorm(d_model, eps=1e-5)
            self.ffn1 = nn.Linear(d_model, d_ff)
            self.ffn2 = nn.Linear(d_ff, d_model)
            self.drop2 = nn.Dropout(dropout)

        def forward(self, x, *context):
            x = x + self.drop1(self.attention(self.norm1(x), *context))
            h = F.gelu(self.ffn1(self.norm2(x)), approximate="tanh")
            return x + self.drop2(self.ffn2(h))

    return EncoderLayer


def child_config(torch, threads, **extra):
    """What a child records of its configuration: torch's version and parallel settings, the
    thread count, the allocator variables, and `extra`."""
    return dict(torch=torch.__version__, threads=threads,
                parallel=torch.__config__.parallel_info().splitlines()[1:4], **extra,
                malloc_mmap_max=os.environ.get("MALLOC_MMAP_MAX_"),
                malloc_trim_threshold=os.environ.get("MALLOC_TRIM_THRESHOLD_"))
