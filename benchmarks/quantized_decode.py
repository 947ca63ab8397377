"""A quantized-GEMV decode step (issue 41, item 5): a Llama-3.2-1B-shaped Hugging Face model whose linear layers
are gemlite's int8-weight layers (A16W8: `gemlite::forward_functional`, 7 per layer, 112 per step at 16 layers),
one decode step at a time over a StaticCache, in one process:

    eager            the model called as is
    trident_graphs   trident.jit(model), CUDA graph replay on (the default)
    trident_direct   trident.jit(model) with `_trident.use_cuda_graphs(False)`: every hit runs the native host
                     program, launch by launch
    hand_graph       eager's step at one position captured by hand as one torch.cuda.CUDAGraph and replayed: the
                     step's device time, the floor the others are held against

then the same step in a second, fresh process sharing the first one's disk cache (TRIDENT_DISK_CACHE_DIR): its
compiles (item 5 asks for 0), loads, first-call time and bits.

    python benchmarks/quantized_decode.py [--layers 16] [--steps 40] [--rounds 5] [--check-steps 12]
                                          [--work DIR] [--out results.json] [--no-second-process]

Method. Positions are device tensors (input_ids, position_ids and cache_position are views of tables made once:
a step does no host-to-device copy). Each system gets its own StaticCache. First `--check-steps` steps at
positions 0, 1, ... whose logits are compared with eager's bit for bit (they compile, warm up and record the
graph), then `--rounds` timed rounds of `--steps` back-to-back steps at the positions after those (each round the
same positions again; one synchronize per round): ms per step is the median round's time / steps.

gemlite's kernel configs: gemlite times its configs the first time it sees a shape. The first eager step here
does that, then `gemlite.cache_config` writes the winners to a file and `gemlite.load_config` loads it (the
library's own way to keep tuned configs), so every system, and the second process, runs eager's configs: the
bits can be compared, and the device time is the tuned one. (torch's capture of the launch would otherwise time
the configs again, and may pick another: other bits.)

Needs CUDA, transformers and gemlite. Writes JSON with the machine (GPU, CPU) and versions.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
if __package__ in (None, ""):  # run as a file: trident from the tree, `benchmarks.llm` from the repository root
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT))

from benchmarks.machine_info import dist_version, machine

SYSTEMS = ("eager", "trident_graphs", "trident_direct", "hand_graph")
LLAMA_1B = dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
                num_key_value_heads=8, head_dim=64, max_position_embeddings=2048, tie_word_embeddings=True)
OP = "gemlite::forward_functional"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=16, help="decoder layers (Llama-3.2-1B has 16)")
    p.add_argument("--steps", type=int, default=40, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds per system")
    p.add_argument("--check-steps", type=int, default=12,
                   help="steps compared with eager bit for bit before timing (>= 4: the graph records at hit 3)")
    p.add_argument("--systems", default=",".join(SYSTEMS), help="comma list of: " + ",".join(SYSTEMS))
    p.add_argument("--work", type=Path, help="folder for the disk cache and gemlite's config file (default: a new "
                   "temporary folder, so the first process compiles)")
    p.add_argument("--out", type=Path, help="write the results here (JSON)")
    p.add_argument("--no-second-process", action="store_true", help="skip the disk-cache check in a fresh process")
    p.add_argument("--second-process", action="store_true", help=argparse.SUPPRESS)  # the child's mode
    p.add_argument("--gemlite-config", type=Path, help=argparse.SUPPRESS)  # the child loads the parent's file
    args = p.parse_args(argv)
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        p.error(f"unknown system(s) {sorted(unknown)}; choose from {list(SYSTEMS)}")
    if args.check_steps < 4:
        p.error("--check-steps must be at least 4: a graph records at a specialization's 3rd hit")
    return args


def missing_requirements() -> str | None:
    """Why this machine cannot run the benchmark (None: it can). gemlite itself needs CUDA when imported."""
    import importlib.util

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (gemlite's kernels and its import need one)"
    for module in ("transformers", "gemlite"):
        if importlib.util.find_spec(module) is None:
            return f"needs {module} (pip install {module})"
    return None


# ---------------------------------------------------------------------------------------------------------
# The model and its inputs


def build_model(layers: int) -> tuple[Any, int]:
    """The Llama-1B-shaped model (random weights, seed 0, bf16, sdpa attention) with every nn.Linear but the LM
    head replaced by gemlite's A16W8 layer (int8 weights, one scale per output channel, bf16 activations), as
    gemlite's `patch_model` does for its users. Returns it and the number of gemlite layers."""
    import transformers
    from gemlite.helper import A16W8, patch_model

    config = transformers.LlamaConfig(**LLAMA_1B, num_hidden_layers=layers)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(dtype=torch.bfloat16).eval()
    model = patch_model(model, device="cuda", processor=A16W8(device="cuda"), skip_modules=["lm_head"])
    quantized = sum(type(m).__name__ == "GemLiteLinearTriton" for m in model.modules())
    return model, quantized


