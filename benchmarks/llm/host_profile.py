"""Where a Trident decode step's time goes: host enqueue time against device time, and the host time by ATen op.

For each position kind (a Python int, a device tensor) the model's step runs under trident.jit and is measured
four ways, after a warm-up that compiles it:
    wall     the benchmark's own loop: steps back to back, synchronized at the end (µs per step)
    host     the time to enqueue a few steps while the GPU is held busy by a sleep kernel, so no launch waits
             for the device (a full launch queue would show as a jump between the two step counts, which are
             both printed). An upper bound: on the H200 host it came out above the steady-state wall time
             (the CPU idles while it waits for the sleep to start and finish)
    device   the sum of the step's GPU kernel durations (torch.profiler with CUDA activity), per kernel name
    ATen     self CPU time per ATen operator called from the compiled program (torch.profiler, CPU only);
             Triton launches (cuLaunchKernel) and the pooled CUDA matmuls (cuBLASLt plans, ATen's CUDA kernel
             called directly) are invisible to it and fall in the remainder
A step is device-bound when host < device; wall then approaches device.

    python -m benchmarks.llm.host_profile [--model llama] [--batch 1] [--pos-kind int,tensor] [--graphs] [--out x.json]
    python -m benchmarks.llm.host_profile --device cpu --tiny --steps 2     # CPU smoke run (no device part)
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import trident
from trident.testing import triton_launch_sites

from benchmarks.llm.models import build_model
from benchmarks.machine_info import machine

WARMUP = 8  # compiles (position 0, then dynamic), autotuning, every Triton variant of the int position
HOST_STEPS = (1, 2)  # few enough that the launch queue (~1000 launches) never fills while the GPU sleeps
HOST_REPEATS = 5  # host time is the median of this many sleeps
SLEEP_CYCLES = 400_000_000  # ~0.2 s at the H200's clock: longer than enqueueing HOST_STEPS steps


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Positions:
    """Successive positions as ints or as [1] int32 device tensors (made ahead, outside any timed region)."""

    def __init__(self, kind: str, device: str, count: int) -> None:
        self.values: list[Any] = list(range(count))
        if kind == "tensor":
            self.values = [torch.tensor([p], dtype=torch.int32, device=device) for p in self.values]
        self.next = 0

    def take(self, n: int) -> list[Any]:
        if self.next + n > len(self.values):
            raise ValueError(f"more positions asked for than the cache holds ({len(self.values)})")
        self.next += n
        return self.values[self.next - n : self.next]


def wall_us(step, tokens, caches, positions: Positions, steps: int) -> float:
    synchronize()
    start = time.perf_counter()
    for pos in positions.take(steps):
        step(tokens, pos, caches)
    synchronize()
    return (time.perf_counter() - start) / steps * 1e6


def host_us(step, tokens, caches, positions: Positions, steps: int) -> float:
    """Enqueue time per step with the GPU asleep, so no call waits on the device (median of HOST_REPEATS)."""
    times = []
    for _ in range(HOST_REPEATS):
        synchronize()
        torch.cuda._sleep(SLEEP_CYCLES)
        start = time.perf_counter()
        for pos in positions.take(steps):
            step(tokens, pos, caches)
        times.append((time.perf_counter() - start) / steps * 1e6)
        synchronize()
    return statistics.median(times)


def device_profile(step, tokens, caches, positions: Positions, steps: int) -> dict[str, Any]:
    """GPU kernel time per step, in total and per kernel name."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for pos in positions.take(steps):
            step(tokens, pos, caches)
        synchronize()
    kernels: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # name -> [launches, µs] per step
    for event in prof.key_averages():
        if event.device_type == DeviceType.CUDA:
            kernels[event.key][0] += event.count / steps
            kernels[event.key][1] += event.self_device_time_total / steps
    total = sum(us for _, us in kernels.values())
    top = sorted(kernels.items(), key=lambda kv: -kv[1][1])
    return {"device_us": total, "kernels_per_step": sum(n for n, _ in kernels.values()),
            "by_kernel": [{"name": name[:90], "per_step": n, "us": us} for name, (n, us) in top]}


