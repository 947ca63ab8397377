"""Hugging Face `generate()` through each way a user can run it, in one process: ms per new token and whether the
greedy tokens equal eager's.

    python benchmarks/hf_generate.py [--model llama-1b|qwen2-1.5b|tiny] [--liger] [--batch 1,8] [--cache static,dynamic]
                                     [--systems eager,...] [--tokens 64] [--rounds 3] [--out results.json]

Systems (every one on the same random-init model, bf16 on CUDA, fp32 on CPU):
  eager        generate(..., disable_compile=True): HF otherwise compiles the forward itself on CUDA
  hf_compiled  generate(...) as HF ships it (static cache on CUDA: inductor, reduce-overhead); dynamic cache: eager
  backend      generate(..., compile_config=CompileConfig(backend=trident.dynamo.backend, mode=None)) for the
               static cache; `model.forward = torch.compile(model.forward, backend="trident")` for the dynamic one
  inductor     `model.forward = torch.compile(model.forward)` (Inductor's defaults), generate(..., disable_compile=True)
  cudagraphs   generate(..., compile_config=CompileConfig(backend="cudagraphs", mode=None)) for the static cache:
               the model's own ATen kernels in a CUDA graph behind Dynamo's guards (cudagraph trees), the same
               device work as trident_jit's replay; dynamic cache: `torch.compile(model.forward, backend="cudagraphs")`
  trident_jit  trident.jit(model).generate(...) unchanged (it never compiles a jitted forward), with the cache
               generate makes each call
  trident_jit_cache  (static cache) the same with one StaticCache the system passes every generate, reset() before
               each: its tensors keep their addresses, so the recorded graph keeps replaying (transformers makes a
               new cache per generate, which a graph must record again wherever the allocator puts it)
  hand_graph   (static cache, CUDA) one decode step of the model captured by hand as a CUDA graph and replayed:
               the device time of a step, the floor for every system above
  graphed_loop (static cache, CUDA) generate(..., disable_compile=True) with one StaticCache it passes itself,
               whose decode forwards copy their inputs into a CUDA graph of the step captured by hand and replay
               it: HF's own loop around that device time, the floor of any system inside generate (the loop
               syncs on the device every token, so its host time between two forwards is not hidden)
Each system runs with each `--stop-check`: `sync` is generate's own loop on CUDA, which waits for the device every
token (`unfinished_sequences.max() == 0`); `deferred` reads that flag one token late with transformers'
DeferredStopCheck, which transformers enables only on MPS and trident.jit on CUDA with TRIDENT_HF_DEFER_STOP=1:
here every system gets it, so that each is compared in the same loop, those that pass a cache of their own too
(stop_check). On the CPU transformers never defers (no device events), so both give the same loop there.
trident_jit's cell also gives `graph_device_ms` (static cache, CUDA): the GPU time of its recorded decode step, one
kept call repeated back to back. For HF models that, not hand_graph, is the device time of eager's kernels: HF's mask
code takes other branches while a stream captures (transformers' is_tracing() is true then).
ms per new token = (time(generate `tokens`) - time(generate 1 token)) / (tokens - 1), median over rounds, after two
warm-up generates (which compile: `tokens` new tokens, then 1). Prints a table and writes JSON with the machine and
versions, and a plot next to it where matplotlib is importable (`--plot-only` plots result files made before).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine

MODELS = {  # Llama-3.2-1B's and Qwen2.5-1.5B's shapes; tiny: a CPU smoke size
    "llama-1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=64, max_position_embeddings=2048,
                     tie_word_embeddings=True),
    "qwen2-1.5b": dict(family="Qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                       num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2, head_dim=128,
                       max_position_embeddings=2048, tie_word_embeddings=True),
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=True),
}
# The order they run in. Those through Dynamo run last: after eager's and HF's own compiled generate had run in the
# process, trident_jit's generate took 0.3 ms more a token than in a process without them (Llama-1B, batch 1, H100;
# benchmarks/README.md, eleventh session; the cause was not isolated).
SYSTEMS = ("eager", "trident_jit", "trident_jit_cache", "graphed_loop", "hf_compiled", "inductor", "cudagraphs",
           "backend")
OWN_CACHE = ("trident_jit_cache", "graphed_loop")  # systems that pass generate one StaticCache of their own
MAX_CACHE_LEN = 256  # the static cache a system passes itself: prompt + new tokens at most


def build_model(name: str, device: torch.device, liger: bool = False) -> Any:
    """`name`'s shape with random weights; `liger`: liger-kernel's RMSNorm, RoPE and SwiGLU applied to it (real
    Triton kernels inside the HF model, as `apply_liger_kernel_to_<family>` does for its users)."""
    import transformers

    shape = dict(MODELS[name])
    family = shape.pop("family", "Llama")
    config = getattr(transformers, f"{family}Config")(**shape)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = getattr(transformers, f"{family}ForCausalLM")(config).to(device=device, dtype=dtype).eval()
    if liger:
        import liger_kernel.transformers as lk

        getattr(lk, f"apply_liger_kernel_to_{family.lower()}")(rope=True, rms_norm=True, swiglu=True,
                                                              cross_entropy=False,
                                                              fused_linear_cross_entropy=False, model=model)
    return model


def generate_fn(system: str, cache: str, model: Any) -> tuple[Any, Callable[[torch.Tensor, int], torch.Tensor]]:
    """`model` made ready for `system` (jitted, or its forward compiled), and how it generates `n` tokens."""
    import transformers

    import trident

    kwargs: dict[str, Any] = {"do_sample": False, "pad_token_id": 0}
    own_cache = system in OWN_CACHE
    if own_cache and cache != "static":
        raise ValueError(f"{system} passes its own StaticCache: the static cache only")
    if own_cache:  # one cache for every generate, reset in place before each: its tensors keep their addresses
        kwargs["past_key_values"] = transformers.StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
    elif cache == "static":
        kwargs["cache_implementation"] = "static"
    ready = model
    if system in ("trident_jit", "trident_jit_cache"):
        ready = trident.jit(model)
    elif system == "backend" and cache == "dynamic":
        model.forward = torch.compile(model.forward, backend=trident.dynamo.backend)
    elif system == "inductor":
        model.forward = torch.compile(model.forward)
    elif system == "cudagraphs" and cache == "dynamic":
        model.forward = torch.compile(model.forward, backend="cudagraphs")
    elif system == "graphed_loop":
        if next(model.parameters()).device.type != "cuda":
            raise ValueError("graphed_loop replays a CUDA graph: CUDA only")
        model.forward = GraphedDecode(model.forward)

    def run(ids: torch.Tensor, n: int) -> torch.Tensor:
        extra: dict[str, Any] = {}
        if own_cache:
            kwargs["past_key_values"].reset()
        if system in ("eager", "inductor", "graphed_loop") or (
            system == "cudagraphs" and cache == "dynamic"
        ):  # fmt: skip
            extra["disable_compile"] = True  # HF would compile the forward itself (again)
        elif system == "cudagraphs":
            extra["compile_config"] = transformers.CompileConfig(backend="cudagraphs", mode=None)
        elif system == "backend" and cache == "static":
            extra["compile_config"] = transformers.CompileConfig(backend=trident.dynamo.backend, mode=None)
        elif system == "backend":
            extra["disable_compile"] = True  # compiled by torch.compile(model.forward) already
        return ready.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs, **extra)

    return ready, run


class GraphedDecode:
    """A model's forward whose decode steps (one new token) replay a CUDA graph of the step captured by hand, one
    per cache and input shapes, after copying the step's tensor inputs into the graph's own; a prefill runs as it
    is. The attention mask is left out of the graph: the benchmark's prompts have no padding, so it is all ones and
    the model's causal mask alone is eager's."""

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        self.graphs: dict[tuple[Any, ...], tuple[Any, dict[str, torch.Tensor], Any]] = {}

    def __call__(self, **kwargs: Any) -> Any:
        ids = kwargs.get("input_ids")
        if ids is None or ids.shape[1] != 1:
            return self.forward(**kwargs)
        kwargs.pop("attention_mask", None)
        tensors = sorted(k for k, v in kwargs.items() if isinstance(v, torch.Tensor))
        key = (id(kwargs["past_key_values"]), *((k, tuple(kwargs[k].shape), kwargs[k].dtype) for k in tensors),
               *sorted((k, repr(v)) for k, v in kwargs.items() if k not in tensors and k != "past_key_values"))
        if key not in self.graphs:
            from benchmarks.llm.hand_graph import capture_by_hand

            # The runs before the capture advance the cache's positions: put back, the first replay is this step.
            put_back = positions_kept(kwargs["past_key_values"])
            inputs = {k: kwargs[k].clone() for k in tensors}
            graph, out = capture_by_hand(lambda: self.forward(**{**kwargs, **inputs}))
            put_back()
            self.graphs[key] = (graph, inputs, out)
        graph, inputs, out = self.graphs[key]
        for k in tensors:
            inputs[k].copy_(kwargs[k])
        graph.replay()
        return out


def positions_kept(cache: Any) -> Callable[[], None]:
    """A function that puts a static cache's position tensors back as they are now: a StaticLayer's
    cumulative_length, which every decode step adds to in place."""
    kept = [(layer.cumulative_length, layer.cumulative_length.clone()) for layer in getattr(cache, "layers", ())
            if isinstance(getattr(layer, "cumulative_length", None), torch.Tensor)]

    def put_back() -> None:
        for now, before in kept:
            now.copy_(before)

    return put_back


KEPT_FORWARD = 4  # the decode call kept_decode_call repeats: the 5th forward of a generate (the 1st is the prefill)
KEPT_REPEATS = 50  # calls per round: each writes the next cache position, and the cache ends at prompt + tokens


def kept_decode_call(ready: Any, generate: Callable[[], Any]) -> tuple[Callable[[], Any], Callable[[], None]]:
    """One decode call of a generate of `ready` (its KEPT_FORWARD-th forward, arguments copied as they were), as a
    function that calls the model again with them, and a function that puts the call's cache positions back as
    they were before it (as they are when this returns). Repeated, each call writes the next position of the same
    cache: KEPT_REPEATS calls fit between two put-backs. The call runs under no_grad, as generate's do, so it
    takes the specialization (and on CUDA the recorded graph) they took."""
    cls = type(ready)
    forward = cls.__call__
    kept: list[tuple[tuple[Any, ...], dict[str, Any], Callable[[], None]]] = []
    count = [0]

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        if count[0] == KEPT_FORWARD:  # generate updates some inputs in place: the kept ones are copies
            copies = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            kept.append((args, copies, positions_kept(kwargs["past_key_values"])))
        count[0] += 1
        return forward(self, *args, **kwargs)

    cls.__call__ = spy
    try:
        generate()
    finally:
        cls.__call__ = forward
    args, kwargs, put_back = kept[0]
    put_back()  # the generate went on past the kept call

    def call() -> Any:
        with torch.no_grad():  # as generate calls the forward: grad mode is part of a specialization's guard
            return ready(*args, **kwargs)

    return call, put_back


def graph_device_ms(ready: Any, generate: Callable[[], Any], rounds: int) -> float:
    """GPU ms per call of one decode call repeated back to back (kept_decode_call), timed by CUDA events: the host
    runs ahead, so this is the device time of the graph Trident recorded, eager's kernels. A hand-captured graph
    of an HF model is not that: transformers' `is_tracing()` is true while the stream captures, so its mask code
    takes the branches it takes under torch.compile (benchmarks/README.md, thirteenth session)."""
    call, put_back = kept_decode_call(ready, generate)
    times = []
    for _ in range(rounds):
        put_back()
        call()  # a replay like every other: the first after the put-back may not be
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(KEPT_REPEATS - 1):
            call()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / (KEPT_REPEATS - 1))
    return statistics.median(times)


_EXPLAIN_LINES = ("trident.jit", "specialization", "CUDA graph", "replay plan", "last miss", "eager", "runs eagerly",
                  "buffer pool", "disk cache")


def replay_phases(ready: Any, generate: Callable[[], Any], device: torch.device) -> dict[str, float]:
    """Host µs per replayed decode step by phase over one more generate after another (the recordings' own timers:
    benchmarks/llm/host_profile.py says what each phase is), and `generate_loop`: the generate's wall time per
    replay outside the replays (HF's Python between forwards, the entry's binding and guards, the prefill)."""
    from benchmarks.llm.host_profile import recordings, timed_phases

    generate()  # one untimed: a cache of a new generate that lands elsewhere records here, and is timed after
    recs = recordings(ready)
    for r in recs:
        r.time_replays(True)
    wall, _ = timed(generate, device)
    replays, phases = timed_phases(recordings(ready))
    for r in recs:
        r.time_replays(False)
    if replays == 0:
        return {"replays": 0}
    phases["generate_loop"] = wall * 1e6 / replays - phases["inside"]
    return {"replays": replays, **{k: round(v, 2) for k, v in phases.items()}}


def hand_graph_ms(args: argparse.Namespace, batch: int, device: torch.device) -> float:
    """ms per replay of one decode step captured by hand as a CUDA graph (positions 1 to 100 of a static cache,
    whose attention reads all of it): device time."""
    import transformers

    from benchmarks.llm.hand_graph import capture_by_hand

    model = build_model(args.model, device, args.liger)
    cache = transformers.StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
    inputs = {"input_ids": torch.ones(batch, 1, dtype=torch.long, device=device)}
    step = lambda: model(**inputs, past_key_values=cache, use_cache=True).logits  # noqa: E731
    with torch.no_grad():
        step()  # the cache's layers are made at their first update
        put_back = positions_kept(cache)  # before every round, so that no replay writes past the cache's end
        graph, _ = capture_by_hand(step)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.rounds):
            put_back()
            start = time.perf_counter()
            for _ in range(100):
                graph.replay()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - start) / 100 * 1e3)
    return statistics.median(times)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[float, Any]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


@contextlib.contextmanager
def stop_check(mode: str) -> Iterator[None]:
    """Inside: every system's generate uses the stop check `mode` names (module docstring). `deferred` answers
    transformers' DeferredStopCheck.is_supported for CUDA as for MPS, and as for a cache that is not returned: the
    systems that pass a StaticCache of their own (which transformers would not crop back) reset it before each
    generate, and min_new_tokens = max_new_tokens means no EOS stop, so no extra step ever runs."""
    from transformers.generation import utils

    from trident.knobs import override

    if mode == "sync":
        with override(hf_defer_stop=False):
            yield
        return
    if mode != "deferred":
        raise ValueError(f"--stop-check: sync or deferred, not {mode!r}")
    is_supported = utils.DeferredStopCheck.is_supported

    def deferred(device: torch.device, cache: Any, cache_is_returned: bool, is_assistant: bool) -> bool:
        device = torch.device("mps") if device.type == "cuda" else device
        return is_supported(device, cache, False, is_assistant)

    utils.DeferredStopCheck.is_supported = staticmethod(deferred)
    try:
        yield
    finally:
        utils.DeferredStopCheck.is_supported = staticmethod(is_supported)


def system_cell(args: argparse.Namespace, device: torch.device, ids: torch.Tensor, cell: dict[str, Any],
                reference: torch.Tensor | None) -> torch.Tensor | None:
    """Measures cell's system (cache, batch, stop check) into `cell`, with the tokens eager gave as `reference`
    (None while eager has not run); returns its last generate's tokens."""
    import trident

    system, cache = cell["system"], cell["cache"]
    model = build_model(args.model, device, args.liger)
    ready, run = generate_fn(system, cache, model)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught, stop_check(cell["stop_check"]):
        warnings.simplefilter("always")
        t_warm, tokens = timed(lambda: run(ids, args.tokens), device)
        run(ids, 1)  # a second generate may call with another structure (a prefill after reset())
        rounds = []
        for _ in range(args.rounds):
            t_n, tokens = timed(lambda: run(ids, args.tokens), device)
            t_1, _ = timed(lambda: run(ids, 1), device)
            rounds.append((t_n - t_1) / (args.tokens - 1) * 1e3)
        reference = tokens if system == "eager" else reference
        cell.update(status="ok", ms_per_token=statistics.median(rounds), rounds=rounds, first_generate_s=t_warm,
                    tokens_equal_eager=None if reference is None else bool(torch.equal(tokens, reference)),
                    trident_warnings=sorted({str(w.message)[:300] for w in caught
                                             if str(w.message).startswith("trident:")}))
        if system == "graphed_loop":
            cell["graphs_captured"] = len(ready.forward.graphs)
        if system.startswith("trident_jit"):  # where host time goes: specializations, graphs, plans
            cell["explain"] = [line for line in trident.explain(ready).splitlines()
                               if line.lstrip().startswith(_EXPLAIN_LINES)]
            if device.type == "cuda":
                generate = lambda: run(ids, args.tokens)  # noqa: E731
                cell["replay_phases_us"] = replay_phases(ready, generate, device)
                if cache == "static":
                    cell["graph_device_ms"] = graph_device_ms(ready, generate, args.rounds)
    return tokens


