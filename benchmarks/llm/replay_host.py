"""Host time of a graph-replayed decode step, and where it goes.

The model's step (op set `kernels`, batch 1 unless --batch) runs under trident.jit with CUDA graph replay over
every position once (compiles, records, and every Triton variant a position needs), then in rounds of 16 steps
enqueued while the GPU sleeps, so no call waits on the device: the median round gives host µs per step. With
--phases, the recordings' own timers (GraphRecording.time_replays) split it: the host program in replay mode (its
opaque and Triton steps apart; with a replay plan on, the words function and the nodes computed from them), the
graph launch and the result copies, the tries of recordings that did not replay; `entry`, the rest, is outside
replay() (the Python loop, binding, guards). By default a replay comes from its replay plan (lowering/replay_plan.py),
without the host program; TRIDENT_REPLAY_PLAN=0 measures replays through the host program.
The timers cost a little, so compare trees or machines without --phases. With --hand-graph, also the same rounds
for a CUDA graph of the step captured by hand (the strongest peer: the user's own loop restructured for a graph).
One JSON line per run on stdout.

    python -m benchmarks.llm.replay_host --model llama --pos-kind int [--seconds 3] [--phases] [--hand-graph]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch

import trident

from benchmarks.llm.hand_graph import capture_by_hand
from benchmarks.llm.host_profile import recordings, timed_phases
from benchmarks.llm.models import build_model
from benchmarks.machine_info import machine

STEPS = 16  # per GPU sleep: few enough that the launch queue never fills
SLEEP_CYCLES = 60_000_000  # ~30 ms at the H200's clock: longer than 16 steps' host time


def timed_rounds(call: Callable[[int], object], seconds: float,
                 before_round: Callable[[], object] = lambda: None) -> tuple[list[float], int]:
    """Host µs per step of each round of STEPS steps (`call(i)`, i counting them) enqueued while the GPU sleeps, for
    `seconds`, `before_round` run ahead of each round's sleep; and the steps. (A function of its own so that a
    profile of the process can keep only these samples.)"""
    rounds, i, start = [], 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        before_round()
        torch.cuda._sleep(SLEEP_CYCLES)
        t0 = time.perf_counter()
        for _ in range(STEPS):
            call(i)
            i += 1
        rounds.append((time.perf_counter() - t0) / STEPS * 1e6)
        torch.cuda.synchronize()
    return rounds, i


def hand_graph_host_us(model: Any, caches: Any, tokens: torch.Tensor, seconds: float) -> float:
    """The same rounds for a CUDA graph of the step captured by hand, as a user restructuring their loop for one would
    write it (the position a device tensor the graph advances): per step, the new tokens copied in, the replay, and
    the logits cloned out (what Trident hands the caller). Host µs per step, median round."""
    step = model.step_for("kernels", "tensor")
    static_tokens, pos = tokens.clone(), torch.zeros(1, dtype=torch.int32, device="cuda")

    def one_step() -> torch.Tensor:
        logits = step(static_tokens, pos, caches)
        pos.add_(1)
        return logits

    graph, logits = capture_by_hand(one_step)

    def replayed(_: int) -> None:
        static_tokens.copy_(tokens)
        graph.replay()
        logits.clone()

    rounds, _ = timed_rounds(replayed, seconds, before_round=lambda: pos.fill_(8))  # each round from position 8
    return sorted(rounds)[len(rounds) // 2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama")
    p.add_argument("--pos-kind", default="int", choices=("int", "tensor"))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seconds", type=float, default=3.0, help="measured time")
    p.add_argument("--phases", action="store_true", help="also split the host time by phase (the replay timers)")
    p.add_argument("--label", default="", help="a name for this run in its JSON line (e.g. which tree)")
    p.add_argument("--hand-graph", action="store_true",
                   help="also the host µs per step of a CUDA graph of the step captured by hand (hand_graph_host_us)")
    args = p.parse_args()
    model = build_model(args.model, "cuda", torch.bfloat16, max_seq=512)
    step = trident.jit(model.step_for("kernels", args.pos_kind))
    caches = model.new_caches(args.batch)
    tokens = torch.zeros(args.batch, dtype=torch.long, device="cuda")
    positions: list[Any] = list(range(model.max_seq - 1))
    if args.pos_kind == "tensor":
        positions = [torch.tensor([p], dtype=torch.int32, device="cuda") for p in positions]

    with torch.no_grad():
        for pos in positions:
            step(tokens, pos, caches)
        torch.cuda.synchronize()
        if args.phases:
            for r in recordings(step):
                r.time_replays(True)
        replays = sum(r.counts["replays"] for r in recordings(step))
        rounds, i = timed_rounds(lambda i: step(tokens, positions[8 + i % (len(positions) - 8)], caches), args.seconds)
    result: dict[str, Any] = {
        "label": args.label, "model": args.model, "pos_kind": args.pos_kind, "batch": args.batch,
        "host_us": sorted(rounds)[len(rounds) // 2], "steps": i,
        "replayed": sum(r.counts["replays"] for r in recordings(step)) - replays,
        "plans": [r.plan for r in recordings(step)],  # the replay plans' states (None: replays run the program)
        "recordings": [r.counts for r in recordings(step)],  # replays, divergences, patched nodes of each
        "machine": machine(torch.device("cuda")),
    }  # fmt: skip
    if args.phases:
        phases = timed_phases(recordings(step))[1]
        if phases:
            phases["entry"] = result["host_us"] - phases["inside"]
        result["phases_us"] = phases
    if args.hand_graph:
        with torch.no_grad():
            result["hand_graph_host_us"] = hand_graph_host_us(model, model.new_caches(args.batch), tokens, args.seconds)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
