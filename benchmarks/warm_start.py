"""Warm start: a fresh process's first call with an empty disk cache (cold) vs a populated one (warm).

Each sample is a new Python process (a restart is what the disk cache is for), so nothing compiled or loaded
in one sample helps another. A process imports torch and trident, builds its program's weights, jits it and
times its first call (capture + lowering + LLVM when cold; fingerprint, library load and guard when warm),
then checks the result against eager. Cold samples each get an empty specialization folder; warm samples share
one populated beforehand. The runtime library is built before timing and shared by all (TRIDENT_CACHE_DIR).

Programs: `small`, an RMSNorm-scaled MLP step (9 ATen calls, 3 weights); `llama`, a Llama-3.2-1B-shaped decode
step of ATen ops (RMSNorm, rotary embedding, 4:1 GQA over a KV cache written in place, SwiGLU, tied LM head) at
CPU-sized widths, cut to 2 layers: ~200 ATen calls, as many host operations as the real 16-layer step makes
with Triton kernels. On a CUDA machine also `llama_triton`: the full Llama-3.2-1B-shaped decode step of
benchmarks/llm (16 layers, its own Triton kernels, bf16): cold includes capture, lowering, LLVM and Triton's
compilation (every cold sample gets an empty TRITON_CACHE_DIR), warm loads the specialization with its Triton
binaries from the disk cache (Triton's own cache is the one the populating process left, as after a restart;
its kernels are not read from there: the loaded sites launch the stored binaries natively).

    python benchmarks/warm_start.py [--repeat N] [--quick] [--only small|llama|llama_triton] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------------------------------------
# The programs (built in the child process)


def make_small() -> tuple[object, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    w1, w2, norm = torch.randn(64, 128) / 8, torch.randn(128, 64) / 11, torch.ones(64)

    def small(x):  # type: ignore[no-untyped-def]
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
        return F.silu(h @ w1) @ w2

    return small, (torch.randn(4, 64),)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):  # type: ignore[no-untyped-def]
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotate_half(x):  # type: ignore[no-untyped-def]
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaLayer(torch.nn.Module):
    """RMSNorm, GQA attention with rotary embedding over a static KV cache written in place, SwiGLU MLP."""

    def __init__(self, dim: int, heads: int, kv_heads: int, hidden: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wk = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wv = torch.nn.Linear(dim, kv_heads * self.head_dim, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)
        self.gate = torch.nn.Linear(dim, hidden, bias=False)
        self.up = torch.nn.Linear(dim, hidden, bias=False)
        self.down = torch.nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin, k_cache, v_cache, pos: int):  # type: ignore[no-untyped-def]
        b = x.shape[0]
        h = self.attn_norm(x)
        q = self.wq(h).view(b, 1, self.heads, self.head_dim).transpose(1, 2)
        k = self.wk(h).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(h).view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k_cache[:, :, pos] = k[:, :, 0]
        v_cache[:, :, pos] = v[:, :, 0]
        n_rep = self.heads // self.kv_heads
        keys = k_cache[:, :, : pos + 1].repeat_interleave(n_rep, dim=1)
        values = v_cache[:, :, : pos + 1].repeat_interleave(n_rep, dim=1)
        scores = q @ keys.transpose(-1, -2) / self.head_dim**0.5
        attention = torch.softmax(scores, dim=-1) @ values
        x = x + self.wo(attention.transpose(1, 2).reshape(b, 1, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaShaped(torch.nn.Module):
    """Llama-3.2-1B's decode step (4:1 grouped-query attention, rotary embedding, tied embeddings) at CPU-sized
    widths and 2 layers: ~200 ATen calls, the size of the real 16-layer step's host program with Triton kernels
    (~194 launches). More layers of ATen ops make the cold compile impractical here (LLVM's time grows faster
    than linearly with the host function: 1, 2, 4 layers take 0.9, 3.5, 21 s on a 2-core CI machine)."""

    def __init__(self, layers: int = 2, dim: int = 128, heads: int = 8, kv_heads: int = 2, hidden: int = 512,
                 vocab: int = 1024, max_seq: int = 64) -> None:  # fmt: skip
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.layers = torch.nn.ModuleList(LlamaLayer(dim, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        head_dim = dim // heads
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(max_seq, dtype=torch.float32), inv_freq)
        self.register_buffer("cos", torch.cat((freqs, freqs), -1).cos())
        self.register_buffer("sin", torch.cat((freqs, freqs), -1).sin())

    def decode_step(self, tokens, caches, pos: int):  # type: ignore[no-untyped-def]
        x = self.embed(tokens)  # [batch, 1, dim]
        cos, sin = self.cos[pos], self.sin[pos]
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            x = layer(x, cos, sin, k_cache, v_cache, pos)
        return self.norm(x) @ self.embed.weight.t()


def make_llama() -> tuple[object, tuple[object, ...]]:
    torch.manual_seed(0)
    model = LlamaShaped().eval()
    caches = [(torch.zeros(1, 2, 64, 16), torch.zeros(1, 2, 64, 16)) for _ in range(len(model.layers))]
    return model.decode_step, (torch.tensor([[3]]), caches, 0)


def make_llama_triton() -> tuple[object, tuple[object, ...]]:
    from llm.models import build_model  # benchmarks/ is on sys.path when this runs as a file

    model = build_model("llama", "cuda", torch.bfloat16)
    return model.decode_step, (torch.tensor([3], device="cuda"), 0, model.new_caches(1))


PROGRAMS = {"small": make_small, "llama": make_llama}
if torch.cuda.is_available():
    PROGRAMS["llama_triton"] = make_llama_triton


def child(name: str, mode: str) -> None:
    """One sample: import trident, build, time the first call; prints one JSON line.

    mode "eager" times the plain function's first call instead: what a fresh process pays to run the program
    once at all (ATen's own first-use costs: thread pools, matmul kernels; Triton loading its cached kernels),
    which a warm start cannot avoid."""
    start = time.perf_counter()
    import trident
    import trident.driver  # noqa: F401  (what every jitted function imports; not part of the first call)
    from trident.cache import warm_start
    from trident.runtime import load_runtime

    load_runtime()
    imported = time.perf_counter()
    fn, args = PROGRAMS[name]()
    cache_seconds = [0.0]
    begin_lookup = warm_start.begin

    def timed_begin(*a, **k):  # type: ignore[no-untyped-def]  # the disk cache's own share of the first call
        t = time.perf_counter()
        try:
            return begin_lookup(*a, **k)
        finally:
            cache_seconds[0] += time.perf_counter() - t

    warm_start.begin = timed_begin  # type: ignore[assignment]
    jitted = fn if mode == "eager" else trident.jit(fn)
    with torch.no_grad():
        begin = time.perf_counter()
        out = jitted(*args)  # type: ignore[operator]
        if out.is_cuda:  # type: ignore[union-attr]
            torch.cuda.synchronize()
        first_call = time.perf_counter() - begin
        expected = fn(*args)  # type: ignore[operator]
        low_precision = out.dtype in (torch.bfloat16, torch.float16)  # type: ignore[union-attr]
        ok = torch.allclose(out, expected, atol=2e-2 if low_precision else 1e-5, rtol=2e-2 if low_precision else 1e-5)
    stats = trident.cache.stats()
    specs = [] if mode == "eager" else jitted._trident.specializations  # type: ignore[attr-defined]
    print(json.dumps({
        "first_call_ms": first_call * 1e3, "import_ms": (imported - start) * 1e3, "ok": bool(ok),
        "cache_ms": cache_seconds[0] * 1e3, "loads": stats["loads"], "stores": stats["stores"],
        "binary_ms": stats["triton_binary_load_ms"], "binaries": stats["triton_binaries_loaded"],
        "ops": sum(len(s.compiled.aten_calls) for s in specs),
    }))  # fmt: skip


# --------------------------------------------------------------------------------------------------------
# The parent: fresh processes, cold and warm


def sample(name: str, cache_dir: Path, mode: str = "jit", triton_cache: Path | None = None) -> dict[str, float]:
    """One fresh process; Triton's cache is `triton_cache`, or an empty folder (Triton compiles from scratch)."""
    triton_cache = triton_cache or Path(tempfile.mkdtemp(prefix="triton-", dir=cache_dir.parent))
    env = dict(os.environ, TRIDENT_DISK_CACHE="1", TRIDENT_DISK_CACHE_DIR=str(cache_dir),
               TRITON_CACHE_DIR=str(triton_cache))
    env.pop("TRIDENT_DISABLE", None)
    command = [sys.executable, __file__, "--child", name, "--mode", mode]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise SystemExit(f"sample of {name} failed:\n{result.stderr}")
    data = json.loads(result.stdout.strip().splitlines()[-1])
    if not data["ok"]:
        raise SystemExit(f"{name}: the jitted result differs from eager")
    return data  # type: ignore[no-any-return]


def measure(name: str, repeat: int, work: Path) -> dict[str, object]:
    cold = []
    for i in range(repeat):
        data = sample(name, work / f"{name}-cold-{i}")
        assert data["loads"] == 0 and data["stores"] == 1, data
        cold.append(data)
    populated = work / f"{name}-warm"
    restarted_triton = work / f"{name}-triton"  # a restart keeps Triton's own cache (its driver stubs) too
    sample(name, populated, triton_cache=restarted_triton)  # populate
    warm = []
    for _ in range(repeat):
        data = sample(name, populated, triton_cache=restarted_triton)
        assert data["loads"] == 1 and data["stores"] == 0, f"warm sample of {name} did not load: {data}"
        warm.append(data)
    eager = [sample(name, work / "unused", mode="eager", triton_cache=restarted_triton) for _ in range(repeat)]

    def median(rows: list[dict[str, float]], field: str) -> float:
        return statistics.median(r[field] for r in rows)

    def spread(rows: list[dict[str, float]]) -> float:
        return max(r["first_call_ms"] for r in rows) - min(r["first_call_ms"] for r in rows)

    return {
        "cold_first_call_ms": median(cold, "first_call_ms"), "warm_first_call_ms": median(warm, "first_call_ms"),
        "warm_binary_load_ms": median(warm, "binary_ms"), "warm_binaries": warm[0]["binaries"],
        "eager_first_call_ms": median(eager, "first_call_ms"), "warm_cache_ms": median(warm, "cache_ms"),
        "cold_cache_ms": median(cold, "cache_ms"), "cold_spread_ms": spread(cold), "warm_spread_ms": spread(warm),
        "import_ms": median(cold + warm, "import_ms"), "aten_calls": cold[0]["ops"], "samples": repeat,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5, help="fresh processes per program and mode")
    parser.add_argument("--quick", action="store_true", help="one sample each (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--only", choices=sorted(PROGRAMS), action="append", help="measure only these programs")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="jit", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.mode)
        return
    from trident.runtime import runtime_library_path

    runtime_library_path()  # build once, before any timing, into the shared TRIDENT_CACHE_DIR
    repeat = 1 if args.quick else args.repeat
    results = {}
    with tempfile.TemporaryDirectory(prefix="trident-warm-start-") as work:
        for name in args.only or PROGRAMS:
            results[name] = measure(name, repeat, Path(work))
    # A sibling script (benchmarks/ is on sys.path when run as a file), imported here rather than at the top so
    # that the --child samples, which time their imports, import nothing more.
    from machine_info import machine

    info = machine("cuda" if torch.cuda.is_available() else None)
    print(f"machine: {info['cpu']} ({info['cpu_count']} cores); Python {info['python']}, torch {info['torch']}, "
          f"Triton {info['triton']}, torch-mlir {info['torch-mlir']}, trident {info['trident']}")
    header = (f"{'program':<12} {'ATen calls':>10} {'cold ms':>9} {'warm ms':>9} {'cold/warm':>10} {'eager ms':>9} "
              f"{'warm/eager':>11} {'lookup+load ms':>15} {'of it binaries':>15} {'import ms':>10}")
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        cold, warm, eager = r["cold_first_call_ms"], r["warm_first_call_ms"], r["eager_first_call_ms"]
        print(f"{name:<12} {r['aten_calls']:>10} {cold:>9.1f} {warm:>9.1f} {cold / warm:>9.1f}x {eager:>9.1f} "  # type: ignore[operator]
              f"{warm / eager:>10.2f}x {r['warm_cache_ms']:>15.1f} {r['warm_binary_load_ms']:>15.1f} "  # type: ignore[operator]
              f"{r['import_ms']:>10.0f}")  # type: ignore[operator]
    print(f"first call of a fresh process, median of {repeat}. eager: the plain function's first call (ATen's own "
          "first-use costs, which no cache removes). lookup+load: the disk cache's share of the warm first call "
          "(key, fingerprint, checks, library load, guard); of it binaries: loading the Triton binaries it stores. import "
          "(torch + trident) is paid by every mode.")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": info, "results": results}, indent=2))


if __name__ == "__main__":
    main()