def aten_profile(step, tokens, caches, positions: Positions, steps: int) -> list[dict[str, Any]]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for pos in positions.take(steps):
            step(tokens, pos, caches)
        synchronize()
    per_op: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])  # name -> [calls, self µs] per step
    for event in prof.key_averages():
        if event.key.startswith("aten::"):
            per_op[event.key][0] += event.count / steps
            per_op[event.key][1] += event.self_cpu_time_total / steps
    return [{"op": name, "calls": n, "us": us} for name, (n, us) in sorted(per_op.items(), key=lambda kv: -kv[1][1])]


def recordings(step) -> list[Any]:
    entry = step._trident.entry
    graphs = [entry.graphs(index) for index in range(len(step._trident.specializations))]
    return [r for g in graphs if g is not None for r in g.recordings]


def timed_phases(recs: list[Any]) -> tuple[int, dict[str, float]]:
    """The replays the recordings timed since time_replays(True), and their host µs per replay by phase, with
    `program_rest`: the host program's time outside its opaque and Triton steps (with a replay plan on, `words` is
    the plan's words function and the rest of `program` the nodes computed from it). `inside` is all the time the
    entry spent in replay() (every recording tried, replayed or not), `unreplayed` the part of it in tries that did
    not replay, and `tries` the recordings tried per replay. ({} when none replayed.)"""
    sums: dict[str, float] = defaultdict(float)
    for r in recs:
        for key, ns in (r.times or {}).items():  # None: a recording made after time_replays(True)
            sums[key] += ns
    replays = int(sums.pop("replays", 0))
    if replays == 0:
        return 0, {}
    tries = sums.pop("tries", 0)
    phases = {key: ns / 1e3 / replays for key, ns in sums.items()}
    phases["program_rest"] = phases["program"] - phases["opaque_steps"] - phases["triton_steps"] - phases["words"]
    phases["tries"] = tries / replays
    return replays, phases


def replay_phases(step, tokens, caches, positions: Positions, steps: int) -> dict[str, float]:
    """Graph replay's host time per replayed step by phase (the runtime's own timers, csrc/graphs/recording.h's
    ReplayTimes), with the GPU asleep as in host_us; `entry` is the rest of the host time per step, outside
    replay(): the call's Python side, the entry's guards and the specialization's selection."""
    for r in recordings(step):
        r.time_replays(True)
    total = host_us(step, tokens, caches, positions, steps) * HOST_REPEATS * steps
    replays, phases = timed_phases(recordings(step))
    for r in recordings(step):
        r.time_replays(False)
    if replays == 0:
        return {"replayed_steps": 0}
    phases["entry"] = total / replays - phases["inside"]
    return {"replayed_steps": replays / (HOST_REPEATS * steps), **phases}


def profile_kind(model, args: argparse.Namespace, kind: str) -> dict[str, Any]:
    caches = model.new_caches(args.batch)
    tokens = torch.zeros(args.batch, dtype=torch.long, device=args.device)
    positions = Positions(kind, args.device, model.max_seq)
    step = trident.jit(model.decode_step_tensor_pos if kind == "tensor" else model.decode_step)
    step._trident.use_cuda_graphs(args.graphs)  # type: ignore[attr-defined]
    for pos in positions.take(WARMUP):
        step(tokens, pos, caches)
    cuda = args.device == "cuda"
    result: dict[str, Any] = {"pos_kind": kind, "wall_us": wall_us(step, tokens, caches, positions, args.steps)}
    if cuda:
        result["host_us"] = {n: host_us(step, tokens, caches, positions, n) for n in HOST_STEPS}
        if args.graphs:
            result["replay_us"] = replay_phases(step, tokens, caches, positions, HOST_STEPS[-1])
        result.update(device_profile(step, tokens, caches, positions, args.steps))
    result["aten"] = aten_profile(step, tokens, caches, positions, args.steps)
    sites = triton_launch_sites(step)
    pools = [s.compiled.buffer_pool for s in step._trident.specializations if s.compiled.buffer_pool]
    result.update(specializations=len(step._trident.specializations), launch_sites=len(sites),
                  native_launches=sum(getattr(s, "native_launches", 0) for s in sites),
                  direct_matmuls=sum(pool.direct_matmuls for pool in pools),
                  planned_matmuls=sum(pool.planned_matmuls for pool in pools),
                  matmul_plans=[why for pool in pools for why in pool.matmul_plans.values()],
                  misses=step._trident.misses)
    return result


