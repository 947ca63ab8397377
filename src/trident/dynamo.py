"""`torch.compile(fn, backend="trident")`: each graph Dynamo captures becomes one Trident SCM.

Dynamo does what `trident.jit` refuses: it splits a function at graph breaks (`.item()`-driven branches,
prints, unsupported Python), runs those pieces in Python, and hands each straight-line piece to a backend as an
FX GraphModule with example inputs. This backend wraps the GraphModule's `forward` in a JitFunction
(driver.py), so a graph is compiled exactly as a jitted function is: Trident captures it again with make_fx over
its own fake tensors, so the ATen calls of the graph and its user Triton kernels (Dynamo's
`triton_kernel_wrapper_mutation` nodes, which make_fx records as `wrap_triton` launches are recorded) go through
Trident's own capture, guards, lowering and runtime. What the backend returns is the native entry: Dynamo's
guards pass, then the entry's guards pick a specialization, with no Python frame of Trident's between them.

Dynamo's contract holds because the graph is run as written: the entry returns what `forward` returns (the
same tuple of outputs, tensors aliasing inputs where the graph's outputs do), and the graph's in-place ops on
its inputs are captured and replayed in order. A graph Trident cannot capture or compile runs eagerly (the
GraphModule itself) with one warning; strict mode raises instead. Unlike a jitted function, whose failure is
remembered per guard set (a new size tries again), the whole graph is decided at its first failure: what Trident
cannot compile in a graph is its code, which Dynamo has already fixed, not the sizes, so each new length of a
growing cache would only capture, fail and warn again. The decision also outlives the graph: a Dynamo recompile
that hands over the same code (same placeholders, same options) runs eagerly at once, without a warning.

Dynamic shapes: what Dynamo made symbolic (SymInt / SymFloat inputs, symbolic sizes and storage offsets of its
placeholders' fake values) starts symbolic in Trident too, instead of being a constant until it changes; the rest
follows Trident's automatic dynamic. Warm start (the disk cache) is off for graphs: a record stored for one never
fit in another process (NOT_OPTIONS says so), so each process compiles its graphs.

Options (`torch.compile(..., options={...})`) are Trident's knobs (knobs.py) by field name, applied while a graph
of that torch.compile misses (captures, compiles, or runs eagerly): knobs are read on the miss path only, never
on a hit. The knobs are process-wide, so a jitted function of another thread compiling at that moment sees them
too; misses of graphs are serialized with one lock for that reason.
"""
from __future__ import annotations

import contextlib
import functools
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from . import exc
from .knobs import DECLARED, knobs, override

if TYPE_CHECKING:
    from .driver import JitFunction

__all__ = ["NOT_OPTIONS", "OPTIONS", "backend", "compiled_graphs", "dynamic_from_graph", "knob_overrides"]


# -- options ---------------------------------------------------------------------------------------------------
# Knob name -> what checks and converts an option's value (knobs.Knob.value). `disable` returns the GraphModule
# itself (eager), as TRIDENT_DISABLE does for trident.jit. The knobs that are not options say why in NOT_OPTIONS.
OPTIONS: dict[str, Callable[[object], object]] = {
    name: declared.value for name, declared in DECLARED.items() if not declared.not_an_option
}
NOT_OPTIONS: dict[str, str] = {
    name: declared.not_an_option for name, declared in DECLARED.items() if declared.not_an_option
}
# What every graph's misses run under, whatever the options.
_GRAPH_KNOBS: dict[str, object] = {"disk_cache": False}


def knob_overrides(options: Mapping[str, object] | None) -> dict[str, object]:
    """The knob values `options` set, checked; raises InvalidOption naming an unknown option or a wrong value."""
    changes: dict[str, object] = {}
    for name, value in (options or {}).items():
        convert = OPTIONS.get(name)
        if name in NOT_OPTIONS:
            raise exc.InvalidOption(f"trident: {name!r} is not an option of backend='trident': {NOT_OPTIONS[name]}")
        if convert is None:
            raise exc.InvalidOption(
                f"trident: unknown option {name!r} in torch.compile(..., backend='trident', options=...); valid "
                f"options (Trident's knobs, README 'Knobs'): {', '.join(sorted(OPTIONS))}"
            )
        try:
            changes[name] = convert(value)
        except TypeError as e:
            raise exc.InvalidOption(
                f"trident: option {name!r} must be {e}, got {type(value).__name__} {value!r}"
            ) from None
    return changes