class Positions:
    """input_ids, position_ids and cache_position of every position, made on the device once: a step's inputs
    are views of these tables (no host-to-device copy per step, as Hugging Face's generate advances them)."""

    def __init__(self, count: int, vocab: int) -> None:
        generator = torch.Generator().manual_seed(1)
        self.ids = torch.randint(1, vocab, (count, 1), generator=generator).cuda()
        self.cache_position = torch.arange(count, device="cuda")
        self.position_ids = self.cache_position.view(count, 1)

    def at(self, p: int) -> dict[str, Any]:
        return {"input_ids": self.ids[p : p + 1], "position_ids": self.position_ids[p : p + 1],
                "cache_position": self.cache_position[p : p + 1]}


def cache_length(args: argparse.Namespace) -> int:
    """Positions of every StaticCache the timed systems and the second process use: one length, so the second
    process's calls have the shapes the first one compiled for."""
    return args.check_steps + args.steps + 8


def new_cache(model: Any, max_len: int) -> Any:
    import transformers

    config = model.config
    cache = transformers.StaticCache(config=config, max_cache_len=max_len)
    cache.early_initialization(batch_size=1, num_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               dtype=torch.bfloat16, device=torch.device("cuda"))
    return cache


def step_of(call: Callable[..., Any], cache: Any, positions: Positions) -> Callable[[int], Any]:
    """One decode step at position p through `call` (the model, or a jitted copy): the logits [1, 1, vocab]."""
    return lambda p: call(**positions.at(p), past_key_values=cache, use_cache=True).logits


def pin_gemlite_configs(eager_step: Callable[[int], Any], path: Path) -> None:
    """One eager step makes gemlite time its configs for every shape of the model; write the winners to `path`
    (gemlite.cache_config) and load them as the library's config table (gemlite.load_config): every later
    launch, eager or captured, is pruned to that one config."""
    import gemlite
    eager_step(0)
    torch.cuda.synchronize()
    gemlite.cache_config(str(path))
    if not gemlite.load_config(str(path)):
        raise SystemExit(f"gemlite did not load the configs it wrote to {path}")


# ---------------------------------------------------------------------------------------------------------
# Measuring


def same_bits(a: Any, b: Any) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def checked_steps(step: Callable[[int], Any], start: int, stop: int) -> list[Any]:
    """Logits of positions start .. stop-1, copied (a later step may reuse the memory of a result)."""
    logits = [step(p).clone() for p in range(start, stop)]
    torch.cuda.synchronize()
    return logits


def first_and_checked_steps(step: Callable[[int], Any], count: int) -> tuple[float, list[Any]]:
    """Seconds of the first step (position 0: a jitted step compiles or loads here), and the logits of positions
    0 .. count-1."""
    start = time.perf_counter()
    first = step(0).clone()
    torch.cuda.synchronize()
    return time.perf_counter() - start, [first] + checked_steps(step, 1, count)


