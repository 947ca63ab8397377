"""LLM decode benchmark: ms per token of a growing-position decode loop, every system in one process.

    python -m benchmarks.llm.run [--models llama,gpt2] [--batch 1,8] [--pos-kind int,tensor] [--ops kernels,library,aten]
                                 [--systems eager,compile,compile_cpp,compile_ro,compile_trident,cuda_graph,trident,
                                            trident_graphs] [--steps 128]
                                 [--budget-s S] [--out benchmarks/results/llm_decode.json]
    python -m benchmarks.llm.report A.json B.json --out C.json         # merge runs, print tables, plot
    python -m benchmarks.llm.run --device cpu --tiny --steps 3          # CPU smoke run (tiny fp32 models)
    # issue 20: the kernels reached through custom ops (library) beside direct launches (kernels); estimated ~4 min on an H200
    python -m benchmarks.llm.run --ops kernels,library --pos-kind tensor --systems eager,cuda_graph,trident,compile
                                 --steps 64 --rounds 3 --budget-s 280

Systems, on the same weights, KV caches, tokens and positions:
    eager       the model's Python step: Triton wrappers launch kernel[grid](...), ATen matmuls
    compile     torch.compile(step)
    compile_cpp torch.compile(step, options={"cpp_wrapper": True}): Inductor's C++ wrapper instead of Python's
    compile_trident  torch.compile(step, backend=trident.dynamo.backend): Dynamo in front, each graph a Trident
                SCM (the function that backend="trident" names where the package is installed; the device
                machine runs Trident from its source tree, without the entry point)
    compile_ro  torch.compile(step, mode="reduce-overhead"): CUDA graphs through cudagraph trees. Skips
                ("skipping cudagraphs due to ...") and re-recordings (one per new int position) are counted
                from torch's cudagraph log and shown in the notes column
    cuda_graph  one tensor-position step plus the position increment, captured by hand and replayed: the
                device-time floor (CUDA events). Run once per (model, batch) and filed under position 'tensor'
    trident     trident.jit(step)
    trident_graphs  trident.jit(step) with CUDA graph replay on (TRIDENT_CUDA_GRAPHS=1 for that function)
`--pos-kind int` passes the position as a Python int (CUDA graphs cannot follow it without re-capture);
`tensor` as a 1-element int32 device tensor (fair to CUDA graphs).
`--ops` picks the operation sets the model runs with (models.py), each a row of its own in the tables:
    kernels     the step launches its Triton kernels itself (kernel[grid] in kernels.py's wrappers); ATen matmuls
    library     the same kernels behind torch.library custom ops, and the matmuls through a custom-op Triton
                GEMV/GEMM (library.py, gemm.py): how kernel libraries expose them. Each system runs it as it runs
                any custom op (eager and torch.compile through the dispatcher; Trident traces into the bodies).
                The CUDA-graph floor is measured per op set (the Triton matmul is not cuBLAS)
    aten        kernels', but the residual add and GELU are `x + y` and F.gelu with ATen's kernels for them
                overridden by the same Triton kernels (torch.library.Library("aten", "IMPL"), aten_ops.py) during
                the op set's cells

Schedule: `--warmup` untimed steps at positions 0.. (compiles happen here; the first call is also timed
alone), then `--rounds` timed rounds of `--steps` steps continuing the positions, so each timed step is at a new
position and the KV history is the same for every system. ms/token is the median round. Logits are compared
with eager's at four positions (max |diff| / max |eager|); eager's with the pure-torch reference (reference.py).

Cells run system by system (eager of every (op set, model, batch, position kind) first, torch.compile last), so a run cut
short by `--budget-s` (no new cell starts after it) has the cheap systems everywhere. The JSON is rewritten
after every cell, with the running cell marked, so a killed run keeps what finished.

On CPU (--device cpu) Triton kernels run only through Triton's interpreter, which Trident uses inside its
compiled program; eager launches would need TRITON_INTERPRET=1 before Triton is imported, which hides the
launches from capture. So on CPU eager is the pure-torch reference, and the CUDA-only systems are skipped.
"""
from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import logging
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: make `benchmarks.llm` importable from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# The first call should be a cold compile: no compiled specializations loaded from Trident's disk cache
# (set TRIDENT_DISK_CACHE=1 to measure a warm start). Read when trident is first imported.
os.environ.setdefault("TRIDENT_DISK_CACHE", "0")

