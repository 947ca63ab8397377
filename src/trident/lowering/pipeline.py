"""The order of Trident's compilation stages, in one place.

  capture (trace + guards) -> ir.fx_import (torch dialect) -> lower_guards + lower_host_program (+ replay_plan,
  where CUDA graphs are on) (func/arith/cf/llvm) -> lower_to_llvm (LLVM dialect) -> backend.engine (native code)

The result is an Artifact (trident/artifact.py): the code and its context slots, no runtime objects; the
driver instantiates it (runtime/specialization.py).

The knobs a compile reads are read once, when it starts (knobs.CompileOptions), and handed to the passes as
values: no pass reads the process-wide knobs.

Each stage's IR can be written to TRIDENT_DUMP_IR; a failing stage writes the IR it was given and says how
to replay it.
"""
from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

from torch_mlir import ir

from .. import exc
from ..artifact import Artifact, NoReplayPlan, ReplayPlan
from ..backend.engine import NativeModule
from ..capture.inputs import CallFacts, LeafKind, state_attribute_names
from ..capture.results import OutputTree
from ..capture.trace import Trace
from ..guards.guard_set import GuardSet
from ..ir.fx_import import MAIN, import_graph, new_context
from ..ir.mlir_text import ModuleBuilder
from ..knobs import CompileOptions
from .leaf_access import ConstantPool
from .lower_guards import lower_guards
from .lower_host_program import HostProgramLowering, OpTable, PlaceholderSource
from .lower_to_llvm import PIPELINE, lower_to_llvm
from .replay_plan import lower_replay_plan


log = logging.getLogger("trident")


def placeholder_sources(trace: Trace, facts: CallFacts) -> list[PlaceholderSource]:
    sources = []
    for leaf_index in trace.placeholder_leaves:
        leaf = facts.leaves[leaf_index]
        kind = {LeafKind.TENSOR: "tensor", LeafKind.FLOAT: "float"}.get(leaf.kind, "int")
        sources.append(PlaceholderSource(kind, leaf.path))
    sources += [PlaceholderSource("constant", constant_index=i) for i in range(len(trace.constants))]
    return sources


def compile_specialization(
    name: str, index: int, trace: Trace, facts: CallFacts, guards: GuardSet, runtime_library: str,
    options: CompileOptions | None = None,
) -> Artifact:
    """`options`: the knobs this compile reads, once, here (default: as they are now); the passes get them as
    values. The disk cache's key holds the same options' key() (cache/key.py)."""
    options = CompileOptions.current() if options is None else options
    dump_ir = options.dump_ir
    stages: dict[str, str] = {}
    context = new_context()
    guard_symbol, run_symbol = f"trident_guard_{index}", f"trident_run_{index}"

    def stage(stage_name: str, produce: Callable[[], object], given: Callable[[], str]) -> object:
        """`given`: the stage's input as text, made only when the stage fails (printing a large module costs
        as much as parsing it)."""
        try:
            result = produce()
        except exc.UnsupportedConstruct:
            raise
        except Exception as e:
            raise _stage_failure(name, index, stage_name, given(), e, dump_ir) from e
        return result

    torch_module, launches = stage(  # type: ignore[misc]
        "import", lambda: import_graph(trace.graph_module.graph, context), lambda: trace.graph_module.code
    )
    stages["torch"] = str(torch_module)
    _dump(name, index, "torch", stages["torch"], dump_ir)

    pool = ConstantPool(list(trace.constants))
    ops = OpTable()
    aten_calls: list[str] = []
    plan: list[ReplayPlan | NoReplayPlan] = [NoReplayPlan("TRIDENT_REPLAY_PLAN=0 or TRIDENT_CUDA_GRAPHS=0", by_knob=True)]
    builder = ModuleBuilder()

    value_modules = [
        stage("import", lambda p=p: import_graph(p.graph_module.graph, context)[0], lambda p=p: p.graph_module.code)
        for p in trace.value_programs
    ]
    value_symbols = [f"trident_value_{index}_{k}" for k in range(len(value_modules))]

    def lower() -> str:
        main = _find_main(torch_module)  # type: ignore[arg-type]
        input_paths = [leaf.path for leaf in facts.leaves]
        state = state_attribute_names(facts.sequences)
        sources = placeholder_sources(trace, facts)  # the same placeholders in the host program and value programs
        # The value programs guards run (a tensor's truth the function read): host programs of one tensor result.
        for symbol, module in zip(value_symbols, value_modules):
            HostProgramLowering(
                builder, symbol, _find_main(module), sources, OutputTree("graph"), input_paths, pool, ops,
                state=state,  # type: ignore[arg-type]
            ).run()
        lower_guards(builder, guard_symbol, guards, pool, value_symbols)
        host = HostProgramLowering(
            builder, run_symbol, main, sources, trace.outputs, input_paths, pool, ops,
            launches, pool_allocations=options.pool_allocations, private_views=options.private_views,
            state_writes=trace.state_writes, state=state,
        )
        host.run()
        aten_calls.extend(host.aten_calls)
        if not options.lowers_replay_plan:
            pass  # plan[0] says the knobs turned it off
        elif not replays_as_graph(facts):
            plan[0] = NoReplayPlan("no CUDA tensor among the arguments: never replayed as a CUDA graph")
        else:
            static = [_static_geometry(source, guards) for source in sources]
            try:
                plan[0] = lower_replay_plan(
                    builder, f"trident_replay_words_{index}", main, sources, trace.outputs, input_paths, pool, ops,
                    launches, options.pool_allocations, static, private_views=options.private_views,
                    state_writes=trace.state_writes, state=state,
                )  # fmt: skip
            except Exception as e:  # noqa: BLE001 - a bug of the optional plan must not cost the program its compile
                if options.strict:
                    raise  # tests: a bug is a failure (the module gains a function only when one is finished)
                plan[0] = NoReplayPlan(f"lowering it failed ({type(e).__name__}: {e}); replays run the host program")
                log.warning("trident: %s: no replay plan for specialization %d: %s", name, index, plan[0].reason)
        return builder.text()

    stages["lowered"] = stage("lower", lower, lambda: stages["torch"])  # type: ignore[assignment]
    _dump(name, index, "lowered", stages["lowered"], dump_ir)
    llvm_module = stage("llvm", lambda: lower_to_llvm(stages["lowered"], context), lambda: stages["lowered"])
    if dump_ir is not None:  # printed only to be written: it is the lowered text's size again
        stages["llvm"] = str(llvm_module)
        _dump(name, index, "llvm", stages["llvm"], dump_ir)

    def jit() -> Artifact:
        # keep_object: the disk cache (trident.cache) persists the generated object.
        native = NativeModule(llvm_module, [runtime_library], keep_object=options.disk_cache)  # type: ignore[arg-type]
        native.address(guard_symbol)  # generates the code now: a failure is this stage's
        writes = tuple(f"{w.path.name}.{w.name}" for w in trace.state_writes)
        return Artifact(native, guard_symbol, run_symbol, list(ops.ops), aten_calls, pool.objects, stages, plan[0],
                        writes)

    return stage("jit", jit, lambda: str(llvm_module))  # type: ignore[return-value]