def timed_rounds(run_round: Callable[[], None], rounds: int, steps: int, cache: Any) -> list[float]:
    """ms per step of each round: `steps` steps back to back, one synchronize at the end. The cache is reset
    before each round, untimed: a StaticCache layer writes at its own counter (cumulative_length), not at the
    step's cache_position, so rounds that repeat positions would otherwise write past its end."""
    times = []
    for _ in range(rounds):
        cache.reset()
        torch.cuda.synchronize()
        start = time.perf_counter()
        run_round()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) / steps * 1e3)
    return times


@contextlib.contextmanager
def counting() -> Iterator[dict[str, Any]]:
    """Compiles and disk-cache counts inside the block (filled in when it ends)."""
    import trident
    from trident.testing import count_compiles

    before = trident.cache.stats()
    counts: dict[str, Any] = {}
    with count_compiles() as compiles:
        yield counts
    after = trident.cache.stats()
    counts["compiles"] = compiles()
    counts.update({k: after[k] - before[k] for k in ("loads", "stores", "triton_binaries_loaded")})


def trident_facts(ready: Any) -> dict[str, Any]:
    """What `explain` and the counters say: per specialization the ops traced into and kept opaque, gemlite ops
    still called through the dispatcher, Triton launch sites (native or through Triton's launcher), graph
    replays, misses and divergences."""
    import trident

    state = ready._trident
    hits = state.entry.hits()
    specs = []
    for spec in state.specializations:
        report = spec.trace.see_through if spec.trace is not None else None  # a loaded one has no trace
        sites = spec.compiled.launch_sites
        graphs = state.entry.graphs(spec.index)
        specs.append({
            "index": spec.index, "hits": hits[spec.index],
            "traced_into": dict(report.traced) if report is not None else None,
            "opaque": dict(report.opaque) if report is not None else None,
            "gemlite_dispatcher_calls": sum("gemlite" in call for call in spec.compiled.aten_calls),
            "aten_calls": len(spec.compiled.aten_calls),
            "launch_sites": len(sites),
            "native_launches": sum(getattr(s, "native_launches", 0) for s in sites),
            "launcher_launches": sum(getattr(s, "fallback_launches", 0) for s in sites),
            "sites_off_native": sorted({s.disabled_reason for s in sites if getattr(s, "disabled_reason", None)}),
            "graph_replays": graphs.replays if graphs else 0, "graph_misses": graphs.misses if graphs else 0,
            "graph_refusal": graphs.refusal if graphs else None,
            "recordings": [{k: r.counts[k] for k in ("replays", "divergences", "patched_nodes", "kernel_nodes",
                                                     "opaque_steps")} for r in (graphs.recordings if graphs else [])],
        })  # fmt: skip
    wanted = ("traced into", "opaque", "CUDA graph", "replay plan", "disk cache", "runs eagerly", "last miss")
    lines = [line.strip() for line in trident.explain(ready).splitlines() if line.strip().startswith(wanted)]
    return {"eager_calls": state.eager_calls, "specializations": specs, "explain": lines}


def measure_system(system: str, model: Any, positions: Positions, args: argparse.Namespace,
                   reference: list[Any] | None) -> dict[str, Any]:
    import trident

    cache = new_cache(model, cache_length(args))
    timed_positions = range(args.check_steps, args.check_steps + args.steps)
    cell: dict[str, Any] = {"system": system}
    if system == "hand_graph":
        from benchmarks.llm.hand_graph import capture_by_hand

        step = step_of(model, cache, positions)
        graph, _ = capture_by_hand(lambda: step(args.check_steps))

        def replay_round() -> None:
            for _ in timed_positions:
                graph.replay()

        cell["ms_per_step"] = timed_rounds(replay_round, args.rounds, args.steps, cache)
        return cell
    ready = model
    if system.startswith("trident"):
        ready = trident.jit(model)
        ready._trident.use_cuda_graphs(system == "trident_graphs")
    step = step_of(ready, cache, positions)
    with counting() as counts:
        cell["first_call_s"], logits = first_and_checked_steps(step, args.check_steps)

        def step_round() -> None:
            for p in timed_positions:
                step(p)

        cell["ms_per_step"] = timed_rounds(step_round, args.rounds, args.steps, cache)
    cell["checked_logits"] = logits
    if reference is not None:
        cell["bits_equal_eager"] = [same_bits(a, b) for a, b in zip(logits, reference)]
    if system.startswith("trident"):
        cell.update(counts)
        cell["facts"] = trident_facts(ready)
    return cell


