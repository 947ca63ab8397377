"""Reads of a tensor's truth in Python (`if mask.all():`, `bool(t)`) that a specialization is guarded on.

Model code branches on tensor values. Hugging Face's mask helpers do it on every forward: `fast_all(padding_mask)`
decides whether SDPA gets an explicit mask or `is_causal=True`, and on a GPU those kernels round differently. A
capture that refuses such a read runs the call eagerly; one that lets the library skip it (its `is_tracing` check,
see `library_branches`) takes another branch than eager, and gives other bits.

Here the read is answered with the truth the call's own tensors give, and the specialization is guarded on it. The
computation that made the tensor, its slice of the graph (ATen ops on the call's arguments and constants), becomes
a *value program*; the guard runs it natively and misses when it gives the other truth. Two values per read, so a
function specializes a bounded number of times. Only truths are answered: an int or float read (`.item()`) could
take a new value every call (a position), so it is refused as before and the call runs eagerly.

Sound only when the slice computes at the guard what it computed during the trace. So it must be pure ATen (no
Triton launch, no Python kernel, nothing random or in place), and nothing the program did before the read may
have written memory: no mutating op precedes the read in the graph. Anything else is refused as before.
"""
from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.utils._python_dispatch import _disable_current_modes

# Python-level functions make_fx records on symbolic ints (sizes, numel): pure.
_PURE_PYTHON_MODULES = frozenset({"_operator", "operator", "math"})
_PURE_SYM_FUNCTIONS = frozenset({torch.sym_float, torch.sym_int, torch.sym_max, torch.sym_min, torch.sym_not})


@dataclasses.dataclass(frozen=True)
class TruthRead:
    """One read the trace answered: the tensor read (an extra graph output until split_value_programs), the truth
    the compiling call's tensors gave, and the user's line."""

    fake: torch.Tensor
    truth: bool
    where: str


@dataclasses.dataclass(frozen=True)
class ValueProgram:
    """A read's slice as a graph of its own: the trace's placeholders (same order, so the same sources), one
    output, the tensor read. The guard lowers and runs it, and compares its truth with `truth`."""

    graph_module: torch.fx.GraphModule
    truth: bool
    where: str


class TruthReads:
    """The truth reads of one trace attempt. `real_inputs`: the real value of each graph placeholder, in order (the
    traced leaves); `real_of`: id(fake of a live tensor) -> the live tensor (tracing_mode.TracingMode's)."""

    def __init__(self, real_inputs: Sequence[object], real_of: dict[int, torch.Tensor]) -> None:
        self.real_inputs = real_inputs
        self.real_of = real_of
        self.reads: list[TruthRead] = []
        self.refusal = ""  # why the last read could not be guarded, if it was one of a truth

    def release(self) -> None:
        """Drop the real tensors, once the trace is done."""
        self.real_inputs, self.real_of = (), {}

    def answer(self, fake: torch.Tensor, where: str) -> bool | None:
        """The truth of `fake` for the compiling call, noted as a read to guard; None when it cannot be guarded
        (the caller refuses the read as before, saying `refusal`)."""
        self.refusal = ""
        proxy_mode = get_proxy_mode()
        if proxy_mode is None or not isinstance(fake, FakeTensor) or not _single_element(fake):
            return None
        slot = get_proxy_slot(fake, proxy_mode.tracer, None)
        if slot is None:  # a tensor the function closes over, read before any op used it: an op puts it in the graph
            fake = torch.ops.aten.alias.default(fake)
            slot = get_proxy_slot(fake, proxy_mode.tracer, None)
            if slot is None:
                return None
        node = slot.proxy.node
        nodes = _slice(node)
        unguardable = next((n for n in nodes if not _pure(n, slice_node=True)), None)
        if unguardable is not None:
            self.refusal = f"it is computed by {_name(unguardable)}, which a guard cannot run again as the trace did"
            return None
        write = next((n for n in node.graph.nodes if not _pure(n, slice_node=False)), None)
        if write is not None:
            self.refusal = f"the function ran {_name(write)} before it, which may have written what it reads"
            return None
        value = self._evaluate(node, nodes, proxy_mode.tracer.root)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            return None
        truth = bool(value)
        self.reads.append(TruthRead(fake, truth, where))
        return truth

    def _evaluate(self, node: torch.fx.Node, nodes: set[torch.fx.Node], root: torch.nn.Module) -> object:
        """`node` computed from its slice `nodes` on the compiling call's real tensors, outside the trace's modes."""
        graph = node.graph
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        env: dict[torch.fx.Node, object] = {}
        with _disable_current_modes(), torch._C.DisableTorchFunction():
            for n in graph.nodes:
                if n not in nodes:
                    continue
                if n.op == "placeholder":
                    env[n] = self.real_inputs[placeholders.index(n)]
                elif n.op == "get_attr":
                    attribute = getattr(root, n.target)  # type: ignore[arg-type]
                    real = self.real_of.get(id(attribute))
                    if real is None and isinstance(attribute, FakeTensor):
                        return None
                    env[n] = attribute if real is None else real
                else:
                    args, kwargs = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
                    env[n] = n.target(*args, **kwargs)  # type: ignore[operator]
        return env[node]


