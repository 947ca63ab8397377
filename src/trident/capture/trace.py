"""Trace a Python function into an FX graph of ATen ops, with the facts its guards need.

Mechanism: `make_fx` over fake tensors whose sizes are static or symbolic per leaf (a ShapeEnv records every
decision the program made about symbolic sizes). The graph is not functionalized: it lists the ATen calls
eager would make, in order, with their in-place ops and views, so replaying it keeps eager's aliasing,
mutation and output strides.

Constants the function reads (closed-over tensors, module parameters) appear in make_fx graphs as
`get_attr` nodes; they are lifted here into trailing placeholders so compiled code receives them through
its context table, never as baked-in data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import linecache
import operator
import os
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.fx
from torch._dynamo.source import LocalSource
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    UnsupportedOperatorException,
)
from torch.utils import _pytree as pytree
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    GuardOnDataDependentSymNode,
    ShapeEnv,
    StatelessSymbolicContext,
)
from torch.overrides import TorchFunctionMode

from .. import exc
from .constant_views import fold_constant_views
from .inputs import CallFacts, Leaf, LeafKind, LeafPath, rebuild_arguments


@dataclasses.dataclass(frozen=True)
class Dynamism:
    """Which leaf properties are traced symbolically: (param, items) -> dims, and ints / offsets."""

    sizes: frozenset[tuple[int, tuple[int, ...], int]] = frozenset()
    ints: frozenset[tuple[int, tuple[int, ...]]] = frozenset()

    def size_dynamic(self, path: LeafPath, dim: int) -> bool:
        return (path.param, path.items, dim) in self.sizes

    def int_dynamic(self, path: LeafPath) -> bool:
        return (path.param, path.items) in self.ints

    def union(self, other: Dynamism) -> Dynamism:
        return Dynamism(self.sizes | other.sizes, self.ints | other.ints)


@dataclasses.dataclass(frozen=True)
class OutputTree:
    """How to rebuild the function's result: a tuple/list of subtrees, or one leaf.

    A leaf is ("graph", i): the i-th graph output; ("const", v): a Python value fixed at capture;
    ("input", leaf_index): an argument returned as itself."""

    kind: str  # "tuple", "list", "graph", "const", "input"
    children: tuple[OutputTree, ...] = ()
    index: int = 0
    value: object = None


@dataclasses.dataclass
class Trace:
    graph_module: torch.fx.GraphModule
    # placeholder i of the graph is leaf placeholder_leaves[i] (an index into facts.leaves) for i <
    # len(placeholder_leaves), then constants[i - len(placeholder_leaves)].
    placeholder_leaves: list[int]
    constants: list[torch.Tensor]
    fake_leaves: dict[int, object]  # leaf index -> fake tensor / SymInt used in the trace
    fake_constants: list[torch.Tensor]
    shape_env: ShapeEnv
    outputs: OutputTree
    # Indices into `constants` of tensors the trace created itself (torch.tensor literals), as opposed to live
    # tensors the function read: the disk cache (trident.cache) stores the former by value, re-resolves the latter.
    created_constants: frozenset[int] = frozenset()
    # Constants that are views of other constants, made at capture (constant_views.py): index -> base index.
    derived_constants: dict[int, int] = dataclasses.field(default_factory=dict)


_state = threading.local()


@contextlib.contextmanager
def _tracing() -> Iterator[None]:
    depth = getattr(_state, "depth", 0)
    _state.depth = depth + 1
    try:
        yield
    finally:
        _state.depth = depth


def is_tracing() -> bool:
    """Whether this thread is inside a Trident capture (a jitted function called from another one)."""
    return getattr(_state, "depth", 0) > 0


# ---------------------------------------------------------------------------------------------------------
# Errors that point at the user's line


_TRIDENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))


def user_location(tb: traceback.StackSummary | list[traceback.FrameSummary]) -> str:
    """'file:line: code' of the innermost frame that belongs to neither torch nor trident."""
    for frame in reversed(tb):
        path = os.path.abspath(frame.filename)
        if path.startswith(_TRIDENT_DIR) or path.startswith(_TORCH_DIR) or frame.filename.startswith("<"):
            continue
        code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
        return f"{frame.filename}:{frame.lineno}: {code}"
    return "<unknown location>"


def _unsupported(construct: str, error: BaseException) -> exc.UnsupportedConstruct:
    where = user_location(traceback.extract_tb(error.__traceback__))
    return exc.UnsupportedConstruct(
        f"{construct}\n  at {where}\n"
        "  Trident compiles the function once per specialization; move this out of the jitted function "
        "or make it independent of tensor values."
    )


_DATA_DEPENDENT = (
    "reading a tensor's value in Python (.item(), .tolist(), bool(tensor), or `if`/`while` on a tensor) "
    "is data-dependent control flow"
)


@contextlib.contextmanager
def _translate_capture_errors() -> Iterator[None]:
    try:
        yield
    except exc.TridentError:
        raise
    except (GuardOnDataDependentSymNode, DataDependentOutputException) as e:
        raise _unsupported(_DATA_DEPENDENT, e) from None
    except DynamicOutputShapeException as e:
        op = str(e.args[0]) if e.args else "an operator"
        raise _unsupported(f"{op} returns a tensor whose shape depends on tensor values", e) from None
    except UnsupportedOperatorException as e:
        op = str(e.args[0]) if e.args else "an operator"
        raise _unsupported(f"operator {op} cannot be traced (no fake-tensor implementation)", e) from None


# ---------------------------------------------------------------------------------------------------------
# Indexing with symbolic ints


def _has_symint(index: object) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.SymInt) for i in items)


def _basic_index(t: torch.Tensor, index: object) -> torch.Tensor:
    """t[index] for basic indexing (ints, SymInts, slices, None, Ellipsis) built from select/slice/unsqueeze.

    Tensor.__getitem__ in C++ turns a SymInt index into a plain int (a guard on its value), which would
    recompile a decode loop every step; select() keeps it symbolic."""
    items = index if isinstance(index, tuple) else (index,)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    expanded: list[object] = []
    for i in items:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (t.dim() - consumed))
        else:
            expanded.append(i)
    out, dim = t, 0
    for i in expanded:
        if i is None:
            out, dim = out.unsqueeze(dim), dim + 1
        elif isinstance(i, slice):
            if i != slice(None):
                out = out[(slice(None),) * dim + (i,)]
            dim += 1
        else:
            out = out.select(dim, i)  # type: ignore[arg-type]
    return out


_VALUE_READS = {
    torch.Tensor.item: ".item()", torch.Tensor.tolist: ".tolist()", torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)", torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__index__: "using a tensor as an index", torch.Tensor.numpy: ".numpy()",
}  # fmt: skip


class _TracingMode(TorchFunctionMode):
    """Active while tracing. It
    - turns real tensors the function reads (closures, module parameters and buffers) into fake tensors
      before any op sees them, so tracing never computes on or mutates live state (FakeTensorMode would
      constant-fold an op whose inputs are all real tensors, running `counter.add_(1)` for real);
      `real_of` maps each such fake back to its live tensor, which _lift_constants passes to compiled code;
    - rejects reads of tensor values in Python (data-dependent control flow);
    - keeps SymInt indices and torch.tensor([pos]) symbolic."""

    def __init__(self, fake_mode: FakeTensorMode) -> None:
        super().__init__()
        self.fake_mode = fake_mode
        self.real_of: dict[int, torch.Tensor] = {}  # id(fake) -> live tensor
        self._fake_of: dict[int, torch.Tensor] = {}  # id(live tensor) -> fake

    def _fake(self, t: torch.Tensor) -> torch.Tensor:
        if type(t) not in (torch.Tensor, torch.nn.Parameter) or isinstance(t, FakeTensor):
            return t
        fake = self._fake_of.get(id(t))
        if fake is None:
            fake = self.fake_mode.from_tensor(t, static_shapes=True)
            self._fake_of[id(t)] = fake
            self.real_of[id(fake)] = t
        return fake

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _VALUE_READS:
            where = user_location(traceback.extract_stack()[:-1])
            raise exc.UnsupportedConstruct(
                f"{_VALUE_READS[func]} reads a tensor's value in Python: data-dependent control flow or "
                f"values cannot be compiled\n  at {where}\n  Keep the computation in tensors (torch.where, "
                "masking) or move it out of the jitted function."
            )
        args, kwargs = pytree.tree_map_only(torch.Tensor, self._fake, (args, kwargs))
        if func is torch.tensor and _symint_data(args[0] if args else kwargs.get("data")):
            return _symbolic_tensor(args[0] if args else kwargs.pop("data"), **kwargs)
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__) and _same_batch(args[0], args[1]):
            return _batched_matmul(args[0], args[1])
        if func is torch.Tensor.__getitem__ and _basic_only(args[1]) and _has_symint(args[1]):
            return _basic_index(args[0], args[1])
        if func is torch.Tensor.__setitem__ and _basic_only(args[1]) and _has_symint(args[1]):
            view = _basic_index(args[0], args[1])
            value = args[2]
            if not isinstance(value, torch.Tensor) and _EAGER_SETITEM_FILLS:
                view.fill_(value)  # as eager's __setitem__ in torch >= 2.15: fill_.Scalar (raises on overflow)
                return None
            if not isinstance(value, torch.Tensor):
                # As eager's __setitem__ before: the scalar becomes a tensor of the destination's dtype first (1e30
                # into float16 is inf, not fill_'s overflow error; inf into int64 raises here, before any indexing).
                value = torch.tensor(value, dtype=view.dtype, device=view.device)
            view.copy_(value)
            return None
        return func(*args, **kwargs)


def _eager_setitem_fills() -> bool:
    """Whether eager's `x[i] = scalar` fills with the scalar itself, as torch 2.15 does (fill_.Scalar: 1e30 into
    a float16 row raises an overflow error), rather than converting it to a tensor of x's dtype first, as torch
    2.13 does (inf). Asked of eager itself, once at import, outside any trace (a row of 2: fill_ of a single
    element does not check for overflow)."""
    probe = torch.zeros(2, 2, dtype=torch.float16)
    try:
        probe[0] = 1e30
    except RuntimeError:
        return True
    return False


_EAGER_SETITEM_FILLS = _eager_setitem_fills()


def _same_batch(a: object, b: object) -> bool:
    """Both operands at least 3-D with the same batch dims and a symbolic size among them."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() < 3 or a.dim() != b.dim():
        return False
    sizes = [*a.shape, *b.shape]
    if not any(isinstance(d, torch.SymInt) for d in sizes):
        return False
    return all(
        x is y or (not isinstance(x, torch.SymInt) and not isinstance(y, torch.SymInt) and x == y)
        for x, y in zip(a.shape[:-2], b.shape[:-2])
    )


