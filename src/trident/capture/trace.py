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
import logging
import math
import operator
import threading
import traceback
from collections.abc import Callable, Iterator, Sequence

import sympy
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
from torch.fx._lazy_graph_module import _use_lazy_graph_module
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import (
    DimDynamic,
    GuardOnDataDependentSymNode,
    ShapeEnv,
    StatelessSymbolicContext,
)

from .. import exc
from ..knobs import CompileOptions
from ..frames import user_location
from .constant_views import fold_constant_views
from .inputs import NOT_PASSED, CallFacts, Leaf, LeafKind, LeafPath, installed_in_state, rebuild_arguments, state_objects
from .kept_fakes import remember_constant_computations
from .python_kernels import Report, Retry, registered_during_capture, seeing_through
from .results import OutputTree, StateWrite, flatten_output
from .specialize import ScalarLowering, symbols_to_specialize, watch_float_folds
from .symbolic_math import symbolic_math
from .user_state import UserState
from .user_state import snapshot as snapshot_user_state
from .tracing_mode import TracingMode
from .value_reads import TruthReads, ValueProgram, library_branches, split_value_programs


@dataclasses.dataclass(frozen=True)
class Dynamism:
    """Which leaf properties are traced symbolically: sizes and strides by (param, items, dim); ints, floats
    and storage offsets by (param, items)."""

    sizes: frozenset[tuple[int, tuple[int, ...], int]] = frozenset()
    ints: frozenset[tuple[int, tuple[int, ...]]] = frozenset()
    floats: frozenset[tuple[int, tuple[int, ...]]] = frozenset()
    strides: frozenset[tuple[int, tuple[int, ...], int]] = frozenset()
    offsets: frozenset[tuple[int, tuple[int, ...]]] = frozenset()

    def size_dynamic(self, path: LeafPath, dim: int) -> bool:
        return (path.param, path.items, dim) in self.sizes

    def int_dynamic(self, path: LeafPath) -> bool:
        return (path.param, path.items) in self.ints

    def float_dynamic(self, path: LeafPath) -> bool:
        return (path.param, path.items) in self.floats

    def stride_dynamic(self, path: LeafPath, dim: int) -> bool:
        return (path.param, path.items, dim) in self.strides

    def offset_dynamic(self, path: LeafPath) -> bool:
        return (path.param, path.items) in self.offsets

    def union(self, other: Dynamism) -> Dynamism:
        return Dynamism(
            self.sizes | other.sizes, self.ints | other.ints, self.floats | other.floats,
            self.strides | other.strides, self.offsets | other.offsets,
        )  # fmt: skip

    def without(self, other: Dynamism) -> Dynamism:
        return Dynamism(
            self.sizes - other.sizes, self.ints - other.ints, self.floats - other.floats,
            self.strides - other.strides, self.offsets - other.offsets,
        )  # fmt: skip

    def __bool__(self) -> bool:
        return bool(self.sizes or self.ints or self.floats or self.strides or self.offsets)


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
    # Python-implemented ops traced into or kept opaque (python_kernels.py).
    see_through: Report = dataclasses.field(default_factory=Report)
    # Attributes the function assigned into the call's state objects, made again by compiled code after its run.
    state_writes: tuple[StateWrite, ...] = ()
    # Truths of tensors the function read in Python (`if mask.all():`), which the guards check (value_reads.py).
    value_programs: tuple[ValueProgram, ...] = ()


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


def _unsupported(construct: str, error: BaseException) -> exc.UnsupportedConstruct:
    where = user_location(traceback.extract_tb(error.__traceback__))
    return exc.UnsupportedConstruct(
        f"{construct}\n  at {where}\n"
        "  Trident compiles the function once per specialization; move this out of the jitted function "
        "or make it independent of tensor values."
    )


def capture_failure(name: str, error: BaseException) -> str:
    """Why a call runs eagerly after its capture raised `error`: the exception and the user's line it came
    from (the operator call in their function, not torch's meta function)."""
    where = user_location(traceback.extract_tb(error.__traceback__))
    lines = str(error).strip().splitlines()
    message = lines[0][:300] if lines else ""
    return (
        f"capturing '{name}' raised {type(error).__name__} at {where}: {message}; "
        "calls with these inputs run eagerly"
    )


