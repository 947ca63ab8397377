"""Where a token of Hugging Face's static-cache `generate()` spends its time, `trident.jit(model)` against HF's
own compiled forward, in one process.

    python benchmarks/hf_token_time.py [--model llama-1b|qwen2-1.5b|tiny] [--systems trident_jit,hf_compiled]
                                       [--tokens 64] [--out results.json]

HF's generate synchronizes on every token (its stopping check reads a device value), so a token costs the host
work before its forward's launch plus the forward's device time. Per system:
  ms_per_token          (generate `tokens` - generate 1) / (tokens - 1), for 2 rounds
  forward_host_us       the forward call's own host time inside generate (no sync: the call returns once its work
                        is queued; median and 10th/90th percentiles over the decode steps)
  forward_back_to_back_ms  the last decode step's call repeated 50 times with no sync: max(host, device), the
                        device time where the host keeps ahead
  forward_synced_ms     the same call synced after each: host + device
  hf_loop_ms            ms_per_token - forward_host - back_to_back: HF's own loop, which no backend can hide
The forward calls run on a StaticCache of the user's with room for them (HF's generate-made cache has none).
`hf_compiled` needs CUDA (HF compiles its forward only there). Writes JSON with the machine and versions.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.hf_generate import build_model, timed  # noqa: E402
from benchmarks.machine_info import machine  # noqa: E402

ROOM = 256  # decode steps the forward loops below may take beyond a generate


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(system: str, args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    import transformers

    import trident

    model = build_model(args.model, device)
    ready = trident.jit(model) if system == "trident_jit" else model
    ids = torch.randint(1, 100, (1, args.prompt), generator=torch.Generator().manual_seed(1)).to(device)

    def generate(n: int, **extra: Any) -> Any:
        if "past_key_values" not in extra:
            extra["cache_implementation"] = "static"
        if system == "trident_jit":
            extra["disable_compile"] = True  # HF would compile the forward itself
        return ready.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, **extra)

    cell: dict[str, Any] = {"system": system}
    with torch.no_grad():
        for _ in range(2):
            generate(args.tokens)
        cell["ms_per_token"] = [
            (timed(lambda: generate(args.tokens), device)[0] - timed(lambda: generate(1), device)[0])
            / (args.tokens - 1) * 1e3 for _ in range(2)
        ]
        # The forward as generate calls it: trident.jit's module class, or HF's compiled call.
        seen: list[float] = []
        last: dict[str, Any] = {}
        owner = type(ready) if system == "trident_jit" else None
        forward = owner.__dict__["__call__"] if owner is not None else model._compiled_call

        def timed_forward(*a: Any, **k: Any) -> Any:
            start = time.perf_counter()
            out = forward(*a, **k)
            seen.append(time.perf_counter() - start)
            last["a"], last["k"] = a, k
            return out

        if owner is not None:
            owner.__call__ = timed_forward
        else:
            model._compiled_call = timed_forward
        try:
            cache = transformers.StaticCache(config=model.config, max_cache_len=args.prompt + args.tokens + ROOM)
            generate(args.tokens, past_key_values=cache)
        finally:
            if owner is not None:
                owner.__call__ = forward
            else:
                model._compiled_call = forward
        decode = sorted(seen[1:])
        cell["forward_host_us"] = {"median": statistics.median(decode) * 1e6,
                                   "p10": decode[len(decode) // 10] * 1e6, "p90": decode[len(decode) * 9 // 10] * 1e6}
        step = lambda: forward(*last["a"], **last["k"])  # noqa: E731 -- the module itself is in last["a"]
        n = min(50, ROOM // 2 - 1)

        def back_to_back() -> None:
            for _ in range(n):
                step()

        def synced() -> None:
            for _ in range(n):
                step()
                _sync(device)

        cell["forward_back_to_back_ms"] = timed(back_to_back, device)[0] / n * 1e3
        cell["forward_synced_ms"] = timed(synced, device)[0] / n * 1e3
        cell["hf_loop_ms"] = (statistics.median(cell["ms_per_token"]) - cell["forward_host_us"]["median"] / 1e3
                              - cell["forward_back_to_back_ms"])
    if system == "trident_jit":
        cell["explain"] = [line for line in trident.explain(ready).splitlines() if "graph" in line or "plan" in line]
        cell["eager_calls"] = ready._trident.eager_calls  # type: ignore[attr-defined]
    return cell


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-1b" if torch.cuda.is_available() else "tiny")
    p.add_argument("--systems", default="trident_jit,hf_compiled" if torch.cuda.is_available() else "trident_jit")
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    info = machine(device)
    print(json.dumps(info), flush=True)
    cells = []
    for system in args.systems.split(","):
        cells.append(measure(system, args, device))
        print(json.dumps({k: v for k, v in cells[-1].items() if k != "explain"}), flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    print("| system | ms/token | forward host (ms) | forward back to back (ms) | forward synced (ms) "
          "| HF's loop (ms) |")
    print("|---|---|---|---|---|---|")
    for c in cells:
        host_ms = c["forward_host_us"]["median"] / 1e3
        print(f"| {c['system']} | {statistics.median(c['ms_per_token']):.2f} | {host_ms:.2f}"
              f" | {c['forward_back_to_back_ms']:.2f} | {c['forward_synced_ms']:.2f} | {c['hf_loop_ms']:.2f} |")
    if args.out:
        args.out.write_text(json.dumps({"machine": info, "argv": sys.argv[1:], "cells": cells}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