def _batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as one bmm over the flattened batch: what matmul does for equal batch dims. torch 2.11's matmul
    decomposition guards on the value of a symbolic contraction size (Eq(pos + 1, N) in attention over a
    growing KV cache), which would recompile a decode loop every step."""
    batch = a.shape[:-2]
    n = 1
    for d in batch:  # an explicit product: reshape(-1, ...) would add divisibility guards
        n = n * d
    out = torch.bmm(a.reshape(n, a.shape[-2], a.shape[-1]), b.reshape(n, b.shape[-2], b.shape[-1]))
    return out.view(*batch, a.shape[-2], b.shape[-1])


def _symint_data(data: object) -> bool:
    items = data if isinstance(data, (list, tuple)) else [data]
    return any(isinstance(i, torch.SymInt) for i in items) and all(isinstance(i, (int, torch.SymInt)) for i in items)


def _symbolic_tensor(data: object, dtype: torch.dtype | None = None, device: object = None, **_: object) -> torch.Tensor:
    """torch.tensor of ints some of which are SymInts, built from torch.full so the values stay symbolic
    (torch.tensor itself guards on each value: a decode loop would recompile every step)."""
    dtype = dtype or torch.int64
    if not isinstance(data, (list, tuple)):
        return torch.full((), data, dtype=dtype, device=device)  # type: ignore[arg-type]
    return torch.cat([torch.full((1,), v, dtype=dtype, device=device) for v in data])  # type: ignore[arg-type]


def _basic_only(index: object) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice, torch.SymInt)) for i in items)


# ---------------------------------------------------------------------------------------------------------
# Fake inputs


def _fake_leaf(leaf: Leaf, fake_mode: FakeTensorMode, dynamism: Dynamism) -> object:
    shape_env = fake_mode.shape_env
    assert shape_env is not None
    source = LocalSource(_source_name(leaf.path))
    if leaf.kind is LeafKind.TENSOR:
        t = leaf.value
        assert isinstance(t, torch.Tensor)
        dims = [
            DimDynamic.DYNAMIC if dynamism.size_dynamic(leaf.path, d) else DimDynamic.STATIC for d in range(t.dim())
        ]
        context = StatelessSymbolicContext(dynamic_sizes=dims)
        # Trace without autograd history: guards ensure grad mode or requires_grad rule this out.
        return fake_mode.from_tensor(t.detach(), symbolic_context=context, source=source)
    if leaf.kind is LeafKind.INT and dynamism.int_dynamic(leaf.path):
        value = leaf.value
        symbol = shape_env.create_unspecified_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC)  # type: ignore[arg-type]
        return shape_env.create_symintnode(symbol, hint=value, source=source)
    return leaf.value


def _source_name(path: LeafPath) -> str:
    # LocalSource names must be identifiers.
    return "_".join(["a" + str(path.param)] + [str(i) for i in path.items]) if not path.is_constant else f"c{path.items[0]}"


def is_traced_leaf(leaf: Leaf, dynamism: Dynamism) -> bool:
    """Whether a leaf is a graph placeholder (tensors, symbolic ints) rather than fixed at capture."""
    return leaf.kind is LeafKind.TENSOR or (leaf.kind is LeafKind.INT and dynamism.int_dynamic(leaf.path))


# ---------------------------------------------------------------------------------------------------------
# Tracing


def trace_function(
    fn: Callable[..., object],
    n_positional: int,
    param_names: Sequence[str],
    values: Sequence[object],
    facts: CallFacts,
    dynamism: Dynamism,
) -> Trace:
    shape_env = ShapeEnv()
    fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    traced = [i for i, leaf in enumerate(facts.leaves) if is_traced_leaf(leaf, dynamism)]
    # Outside `with fake_mode`: there, t.detach() would already be a (static) fake tensor.
    fakes = {i: _fake_leaf(facts.leaves[i], fake_mode, dynamism) for i in traced}
    output_holder: list[OutputTree] = []

    def flat_fn(*placeholders: object) -> list[object]:
        leaf_values = [leaf.value for leaf in facts.leaves]
        for i, p in zip(traced, placeholders):
            leaf_values[i] = p
        args = rebuild_arguments(values, facts, leaf_values)
        positional = args[:n_positional]
        keywords = dict(zip(param_names[n_positional:], args[n_positional:]))
        result = fn(*positional, **keywords)
        graph_outputs: list[object] = []
        output_holder.append(_flatten_output(result, graph_outputs, placeholders, traced))
        return graph_outputs

    from .triton_launches import intercept_triton_launches  # imports triton: only when tracing

    mode = _TracingMode(fake_mode)
    # Traced with inference mode off: under it, make_fx's Python dispatcher picks torch's Python decompositions
    # of composite ops (matmul folds differently from eager's C++ matmul); no_grad keeps autograd out as well.
    with _translate_capture_errors(), torch.inference_mode(False), torch.no_grad(), _tracing(), \
            intercept_triton_launches(), fake_mode, mode:
        gm = make_fx(flat_fn, tracing_mode="real", _allow_non_fake_inputs=True)(*[fakes[i] for i in traced])
    _split_size_lists(gm)
    constants, fake_constants, created = _lift_constants(gm, fake_mode, mode.real_of)
    derived = fold_constant_views(gm, len(traced), constants, fake_constants)
    return Trace(gm, traced, constants, fakes, fake_constants, shape_env, output_holder[0], created, derived)


def _flatten_output(
    value: object, graph_outputs: list[object], placeholders: Sequence[object], traced: Sequence[int]
) -> OutputTree:
    if type(value) in (tuple, list):
        children = tuple(_flatten_output(v, graph_outputs, placeholders, traced) for v in value)  # type: ignore[union-attr]
        return OutputTree("tuple" if type(value) is tuple else "list", children)
    if isinstance(value, (torch.Tensor, torch.SymInt)):
        for p, leaf_index in zip(placeholders, traced):
            if p is value:  # an argument returned as itself keeps its identity
                return OutputTree("input", index=leaf_index)
        graph_outputs.append(value)
        return OutputTree("graph", index=len(graph_outputs) - 1)
    if isinstance(value, (torch.SymFloat, torch.SymBool)):
        raise exc.UnsupportedConstruct(
            f"the function returns a symbolic {type(value).__name__}; return a tensor or an int instead"
        )
    if value is None or type(value) in (int, float, bool, str):
        return OutputTree("const", value=value)
    raise exc.UnsupportedConstruct(
        f"the function returns a {type(value).__name__}; Trident returns tensors, Python scalars and "
        "(nested) tuples and lists of them natively. Return a tuple instead."
    )


_SIZE_LISTS = {torch.ops.aten.sym_size.default: torch.ops.aten.sym_size.int,
               torch.ops.aten.size.default: torch.ops.aten.sym_size.int,
               torch.ops.aten.sym_stride.default: torch.ops.aten.sym_stride.int,
               torch.ops.aten.stride.default: torch.ops.aten.sym_stride.int}  # fmt: skip


def _split_size_lists(gm: torch.fx.GraphModule) -> None:
    """Replace list-valued size/stride nodes (torch 2.11's make_fx records x.size() inside some
    decompositions as one aten.sym_size.default / aten.size.default node; the torch-mlir importer cannot type
    a list value) with per-dim sym_size.int / sym_stride.int nodes and plain ints."""
    graph = gm.graph
    for node in list(graph.nodes):
        per_dim = _SIZE_LISTS.get(node.target)  # type: ignore[arg-type]
        if per_dim is None or not isinstance(node.meta.get("val"), (list, tuple)):
            continue
        tensor = node.args[0]
        items: list[object] = []
        with graph.inserting_after(node):
            for d, value in reversed(list(enumerate(node.meta["val"]))):
                if isinstance(value, torch.SymInt):
                    item = graph.call_function(per_dim, (tensor, d))
                    item.meta["val"] = value
                    items.insert(0, item)
                else:
                    items.insert(0, int(value))
        for user in list(node.users):
            if user.target is operator.getitem:
                replacement = items[user.args[1]]  # type: ignore[index]
                _replace_uses(user, replacement)
                graph.erase_node(user)
            else:
                _replace_uses_in(user, node, list(items))
        graph.erase_node(node)
    graph.lint()


def _replace_uses(node: torch.fx.Node, replacement: object) -> None:
    if isinstance(replacement, torch.fx.Node):
        node.replace_all_uses_with(replacement)
        return
    for user in list(node.users):
        _replace_uses_in(user, node, replacement)


def _replace_uses_in(user: torch.fx.Node, old: torch.fx.Node, replacement: object) -> None:
    user.args = pytree.tree_map(lambda a: replacement if a is old else a, user.args)
    user.kwargs = pytree.tree_map(lambda a: replacement if a is old else a, user.kwargs)


def _lift_constants(
    gm: torch.fx.GraphModule, fake_mode: FakeTensorMode, real_of: dict[int, torch.Tensor]
) -> tuple[list[torch.Tensor], list[torch.Tensor], frozenset[int]]:
    """Turn get_attr tensor constants into trailing placeholders; returns (live tensors, their fakes, indices of
    the constants the trace created).

    A get_attr value is either a fake _TracingMode made for a live tensor (`real_of` maps it back) or a
    real tensor the trace created itself (torch.tensor literals)."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    constants: list[torch.Tensor] = []
    fakes: list[torch.Tensor] = []
    by_identity: dict[int, torch.fx.Node] = {}
    last = placeholders[-1] if placeholders else None
    targets: set[str] = set()
    created: set[int] = set()
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        attribute = getattr(gm, node.target)  # type: ignore[arg-type]
        targets.add(node.target)  # type: ignore[arg-type]  # one attribute may back several get_attr nodes
        value = real_of.get(id(attribute), attribute)
        if not isinstance(value, torch.Tensor):
            raise exc.UnsupportedConstruct(f"the function reads a constant of type {type(value).__name__}")
        existing = by_identity.get(id(value))
        if existing is None:
            if last is None:
                with graph.inserting_before(next(iter(graph.nodes))):
                    existing = graph.placeholder(f"constant_{len(constants)}")
            else:
                with graph.inserting_after(last):
                    existing = graph.placeholder(f"constant_{len(constants)}")
            last = existing
            fake = attribute if isinstance(attribute, FakeTensor) else node.meta.get("val")
            if fake is None:
                fake = fake_mode.from_tensor(value, static_shapes=True)
            existing.meta["val"] = fake
            by_identity[id(value)] = existing
            if id(attribute) not in real_of:
                created.add(len(constants))
            constants.append(value)
            fakes.append(fake)
        node.replace_all_uses_with(existing)
        graph.erase_node(node)
    for target in targets:
        delattr(gm, target)
    gm.recompile()
    return constants, fakes, frozenset(created)
