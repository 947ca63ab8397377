"""Per-call host time of one small launch-bound program: eager, torch.compile (Inductor), torch.compile with
backend="trident", trident.jit, and torch.compile(backend="eager") (Dynamo's frame and guards around the
unchanged graph), all in one process.

The program is a chain of cheap ops on tiny tensors (on CUDA, plus one user Triton kernel), so a call costs what
the host does. backend="trident" minus trident.jit is what Dynamo adds in front of the same native entry (its
guard evaluation and frame handling); backend="eager" minus eager is Dynamo's cost around a graph run in Python.
Of the former, Dynamo's guard evaluation alone is timed too: the compiled frame's guard manager checking the same
arguments (called from Python here, so an upper bound on what Dynamo's C++ frame evaluation pays for it).

    python benchmarks/dynamo_overhead.py [--device cpu|cuda] [--calls N] [--rounds N] [--no-inductor] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

import trident

sys.path.insert(0, str(Path(__file__).resolve().parent))
from host_overhead_cpu import time_per_call  # noqa: E402 -- a sibling script
from machine_info import machine  # noqa: E402 -- a sibling script


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 0.5, mask=mask)


def program(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Twelve cheap ops (and on CUDA one Triton launch): per-call time is host time."""
    h = x
    for i in range(3):
        h = h * y
        h = h + x
        h = torch.relu(h) if i % 2 == 0 else torch.tanh(h)
        h = h - h.mean(dim=-1, keepdim=True)
    if h.is_cuda:
        out = torch.empty_like(h)
        scale_kernel[(triton.cdiv(h.numel(), 256),)](h, out, h.numel(), BLOCK=256)
        h = out
    return h


def guard_check_us(calls: int, rounds: int, frame_locals: dict[str, object]) -> float:
    """µs per check of the guards Dynamo compiled for `program`'s frame (the last cache entry: the same for every
    backend, since guards come from tracing, not from the backend)."""
    from torch._dynamo.eval_frame import _debug_get_cache_entry_list

    entries = _debug_get_cache_entry_list(program.__code__)
    if not entries:
        return float("nan")
    manager = entries[0].guard_manager
    assert manager.check(frame_locals), "the compiled frame's guards reject the benchmark's own arguments"
    median, _ = time_per_call(lambda: manager.check(frame_locals), calls, rounds, lambda: None)
    return median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile's default backend")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    torch.manual_seed(0)
    x, y = torch.randn(4, 64, device=device), torch.randn(4, 64, device=device)
    systems: dict[str, Callable[[], object]] = {"eager": lambda: program(x, y)}
    if not args.no_inductor:
        inductor = torch.compile(program)
        systems["torch.compile"] = lambda: inductor(x, y)
    dynamo_eager = torch.compile(program, backend="eager")
    systems["compile, backend=eager"] = lambda: dynamo_eager(x, y)
    via_trident = torch.compile(program, backend=trident.dynamo.backend)
    systems["compile, backend=trident"] = lambda: via_trident(x, y)
    jitted = trident.jit(program)
    systems["trident.jit"] = lambda: jitted(x, y)

    results: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        expected = program(x, y)
        for name, fn in systems.items():
            torch.testing.assert_close(fn(), expected)
            median, spread = time_per_call(fn, args.calls, args.rounds, sync)
            results[name] = {"us": median, "spread": spread}
        guards = guard_check_us(args.calls, args.rounds, {"x": x, "y": y})
    graphs = trident.dynamo.compiled_graphs()
    native = all(g.eager_calls == 0 and g.specializations for g in graphs) and jitted._trident.eager_calls == 0

    info = machine(device)
    print(f"machine: {info['cpu']} ({info['threads']} threads){', ' + info['gpu'] if 'gpu' in info else ''}; "
          f"Python {info['python']}, torch {info['torch']}, Triton {info['triton']}, trident {info['trident']}")
    print(f"device {device.type}; every Trident call native: {native}")
    base = results["trident.jit"]["us"]
    print(f"{'system':<26} {'µs/call':>9} {'spread':>8} {'/ trident.jit':>14}")
    for name, row in results.items():
        print(f"{name:<26} {row['us']:>9.2f} {row['spread']:>8.2f} {row['us'] / base:>13.2f}x")
    dynamo_over_trident = results["compile, backend=trident"]["us"] - base
    dynamo_over_eager = results["compile, backend=eager"]["us"] - results["eager"]["us"]
    print(f"Dynamo in front of Trident's entry (backend=trident - trident.jit): {dynamo_over_trident:.2f} µs per call")
    print(f"Dynamo around a Python graph (backend=eager - eager):              {dynamo_over_eager:.2f} µs per call")
    print(f"of which Dynamo's guard check of the compiled frame:                {guards:.2f} µs per call")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "machine": info, "device": device.type, "results": results, "all_native": native,
            "dynamo_over_trident_us": dynamo_over_trident, "dynamo_over_eager_us": dynamo_over_eager,
            "dynamo_guard_check_us": guards,
        }, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