import contextlib

import torch
import torch._dynamo

import trident  # before the aten op set registers its kernels: capture knows them from import on
from benchmarks.llm import aten_ops
from benchmarks.llm.hand_graph import capture_by_hand
from benchmarks.llm.models import OP_SETS, Caches, Decoder, build_model
from benchmarks.llm.report import SYSTEMS, Results, finish, fmt
from benchmarks.machine_info import machine

ROOT = Path(__file__).resolve().parents[2]
RUN_ORDER = ("eager", "cuda_graph", "trident", "trident_graphs", "compile_trident", "compile", "compile_cpp",
             "compile_ro")  # cheapest compile first
CUDA_ONLY = {"compile", "compile_cpp", "compile_ro", "compile_trident", "cuda_graph"}
Checks = dict[int, torch.Tensor]  # logits at the check positions


@dataclasses.dataclass(frozen=True)
class Schedule:
    warmup: int
    steps: int
    rounds: int

    @property
    def total(self) -> int:
        return self.warmup + self.steps * self.rounds

    @property
    def max_seq(self) -> int:
        return -(-self.total // 64) * 64  # whole attention blocks

    @property
    def check_positions(self) -> list[int]:
        """The last warm-up step, the first, middle and last timed step."""
        return sorted({self.warmup - 1, self.warmup, self.warmup + self.steps * self.rounds // 2, self.total - 1})


@dataclasses.dataclass
class Workload:
    """One (model, batch, position kind): the caches and inputs that every system runs on."""

    model: Decoder
    batch: int
    pos_kind: str
    schedule: Schedule
    caches: Caches
    tokens: list[torch.Tensor]  # [batch] int64 per step, separate tensors (no per-step slicing)
    positions: list[Any]  # per step: an int, or a [1] int32 device tensor
    op_set: str = "kernels"
    # Shared by the op sets' copies of one workload (dataclasses.replace keeps the dict): the reference's logits.
    memo: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def make(cls, model: Decoder, batch: int, pos_kind: str, schedule: Schedule, seed: int = 1) -> Workload:
        generator = torch.Generator(device=model.device).manual_seed(seed)
        tokens = [torch.randint(0, model.vocab, (batch,), generator=generator, device=model.device)
                  for _ in range(schedule.total)]
        positions: list[Any] = list(range(schedule.total))
        if pos_kind == "tensor":
            positions = [torch.tensor([p], dtype=torch.int32, device=model.device) for p in positions]
        return cls(model, batch, pos_kind, schedule, model.new_caches(batch), tokens, positions)

    @property
    def device(self) -> torch.device:
        return self.model.device

    def step(self) -> Callable[[torch.Tensor, Any, Caches], torch.Tensor]:
        return self.model.step_for(self.op_set, self.pos_kind)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def zero_caches(caches: Caches) -> None:
    for k, v in caches:
        k.zero_()
        v.zero_()


# ---------------------------------------------------------------------------------------------------------
# Driving a step function over the schedule


def drive(step: Callable[..., torch.Tensor], work: Workload) -> tuple[dict[str, Any], Checks]:
    """Warm-up steps (the first call also timed alone), then the timed rounds; logits cloned at the checks."""
    s, device, caches = work.schedule, work.device, work.caches
    zero_caches(caches)
    wanted, checks = set(s.check_positions), {}
    synchronize(device)
    start = time.perf_counter()
    first_s = 0.0
    for i in range(s.warmup):
        logits = step(work.tokens[i], work.positions[i], caches)
        if i == 0:
            synchronize(device)
            first_s = time.perf_counter() - start
        if i in wanted:
            checks[i] = logits.clone()
    synchronize(device)
    warmup_s = time.perf_counter() - start
    round_ms = []
    for r in range(s.rounds):
        begin = s.warmup + r * s.steps
        synchronize(device)
        t0 = time.perf_counter()
        for i in range(begin, begin + s.steps):
            logits = step(work.tokens[i], work.positions[i], caches)
            if i in wanted:
                checks[i] = logits.clone()
        synchronize(device)
        round_ms.append((time.perf_counter() - t0) / s.steps * 1e3)
    return {"ms_per_token": statistics.median(round_ms), "round_ms_per_token": round_ms,
            "first_call_s": first_s, "warmup_s": warmup_s}, checks


def compare_logits(actual: Checks, expected: Checks, tolerance: float) -> dict[str, Any]:
    """max |a - e| / max |e| over the shared check positions, and how often the argmax agrees."""
    positions = sorted(set(actual) & set(expected))
    worst_rel = worst_abs = 0.0
    argmax_same = rows = 0
    finite = True
    for p in positions:
        a, e = actual[p].float().cpu(), expected[p].float().cpu()
        finite &= bool(torch.isfinite(a).all())
        diff = (a - e).abs().max().item()
        worst_abs = max(worst_abs, diff)
        worst_rel = max(worst_rel, diff / max(e.abs().max().item(), 1e-6))
        argmax_same += int((a.argmax(-1) == e.argmax(-1)).sum())
        rows += a.shape[0]
    return {"ok": bool(positions) and finite and worst_rel <= tolerance, "positions": positions,
            "max_abs_diff": worst_abs, "max_rel_diff": worst_rel,
            "argmax_agreement": argmax_same / rows if rows else None, "tolerance": tolerance}


def reference_checks(work: Workload) -> Checks:
    """The pure-torch reference (reference.py) over the whole schedule, on caches of its own; computed once for
    the op sets sharing the workload."""
    if "reference" in work.memo:
        return work.memo["reference"]
    caches = work.model.new_caches(work.batch)
    wanted, checks = set(work.schedule.check_positions), {}
    for i in range(work.schedule.total):
        logits = work.model.reference_step(work.tokens[i], work.positions[i], caches)
        if i in wanted:
            checks[i] = logits
    work.memo["reference"] = checks
    return checks


# ---------------------------------------------------------------------------------------------------------
# Systems: each returns (measurements, check logits)


def reference_tolerance(work: Workload) -> float:
    """How far eager itself may be from the pure-torch reference: bf16 rounds differently inside the kernels."""
    return 5e-2 if work.model.dtype == torch.bfloat16 else 1e-4


def run_eager(work: Workload) -> tuple[dict[str, Any], Checks]:
    if work.device.type == "cpu":
        result, checks = drive(work.model.reference_step, work)
        return {**result, "impl": "pure-torch reference (CPU: Triton kernels need the interpreter)"}, checks
    result, checks = drive(work.step(), work)
    result["reference_check"] = compare_logits(checks, reference_checks(work), reference_tolerance(work))
    result["first_call_note"] = "includes Triton's JIT compile of the kernels unless in Triton's disk cache"
    return result, checks


class TorchLog(logging.Handler):
    """Collects what torch logs about recompiles and CUDA graphs (cudagraph trees' re-recordings, skips) while
    installed; the loggers stop propagating meanwhile, so nothing reaches stderr."""

    ARTIFACTS = ("__recompiles", "__cudagraphs", "__perf_hints")

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.recordings = 0

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if "Recording cudagraph tree" in text:
            self.recordings += 1
        elif len(self.lines) < 30:
            self.lines.append(text[:400])

    def __enter__(self) -> TorchLog:
        import torch._dynamo  # noqa: F401 - registers the loggers
        import torch._inductor.cudagraph_trees  # noqa: F401

        names = [n for n in logging.root.manager.loggerDict if n.startswith("torch") and n.endswith(self.ARTIFACTS)]
        self.saved = [(logger, logger.level, logger.propagate) for logger in map(logging.getLogger, names)]
        for logger, _, _ in self.saved:
            logger.addHandler(self)
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
        return self

    def __exit__(self, *exc: object) -> None:
        for logger, level, propagate in self.saved:
            logger.removeHandler(self)
            logger.setLevel(level)
            logger.propagate = propagate


def mark_static(work: Workload) -> None:
    """Weights and caches keep their addresses across calls: telling Dynamo so keeps cudagraph trees from
    copying them into graph-owned buffers every replay (the model is no nn.Module, so nothing else says it)."""
    objects = (work.model, *work.model.layers)  # type: ignore[attr-defined]
    tensors = [t for obj in objects for t in vars(obj).values() if isinstance(t, torch.Tensor)]
    for t in tensors + [t for pair in work.caches for t in pair]:
        torch._dynamo.mark_static_address(t)


def run_compile(work: Workload, mode: str | None, backend: str | Callable[..., Any] = "inductor",
                options: dict[str, Any] | None = None) -> tuple[dict[str, Any], Checks]:  # fmt: skip
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    mark_static(work)
    before = {group: dict(counters[group]) for group in ("stats", "inductor")}
    with TorchLog() as log:
        result, checks = drive(torch.compile(work.step(), mode=mode, backend=backend, options=options), work)
    delta = {f"{group}.{k}": v - before[group].get(k, 0) for group in before for k, v in counters[group].items()
             if v != before[group].get(k, 0)}
    result.update(mode=mode or "default", backend=getattr(backend, "__module__", backend), options=options or {}, torch_counters=delta, torch_log=log.lines,
                  graphs_compiled=delta.get("stats.unique_graphs", 0),
                  cudagraph_skips=delta.get("inductor.cudagraph_skips", 0), cudagraph_recordings=log.recordings)
    notes = [f"{result['graphs_compiled']} graph(s)"]
    if mode == "reduce-overhead":
        notes.append(f"{log.recordings} cudagraph recording(s)")
        skip = next((line for line in log.lines if "skipping cudagraphs" in line), None)
        if result["cudagraph_skips"] or skip:
            notes.append(f"FELL BACK: {skip or 'cudagraphs skipped'}")
    result["notes"] = ", ".join(notes)
    return result, checks


def run_cuda_graph(work: Workload) -> tuple[dict[str, Any], Checks]:
    """Capture one tensor-position step plus `pos += 1`; replay. A check pass over the whole schedule (tokens
    copied in before each replay) gives the logits; the timed rounds then replay alone from position warmup."""
    s, step = work.schedule, work.model.step_for(work.op_set, "tensor")
    tokens = work.tokens[0].clone()
    pos = torch.zeros(1, dtype=torch.int32, device=work.device)

    def one_step() -> torch.Tensor:
        logits = step(tokens, pos, work.caches)
        pos.add_(1)
        return logits

    start = time.perf_counter()
    graph, logits = capture_by_hand(one_step)  # the warm-up's cache writes and positions are reset below
    torch.cuda.synchronize()
    capture_s = time.perf_counter() - start

    zero_caches(work.caches)
    pos.zero_()
    wanted, checks = set(s.check_positions), {}
    for i in range(s.total):
        tokens.copy_(work.tokens[i])
        graph.replay()
        if i in wanted:
            checks[i] = logits.clone()

    pos.fill_(s.warmup)
    round_ms, device_ms = [], []
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(s.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        begin.record()
        for _ in range(s.steps):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        round_ms.append((time.perf_counter() - t0) / s.steps * 1e3)
        device_ms.append(begin.elapsed_time(end) / s.steps)
    return {"ms_per_token": statistics.median(round_ms), "round_ms_per_token": round_ms,
            "device_ms_per_token": statistics.median(device_ms), "round_device_ms_per_token": device_ms,
            "first_call_s": capture_s, "notes": "warm-up (2 steps) + capture in 1st call"}, checks


def _pool_stats(pool: object) -> dict[str, int]:
    """A specialization's buffer pool counters (csrc/buffer_pool.cpp), when it has one."""
    if pool is None:
        return {}
    return {"pool_sites": pool.sites, "pool_reuses": pool.reuses, "pool_allocations": pool.allocations,  # type: ignore[attr-defined]
            "planned_matmuls": pool.planned_matmuls, "direct_matmuls": pool.direct_matmuls,  # type: ignore[attr-defined]
            "matmul_plan_refusals": sorted({why for why in pool.matmul_plans.values() if why})}  # type: ignore[attr-defined]


def run_trident(work: Workload, graphs: bool = False) -> tuple[dict[str, Any], Checks]:
    """trident.jit on the step; with `graphs`, CUDA graph replay on (TRIDENT_CUDA_GRAPHS=1 for this function)."""
    from trident.testing import count_compiles

    step = trident.jit(work.step())
    step._trident.use_cuda_graphs(graphs)  # type: ignore[attr-defined]
    with count_compiles() as compiles:
        result, checks = drive(step, work)
    state = step._trident  # type: ignore[attr-defined]
    specs = [{"compile_s": s.compile_seconds, "aten_calls": len(s.compiled.aten_calls),
              "launches": len(s.compiled.launch_sites), **_pool_stats(s.compiled.buffer_pool),
              "traced_into": dict(s.trace.see_through.traced), "opaque": dict(s.trace.see_through.opaque)}
             for s in state.specializations]
    result.update(compiles=compiles(), specializations=specs, misses=state.misses, eager_calls=state.eager_calls,
                  eager_reason=state.eager_reason, last_miss_reason=state.last_miss_reason,
                  explain=trident.explain(step))
    result["notes"] = f"{compiles()} compile(s)" + (f", {state.eager_calls} EAGER call(s)" if state.eager_calls else "")
    opaque = sorted({op for spec in specs for op in spec["opaque"]})
    if work.op_set != "kernels":  # the launches are native only where capture saw through the ops
        traced = sorted({op for spec in specs for op in spec["traced_into"]})
        result["notes"] += f", {len(traced)} op(s) traced into"
    if opaque:
        result["notes"] += f", OPAQUE: {', '.join(opaque)}"
    if graphs:
        graphs = [state.entry.graphs(s.index) for s in state.specializations]
        fields = ("replays", "misses", "pauses", "recordings_tried", "paused_until_hit", "record_after_hit",
                  "never_record", "refusal")  # fmt: skip
        result["graphs"] = [{**{f: getattr(g, f) for f in fields}, "hits": hits,
                             "recordings": [r.counts for r in g.recordings]}
                            for g, hits in zip(graphs, state.entry.hits()) if g is not None]  # fmt: skip
        result["notes"] += f", {sum(g.replays for g in graphs if g is not None)} graph replay(s)"
    return result, checks


RUNNERS: dict[str, Callable[[Workload], tuple[dict[str, Any], Checks]]] = {
    "eager": run_eager,
    "compile": lambda work: run_compile(work, None),
    "compile_ro": lambda work: run_compile(work, "reduce-overhead"),
    "compile_cpp": lambda work: run_compile(work, None, options={"cpp_wrapper": True}),
    "compile_trident": lambda work: run_compile(work, None, backend=trident.dynamo.backend),
    "cuda_graph": run_cuda_graph,
    "trident": run_trident,
    "trident_graphs": lambda work: run_trident(work, graphs=True),
}


def op_set_context(work: Workload) -> contextlib.AbstractContextManager[Any]:
    """What the op set needs around every system's run: the aten op set's kernel overrides, and on CPU Triton's
    interpreter for the launches they make eagerly (the reference's adds on CPU reach them too)."""
    stack = contextlib.ExitStack()
    if work.op_set == "aten":
        if work.device.type == "cpu":
            from trident.capture.triton_launches import interpret_cpu_launches

            stack.enter_context(interpret_cpu_launches())
        stack.enter_context(aten_ops.overrides(work.device))
    return stack


def run_system(work: Workload, system: str, expected: Checks | None,
               tolerance: float) -> tuple[dict[str, Any], Checks | None]:
    """One system on one workload, never raising: errors are recorded. Logits are checked against eager's (or,
    when eager did not run, the reference's)."""
    if system in CUDA_ONLY and work.device.type != "cuda":
        return {"status": "skipped", "reason": "needs CUDA"}, None
    started = time.perf_counter()
    try:
        with torch.no_grad(), op_set_context(work):
            result, checks = RUNNERS[system](work)
            if system != "eager":
                if expected is not None:
                    result["check"] = dict(compare_logits(checks, expected, tolerance), against="eager")
                else:  # eager did not run: held to eager's own bound against the reference
                    result["check"] = dict(compare_logits(checks, reference_checks(work), reference_tolerance(work)),
                                           against="reference")
        result["status"] = "ok"
    except Exception as e:  # noqa: BLE001 - one failing system must not lose the others
        result, checks = {"status": "error", "error": f"{type(e).__name__}: {e}"[:4000],
                          "traceback": traceback.format_exc()[-4000:]}, None
    result["cell_s"] = time.perf_counter() - started
    torch._dynamo.reset()
    gc.collect()
    if work.device.type == "cuda":
        torch.cuda.empty_cache()
    return result, checks


# ---------------------------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="llama,gpt2")
    p.add_argument("--batch", default="1,8")
    p.add_argument("--pos-kind", default="int,tensor", help="int, tensor, or int,tensor")
    p.add_argument("--ops", default="kernels", help="operation sets, of kernels, library, aten (e.g. kernels,library)")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--steps", type=int, default=128, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds (ms/token is the median round)")
    p.add_argument("--warmup", type=int, default=8, help="untimed steps first (compiles happen here); >= 3")
    p.add_argument("--budget-s", type=float, default=None, help="start no cell after this many seconds")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tiny", action="store_true", help="tiny configs (2 layers, hidden 64): smoke runs")
    p.add_argument("--dtype", choices=("bf16", "fp32"), default=None, help="default: bf16 on cuda, fp32 on cpu")
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "llm_decode.json")
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)
    for name, allowed in (("models", ("llama", "gpt2")), ("pos_kind", ("int", "tensor")), ("systems", SYSTEMS),
                          ("ops", OP_SETS)):
        values = [v for v in getattr(args, name).split(",") if v]
        bad = [v for v in values if v not in allowed]
        if bad:
            p.error(f"--{name.replace('_', '-')}: unknown {bad}; choose from {list(allowed)}")
        setattr(args, name, values)
    args.batch = [int(b) for b in args.batch.split(",") if b]
    if args.warmup < 3:
        p.error("--warmup must be >= 3 (an int position becomes dynamic on the second call)")
    return args


def plan_cells(args: argparse.Namespace) -> list[tuple[str, str, str, int, str]]:
    """(system, op set, model, batch, position kind) in run order: each system on every workload before the
    next system, cheapest first; the CUDA graph once per (op set, model, batch), on the tensor position."""
    cells = []
    for system in sorted(args.systems, key=RUN_ORDER.index):
        kinds = ["tensor"] if system == "cuda_graph" else args.pos_kind
        cells += [(system, ops, model, batch, kind) for ops in args.ops for model in args.models
                  for batch in args.batch for kind in kinds]
    return cells


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}.get(args.dtype) or (
        torch.bfloat16 if device.type == "cuda" else torch.float32)
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    schedule = Schedule(args.warmup, args.steps, args.rounds)
    start = time.monotonic()
    run_info = {"argv": sys.argv[1:] if argv is None else argv, "machine": machine(device),
                "schedule": dataclasses.asdict(schedule), "dtype": str(dtype),
                "env": {k: v for k, v in os.environ.items() if k.startswith(("TRIDENT_", "TORCHINDUCTOR_", "TRITON_"))}}
    results = Results(args.out, [run_info])
    print(f"machine: {json.dumps(run_info['machine'])}")
    print(f"schedule: warm-up {schedule.warmup}, {schedule.rounds} x {schedule.steps} timed steps, "
          f"max_seq {schedule.max_seq}; results: {args.out}", flush=True)

    models: dict[str, Decoder | str] = {}  # built up front (both fit easily), or why not
    for name in args.models:
        try:
            models[name] = build_model(name, device, dtype, tiny=args.tiny, max_seq=schedule.max_seq)
        except Exception as e:  # noqa: BLE001
            models[name] = f"model not built: {type(e).__name__}: {e}"
    workloads: dict[tuple[str, int, str], Workload] = {}  # one per (model, batch, position kind), all op sets
    expected: dict[tuple[str, str, int, str], Checks] = {}  # eager's logits per (op set, workload)
    for system, ops, name, batch, kind in plan_cells(args):
        record = {"model": name, "tiny": args.tiny, "device": device.type, "dtype": str(dtype), "batch": batch,
                  "pos_kind": kind, "ops": ops, "system": system, "run": 0, **dataclasses.asdict(schedule)}
        model = models[name]
        if isinstance(model, str):
            results.put(dict(record, status="error", error=model))
            continue
        if args.budget_s is not None and time.monotonic() - start > args.budget_s:
            results.put(dict(record, status="skipped", reason=f"--budget-s {args.budget_s:.0f} spent"))
            continue
        results.put(dict(record, status="running"))
        print(f"{name} ({ops}) batch {batch} pos {kind}: {system} ...", flush=True)
        key = (name, batch, kind)
        if key not in workloads:
            workloads[key] = Workload.make(model, batch, kind, schedule)
        work = dataclasses.replace(workloads[key], op_set=ops)  # same caches, inputs and reference logits
        result, checks = run_system(work, system, expected.get((ops, *key)), tolerance)
        if system == "eager" and checks is not None:
            expected[(ops, *key)] = checks
        results.put(dict(record, **result))
        check = result.get("check") or result.get("reference_check")
        print(f"  {result['status']}: {fmt(result.get('ms_per_token'), '.3f')} ms/token, first call "
              f"{fmt(result.get('first_call_s'), '.2f')} s, {result.get('notes', '')}"
              + (f" check {'ok' if check['ok'] else 'FAIL'}" if check else "")
              + (f"\n  {result['error'][:600]}" if "error" in result else ""), flush=True)
    finish(results, args.no_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