def second_process(args: argparse.Namespace, env: dict[str, str]) -> dict[str, Any]:
    """The same step in a fresh process sharing this one's disk cache and gemlite configs."""
    command = [sys.executable, str(Path(__file__).resolve()), "--second-process", "--gemlite-config",
               str(args.gemlite_config), "--work", str(args.work), "--layers", str(args.layers),
               "--check-steps", str(args.check_steps), "--steps", str(args.steps)]
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - start
    if result.returncode != 0:
        return {"status": "error", "returncode": result.returncode, "stderr": result.stderr[-4000:]}
    data = json.loads(result.stdout.strip().splitlines()[-1])
    data["process_wall_s"] = wall
    return data


def run_second_process(args: argparse.Namespace) -> None:
    """The child: load gemlite's configs, jit the model and make the first call (from the disk cache, or a
    compile), then the rest of `--check-steps` steps; their logits are compared with eager's. Prints one JSON
    line."""
    import gemlite
    import trident

    if not gemlite.load_config(str(args.gemlite_config)):
        raise SystemExit(f"gemlite could not load {args.gemlite_config}")
    model, _ = build_model(args.layers)
    positions = Positions(cache_length(args), model.config.vocab_size)
    ready = trident.jit(model)
    step = step_of(ready, new_cache(model, cache_length(args)), positions)
    with torch.no_grad():
        with counting() as counts:
            first_call_s, logits = first_and_checked_steps(step, args.check_steps)
        expected = checked_steps(step_of(model, new_cache(model, cache_length(args)), positions), 0,
                                 args.check_steps)
    print(json.dumps({"status": "ok", "first_call_s": first_call_s, **counts,
                      "bits_equal_eager": [same_bits(a, b) for a, b in zip(logits, expected)],
                      **trident_facts(ready)}))


# ---------------------------------------------------------------------------------------------------------
# Report


def table(cells: list[dict[str, Any]]) -> str:
    hand = next((statistics.median(c["ms_per_step"]) for c in cells if c["system"] == "hand_graph"
                 and "ms_per_step" in c), None)
    eager = next((statistics.median(c["ms_per_step"]) for c in cells if c["system"] == "eager"
                  and "ms_per_step" in c), None)
    lines = [f"{'system':<16} {'ms/step':>9} {'spread':>8} {'/ hand graph':>13} {'/ eager':>8} {'bits = eager':>13} "
             f"{'compiles':>9}"]
    for c in cells:
        if "ms_per_step" not in c:
            lines.append(f"{c['system']:<16} {'error: ' + c.get('error', '?')[:100]}")
            continue
        ms = statistics.median(c["ms_per_step"])
        spread = max(c["ms_per_step"]) - min(c["ms_per_step"])
        bits = c.get("bits_equal_eager")
        lines.append(f"{c['system']:<16} {ms:>9.3f} {spread:>8.3f} {(f'{ms / hand:.2f}x' if hand else '-'):>13} "
                     f"{(f'{ms / eager:.2f}x' if eager else '-'):>8} "
                     f"{('-' if bits is None else f'{sum(bits)}/{len(bits)}'):>13} {c.get('compiles', '-'):>9}")
    return "\n".join(lines)


