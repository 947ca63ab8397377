"""Where a trident decode step's host time goes: ATen calls (by operator) against the whole step.

Runs the model's step under trident.jit (position as a Python int), then profiles a few steps with
torch.profiler on the CPU side only. ATen operators called from the compiled program go through the
dispatcher, so the profiler sees each one; what is left of the step (Triton launches through
cuLaunchKernel, the entry and guards, and the pooled CUDA matmuls Trident hands straight to ATen's CUDA kernel,
which the profiler does not see) is reported as the remainder, with those counts per step.

    python -m benchmarks.llm.host_profile [--model llama] [--batch 1] [--steps 20]
    python -m benchmarks.llm.host_profile --device cpu --tiny --steps 2     # CPU smoke run
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.profiler import ProfilerActivity, profile

import trident
from trident.testing import triton_launch_sites

from benchmarks.llm.models import build_model


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="llama")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny fp32 model (a CPU smoke run)")
    args = parser.parse_args()
    dtype = torch.float32 if args.tiny else torch.bfloat16
    model = build_model(args.model, args.device, dtype, tiny=args.tiny, max_seq=512)
    caches = model.new_caches(args.batch)
    tokens = torch.zeros(args.batch, dtype=torch.long, device=args.device)
    step = trident.jit(model.decode_step)
    pos = 0
    with torch.no_grad():
        for pos in range(8):  # compiles (position 0, then dynamic), autotuning, first native launches
            step(tokens, pos, caches)
        synchronize()
        start = time.perf_counter()
        for k in range(args.steps):
            step(tokens, pos + 1 + k, caches)
        synchronize()
        step_us = (time.perf_counter() - start) / args.steps * 1e6
        pos += 1 + args.steps
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for k in range(args.steps):
                step(tokens, pos + k, caches)
            synchronize()
    per_op: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])  # name -> [calls per step, self µs per step]
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            per_op[event.key][0] += event.count / args.steps
            per_op[event.key][1] += event.self_cpu_time_total / args.steps
    sites = triton_launch_sites(step)
    native = sum(getattr(s, "native_launches", 0) for s in sites)  # CPU sites run in the interpreter
    pools = [spec.compiled.buffer_pool for spec in step._trident.specializations if spec.compiled.buffer_pool]
    direct = sum(pool.direct_matmuls for pool in pools)
    print(f"{args.model} batch {args.batch} on {args.device}: {step_us:.0f} µs per step (unprofiled); "
          f"{len(sites)} Triton launch sites, {native} native launches and {direct} direct CUDA matmuls so far")
    print(f"{'ATen operator (self CPU, profiled)':<44} {'calls/step':>10} {'µs/step':>9} {'µs/call':>8}")
    aten_total = 0.0
    for name, (count, us) in sorted(per_op.items(), key=lambda kv: -kv[1][1]):
        aten_total += us
        print(f"{name:<44} {count:>10.1f} {us:>9.1f} {us / max(count, 1e-9):>8.2f}")
    print(f"{'ATen total':<44} {'':>10} {aten_total:>9.1f}")
    print(f"remainder (launches, entry, guards, profiler): {step_us - aten_total:.1f} µs per step")


if __name__ == "__main__":
    main()
