"""Host cost of views of a call's own intermediates: made below autograd (Trident's default) or through it.

One program of 40 slice + view pairs of one intermediate (a decode step's `qkv[:, a:b].view(...)` pattern)
on a tiny CPU tensor, jitted twice in one process — TRIDENT_PRIVATE_VIEWS on and off — and run eagerly; µs per
call (best of rounds) and the saving per view. No disk cache, so each jit compiles its own specialization.

    python benchmarks/private_views_cpu.py [--calls N] [--rounds R] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["TRIDENT_DISK_CACHE"] = "0"  # read when trident is first imported

import torch

import trident
from trident.knobs import override

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine

PAIRS = 40  # slice + view pairs: 80 views per call


def program(x: torch.Tensor) -> torch.Tensor:
    h = x * 2  # the intermediate every view is taken of; only the sum of the views is returned
    total = h[:, 0:1].view(-1)
    for i in range(1, PAIRS):
        total = total + h[:, i : i + 1].view(-1)
    return total


def best_us(fn, x: torch.Tensor, calls: int, rounds: int) -> float:  # type: ignore[no-untyped-def]
    for _ in range(200):
        fn(x)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn(x)
        times.append((time.perf_counter() - start) / calls * 1e6)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    x = torch.randn(4, 64)
    with torch.no_grad():
        below = trident.jit(program)
        below(x)
        with override(private_views=False):
            through = trident.jit(program)
            through(x)
        results = {name: best_us(fn, x, args.calls, args.rounds)
                   for name, fn in (("below autograd", below), ("through autograd", through), ("eager", program))}
        torch.testing.assert_close(below(x), program(x))
        torch.testing.assert_close(through(x), program(x))
    info = machine()
    saving_ns = (results["through autograd"] - results["below autograd"]) / (2 * PAIRS) * 1e3
    print(f"{2 * PAIRS} views of an intermediate per call, µs per call (best of {args.rounds} x {args.calls}), {info}")
    for name, us in results.items():
        print(f"  {name:<18} {us:8.1f}   {results['through autograd'] / us:5.2f}x vs through autograd")
    print(f"  saving per view: {saving_ns:.0f} ns")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "views": 2 * PAIRS, "us_per_call": results,
                                         "saving_ns_per_view": saving_ns}, indent=1))


if __name__ == "__main__":
    main()
