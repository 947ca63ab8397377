"""Per-call cost of a call Trident runs eagerly because its capture failed: remembered vs captured again.

A function `x + a` with a numpy array `a` (eager accepts it; capture over fake tensors does not). Trident runs
such a call eagerly and remembers the decision for its guard set (trident/fallback.py), so later calls go
eager without capturing again. "captured every call" clears that memory before each call: what every call
cost before the decision was remembered. µs per call, best of rounds, all in one process, against eager.

    python benchmarks/eager_fallback_cpu.py [--calls N] [--rounds R] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

os.environ["TRIDENT_DISK_CACHE"] = "0"  # read when trident is first imported

import numpy as np
import torch

import trident
from trident.fallback import EagerFallbacks
from trident.testing import expect_fallback

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine


def program(x: torch.Tensor, a: np.ndarray) -> torch.Tensor:
    return x + a


def best_us(fn: Callable[[], object], calls: int, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the fallback's one warning, numpy's deprecation of __array_wrap__
    x, a = torch.randn(4), np.arange(4, dtype=np.float32)
    remembered, every_call = trident.jit(program), trident.jit(program)
    state = every_call._trident  # type: ignore[attr-defined]

    def captured_every_call() -> object:
        state.fallbacks = EagerFallbacks()  # forget the decision: this call captures again
        return every_call(x, a)

    # Every Trident call here runs eagerly on purpose; under TRIDENT_STRICT=1 (the smoke test inherits it) any
    # other fallback, or none at all, fails the run.
    with torch.no_grad(), expect_fallback("capturing 'program' raised RuntimeError"):
        results = {
            "eager": best_us(lambda: program(x, a), args.calls, args.rounds),
            "trident, remembered": best_us(lambda: remembered(x, a), args.calls, args.rounds),
            "trident, captured every call": best_us(captured_every_call, max(args.calls // 20, 1), args.rounds),
        }
    captures = remembered._trident.fallbacks  # type: ignore[attr-defined]
    print(f"{'path':32s} {'us/call':>10s} {'x eager':>8s}")
    for name, us in results.items():
        print(f"{name:32s} {us:10.1f} {us / results['eager']:8.2f}")
    info = {**machine(), "numpy": np.__version__, "load_average": os.getloadavg()}
    if args.json is not None:
        eager_calls = [remembered._trident.eager_calls, state.eager_calls]  # type: ignore[attr-defined]
        data = {"us_per_call": results, "guard_sets_remembered": len(captures), "eager_calls": eager_calls,
                "machine": info}
        args.json.write_text(json.dumps(data, indent=2))


if __name__ == "__main__":
    main()