def _name(node: torch.fx.Node) -> str:
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def _single_element(fake: torch.Tensor) -> bool:
    numel = fake.numel()
    return not isinstance(numel, torch.SymInt) and numel == 1


def _slice(node: torch.fx.Node) -> set[torch.fx.Node]:
    """`node` and every node it is computed from."""
    seen: set[torch.fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def _pure(node: torch.fx.Node, *, slice_node: bool) -> bool:
    """Whether `node` writes no memory and computes the same on the same inputs. A slice node must also be one the
    value program may run again at each guard: ATen or prims (another library's op may launch a kernel that a
    functional schema does not show)."""
    if node.op in ("placeholder", "get_attr", "output"):
        return True
    if node.op != "call_function":
        return False
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target._schema.is_mutable or torch.Tag.nondeterministic_seeded in target.tags:
            return False
        return not slice_node or target.namespace in ("aten", "prims")
    return getattr(target, "__module__", None) in _PURE_PYTHON_MODULES or target in _PURE_SYM_FUNCTIONS


def split_value_programs(gm: torch.fx.GraphModule, reads: Sequence[TruthRead]) -> tuple[ValueProgram, ...]:
    """Take the reads' tensors, the last len(reads) outputs of `gm` (kept there so that the passes after make_fx
    update them like any use), out of it: each becomes a ValueProgram, and nodes that only they used leave `gm`."""
    if not reads:
        return ()
    graph = gm.graph
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    outputs = list(output.args[0])  # type: ignore[arg-type]
    read_nodes = outputs[len(outputs) - len(reads):]
    output.args = (outputs[: len(outputs) - len(reads)],)
    programs = tuple(
        ValueProgram(_program_of(graph, node), read.truth, read.where)  # type: ignore[arg-type]
        for node, read in zip(read_nodes, reads)
    )
    # What only the reads used: the slices are pure, so dropping what no one reads now changes nothing.
    sliced = set().union(*map(_slice, read_nodes))
    for node in reversed(list(graph.nodes)):
        if node in sliced and node.op == "call_function" and not node.users:
            graph.erase_node(node)
    gm.recompile()
    return programs


def _program_of(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.GraphModule:
    """A graph with every placeholder of `graph` (its inputs keep their places) and `node`'s slice."""
    program = torch.fx.Graph()
    copied: dict[torch.fx.Node, torch.fx.Node] = {}
    nodes = _slice(node)
    for n in graph.nodes:
        if n.op == "placeholder" or n in nodes:
            copied[n] = program.node_copy(n, copied.__getitem__)
    program.output(copied[node])
    return torch.fx.GraphModule(torch.nn.Module(), program)


def truth_of(program: ValueProgram, inputs: Sequence[object]) -> bool | None:
    """The program's truth for a call whose placeholder values are `inputs` (a guard's Python form); None where
    its result is a CUDA tensor while that device's stream is capturing: the read would end the capture."""
    result = program.graph_module(*inputs)
    if isinstance(result, torch.Tensor) and result.is_cuda:
        with torch.cuda.device(result.device):
            if torch.cuda.is_current_stream_capturing():
                return None
    return bool(result)


# ---------------------------------------------------------------------------------------------------------
# Libraries that skip a read while tracing


# The captures in progress, in any thread (each one's test of its own fakes), while transformers' is_fake_tensor is
# replaced; the original comes back when the last one ends. Two functions may capture at once in two threads.
_capturing: list[Callable[[object], bool]] = []
_replaced: dict[str, Callable[[object], bool]] = {}  # "is_fake_tensor" -> transformers' own, while replaced
_lock = threading.Lock()


@contextlib.contextmanager
def library_branches(is_ours: Callable[[object], bool]) -> Iterator[None]:
    """Libraries that skip a value read while a tracer runs, for the capture's fakes: take eager's branch.

    transformers asks `is_tracing(tensor)` before reading a mask (`fast_all(padding_mask)`), and a FakeTensor
    counts as tracing: export and torch.compile must not bake one call's mask into their graph. Trident guards on
    the read (above), so its capture takes the branch eager takes; `is_ours`: whether a tensor is a fake of this
    capture (another FakeTensor, or a tensor under torch.compile, still counts as tracing)."""
    module = sys.modules.get("transformers.utils.import_utils")
    if module is None or not callable(getattr(module, "is_fake_tensor", None)):
        yield
        return
    with _lock:
        if not _capturing:
            original = _replaced["is_fake_tensor"] = module.is_fake_tensor

            def is_fake_tensor(x: object) -> bool:
                return original(x) and not any(ours(x) for ours in tuple(_capturing))

            module.is_fake_tensor = is_fake_tensor
        _capturing.append(is_ours)
    try:
        yield
    finally:
        with _lock:
            _capturing.remove(is_ours)
            if not _capturing:
                module.is_fake_tensor = _replaced.pop("is_fake_tensor")