@contextlib.contextmanager
def _quiet_meta_functions() -> Iterator[None]:
    """Silence fake_tensor's log while capturing: when a meta function rejects its inputs it logs the whole
    traceback at ERROR (about 25 lines) before raising, and that exception is handled here (the call runs
    eagerly and eager's own error, if any, is what the user sees)."""
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    disabled = logger.disabled
    logger.disabled = True
    try:
        yield
    finally:
        logger.disabled = disabled


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
        # A symbolic stride is DYNAMIC (its own symbol); the others are inferred as the ShapeEnv does (static,
        # or expressions of the sizes when sizes are symbolic). Strides of 0 and 1 stay constants either way
        # (expanded and unit dims keep their meaning), so does 16-byte alignment (a TensorGuard).
        strides = [
            DimDynamic.DYNAMIC if dynamism.stride_dynamic(leaf.path, d) else DimDynamic.INFER_STRIDE
            for d in range(t.dim())
        ]
        context = StatelessSymbolicContext(dynamic_sizes=dims, dynamic_strides=strides)
        if dynamism.offset_dynamic(leaf.path):
            shape_env.dynamic_offsets.add(source.name)  # type: ignore[attr-defined]
        # Trace without autograd history: guards ensure grad mode or requires_grad rule this out.
        return fake_mode.from_tensor(t.detach(), symbolic_context=context, source=source)
    if leaf.kind is LeafKind.INT and dynamism.int_dynamic(leaf.path):
        value = leaf.value
        symbol = shape_env.create_unspecified_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC)  # type: ignore[arg-type]
        return shape_env.create_symintnode(symbol, hint=value, source=source)
    if _float_traced(leaf, dynamism):
        value = leaf.value
        symbol = shape_env.create_unspecified_symbol(value, source, dynamic_dim=DimDynamic.DYNAMIC)  # type: ignore[arg-type]
        return shape_env.create_symfloatnode(symbol, hint=value, source=source)
    return leaf.value


def _float_traced(leaf: Leaf, dynamism: Dynamism) -> bool:
    """A float leaf is traced symbolically when dynamic and finite: sympy's algebra assumes a finite real (it
    folds t - t to 0), so inf and NaN stay constants of their own specializations (guards check finiteness)."""
    return leaf.kind is LeafKind.FLOAT and dynamism.float_dynamic(leaf.path) and math.isfinite(leaf.value)  # type: ignore[arg-type]