# -- the graphs ------------------------------------------------------------------------------------------------
_graphs: list[weakref.ref[JitFunction]] = []
_graphs_lock = threading.Lock()
# Graphs Trident could not compile, by _graph_key -> the reason (module docstring). Process-wide, as Dynamo's own
# caches of code are: a recompile of the same frame hands over a new GraphModule with the same code.
_uncompilable: dict[tuple[object, ...], str] = {}
_options_lock = threading.RLock()  # misses of graphs with options: knobs are process-wide


def compiled_graphs() -> list[JitFunction]:
    """The JitFunctions this backend made for Dynamo's graphs that are still alive, oldest first. Each one's
    `entry` is what Dynamo calls; `trident.explain(graph.entry)` explains it, as for a jitted function."""
    with _graphs_lock:
        alive = [g for g in (ref() for ref in _graphs) if g is not None]
        _graphs[:] = [weakref.ref(g) for g in alive]
    return alive


def backend(gm: torch.fx.GraphModule, example_inputs: Sequence[object], *, mode: str | None = None,
            options: Mapping[str, object] | None = None) -> Callable[..., Any]:  # fmt: skip
    """Dynamo's backend: the native entry of a JitFunction over `gm.forward` (module docstring). `mode` is
    torch.compile's `mode`, which Trident has none of; `options` are Trident's knobs by name (OPTIONS)."""
    if mode is not None and mode != "default":
        raise exc.InvalidOption(
            f"trident: torch.compile(..., backend='trident') takes no mode (got mode={mode!r}): Trident has one way "
            "to compile; its knobs go in options={...}"
        )
    changes = knob_overrides(options)
    if changes.pop("disable", knobs.disable):
        return gm.forward  # eager: the graph as Dynamo made it
    from torch.fx._lazy_graph_module import _LazyGraphModule

    # A lazy GraphModule's forward is a (*args, **kwargs) stub until its code is generated; Trident binds calls
    # by forward's real parameters (the graph's placeholders).
    _LazyGraphModule.force_recompile(gm)
    cuda_graphs = changes.pop("cuda_graphs", None)  # set on the graph's entry, not read on its misses
    graph = _make_graph_function(gm, changes)
    graph.key = _graph_key(gm, changes)
    with _graphs_lock:
        graph.eager_graph = _uncompilable.get(graph.key)
    if cuda_graphs is not None:
        graph.use_cuda_graphs(cuda_graphs)
    with _graphs_lock:
        _graphs.append(weakref.ref(graph))
    return graph.entry  # type: ignore[no-any-return]


def _make_graph_function(gm: torch.fx.GraphModule, changes: dict[str, object]) -> JitFunction:
    graph = _graph_function_class()(gm.forward, name=_graph_name(gm))
    graph.knob_changes = {**_GRAPH_KNOBS, **changes}
    graph.dynamism = dynamic_from_graph(gm)
    return graph


@functools.cache
def _graph_function_class() -> type[JitFunction]:
    """GraphFunction, made at the first graph: the driver imports the compiler, which `import trident.dynamo`
    (torch's entry point, trident.dynamo.backend) must not pay for."""
    from .driver import JitFunction
    from .eager import call_eagerly
    from .fallback import report_fallback

    class GraphFunction(JitFunction):
        """A Dynamo graph's JitFunction: its misses run under its torch.compile options, and the first capture
        or compile that fails decides the whole graph (module docstring)."""

        knob_changes: dict[str, object] = {}
        key: tuple[object, ...] = ()
        eager_graph: str | None = None  # why every miss runs eagerly, once decided

        def on_miss(self, *args: object, **kwargs: object) -> object:
            if self.eager_graph is not None:
                # Decided: no capture, no warning (the failure warned once). Still reported: strict mode raises.
                self.misses += 1
                self.eager_calls += 1
                report_fallback(self.name, self.eager_graph)
                return call_eagerly(self.fn, args, kwargs)
            failed_before = len(self.fallbacks)
            try:
                with _knobs_set(self.knob_changes):
                    return super().on_miss(*args, **kwargs)
            finally:
                # A guard set remembered as eager is a capture or compile that failed (the driver warned and ran
                # it eagerly, or raised in strict mode). Requires-grad and int64 calls run eagerly without one.
                if len(self.fallbacks) > failed_before and self.eager_graph is None:
                    self.eager_graph = self.eager_reason or "not compiled"
                    with _graphs_lock:
                        _uncompilable.setdefault(self.key, self.eager_graph)

        def explain(self) -> str:
            text = super().explain()
            if self.eager_graph is None:
                return text
            return f"{text}\nevery miss of this graph runs eagerly, without capturing again: {self.eager_graph}"

    return GraphFunction


