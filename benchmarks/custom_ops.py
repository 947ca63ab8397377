"""Triton kernels behind custom ops and ATen overrides: eager, torch.compile and Trident per decode step (issue 20).

    python benchmarks/custom_ops.py [--out benchmarks/results/custom_ops.h200.json] [--layers 16] [--steps 64]
    python benchmarks/custom_ops.py --device cpu --tiny --steps 2 --rounds 1      # CPU smoke run

A decode-step-shaped program (batch 1, Llama-3.2-1B-sized by default, bf16): per layer an RMS norm, q/k/v/o and
gate/up/down projections, SiLU(gate) * up and two residual adds. Its kernels are the same Triton kernels in
three spellings ("variants"):
    direct      the step launches them itself: `gemv_kernel[grid](...)`, `binary_kernel[grid](...)`
    custom_op   projections call `bench_ops::gemv`, a torch.library.custom_op (mutates_args=()) whose
                implementation picks BLOCK_N from a module-level table and launches an autotuned GEMV kernel;
                pointwise ops are plain torch (`x * y`, `x + y`, `F.silu`) with aten::mul.Tensor, add.Tensor and
                silu overridden for the device by Triton kernels through torch.library.Library("aten", "IMPL")
                (flag-gems' pattern)
Systems: eager; torch.compile (custom ops opaque to it; Inductor generates its own code for the overridden ATen
ops); trident (sees through both: python_kernels.py); trident with TRIDENT_SEE_THROUGH=0 (the ops as opaque
dispatcher calls, what Trident did before); device time: one step captured in a CUDA graph by hand and replayed
(CUDA events). ms per step is the median over `--rounds` rounds of `--steps` steps after warm-up. Every system's
output is compared with eager's of the same variant. Prints a table with ratios to device time, machine and
versions; writes the JSON.

On CPU (--device cpu) Triton runs through its interpreter: eager launches under Trident's interpret_cpu_launches;
torch.compile and the CUDA graph are skipped.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import os

os.environ.setdefault("TRIDENT_DISK_CACHE", "0")  # cold compiles

import torch
import triton
import triton.language as tl

import trident  # before the library below registers its kernels: trident notes registrations from import on

from benchmarks.machine_info import machine

# ---------------------------------------------------------------------------------------------------------
# The kernels


@triton.autotune(
    configs=[triton.Config({"BLOCK_K": 128}, num_warps=4), triton.Config({"BLOCK_K": 256}, num_warps=4),
             triton.Config({"BLOCK_K": 512}, num_warps=8)],
    key=["N", "K"],
)
@triton.jit
def gemv_kernel(w_ptr, x_ptr, out_ptr, N, K, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < K), other=0.0)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=rows < N)


@triton.jit
def binary_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=m).to(tl.float32)
    r = x + y if OP == 0 else x * y
    tl.store(out_ptr + offs, r.to(out_ptr.dtype.element_ty), mask=m)


@triton.jit
def silu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m).to(tl.float32)
    tl.store(out_ptr + offs, (x / (1.0 + tl.exp(-x))).to(out_ptr.dtype.element_ty), mask=m)


GEMV_BLOCK_N = {"narrow": 4, "wide": 8}  # rows per program by output size: what a library keeps in a table


def launch_gemv(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    n, k = w.shape
    out = torch.empty(n, device=x.device, dtype=x.dtype)
    block_n = GEMV_BLOCK_N["narrow" if n <= 4096 else "wide"]
    gemv_kernel[(triton.cdiv(n, block_n),)](w, x, out, n, k, BLOCK_N=block_n)
    return out


def launch_binary(x: torch.Tensor, y: torch.Tensor, op: int) -> torch.Tensor:
    out = torch.empty_like(x)
    binary_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), OP=op, BLOCK=1024)
    return out


def launch_silu(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out


# ---------------------------------------------------------------------------------------------------------
# The library: a custom-op GEMV and ATen overrides


@torch.library.custom_op("bench_ops::gemv", mutates_args=())
def gemv(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return launch_gemv(w, x)


@gemv.register_fake
def _(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(w.shape[0])


def _same_layout(x: object, y: object) -> bool:
    return (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
            and x.dtype == y.dtype and x.is_contiguous() and y.is_contiguous())


def _add(x: torch.Tensor, y: Any, *, alpha: Any = 1) -> torch.Tensor:
    if alpha == 1 and _same_layout(x, y):
        return launch_binary(x, y, 0)
    # Broadcasting and the like: ATen's own kernel through the out= overload, which is not overridden.
    out = torch.empty(torch.broadcast_shapes(x.shape, torch.as_tensor(y).shape), dtype=torch.result_type(x, y), device=x.device)
    return torch.ops.aten.add.out(x, y, alpha=alpha, out=out)


def _mul(x: torch.Tensor, y: Any) -> torch.Tensor:
    if _same_layout(x, y):
        return launch_binary(x, y, 1)
    out = torch.empty(torch.broadcast_shapes(x.shape, torch.as_tensor(y).shape), dtype=torch.result_type(x, y), device=x.device)
    return torch.ops.aten.mul.out(x, y, out=out)


def _silu(x: torch.Tensor) -> torch.Tensor:
    if x.is_contiguous():
        return launch_silu(x)
    return torch.ops.aten.silu.out(x, out=torch.empty_like(x))


@contextlib.contextmanager
def aten_overrides(device: torch.device) -> Iterator[None]:
    """aten::add.Tensor, aten::mul.Tensor and aten::silu as Triton kernels for the device, while inside."""
    lib = torch.library.Library("aten", "IMPL")
    key = "CUDA" if device.type == "cuda" else "CPU"
    try:
        lib.impl("add.Tensor", _add, key)
        lib.impl("mul.Tensor", _mul, key)
        lib.impl("silu", _silu, key)
        yield
    finally:
        lib._destroy()


# ---------------------------------------------------------------------------------------------------------
# The program


class Model:
    def __init__(self, layers: int, hidden: int, intermediate: int, device: torch.device, dtype: torch.dtype) -> None:
        g = torch.Generator(device="cpu").manual_seed(0)

        def weight(n: int, k: int) -> torch.Tensor:
            return (torch.randn(n, k, generator=g) / k**0.5).to(device=device, dtype=dtype)

        self.layers = [
            {"norm": torch.ones(hidden, device=device, dtype=dtype), "q": weight(hidden, hidden),
             "k": weight(hidden // 4, hidden), "v": weight(hidden // 4, hidden), "o": weight(hidden, hidden),
             "norm2": torch.ones(hidden, device=device, dtype=dtype), "gate": weight(intermediate, hidden),
             "up": weight(intermediate, hidden), "down": weight(hidden, intermediate)}
            for _ in range(layers)
        ]

    def step_custom_op(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.layers:
            h = rms_norm(x, p["norm"])
            q, k, v = gemv(p["q"], h), gemv(p["k"], h), gemv(p["v"], h)
            mixed = q + torch.cat([k, v, k, v, k, v, k, v])[: q.shape[0]]  # stands in for attention
            x = x + gemv(p["o"], mixed)
            h = rms_norm(x, p["norm2"])
            x = x + gemv(p["down"], torch.nn.functional.silu(gemv(p["gate"], h)) * gemv(p["up"], h))
        return x

    def step_direct(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.layers:
            h = rms_norm_direct(x, p["norm"])
            q, k, v = launch_gemv(p["q"], h), launch_gemv(p["k"], h), launch_gemv(p["v"], h)
            mixed = launch_binary(q, torch.cat([k, v, k, v, k, v, k, v])[: q.shape[0]].contiguous(), 0)
            x = launch_binary(x, launch_gemv(p["o"], mixed), 0)
            h = rms_norm_direct(x, p["norm2"])
            act = launch_binary(launch_silu(launch_gemv(p["gate"], h)), launch_gemv(p["up"], h), 1)
            x = launch_binary(x, launch_gemv(p["down"], act), 0)
        return x


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """ATen ops with broadcasting (the overrides hand these to ATen's own kernels) and one same-shape mul by the
    weight (the mul override launches binary_kernel for it)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def rms_norm_direct(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """rms_norm with the kernel the custom_op variant's mul override launches called directly, so that both
    variants launch the same Triton kernels (224 per step at 16 layers)."""
    xf = x.float()
    return launch_binary((xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype), w, 1)


# ---------------------------------------------------------------------------------------------------------
# Timing


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(step: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, steps: int, rounds: int,
               device: torch.device) -> list[float]:
    """ms per step of each round."""
    out = []
    for _ in range(rounds):
        synchronize(device)
        t0 = time.perf_counter()
        for _ in range(steps):
            step(x)
        synchronize(device)
        out.append((time.perf_counter() - t0) / steps * 1e3)
    return out


def device_time(step: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, steps: int, rounds: int) -> list[float]:
    """ms per step of one step captured in a CUDA graph and replayed, by CUDA events: the device-time floor."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            step(x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step(x)
    out = []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(rounds):
        torch.cuda.synchronize()
        begin.record()
        for _ in range(steps):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        out.append(begin.elapsed_time(end) / steps)
    return out


def run_variant(model: Model, variant: str, x: torch.Tensor, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    from trident.capture.triton_launches import interpret_cpu_launches
    from trident.knobs import override
    from trident.testing import count_compiles, triton_launch_sites

    step = model.step_custom_op if variant == "custom_op" else model.step_direct
    eager_ctx = interpret_cpu_launches if device.type == "cpu" else contextlib.nullcontext
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        if variant == "custom_op":
            stack.enter_context(aten_overrides(device))
        with eager_ctx():
            expected = step(x)
            expected = step(x)  # autotuned, as every system sees it

        def record(system: str, fn: Callable[[], dict[str, Any]]) -> None:
            try:
                results[system] = {"status": "ok", **fn()}
            except Exception as e:  # noqa: BLE001 -- one failing system must not lose the others
                results[system] = {"status": "error", "error": f"{type(e).__name__}: {e}"[:2000],
                                   "traceback": traceback.format_exc()[-3000:]}
            print(f"  {variant:9s} {system:15s} " + (f"{results[system]['ms']:.3f} ms" if "ms" in results[system]
                                                     else results[system].get("error", results[system]["status"])),
                  flush=True)

        def check(actual: torch.Tensor) -> float:
            return float((actual.float() - expected.float()).abs().max() / expected.float().abs().max())

        def eager() -> dict[str, Any]:
            with eager_ctx():
                rounds = time_steps(step, x, args.steps, args.rounds, device)
            return {"ms": statistics.median(rounds), "rounds_ms": rounds}

        def compiled() -> dict[str, Any]:
            if device.type != "cuda":
                return {"status": "skipped", "reason": "needs CUDA"}
            fn = torch.compile(step)
            t0 = time.perf_counter()
            actual = fn(x)
            first = time.perf_counter() - t0
            fn(x)
            rounds = time_steps(fn, x, args.steps, args.rounds, device)
            torch._dynamo.reset()
            return {"ms": statistics.median(rounds), "rounds_ms": rounds, "first_call_s": first,
                    "max_rel_diff": check(actual)}

        def jitted(see_through: bool) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                fn = trident.jit(step)
                with count_compiles() as compiles, override(see_through=see_through):
                    t0 = time.perf_counter()
                    with eager_ctx():  # opaque ops launch through Python; on CPU through the interpreter
                        actual = fn(x)
                    first = time.perf_counter() - t0
                with eager_ctx():
                    fn(x)
                    rounds = time_steps(fn, x, args.steps, args.rounds, device)
                state = fn._trident  # type: ignore[attr-defined]
                sites = triton_launch_sites(fn)
                return {"ms": statistics.median(rounds), "rounds_ms": rounds, "first_call_s": first,
                        "max_rel_diff": check(actual), "compiles": compiles(), "eager_calls": state.eager_calls,
                        "launch_sites": len(sites),
                        "native_launches": sum(getattr(s, "native_launches", 0) for s in sites),
                        "aten_calls": sum(len(s.compiled.aten_calls) for s in state.specializations),
                        "explain": trident.explain(fn)}
            return run

        def graph() -> dict[str, Any]:
            if device.type != "cuda":
                return {"status": "skipped", "reason": "needs CUDA"}
            rounds = device_time(step, x, args.steps, args.rounds)
            return {"ms": statistics.median(rounds), "rounds_ms": rounds}

        record("eager", eager)
        record("torch.compile", compiled)
        record("trident", jitted(True))
        if variant == "custom_op":
            record("trident opaque", jitted(False))
        record("device (graph)", graph)
    return results


def table(results: dict[str, dict[str, Any]]) -> str:
    systems = ["eager", "torch.compile", "trident", "trident opaque", "device (graph)"]
    lines = ["| variant | " + " | ".join(systems) + " | trident / device | trident launches native |",
             "|---|" + "---|" * (len(systems) + 2)]
    for variant, cells in results.items():
        device_ms = cells.get("device (graph)", {}).get("ms")
        row = [f"{cells[s]['ms']:.3f}" if s in cells and "ms" in cells[s] else "–" for s in systems]
        t = cells.get("trident", {})
        ratio = f"{t['ms'] / device_ms:.2f}×" if device_ms and "ms" in t else "–"
        native = f"{t.get('native_launches', '–')} of {t.get('launch_sites', '–')} sites" if t else "–"
        lines.append(f"| {variant} | " + " | ".join(row) + f" | {ratio} | {native} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--intermediate", type=int, default=8192)
    p.add_argument("--tiny", action="store_true", help="2 layers, hidden 64, intermediate 128, fp32 (CPU smoke)")
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--variants", default="direct,custom_op")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    if args.tiny:
        args.layers, args.hidden, args.intermediate = 2, 64, 128
    dtype = torch.bfloat16 if device.type == "cuda" and not args.tiny else torch.float32
    info = machine(device)
    print(json.dumps(info))
    model = Model(args.layers, args.hidden, args.intermediate, device, dtype)
    x = torch.randn(args.hidden, generator=torch.Generator().manual_seed(1)).to(device=device, dtype=dtype)
    results = {}
    with torch.no_grad():
        for variant in args.variants.split(","):
            results[variant] = run_variant(model, variant, x, args, device)
    print(table(results))
    for variant, cells in results.items():
        for system, cell in cells.items():
            if "max_rel_diff" in cell:
                print(f"{variant} {system}: max |diff| / max |eager| = {cell['max_rel_diff']:.2e}"
                      + (f", {cell['compiles']} compile(s), {cell['eager_calls']} eager call(s)" if "compiles" in cell else ""))
    see = results.get("custom_op", {}).get("trident", {}).get("explain", "")
    print("\n".join(line for line in see.splitlines() if "traced into" in line or "opaque" in line))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"machine": info, "args": vars(args), "results": results}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
