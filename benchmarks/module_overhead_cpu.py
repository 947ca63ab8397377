"""What calling through trident.jit(module) and LazyEntry costs over calling the native entry directly (CPU).

One program that runs no operator (it returns its tensor argument), so what is timed is the call path itself:
the entry, binding, guards. All in one process; rows take turns in each round; median and min over rounds
(on a loaded machine the min is the better estimate of the undisturbed cost).
  entry          the native entry of trident.jit(fn), called directly (the reference)
  lazy entry     trident.jit(fn) made before the runtime was loaded: the LazyEntry object, whose class's
                 __call__ is the entry after the first call
  python fwd     a plain Python function forwarding to the entry (what a Python-level wrapper would cost)
  module         trident.jit(module)(x): the wrapper's class __call__ is the entry, `self` an identity guard
  module, entry  the same entry called as entry(wrapper, x): the class-slot cost is the difference
  module+8 attrs a module whose forward reads 8 plain attributes and the training flag (9 native module guards)
Prints a table; --json PATH writes the numbers with the machine's facts.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine


def per_call_ns(
    rows: dict[str, Callable[[], object]], calls: int, rounds: int
) -> dict[str, tuple[float, float, float]]:
    """Median, min and max ns per call of each row; rows take turns within a round, so a load change on the
    (shared) machine hits all of them alike."""
    for fn in rows.values():
        for _ in range(1000):
            fn()
    samples: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(rounds):
        for name, fn in rows.items():
            start = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            samples[name].append((time.perf_counter_ns() - start) / calls)
    return {name: (statistics.median(s), min(s), max(s)) for name, s in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--json", default="")
    args = parser.parse_args()

    import trident
    def add_one(x):  # type: ignore[no-untyped-def]
        return x  # no operator: the call path alone

    lazy = trident.jit(add_one)  # made before the runtime is loaded: a LazyEntry

    class Tiny(nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return x

    class Attrs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c, self.d, self.e, self.f, self.g, self.h = 1, 2, 3, 4, 0.5, True, None, 7

        def forward(self, x):  # type: ignore[no-untyped-def]
            k = self.a + self.b + self.c + self.d + self.e + self.h + (1 if self.f and self.g is None else 0)
            return x if self.training or k else None

    x = torch.randn(4)
    with torch.no_grad():
        lazy(x)
        direct = trident.jit(add_one)  # the runtime is loaded now: the native entry itself
        direct(x)
        entry = direct

        def forward(x):  # type: ignore[no-untyped-def]
            return entry(x)

        module = trident.jit(Tiny().eval())
        module(x)
        module_entry = module._trident.entry  # type: ignore[attr-defined]
        attrs = trident.jit(Attrs().eval())
        attrs(x)
        rows = {
            "entry": lambda: entry(x),
            "lazy entry": lambda: lazy(x),
            "python fwd": lambda: forward(x),
            "module": lambda: module(x),
            "module, entry": lambda: module_entry(module, x),
            "module+8 attrs": lambda: attrs(x),
        }
        results = per_call_ns(rows, args.calls, args.rounds)
        assert module_entry.misses == 1 and attrs._trident.entry.misses == 1  # type: ignore[attr-defined]
    base, base_min = results["entry"][0], results["entry"][1]
    print(f"{'path':16} {'median ns':>10} {'min':>8} {'max':>8} {'median - entry':>15} {'min - entry':>12}")
    for name, (median, low, high) in results.items():
        print(f"{name:16} {median:10.0f} {low:8.0f} {high:8.0f} {median - base:+15.0f} {low - base_min:+12.0f}")
    if args.json:
        meta = {**machine(), "load_average": os.getloadavg()[0], "calls": args.calls, "rounds": args.rounds}
        per_call = {name: dict(zip(("median", "min", "max"), values)) for name, values in results.items()}
        with open(args.json, "w") as out:
            json.dump({"meta": meta, "ns_per_call": per_call}, out, indent=1)


if __name__ == "__main__":
    main()