def replays_as_graph(facts: CallFacts) -> bool:
    """Whether calls of this specialization may be recorded as CUDA graphs: only those with a CUDA tensor among their
    arguments are (graphs/recorder.py), so only their replay plans can ever run, and a plan adds ~8% to a
    decode step's compile time (tests/conftest.py's plans_on_cpu sets this aside to run words functions on CPU)."""
    return any(leaf.tensor is not None and leaf.tensor.device.type == "cuda" for leaf in facts.leaves)


def _static_geometry(source: PlaceholderSource, guards: GuardSet) -> bool:
    """Whether a block argument's sizes and strides are the same in every call the guards accept: a constant's
    always (its guards compare them with the captured ones); an input's when none is symbolic."""
    if source.kind == "constant":
        return True
    if source.kind != "tensor":
        return False
    geometry = ("size", "stride")
    if any(b.path == source.path and b.prop in geometry for b in guards.bindings):
        return False
    return all(p.expr.is_Integer for p in guards.properties if p.path == source.path and p.prop in geometry)


def _find_main(module: ir.Module) -> ir.Operation:
    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == MAIN:
            return op.operation
    raise exc.LoweringError("imported module has no @main")


def _dump(name: str, index: int, stage_name: str, text: str, dump_ir: Path | None) -> None:
    if dump_ir is None:
        return
    dump_ir.mkdir(parents=True, exist_ok=True)
    (dump_ir / f"{_file_name(name)}.{index}.{stage_name}.mlir").write_text(text)


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def _stage_failure(
    name: str, index: int, stage_name: str, given: str, error: Exception, dump_ir: Path | None
) -> exc.LoweringError:
    directory = dump_ir or Path(tempfile.mkdtemp(prefix="trident-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{_file_name(name)}.{index}.before-{stage_name}.mlir"
    path.write_text(given)
    replay = ""
    if stage_name == "llvm":
        opt = os.path.join(os.path.dirname(ir.__file__), "_mlir_libs", "torch-mlir-opt")
        replay = f"\n  replay: {opt} --pass-pipeline='{PIPELINE}' {path}"
    return exc.LoweringError(
        f"Trident failed to compile specialization {index} of '{name}' at stage '{stage_name}': "
        f"{type(error).__name__}: {error}\n  the IR given to that stage is in {path}{replay}\n"
        "  this is a bug in Trident; TRIDENT_DISABLE=1 runs the function eagerly meanwhile"
    )