@contextlib.contextmanager
def _knobs_set(changes: dict[str, object]) -> Iterator[None]:
    with _options_lock, override(**changes):
        yield


def dynamic_from_graph(gm: torch.fx.GraphModule):  # noqa: ANN201 -- capture.trace.Dynamism
    """What Dynamo made symbolic, as Trident's Dynamism of forward's parameters (the placeholders, in order): read
    from each placeholder's fake example value (the example inputs Dynamo passes are the call's real tensors):
    SymInt and SymFloat inputs, tensor sizes and storage offsets that are not constants. A size Dynamo wrote as an
    expression of another (`s0 + 1`) gets its own symbol here: Trident derives relations from its own trace.
    Strides are left to Trident: a contiguous tensor's strides follow its sizes, and independent stride symbols
    would only cost guards."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    from .capture.trace import Dynamism

    sizes, ints, floats, offsets = set(), set(), set(), set()
    for i, node in enumerate(gm.graph.find_nodes(op="placeholder")):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.SymInt) and not is_concrete_int(value):
            ints.add((i, ()))
        elif isinstance(value, torch.SymFloat) and not value.node.is_constant():
            floats.add((i, ()))
        elif isinstance(value, torch.Tensor):
            sizes.update((i, (), d) for d, s in enumerate(value.shape) if not is_concrete_int(s))
            if not is_concrete_int(value.storage_offset()):
                offsets.add((i, ()))
    return Dynamism(sizes=frozenset(sizes), ints=frozenset(ints), floats=frozenset(floats), offsets=frozenset(offsets))


def _graph_key(gm: torch.fx.GraphModule, changes: Mapping[str, object]) -> tuple[object, ...]:
    """What decides whether Trident compiles a graph: its code, what each placeholder holds (kind, dtype, device,
    sizes, concrete or by symbol name, which Dynamo derives from the source and so keeps across recompiles) and
    the options its misses run under."""
    placeholders = []
    for node in gm.graph.find_nodes(op="placeholder"):
        value = node.meta.get("example_value", node.meta.get("val"))
        if isinstance(value, torch.Tensor):
            placeholders.append((value.dtype, str(value.device), tuple(map(str, value.shape)), value.requires_grad))
        else:
            placeholders.append(type(value).__name__)
    return gm.code, tuple(placeholders), tuple(sorted((k, repr(v)) for k, v in changes.items()))


_FRAME = re.compile(r'File "[^"]*", line \d+, in (\S+)')


def _graph_name(gm: torch.fx.GraphModule) -> str:
    """`fn (torch.compile graph 0/1)`: the frame Dynamo compiled and its compile id. The frame is the outermost
    one of the nodes' stack traces (after a break, Dynamo's `torch_dynamo_resume_in_fn_at_<line>`), or for a
    module whose nodes carry none, `Class.forward` of the outermost module they were called in."""
    compile_id = gm.meta.get("dynamo_compile_id")
    what = f"torch.compile graph {compile_id}" if compile_id is not None else "torch.compile graph"
    for node in gm.graph.nodes:
        match = _FRAME.search(node.meta.get("stack_trace") or "")
        if match:
            return f"{match.group(1)} ({what})"
    for node in gm.graph.nodes:
        modules = node.meta.get("nn_module_stack")
        if modules:
            _, cls = next(iter(modules.values()))
            return f"{getattr(cls, '__qualname__', cls)}.forward ({what})"
    return what