class _LayoutShapeEnv(ShapeEnv):
    """A ShapeEnv whose storage offsets of chosen inputs are symbols of their own, 0 and 1 included. torch makes
    an offset symbolic only when a size is (then duck-sized: one symbol with any size of the same value), with
    no option to ask for it; Trident makes it symbolic when offsets vary, sizes or not."""

    def __init__(self) -> None:
        super().__init__()
        self.dynamic_offsets: set[str] = set()  # source names of tensors whose offset is symbolic

    def _compute_symbolic_stride(self, source, size, ex_size, ex_stride, dynamic_strides, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        """torch keeps strides 0 and 1 constants even when asked for a symbol; a stride marked DYNAMIC (its
        values varied) becomes a symbol over [0, inf) here. What the trace relies on (an expanded dim, a unit
        stride for a view or a contiguity check) becomes a ShapeEnv guard like any other, checked natively."""
        from torch._dynamo.source import TensorProperty, TensorPropertySource

        strides = super()._compute_symbolic_stride(source, size, ex_size, ex_stride, dynamic_strides, *args, **kwargs)
        for i, dynamic in enumerate(dynamic_strides):
            if dynamic is DimDynamic.DYNAMIC and strides[i] in (0, 1) and isinstance(strides[i], sympy.Integer):
                strides[i] = super().create_symbol(
                    ex_stride[i], TensorPropertySource(source, TensorProperty.STRIDE, i), DimDynamic.DYNAMIC,
                    do_not_specialize_zero_one=True,
                )  # fmt: skip
        return strides

    def create_symbol(self, val, source, dynamic_dim=DimDynamic.DUCK, *args, **kwargs):  # type: ignore[no-untyped-def,override]
        from torch._dynamo.source import TensorProperty, TensorPropertySource

        if isinstance(source, TensorPropertySource) and source.prop is TensorProperty.STRIDE and dynamic_dim is DimDynamic.DYNAMIC:
            kwargs["do_not_specialize_zero_one"] = True  # a varying stride: one symbol over [0, inf), 0 and 1 included
        elif isinstance(source, TensorPropertySource) and source.prop is TensorProperty.STRIDE and dynamic_dim is DimDynamic.DUCK:
            # A stride inferred symbolic (its sizes are) gets a symbol of its own, not the symbol of whichever
            # size has the same value now (stride 7 of a [2, 7] slice is not "size 1" at the next call).
            dynamic_dim = DimDynamic.DYNAMIC
        if (
            isinstance(source, TensorPropertySource)
            and source.prop is TensorProperty.STORAGE_OFFSET
            and source.base.name in self.dynamic_offsets
        ):
            dynamic_dim = DimDynamic.DYNAMIC
            # Offsets 0 and 1 mean nothing special (alignment is checked where it matters, per launch): one
            # symbol for every offset instead of three specializations (0, 1, the rest).
            kwargs["do_not_specialize_zero_one"] = True
        return super().create_symbol(val, source, dynamic_dim, *args, **kwargs)


def _source_name(path: LeafPath) -> str:
    # LocalSource names must be identifiers.
    return "_".join(["a" + str(path.param)] + [str(i) for i in path.items]) if not path.is_constant else f"c{path.items[0]}"


def is_traced_leaf(leaf: Leaf, dynamism: Dynamism) -> bool:
    """Whether a leaf is a graph placeholder (tensors, symbolic ints and floats) rather than fixed at capture."""
    return (
        leaf.kind is LeafKind.TENSOR
        or (leaf.kind is LeafKind.INT and dynamism.int_dynamic(leaf.path))
        or _float_traced(leaf, dynamism)
    )


# ---------------------------------------------------------------------------------------------------------
# Tracing


def trace_function(
    fn: Callable[..., object],
    n_positional: int,
    param_names: Sequence[str],
    values: Sequence[object],
    facts: CallFacts,
    dynamism: Dynamism,
    lowering: ScalarLowering,
    reachable: UserState | None = None,
    options: CompileOptions | None = None,
) -> Trace:
    """Trace with `dynamism`, then again with the symbols the trace cannot keep symbolic made constants
    (capture/specialize.py, asking `lowering` what it compiles exactly) until none is left; and again with a
    Python-implemented op opaque whose body could not be traced into (python_kernels.py). Each new attempt starts
    from the user's objects as they were before the first (`reachable`): what an attempt assigned into them
    belongs to its finished trace."""
    if reachable is None:
        reachable = snapshot_user_state(fn, values, param_names)
    options = CompileOptions.current() if options is None else options
    opaque: dict[str, str] = {}
    while True:
        try:
            trace, pinned = _trace_once(fn, n_positional, param_names, values, facts, dynamism, opaque, lowering,
                                        options, reachable)
        except Retry as retry:
            opaque[retry.op] = retry.reason
            reachable.restore()
            continue
        pinned = pinned.without(pinned.without(dynamism))  # only what this trace had symbolic
        if not pinned:
            return trace
        dynamism = dynamism.without(pinned)
        reachable.restore()


def _trace_once(
    fn: Callable[..., object],
    n_positional: int,
    param_names: Sequence[str],
    values: Sequence[object],
    facts: CallFacts,
    dynamism: Dynamism,
    opaque: dict[str, str],
    lowering: ScalarLowering,
    options: CompileOptions,
    reachable: UserState,
) -> tuple[Trace, Dynamism]:
    """One trace, and the dynamism of the symbols it must not keep symbolic; `opaque`: Python-implemented ops
    to record as one call (why); `options`: the compile's, of which capture reads what it sees through;
    `reachable`: the user's objects before the call (an object the result holds that none of them reached was
    made by the call)."""
    shape_env = _LayoutShapeEnv()
    fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    traced = [i for i, leaf in enumerate(facts.leaves) if is_traced_leaf(leaf, dynamism)]
    # Outside `with fake_mode`: there, t.detach() would already be a (static) fake tensor.
    fakes = {i: _fake_leaf(facts.leaves[i], fake_mode, dynamism) for i in traced}
    output_holder: list[OutputTree] = []
    writes_holder: list[StateWrite] = []
    see_through_holder = []

    def flat_fn(*placeholders: object) -> list[object]:
        leaf_values = [leaf.value for leaf in facts.leaves]
        for i, p in zip(traced, placeholders):
            leaf_values[i] = p
        args = rebuild_arguments(values, facts, leaf_values)
        positional = args[:n_positional]
        # A keyword of **kwargs that this call did not pass has a slot (NOT_PASSED): the function does not get it.
        keywords = {k: v for k, v in zip(param_names[n_positional:], args[n_positional:]) if v is not NOT_PASSED}
        # Entered inside make_fx: above its proxy mode, so Python kernels are traced into before it records.
        with seeing_through(lambda: mode, opaque, options) as see_through, \
                installed_in_state(values, facts, leaf_values) as state:
            see_through_holder.append(see_through)
            result = fn(*positional, **keywords)
            graph_outputs: list[object] = []
            objects = state_objects(values, facts)
            output_holder.append(flatten_output(result, graph_outputs, placeholders, traced, facts.leaves, objects,
                                                reachable.made_since))
            writes_holder.extend(
                StateWrite(path, name, flatten_output(value, graph_outputs, placeholders, traced, facts.leaves, objects))
                for path, name, value in state.assigned()
            )
        # The tensors whose truth was read, as outputs until split_value_programs takes them out: the passes below
        # update their nodes like any use.
        graph_outputs.extend(read.fake for read in truths.reads)
        return graph_outputs

    from .triton_launches import intercept_triton_launches  # imports triton: only when tracing

    truths = TruthReads([facts.leaves[i].value for i in traced], {})
    mode = TracingMode(fake_mode, truths, lambda: bool(see_through_holder) and see_through_holder[-1].in_body())
    truths.real_of = mode.real_of

    def is_ours(value: object) -> bool:
        return isinstance(value, FakeTensor) and value.fake_mode is fake_mode

    # Traced with inference mode off: under it, make_fx's Python dispatcher picks torch's Python decompositions
    # of composite ops (matmul folds differently from eager's C++ matmul); no_grad keeps autograd out as well.
    # A lazy GraphModule generates its Python code when it is first read or called, not at each recompile():
    # the passes below edit the graph three times, and the lowering reads only the graph (generating the code
    # of a 28-layer model's graph took 0.2 s each time).
    try:
        with registered_during_capture() as registrations, _translate_capture_errors(), _quiet_meta_functions(), \
                torch.inference_mode(False), torch.no_grad(), _tracing(), intercept_triton_launches(), \
                symbolic_math(), watch_float_folds() as folded, library_branches(is_ours), fake_mode, mode, \
                _use_lazy_graph_module(True):
            gm = make_fx(flat_fn, tracing_mode="real", _allow_non_fake_inputs=True)(*[fakes[i] for i in traced])
    finally:
        # The compiling call's tensors: neither a specialization nor a failed capture's exception (whose traceback
        # holds the tracing modes, which refer to this object) may keep them alive.
        truths.release()
    see_through_holder[0].check()  # a refusal the function itself caught still retries
    registrations.settle(see_through_holder[0].report)
    remember_constant_computations(gm, mode.real_of, mode.produced)
    pinned = _dynamism_of(symbols_to_specialize(gm, shape_env, folded, lowering), shape_env, facts, traced)
    _split_size_lists(gm)
    _int_to_float_nodes(gm)
    constants, fake_constants, created = _lift_constants(gm, fake_mode, mode.real_of)
    derived = fold_constant_views(gm, len(traced), constants, fake_constants)
    value_programs = split_value_programs(gm, truths.reads)
    trace = Trace(gm, traced, constants, fakes, fake_constants, shape_env, output_holder[0], created, derived,
                  see_through_holder[0].report, tuple(writes_holder), value_programs)
    return trace, pinned


def _dynamism_of(symbols: set[object], shape_env: ShapeEnv, facts: CallFacts, traced: Sequence[int]) -> Dynamism:
    """The leaf properties these symbols stand for (their sources: the leaf itself, or a tensor's size, stride
    or storage offset)."""
    from torch._dynamo.source import TensorProperty, TensorPropertySource

    paths = [facts.leaves[i].path for i in traced]
    keys = {LocalSource(_source_name(p)).name: (p.param, p.items) for p in paths}
    sizes, scalars, strides, offsets = set(), set(), set(), set()
    for symbol in symbols:
        for source in shape_env.var_to_sources.get(symbol, []):  # type: ignore[call-overload]
            if isinstance(source, TensorPropertySource):
                key = keys.get(source.base.name)
                if key is None:
                    continue
                if source.prop is TensorProperty.SIZE:
                    sizes.add((*key, source.idx))
                elif source.prop is TensorProperty.STRIDE:
                    strides.add((*key, source.idx))
                else:
                    offsets.add(key)
            elif source.name in keys:
                scalars.add(keys[source.name])
    scalar_keys = frozenset(scalars)
    return Dynamism(frozenset(sizes), scalar_keys, scalar_keys, frozenset(strides), frozenset(offsets))  # type: ignore[arg-type]


def _int_to_float_nodes(gm: torch.fx.GraphModule) -> None:
    """torch.sym_float(n) (int -> float in Python arithmetic, `t * n`) as aten.Float.Scalar, which torch-mlir
    imports (it has no importer for torch.sym_float)."""
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is torch.sym_float:
            node.target = torch.ops.aten.Float.Scalar
    gm.recompile()


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

    A get_attr value is either a fake TracingMode made for a live tensor (`real_of` maps it back) or a
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