def summary(facts: dict[str, Any]) -> str:
    """trident_facts in a few lines: what was traced into or kept opaque, how launches went, graph replays."""
    lines = [f"eager calls {facts['eager_calls']}"]
    for s in facts["specializations"]:
        opaque = "; ".join(f"{op}: {why[:160]}" for op, why in (s["opaque"] or {}).items()) or "none"
        divergences = [r["divergences"] for r in s["recordings"]]
        lines.append(
            f"specialization {s['index']}: {s['hits']} hit(s); traced into {s['traced_into']}; opaque: {opaque}; "
            f"{s['gemlite_dispatcher_calls']} gemlite call(s) through the dispatcher; {s['launch_sites']} launch "
            f"site(s), {s['native_launches']} native launch(es), {s['launcher_launches']} through Triton's launcher"
            + (f" (off native: {s['sites_off_native']})" if s["sites_off_native"] else "")
            + f"; CUDA graph: {s['graph_replays']} replay(s), {s['graph_misses']} miss(es), divergences per "
            f"recording {divergences}" + (f", refusal: {s['graph_refusal']}" if s["graph_refusal"] else ""))
    return "\n  ".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    missing = missing_requirements()
    if missing:
        print(f"quantized_decode: {missing}", file=sys.stderr)
        return 2
    args.work = args.work or Path(tempfile.mkdtemp(prefix="trident-quantized-decode-"))
    args.work.mkdir(parents=True, exist_ok=True)
    # Before trident is imported (its knobs are read once): this run's own disk cache, on; the second process
    # gets the same folder.
    os.environ["TRIDENT_DISK_CACHE"] = "1"
    os.environ["TRIDENT_DISK_CACHE_DIR"] = str(args.work / "specializations")
    if args.second_process:
        run_second_process(args)
        return 0

    info = machine("cuda")
    info["gemlite"] = dist_version("gemlite")
    print(json.dumps(info), flush=True)
    model, quantized = build_model(args.layers)
    print(f"model: {args.layers} layers, {quantized} gemlite A16W8 layers ({OP} calls per step)", flush=True)
    positions = Positions(cache_length(args), model.config.vocab_size)
    args.gemlite_config = args.work / "gemlite_configs.json"
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    cells: list[dict[str, Any]] = []
    with torch.no_grad():
        pin_gemlite_configs(step_of(model, new_cache(model, 8), positions), args.gemlite_config)
        reference = None
        for system in ["eager"] + [s for s in systems if s != "eager"]:
            try:
                cell = measure_system(system, model, positions, args, reference)
            except Exception as e:  # noqa: BLE001 -- a system that fails is a result too
                cell = {"system": system, "error": f"{type(e).__name__}: {e}"[:2000],
                        "traceback": traceback.format_exc()[-4000:]}
            if system == "eager":
                reference = cell.pop("checked_logits", None)
            else:
                cell.pop("checked_logits", None)
            if system in systems:
                cells.append(cell)
            print(json.dumps({k: v for k, v in cell.items() if k != "facts"}), flush=True)
    result: dict[str, Any] = {"machine": info, "argv": sys.argv[1:], "gemlite_layers": quantized, "cells": cells}
    if not args.no_second_process:
        result["second_process"] = second_process(args, dict(os.environ))
    print()
    print(table(cells))
    for c in cells:
        facts = c.get("facts")
        if facts:
            print(f"\n{c['system']}: {summary(facts)}")
    second = result.get("second_process")
    if second and second.get("status") != "ok":
        print(f"\nsecond process failed (exit {second.get('returncode')}):\n{second.get('stderr')}")
    elif second:
        print(f"\nsecond process: {summary(second)}")
        print(f"\nsecond process: {second.get('status')}, compiles {second.get('compiles')}, "
              f"loads {second.get('loads')}, first call {second.get('first_call_s', float('nan')):.2f} s, "
              f"bits = eager {sum(second.get('bits_equal_eager', []))}/{len(second.get('bits_equal_eager', []))}")
    print("ms/step: median of rounds of back-to-back steps; hand graph: eager's step captured once and replayed "
          "(device time). bits = eager: checked steps whose logits equal eager's bit for bit.")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