def report(r: dict[str, Any]) -> None:
    host = r.get("host_us", {})
    host_text = " / ".join(f"{us:.0f} ({n} steps)" for n, us in host.items()) or "-"
    device = f"{r['device_us']:.0f} µs ({r['kernels_per_step']:.0f} kernels)" if "device_us" in r else "-"
    print(f"\nposition {r['pos_kind']}: wall {r['wall_us']:.0f} µs/step; host alone {host_text}; device {device}; "
          f"{r['specializations']} specialization(s), {r['misses']} miss(es), {r['launch_sites']} launch sites, "
          f"{r['planned_matmuls']} matmuls through cuBLASLt plans and {r['direct_matmuls']} straight to ATen's CUDA "
          f"kernel so far; {sum(why is None for why in r['matmul_plans'])} of {len(r['matmul_plans'])} sites planned"
          + "".join(f"\n  not planned: {why}" for why in sorted({w for w in r['matmul_plans'] if w})))
    phases = r.get("replay_us")
    if phases:
        print(f"  graph replay, host µs per replayed step ({phases['replayed_steps']:.2f} of the steps replayed): "
              + ", ".join(f"{key} {phases[key]:.1f}" for key in ("entry", "program", "opaque_steps", "triton_steps",
                                                                  "program_rest", "launch", "result_copies")))
    for k in r.get("by_kernel", [])[:12]:
        print(f"    {k['name']:<92} {k['per_step']:>6.1f}/step {k['us']:>8.1f} µs")
    aten_total = sum(op["us"] for op in r["aten"])
    print(f"  {'ATen operator (self CPU, profiled)':<44} {'calls/step':>10} {'µs/step':>9} {'µs/call':>8}")
    for op in r["aten"][:14]:
        print(f"  {op['op']:<44} {op['calls']:>10.1f} {op['us']:>9.1f} {op['us'] / max(op['calls'], 1e-9):>8.2f}")
    print(f"  {'ATen total':<44} {'':>10} {aten_total:>9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--pos-kind", default="int,tensor")
    parser.add_argument("--steps", type=int, default=32, help="steps per wall / profiled measurement")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tiny", action="store_true", help="tiny fp32 model (a CPU smoke run)")
    parser.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    parser.add_argument("--graphs", action="store_true", help="CUDA graph replay on (TRIDENT_CUDA_GRAPHS=1)")
    args = parser.parse_args()
    dtype = torch.float32 if args.tiny else torch.bfloat16
    kinds = [k for k in args.pos_kind.split(",") if k]
    needed = WARMUP + 3 * args.steps + HOST_REPEATS * (sum(HOST_STEPS) + HOST_STEPS[-1])
    model = build_model(args.model, args.device, dtype, tiny=args.tiny, max_seq=-(-needed // 64) * 64)
    info = machine(torch.device(args.device))
    print(f"{args.model} batch {args.batch} on {args.device}{' with CUDA graph replay' if args.graphs else ''}: "
          f"{json.dumps(info)}")
    results = []
    with torch.no_grad():
        for kind in kinds:
            results.append(profile_kind(model, args, kind))
            report(results[-1])
    if args.out:
        args.out.write_text(json.dumps({"machine": info, "model": args.model, "batch": args.batch,
                                        "cuda_graphs": args.graphs, "results": results}, indent=1))


if __name__ == "__main__":
    main()
