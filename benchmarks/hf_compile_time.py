"""First-call (compile) time of `trident.jit(model)` on Hugging Face causal LMs as the layer count grows, in one
process.

    python benchmarks/hf_compile_time.py [--families llama,qwen2] [--layers 4,8,16,28] [--new-tokens 8]
                                         [--rounds 1] [--out results.json]

Tiny width, realistic depth: the real transformers classes (LlamaForCausalLM; Qwen2ForCausalLM, whose attention
projections have biases) with hidden size 64, 4 heads, 2 KV heads and random weights, so the time is Trident's
(capture, guards, lowering, LLVM, disk-cache store) and not the model's arithmetic. Per family and layer count:
  prefill         the first call, input_ids 1x16, use_cache=True (a DynamicCache made by the model): one compile
  decode          the next call, 1x1 with the returned past_key_values: one compile
  generate        a fresh trident.jit(model).generate(ids, max_new_tokens, do_sample=False), DynamicCache: end to
                  end, its compiles included (prefill, first decode step, then the decode step traced with a
                  symbolic position)
  generate static the same with cache_implementation="static"
Each row is wall seconds (median of --rounds; the spread is min-max) and CPU seconds of the process, with the
compiles it made and the seconds each took (the driver's own timer). Every measurement uses a fresh model, a fresh
jit and an empty disk cache of its own, after one warm-up compile, so nothing is loaded from an earlier store and
the process's one-time costs (imports, loading the runtime) are not counted. The seconds-per-layer slope of each
phase is a least-squares fit over the layer counts. Writes JSON with the machine and versions.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine

FAMILIES = {"llama": "Llama", "qwen2": "Qwen2"}
PHASES = ("prefill", "decode", "generate", "generate static")
PROMPT = 16


def build_model(family: str, layers: int) -> Any:
    import transformers

    name = FAMILIES[family]
    config = getattr(transformers, f"{name}Config")(
        hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=layers, vocab_size=256,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return getattr(transformers, f"{name}ForCausalLM")(config).eval()


def _compile_seconds(jitted: Any, before: int) -> list[float]:
    """The seconds each specialization compiled since `before` took, by the driver's timer."""
    return [round(s.compile_seconds, 3) for s in type(jitted)._trident.specializations[before:]]


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def measure_once(family: str, layers: int, new_tokens: int) -> dict[str, dict[str, Any]]:
    """One round of every phase: {phase: {wall, cpu, compiles, compile_seconds, eager_calls}}."""
    import trident
    from trident.knobs import override

    ids = torch.randint(1, 256, (1, PROMPT), generator=torch.Generator().manual_seed(1))
    rows: dict[str, dict[str, Any]] = {}

    def fresh_cache() -> Any:
        return override(disk_cache_dir=Path(tempfile.mkdtemp(prefix="trident-compile-time-")))

    def row(jitted: Any, before: int, wall: float, cpu: float) -> dict[str, Any]:
        seconds = _compile_seconds(jitted, before)
        return {"wall": wall, "cpu": cpu, "compiles": len(seconds), "compile_seconds": seconds,
                "eager_calls": type(jitted)._trident.eager_calls}

    with torch.no_grad():
        with fresh_cache():
            jitted = trident.jit(build_model(family, layers))
            wall, cpu, out = _timed(lambda: jitted(input_ids=ids, use_cache=True))
            rows["prefill"] = row(jitted, 0, wall, cpu)
            step = out.logits[:, -1:].argmax(-1)
            wall, cpu, _ = _timed(lambda: jitted(input_ids=step, past_key_values=out.past_key_values, use_cache=True))
            rows["decode"] = row(jitted, rows["prefill"]["compiles"], wall, cpu)
        for phase, extra in (("generate", {}), ("generate static", {"cache_implementation": "static"})):
            with fresh_cache():
                jitted = trident.jit(build_model(family, layers))
                wall, cpu, _ = _timed(lambda: jitted.generate(
                    ids, max_new_tokens=new_tokens, do_sample=False, pad_token_id=0, disable_compile=True, **extra
                ))  # fmt: skip
                rows[phase] = row(jitted, 0, wall, cpu)
    return rows


def slope(points: list[tuple[int, float]]) -> dict[str, float] | None:
    """Least-squares seconds = per_layer * layers + fixed; None with fewer than two layer counts."""
    if len({n for n, _ in points}) < 2:
        return None
    mean_n = statistics.fmean(n for n, _ in points)
    mean_s = statistics.fmean(s for _, s in points)
    per_layer = sum((n - mean_n) * (s - mean_s) for n, s in points) / sum((n - mean_n) ** 2 for n, _ in points)
    return {"per_layer": per_layer, "fixed": mean_s - per_layer * mean_n}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| model | layers | phase | wall s | spread | cpu s | compiles | s per compile |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['family']} | {r['layers']} | {r['phase']} | {r['wall']:.2f} | "
                     f"{r['wall_min']:.2f}-{r['wall_max']:.2f} | {r['cpu']:.2f} | {r['compiles']} | "
                     f"{', '.join(f'{s:.2f}' for s in r['compile_seconds'])} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--families", default="llama,qwen2")
    parser.add_argument("--layers", default="4,8,16,28")
    parser.add_argument("--new-tokens", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    families = [f for f in args.families.split(",") if f]
    layer_counts = [int(n) for n in args.layers.split(",") if n]
    unknown = set(families) - set(FAMILIES)
    if unknown:
        parser.error(f"unknown families {sorted(unknown)}; choose from {sorted(FAMILIES)}")

    # One compile first: imports, the runtime's loading and torch's first-use work are the process's, not a phase's.
    measure_once(families[0], 1, 2)

    results = []
    for family in families:
        for layers in layer_counts:
            rounds = [measure_once(family, layers, args.new_tokens) for _ in range(args.rounds)]
            for phase in PHASES:
                walls = [r[phase]["wall"] for r in rounds]
                last = rounds[-1][phase]
                results.append({
                    "family": family, "layers": layers, "phase": phase, "wall": statistics.median(walls),
                    "wall_min": min(walls), "wall_max": max(walls),
                    "cpu": statistics.median(r[phase]["cpu"] for r in rounds), "compiles": last["compiles"],
                    "compile_seconds": last["compile_seconds"], "eager_calls": last["eager_calls"],
                })  # fmt: skip
            print("\n".join(table(results[-len(PHASES):]).splitlines()[2:]), file=sys.stderr, flush=True)
    fits = {
        f"{family} {phase}": slope([(r["layers"], r["wall"]) for r in results
                                    if r["family"] == family and r["phase"] == phase])
        for family in families for phase in PHASES
    }  # fmt: skip
    print(table(results))
    print("\n| model | phase | wall s per layer | fixed s |\n|---|---|---|---|")
    for name, fit in fits.items():
        if fit is not None:
            family, phase = name.split(" ", 1)
            print(f"| {family} | {phase} | {fit['per_layer']:.3f} | {fit['fixed']:.2f} |")
    report = {"machine": machine(), "prompt": PROMPT, "new_tokens": args.new_tokens, "rounds": args.rounds,
              "results": results, "per_layer_fits": fits}
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / "hf_compile_time.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
