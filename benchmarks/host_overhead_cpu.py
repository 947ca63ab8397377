"""Host overhead on CPU: eager vs torch.compile vs trident.jit on tiny tensors, in one process.

Tiny tensors make the ATen kernels nearly free, so per-call time is host overhead: Python argument
parsing and dispatch (eager), guard evaluation and the Python wrapper (torch.compile), or the native
entry, guards and dispatcher calls (trident). Also measured: the entry alone (binding, key, a no-op
specialization) and the guard function alone for a 2-tensor program.

    python benchmarks/host_overhead_cpu.py [--repeat N] [--quick] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import operator
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

import torch

import trident

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine


def chain(n_ops: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """A program of n_ops cheap ATen ops on two small tensors (a mix of pointwise ops and reductions)."""

    def program(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x
        for i in range(n_ops // 4):
            h = h * y
            h = h + x
            h = torch.relu(h) if i % 2 == 0 else torch.tanh(h)
            h = h - h.mean(dim=-1, keepdim=True)
        return h

    program.__name__ = f"chain{n_ops}"
    return program


CPP_FLOOR = r"""
#include <torch/extension.h>
// The same program as chain(n_ops), written in C++ against ATen's unboxed operator entries: the per-op floor
// of any system that runs ATen operators one by one (no Python, no guards, no dispatch of its own).
at::Tensor chain(const at::Tensor& x, const at::Tensor& y, int64_t n_ops) {
  at::Tensor h = x;
  for (int64_t i = 0; i < n_ops / 4; ++i) {
    h = at::_ops::mul_Tensor::call(h, y);
    h = at::_ops::add_Tensor::call(h, x, 1);
    h = i % 2 == 0 ? at::_ops::relu::call(h) : at::_ops::tanh::call(h);
    h = at::_ops::sub_Tensor::call(h, at::_ops::mean_dim::call(h, at::IntArrayRef{-1}, true, std::nullopt), 1);
  }
  return h;
}
"""


def cpp_floor() -> Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]:
    from torch.utils.cpp_extension import load_inline

    return load_inline("trident_bench_floor", cpp_sources=CPP_FLOOR, functions=["chain"]).chain  # type: ignore[no-any-return]


def time_per_call(fn: Callable[[], object], repeat: int, rounds: int = 7,
                  sync: Callable[[], None] = lambda: None) -> tuple[float, float]:  # fmt: skip
    """(median, spread) of µs per call over `rounds` rounds of `repeat` calls, after warm-up. `sync` waits for a
    device (torch.cuda.synchronize) after the warm-up and at the end of each round, not between calls: a call's
    time is the host's while the device keeps up."""
    for _ in range(max(repeat // 10, 20)):
        fn()
    sync()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / repeat * 1e6)
    samples.sort()
    return statistics.median(samples), samples[-1] - samples[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--quick", action="store_true", help="one short round per system (smoke test)")
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile (slow to build on CPU)")
    parser.add_argument("--no-cpp-floor", action="store_true", help="skip the C++ ATen floor (a ~60 s build)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    floor = None if args.no_cpp_floor else cpp_floor()
    repeat, rounds = (20, 1) if args.quick else (args.repeat, 7)

    torch.manual_seed(0)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    results: dict[str, dict[str, float]] = {}
    with torch.no_grad():
        for n_ops in (20, 100):
            program = chain(n_ops)
            systems: dict[str, Callable[[], object]] = {"eager": lambda p=program: p(x, y)}
            if floor is not None:
                torch.testing.assert_close(floor(x, y, n_ops), program(x, y))
                systems["C++ ATen floor"] = lambda n=n_ops: floor(x, y, n)
            if not args.no_compile:
                compiled = torch.compile(program)
                systems["torch.compile"] = lambda c=compiled: c(x, y)
            jitted = trident.jit(program)
            torch.testing.assert_close(jitted(x, y), program(x, y))
            systems["trident"] = lambda j=jitted: j(x, y)
            row = {}
            for name, fn in systems.items():
                median, spread = time_per_call(fn, repeat, rounds)
                row[name] = median
                row[name + " spread"] = spread
            results[f"{n_ops} ops"] = row

        # The entry alone: binding, structural key, a specialization whose guard and run do nothing.
        from trident.runtime import load_runtime

        runtime = load_runtime()
        entry = runtime.Entry("noop", lambda *a: None, ("x", "y"), 2, {})
        context = runtime.Context([], [])
        entry.add_spec(
            entry.structural_key(x, y), runtime.always_guard_address(), runtime.noop_run_address(), context, None
        )
        # timeit's loop, not a lambda; a C builtin called the same way (operator.is_(x, y)) is the baseline
        # cost of making any call from Python, subtracted to give the entry's own cost.
        def loop_us(statement: str) -> float:
            names = {"entry": entry, "x": x, "y": y, "operator": operator}
            n = repeat * 10
            return min(timeit.repeat(statement, globals=names, number=n, repeat=rounds)) / n * 1e6

        entry_us = loop_us("entry(x, y)") - loop_us("operator.is_(x, y)")
        # The guard function alone, for the 2-tensor 20-op program (native loop, no Python per call).
        jit20 = trident.jit(chain(20))
        jit20(x, y)
        spec = jit20._trident.specializations[0]  # type: ignore[attr-defined]
        guard_context = runtime.Context(spec.compiled.ops, spec.compiled.constants)
        guard_ns = runtime.time_guard(spec.compiled.guard_address, guard_context, (x, y), 200000)

    info = machine()
    print(f"machine: {info['cpu']} ({info['threads']} threads); Python {info['python']}, torch {info['torch']}, "
          f"torch-mlir {info['torch-mlir']}, trident {info['trident']}")
    header = (f"{'program':<10} {'eager µs':>9} {'compile µs':>11} {'C++ floor µs':>13} {'trident µs':>11} "
              f"{'vs eager':>9} {'vs compile':>11} {'vs floor':>9}")
    print(header)
    print("-" * len(header))
    nan = float("nan")
    for name, row in results.items():
        compiled_us, floor_us = row.get("torch.compile", nan), row.get("C++ ATen floor", nan)
        print(
            f"{name:<10} {row['eager']:>9.2f} {compiled_us:>11.2f} {floor_us:>13.2f} {row['trident']:>11.2f} "
            f"{row['eager'] / row['trident']:>8.2f}x {compiled_us / row['trident']:>10.2f}x "
            f"{row['trident'] / floor_us:>8.2f}x"
        )
    print(f"entry only (bind + key + no-op specialization): {entry_us * 1e3:.0f} ns per call (beyond a C builtin call)")
    print(f"guards only, 2 tensors (native loop):            {guard_ns:.0f} ns per call")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"machine": info, "results": results, "entry_ns": entry_us * 1e3, "guard_ns": guard_ns}, indent=2)
        )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