def measure(args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    cells = []
    for cache in args.cache.split(","):
        for batch in (int(b) for b in args.batch.split(",")):
            ids = torch.randint(1, 100, (batch, args.prompt), generator=torch.Generator().manual_seed(1)).to(device)
            wanted = [s for s in SYSTEMS if s in args.systems.split(",")]
            if cache != "static":  # these pass a StaticCache of their own
                wanted = [s for s in wanted if s not in OWN_CACHE]
            if device.type != "cuda":  # a CUDA graph of the step
                wanted = [s for s in wanted if s != "graphed_loop"]
            for stop in args.stop_check.split(","):
                reference = None
                for system in wanted:
                    cell: dict[str, Any] = {"model": args.model + ("+liger" if args.liger else ""), "cache": cache,
                                             "batch": batch, "stop_check": stop, "system": system}
                    try:
                        tokens = system_cell(args, device, ids, cell, reference)
                        reference = tokens if system == "eager" else reference
                    except Exception as e:  # noqa: BLE001 -- a system that fails is a result too
                        cell.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
                    cells.append(cell)
                    print(json.dumps({k: v for k, v in cell.items() if k != "explain"}), flush=True)
                    if device.type == "cuda":  # the system's model and graphs are gone with system_cell's frame
                        torch.cuda.empty_cache()
            if device.type == "cuda" and cache == "static" and "hand_graph" in args.systems.split(","):
                cell = {"model": args.model + ("+liger" if args.liger else ""), "cache": cache, "batch": batch,
                        "system": "hand_graph"}
                try:
                    cell.update(status="ok", ms_per_token=hand_graph_ms(args, batch, device))
                except Exception as e:  # noqa: BLE001
                    cell.update(status="error", error=f"{type(e).__name__}: {e}"[:2000])
                cells.append(cell)
                print(json.dumps(cell), flush=True)
    return cells


def panel(cell: dict[str, Any]) -> tuple[str, int, str]:
    """A cell's (cache, batch, stop check): systems compare within one. Results made before --stop-check existed
    ran generate's own loop (sync); the hand graph runs no generate (its panel's device line is its batch's)."""
    return cell["cache"], cell["batch"], cell.get("stop_check", "sync")


def device_cell(cells: list[dict[str, Any]], cache: str, batch: int) -> dict[str, Any] | None:
    """The hand graph's cell of a static cache's batch: the device time of a step."""
    return next((c for c in cells if (c["cache"], c["batch"]) == (cache, batch) and c["system"] == "hand_graph"
                 and c["status"] == "ok"), None)


def table(cells: list[dict[str, Any]]) -> str:
    lines = ["| cache | batch | stop check | system | ms/token | / eager | / hf_compiled | / hand_graph | "
             "tokens = eager | status |", "|---|---|---|---|---|---|---|---|---|---|"]
    for cell in cells:
        if cell["system"] == "hand_graph":
            same = [cell]
        else:
            same = [c for c in cells if c["system"] != "hand_graph" and panel(c) == panel(cell) and c["status"] == "ok"]
        base = {c["system"]: c["ms_per_token"] for c in same}
        graph = device_cell(cells, cell["cache"], cell["batch"])
        if graph:
            base["hand_graph"] = graph["ms_per_token"]
        ms = cell.get("ms_per_token")
        ratio = lambda b: f"{ms / base[b]:.2f}x" if ms and base.get(b) else "-"  # noqa: E731
        stop = "-" if cell["system"] == "hand_graph" else panel(cell)[2]
        head = f"| {cell['cache']} | {cell['batch']} | {stop} | {cell['system']} |"
        lines.append(f"{head} {ms:.2f} | {ratio('eager')} | {ratio('hf_compiled')} | {ratio('hand_graph')} | "
                     f"{cell.get('tokens_equal_eager')} | {cell['status']} |"
                     if ms is not None else f"{head} - | - | - | - | - | {cell.get('error', '')[:80]} |")
    return "\n".join(lines)


def breakdown(cells: list[dict[str, Any]]) -> str:
    """Where each static cell's time over the device goes, per new token: HF's loop around the forward (the floor,
    graphed_loop, minus the hand graph) and Trident's forward over the floor's (trident_jit minus graphed_loop),
    with the replay's own host phases beside it. A line per (cache, batch, stop check) that has all three cells."""
    lines = []
    for key in sorted({panel(c) for c in cells if c["system"] != "hand_graph"}, key=str):
        ok = {c["system"]: c for c in cells if c["system"] != "hand_graph" and panel(c) == key and c.get("ms_per_token")}
        graph = device_cell(cells, key[0], key[1])
        if not graph or not all(s in ok for s in ("trident_jit", "graphed_loop")):
            continue
        device, floor, ours = graph["ms_per_token"], ok["graphed_loop"]["ms_per_token"], ok["trident_jit"]["ms_per_token"]
        phases = ok["trident_jit"].get("replay_phases_us") or {}
        inside = f"; inside the replay {phases['inside']:.0f} us" if "inside" in phases else ""
        own = ok["trident_jit"].get("graph_device_ms")
        inside += f"; Trident's own graph back to back {own:.3f} ms on the GPU" if own else ""
        cache, batch, stop = key
        lines.append(f"{cache} cache, batch {batch}, {stop} stop check: trident.jit {ours:.3f} ms = device "
                     f"{device:.3f} + HF's loop {floor - device:+.3f} (the floor {floor:.3f}, {floor / device:.2f}x "
                     f"device) + Trident's forward over the floor's {ours - floor:+.3f}{inside}; "
                     f"{ours / device:.2f}x device, {ours / floor:.2f}x the floor")
    return "\n".join(lines)


def plot(cells: list[dict[str, Any]], info: dict[str, Any], path: Path) -> str:
    """A bar chart of ms per token, one panel per (cache, batch, stop check), the hand graph's device time as a line; the
    machine and versions in the title. Written only where matplotlib is importable."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "note: matplotlib is not importable; no plot written"
    panels = sorted({panel(c) for c in cells if c.get("ms_per_token") and c["system"] != "hand_graph"}, key=str)
    if not panels:
        return "note: no cells to plot"
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4.2), squeeze=False)
    for ax, (cache, batch, stop) in zip(axes[0], panels):
        same = {c["system"]: c for c in cells
                if c["system"] != "hand_graph" and panel(c) == (cache, batch, stop) and c.get("ms_per_token")}
        names = [s for s in SYSTEMS if s in same]
        bars = ax.bar(names, [same[s]["ms_per_token"] for s in names], color="#4c72b0")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
        graph = device_cell(cells, cache, batch)
        if graph:
            ax.axhline(graph["ms_per_token"], color="#c44e52", linestyle="--", label="device time (hand graph)")
            ax.legend(fontsize=7)
        ax.set_title(f"{cells[0]['model']}, {cache} cache, batch {batch}, {stop} stop", fontsize=9)
        ax.set_ylabel("ms / new token")
        ax.tick_params(axis="x", labelrotation=40, labelsize=7)
    versions = ", ".join(f"{k} {info.get(k)}" for k in ("torch", "triton", "transformers") if info.get(k))
    fig.suptitle(f"HF generate: {info.get('gpu') or info.get('cpu')}; {versions}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return f"plot: {path}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="llama-1b" if torch.cuda.is_available() else "tiny", choices=sorted(MODELS))
    p.add_argument("--batch", default="1")
    p.add_argument("--cache", default="static,dynamic")
    p.add_argument("--systems", default=",".join(SYSTEMS + ("hand_graph",)))
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--stop-check", default="sync,deferred", help="generate's stop check for every system: sync "
                   "(transformers' loop on CUDA), deferred (DeferredStopCheck), or both, comma-separated")
    p.add_argument("--liger", action="store_true", help="apply liger-kernel's Triton kernels to the model first")
    p.add_argument("--out", type=Path, help="the JSON; the plot goes next to it (.png)")
    p.add_argument("--plot-only", type=Path, nargs="+", metavar="JSON",
                   help="write the table and plot of result files made before, measuring nothing")
    args = p.parse_args(argv)
    if args.plot_only:
        for path in args.plot_only:
            data = json.loads(path.read_text())
            print(table(data["cells"]))
            print(breakdown(data["cells"]))
            print(plot(data["cells"], data["machine"], path.with_suffix(".png")))
        return 0
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    info = machine(device)
    print(json.dumps(info), flush=True)
    cells = measure(args, device)
    print(table(cells))
    print(breakdown(cells))
    if args.out:
        args.out.write_text(json.dumps({"machine": info, "argv": sys.argv[1:], "cells": cells}, indent=1))
        print(plot(cells, info, args.out.with_suffix(".png")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
