"""The guards of one specialization: what a call must satisfy for its compiled code to be correct.

Built from the call's facts and the trace's fake inputs and ShapeEnv. Each guard has a native lowering
(lowering/lower_guards.py), which decides calls, and a Python twin (`first_failure`), which explains a miss and
lets warm start reject a record before loading it; both check exactly the same thing, and
tests/unit/test_guard_differential.py holds them to it on fuzzed calls.

Symbolic sizes: every symbol is bound from the first input property that is exactly that symbol; every
other property must equal its expression; then the ShapeEnv's guards and value ranges must hold.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence

import sympy
import torch

from .. import abi
from ..native_numbers import (
    INT64_MAX, INT64_MIN, LeavesInt64, check_relation, float_bits, has_float, python_int_value,
)
from ..torch_codes import dtype_code, dtype_name
from .constant_views import byte_distance
from .inputs import ABSENT, CallFacts, LeafKind, LeafPath, SequenceFact, TensorFact, classify, leaf_value
from .specialize import is_float_expr
from .python_kernels import KernelVersions, Report
from .trace import Trace



@dataclasses.dataclass(frozen=True)
class SequenceGuard:
    fact: SequenceFact

    def describe(self) -> str:
        return f"{self.fact.path.name}: {self.fact.describe()}"


# What a TensorGuard checks of a tensor leaf besides its layout, as explain shows it: the Python check and the
# explain text both read this table (the native guard compares the same facts in the runtime's encoding,
# lower_guards.py: a type tag, a dtype code, device type and index, dim and a flags word).
_TENSOR_FIELDS: tuple[tuple[str, Callable[[TensorFact], object]], ...] = (
    ("type", lambda f: "Parameter" if f.type_tag == abi.TYPE_PARAMETER else "Tensor"),
    ("dtype", lambda f: f.dtype),
    ("device", lambda f: f.device),
    ("rank", lambda f: len(f.sizes)),
    ("requires_grad", lambda f: f.requires_grad),
    ("conj bit", lambda f: f.is_conj),
    ("neg bit", lambda f: f.is_neg),
)


@dataclasses.dataclass(frozen=True)
class TensorGuard:
    """Type, dtype, device, rank and flags of a tensor leaf (sizes are PropertyGuards).

    Not the data pointer's alignment: nothing a specialization bakes in depends on it. What does is checked
    where it is used, on every call: each Triton launch keys its compiled variants on the 16-byte alignment of
    its pointers natively (runtime/triton_native.py, a new alignment goes to Triton's launcher and registers a
    variant), and a matmul plan runs only for operands as aligned as those it was made for (csrc/matmul_plan.cpp).
    Guarding it here too made every alignment of every argument a specialization of its own."""

    path: LeafPath
    fact: TensorFact

    def describe(self) -> str:
        kind, dtype, device, rank, *bits = (get(self.fact) for _, get in _TENSOR_FIELDS)
        flags = "".join(f" {name}" for (name, _), on in zip(_TENSOR_FIELDS[4:], bits) if on)
        return f"{self.path.name}: {kind} {str(dtype).removeprefix('torch.')} {device} rank {rank}{flags}"

    def mismatch(self, fact: TensorFact) -> str | None:
        """The first field of _TENSOR_FIELDS in which `fact` (a call's tensor) differs, or None."""
        for name, get in _TENSOR_FIELDS:
            if get(fact) != get(self.fact):
                return f"{name} mismatch: expected {get(self.fact)}, got {get(fact)}"
        return None


@dataclasses.dataclass(frozen=True)
class PropertyGuard:
    """size(dim) / stride(dim) / storage_offset() of a tensor leaf, or an int leaf's value ("int"), equals
    `expr` (a sympy integer or an expression over bound symbols)."""

    path: LeafPath
    prop: str  # "size", "stride", "offset", "int"
    dim: int
    expr: sympy.Expr


@dataclasses.dataclass(frozen=True)
class SymbolBinding:
    """Symbol `symbol` takes the value of a property of a leaf ("size"/"stride"/"offset", or "int")."""

    symbol: sympy.Symbol
    path: LeafPath
    prop: str
    dim: int


@dataclasses.dataclass(frozen=True)
class ScalarGuard:
    """An int / float / bool / None leaf, or a str / torch.device / torch.dtype (VALUE: equal, of the same type).
    value None on an int means any int (bound to a symbol)."""

    path: LeafPath
    kind: LeafKind
    value: object

    def describe(self) -> str:
        if self.kind is LeafKind.NONE:
            return f"{self.path.name}: None"
        if self.value is None:  # a symbolic float excludes inf and NaN (capture/trace.py _float_traced)
            return f"{self.path.name}: any {'finite ' if self.kind is LeafKind.FLOAT else ''}{self.kind.value}"
        return f"{self.path.name}: {self.kind.value} == {self.value!r}"


@dataclasses.dataclass(frozen=True)
class IdentityGuard:
    """Any other object: the very object seen at capture (held in the context's constants)."""

    path: LeafPath
    constant_index: int
    type_name: str

    def describe(self) -> str:
        return f"{self.path.name}: the same {self.type_name} object as at capture"


@dataclasses.dataclass(frozen=True)
class RelationGuard:
    """A relation among symbols the traced program relied on (from the ShapeEnv)."""

    expr: sympy.Basic

    def describe(self) -> str:
        return str(self.expr)


@dataclasses.dataclass(frozen=True)
class Int64RangeGuard(RelationGuard):
    """`value`, an int the program computes, fits in int64 (`expr` is `value <= INT64_MAX`, lowered like every
    relation: computing `value` with checked arithmetic is the check). Made by capture/int64_ranges.py."""

    value: sympy.Expr = sympy.Integer(0)

    def describe(self) -> str:
        return f"{self.value} fits in int64"


@dataclasses.dataclass(frozen=True)
class GlobalStateGuard:
    """Grad mode, autocast, inference mode, torch functions disabled, default dtype: packed as
    trident_global_state() packs them."""

    state: int

    def describe(self) -> str:
        return f"global state: {describe_global_state(self.state)}"


@dataclasses.dataclass(frozen=True)
class DerivedConstantGuard:
    """Constant `index` is a view of constant `base` made at capture (capture/constant_views.py): it is still
    `distance` bytes from the base's data pointer, i.e. the base was not pointed at other memory since."""

    index: int
    base: int
    distance: int
    base_label: str = ""  # the base's name in explain ("layers.0.fc.weight"); empty: "constant #base"

    def describe(self) -> str:
        base = self.base_label or f"constant #{self.base}"
        return f"constant #{self.index}: a view of {base} made at capture, at its data + {self.distance} bytes"




@dataclasses.dataclass(frozen=True)
class AttributeGuard:
    """Module state the function read while it was captured (capture/module_state.py): entry `name` of `owner`'s
    instance __dict__ (a module's `training`, `eps`, ...), or with `in_dict`, item `name` of the dict `owner` (a
    module's _parameters, _buffers or _modules), is still what capture saw: the same bool/int/float/None value,
    the same object otherwise (a parameter rebound, a submodule replaced), or still absent (ABSENT).
    With `keys`, the dict `owner` holds exactly these keys in this order (the children of an iterated container,
    which a program ran one by one: one added, removed or moved changes what it computes); name/kind/value unused."""

    label: str  # how the user names it: "layers.0.drop.training"
    owner: object
    name: str
    in_dict: bool
    kind: LeafKind  # BOOL, INT, FLOAT, NONE: compared by value; OBJECT: by identity
    value: object
    keys: tuple[str, ...] | None = None

    def current(self) -> object:
        """The entry now (ABSENT if there is none), read as the native guard reads it: no descriptors."""
        if self.in_dict:
            store = self.owner
        else:
            try:
                store = object.__getattribute__(self.owner, "__dict__")  # a class's: a mappingproxy of its dict
            except AttributeError:
                return ABSENT
        return store.get(self.name, ABSENT) if isinstance(store, Mapping) else ABSENT

    def describe(self) -> str:
        if self.keys is not None:
            return f"{self.label}: keys {list(self.keys)} in this order"
        if self.value is ABSENT:
            return f"{self.label}: absent"
        if self.kind is LeafKind.OBJECT:
            return f"{self.label}: the same {type(self.value).__name__} object as at capture"
        return f"{self.label}: {self.kind.value} == {self.value!r}"

    def failure(self) -> str | None:
        if self.keys is not None:
            now_keys = tuple(self.owner) if isinstance(self.owner, dict) else None
            return None if now_keys == self.keys else f"{self.label}: keys changed since capture ({now_keys})"
        now = self.current()
        if self.value is ABSENT:
            return None if now is ABSENT else f"{self.label}: added since capture"
        if now is ABSENT:
            return f"{self.label}: removed since capture"
        if self.kind is LeafKind.OBJECT:
            return None if now is self.value else f"{self.label}: rebound to another {type(now).__name__} since capture"
        if classify(now) is not self.kind or not _same_scalar(now, self.value):
            return f"{self.label}: value mismatch: expected {self.value!r}, got {now!r}"
        return None


@dataclasses.dataclass
class GuardSet:
    sequences: list[SequenceGuard]
    tensors: list[TensorGuard]
    scalars: list[ScalarGuard]
    identities: list[IdentityGuard]
    bindings: list[SymbolBinding]
    properties: list[PropertyGuard]
    relations: list[RelationGuard]
    global_state: GlobalStateGuard
    identity_objects: list[object]  # held by the context, compared by address natively
    derived: list[DerivedConstantGuard] = dataclasses.field(default_factory=list)
    # The torch function mode stack at capture (bottom first), held by the context: a default device set with
    # torch.set_default_device or `with torch.device(...)` is such a mode, and the program bakes in the device
    # it gave factories. Compared by identity, or by device for default-device modes (default_device_of).
    function_modes: list[object] = dataclasses.field(default_factory=list)
    # Module attributes the function read (module_state.py), checked natively like the rest.
    attributes: list[AttributeGuard] = dataclasses.field(default_factory=list)
    # How explain and the disk cache name each tensor constant: its module path ("layers.0.attn.q_proj.weight")
    # where one is known, else "constant #i".
    constant_labels: dict[int, str] = dataclasses.field(default_factory=dict)

    def constant_label(self, index: int) -> str:
        return self.constant_labels.get(index, f"constant #{index}")

    def symbols(self) -> dict[sympy.Symbol, SymbolBinding]:
        return {b.symbol: b for b in self.bindings}


# ---------------------------------------------------------------------------------------------------------
# Global state


# ATen's TorchFunctionDisabledState, set by torch._C.DisableTorchFunctionSubclass / DisableTorchFunction.
_TORCH_FUNCTION_STATES = {
    abi.TORCH_FUNCTION_ENABLED: "torch functions on",
    abi.TORCH_FUNCTION_SUBCLASSES_DISABLED: "subclass torch functions off",
    abi.TORCH_FUNCTION_ALL_DISABLED: "torch functions off",
}


def torch_function_disabled_state() -> int:
    if torch._C._is_torch_function_all_disabled():
        return abi.TORCH_FUNCTION_ALL_DISABLED
    if torch._C._is_torch_function_enabled():
        return abi.TORCH_FUNCTION_ENABLED
    return abi.TORCH_FUNCTION_SUBCLASSES_DISABLED


def current_global_state() -> int:
    """What the runtime's trident_global_state returns now (its TRIDENT_STATE_* fields)."""
    autocast = any(
        torch.is_autocast_enabled(device) for device in ("cpu", "cuda")
    )
    return (
        (abi.STATE_GRAD_ENABLED if torch.is_grad_enabled() else 0)
        | (abi.STATE_AUTOCAST_ENABLED if autocast else 0)
        | (abi.STATE_INFERENCE_MODE if torch.is_inference_mode_enabled() else 0)
        | torch_function_disabled_state() << abi.STATE_TORCH_FUNCTION_SHIFT
        | dtype_code(torch.get_default_dtype()) << abi.STATE_DEFAULT_DTYPE_SHIFT
        | autocast_code("cpu") << abi.STATE_AUTOCAST_CPU_SHIFT
        | autocast_code("cuda") << abi.STATE_AUTOCAST_CUDA_SHIFT
    )


def autocast_code(device_type: str) -> int:
    """1 + the dtype code autocast casts to on `device_type`, or 0 when it is off there (as the runtime's
    trident_global_state packs it): the casts a capture records follow that dtype and device type."""
    if not torch.is_autocast_enabled(device_type):
        return 0
    return 1 + dtype_code(torch.get_autocast_dtype(device_type))


def current_function_modes() -> list[object]:
    """The torch function mode stack, bottom first (what trident_function_mode_matches reads natively)."""
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def default_device_of(mode: object) -> torch.device | None:
    """The device of a default-device mode (torch.set_default_device, `with torch.device(...)`), whose only
    state is that device, so two of them with equal devices act alike; None for any other mode (compared by
    identity). The native guard applies the same rule (trident_function_mode_matches)."""
    from torch.utils._device import DeviceContext

    return mode.device if type(mode) is DeviceContext else None  # type: ignore[attr-defined]


def same_function_modes(now: Sequence[object], captured: Sequence[object]) -> bool:
    return len(now) == len(captured) and all(
        a is b or (type(a) is type(b) and default_device_of(b) is not None and a.device == default_device_of(b))  # type: ignore[attr-defined]
        for a, b in zip(now, captured)
    )


def describe_function_modes(modes: Sequence[object]) -> str:
    if not modes:
        return "none"
    return ", ".join(
        f"{type(m).__name__}({default_device_of(m)})" if default_device_of(m) is not None else type(m).__name__
        for m in modes
    )


def _describe_autocast(state: int) -> str:
    shifts = (("cpu", abi.STATE_AUTOCAST_CPU_SHIFT), ("cuda", abi.STATE_AUTOCAST_CUDA_SHIFT))
    codes = [(device, (state >> shift) & abi.STATE_DTYPE_MASK) for device, shift in shifts]
    casts = [f"{device} {dtype_name(code - 1)}" for device, code in codes if code]
    if casts:
        return "on (" + ", ".join(casts) + ")"
    return "on" if state & abi.STATE_AUTOCAST_ENABLED else "off"


def describe_global_state(state: int) -> str:
    torch_functions = (state >> abi.STATE_TORCH_FUNCTION_SHIFT) & abi.STATE_TORCH_FUNCTION_MASK
    default_dtype = (state >> abi.STATE_DEFAULT_DTYPE_SHIFT) & abi.STATE_DTYPE_MASK
    return (
        f"grad {'on' if state & abi.STATE_GRAD_ENABLED else 'off'}, autocast {_describe_autocast(state)}, "
        f"inference mode {'on' if state & abi.STATE_INFERENCE_MODE else 'off'}, "
        + (f"{_TORCH_FUNCTION_STATES[torch_functions]}, " if torch_functions != abi.TORCH_FUNCTION_ENABLED else "")
        + f"default dtype {dtype_name(default_dtype)}"
    )


# ---------------------------------------------------------------------------------------------------------
# Building


def _expr(value: object) -> sympy.Expr:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return value.node.expr
    return sympy.Integer(int(value))  # type: ignore[call-overload]


def build_guards(facts: CallFacts, trace: Trace, names: dict[int, str] | None = None) -> GuardSet:
    """`names`: id(tensor) -> how the user names a constant (a module path), for explain and miss reasons."""
    guards = GuardSet([], [], [], [], [], [], [], GlobalStateGuard(current_global_state()), [])
    names = names or {}
    guards.constant_labels = {i: names[id(c)] for i, c in enumerate(trace.constants) if id(c) in names}
    guards.function_modes = current_function_modes()
    guards.sequences = [SequenceGuard(s) for s in facts.sequences]
    properties: list[tuple[LeafPath, str, int, sympy.Expr]] = []

    def tensor_properties(path: LeafPath, fake: torch.Tensor) -> None:
        for d in range(fake.dim()):
            properties.append((path, "size", d, _expr(fake.size(d))))
        properties.append((path, "offset", 0, _expr(fake.storage_offset())))
        for d in range(fake.dim()):
            properties.append((path, "stride", d, _expr(fake.stride(d))))

    for index, leaf in enumerate(facts.leaves):
        if leaf.kind is LeafKind.TENSOR:
            assert leaf.tensor is not None
            guards.tensors.append(TensorGuard(leaf.path, leaf.tensor))
            tensor_properties(leaf.path, trace.fake_leaves[index])  # type: ignore[arg-type]
        elif leaf.kind in (LeafKind.INT, LeafKind.FLOAT) and index in trace.fake_leaves:
            guards.scalars.append(ScalarGuard(leaf.path, leaf.kind, None))
            properties.append((leaf.path, leaf.kind.value, 0, _expr(trace.fake_leaves[index])))
        elif leaf.kind is LeafKind.OBJECT:
            guards.identities.append(
                IdentityGuard(leaf.path, len(guards.identity_objects), type(leaf.value).__name__)
            )
            guards.identity_objects.append(leaf.value)
        else:
            guards.scalars.append(ScalarGuard(leaf.path, leaf.kind, leaf.value))

    from .inputs import tensor_fact

    for i, (constant, fake) in enumerate(zip(trace.constants, trace.fake_constants)):
        if i in trace.derived_constants:  # Trident's own view: only its base can change
            base = trace.derived_constants[i]
            distance = byte_distance(constant, trace.constants[base])
            guards.derived.append(DerivedConstantGuard(i, base, distance, guards.constant_labels.get(base, "")))
            continue
        path = LeafPath(-1, (i,), f"{guards.constant_label(i)} {tuple(constant.shape)}")
        fact = tensor_fact(constant)
        if fact is None:
            from .. import exc

            raise exc.UnsupportedArgument(
                f"the function closes over a {type(constant).__name__} that is not a plain strided tensor"
                + (f" ({names[id(constant)]})" if id(constant) in names else "")
            )
        guards.tensors.append(TensorGuard(path, fact))
        tensor_properties(path, fake)

    bound: set[sympy.Symbol] = set()
    for path, prop, dim, expr in properties:
        if isinstance(expr, sympy.Symbol) and expr not in bound:
            bound.add(expr)
            guards.bindings.append(SymbolBinding(expr, path, prop, dim))
        elif prop == "float":  # capture/specialize.py retraces a float sympy bound to anything else as a constant
            from .. import exc

            raise exc.LoweringError(f"internal error: symbolic float '{path.name}' is {expr}, not its own symbol")
        else:
            guards.properties.append(PropertyGuard(path, prop, dim, expr))
    guards.relations = _shape_env_relations(trace, bound)
    return guards


def _shape_env_relations(trace: Trace, bound: set[sympy.Symbol]) -> list[RelationGuard]:
    shape_env = trace.shape_env
    relations: list[RelationGuard] = []
    seen: set[sympy.Basic] = set()
    for guard in shape_env.guards:
        # In terms of the symbols that survived replacement (s1 -> s0 after Eq(s0, s1)): the ones the fake
        # inputs' sizes carry, so the ones bound. Input properties equal to a replaced symbol are checked
        # against its replacement by PropertyGuards.
        expr = shape_env.simplify(guard.expr)
        if expr in seen or expr == sympy.true:
            continue
        seen.add(expr)
        relations.append(RelationGuard(expr))
    # Value ranges the trace assumed (sizes >= 2 once 0/1 were specialized away, bounds learned from guards).
    for symbol in sorted(bound, key=str):
        vr = shape_env.var_to_range.get(symbol)
        if vr is None:
            continue
        if isinstance(vr.lower, sympy.Integer):  # unbounded ends are int_oo, not Integer
            relations.append(RelationGuard(sympy.Ge(symbol, sympy.Integer(int(vr.lower)))))
        if isinstance(vr.upper, sympy.Integer):
            relations.append(RelationGuard(sympy.Le(symbol, sympy.Integer(int(vr.upper)))))
    unbound = set().union(*(r.expr.free_symbols for r in relations)) - bound if relations else set()
    if unbound:
        from .. import exc

        raise exc.UnsupportedConstruct(
            f"the trace relied on sizes that are not inputs' sizes or ints ({sorted(map(str, unbound))})"
        )
    return relations


# ---------------------------------------------------------------------------------------------------------
# Python explanations (miss reasons): the same checks as the native guards, phrased for the user.


def first_failure(
    guards: GuardSet, args: Sequence[object], constants: Sequence[object], *, int64: bool = True
) -> str | None:
    """Why a call does not match, in the user's words, or None if every guard holds: None exactly when the native
    guard accepts the call (tests/unit/test_guard_differential.py holds the two to that).

    The native guard computes ints as int64 with checked arithmetic: an int argument outside int64, or a relation
    whose computation leaves int64 on the way, fails it. `int64=False` leaves out the second, so relations hold or
    not in Python's exact ints alone: int64_ranges.int64_overflow asks that first, then which int leaves int64."""
    from .inputs import classify, tensor_fact

    for g in guards.sequences:
        try:
            value = leaf_value(g.fact.path, args, constants)
        except (IndexError, TypeError):
            return f"argument '{g.fact.path.name}': missing"
        if g.fact.kind == abi.SEQ_OBJECT:
            assert g.fact.cls is not None
            if type(value) is not g.fact.cls:
                return f"argument '{g.fact.path.name}': expected a {g.fact.cls.__qualname__}, got {type(value).__qualname__}"
            now = tuple(getattr(value, "__dict__", {}))
            if now != g.fact.keys:
                return f"argument '{g.fact.path.name}': attributes mismatch: expected {list(g.fact.keys)}, got {list(now)}"
            continue
        kind = {abi.SEQ_TUPLE: "tuple", abi.SEQ_LIST: "list", abi.SEQ_DICT: "dict"}[g.fact.kind]
        if type(value).__name__ != kind:
            return f"argument '{g.fact.path.name}': expected a {kind}, got {type(value).__name__}"
        if g.fact.kind == abi.SEQ_DICT and tuple(value) != g.fact.keys:  # type: ignore[arg-type]
            return f"argument '{g.fact.path.name}': keys mismatch: expected {list(g.fact.keys)}, got {list(value)}"  # type: ignore[arg-type]
        if len(value) != g.fact.length:  # type: ignore[arg-type]
            return f"argument '{g.fact.path.name}': length mismatch: expected {g.fact.length}, got {len(value)}"  # type: ignore[arg-type]
    for tg in guards.tensors:
        value = leaf_value(tg.path, args, constants)
        where = f"argument '{tg.path.name}'" if not tg.path.is_constant else tg.path.name
        if not isinstance(value, torch.Tensor):
            return f"{where}: expected a tensor, got {type(value).__name__}"
        fact = tensor_fact(value)
        if fact is None:
            return f"{where}: {type(value).__name__} with layout {value.layout} is not a plain strided tensor"
        why = tg.mismatch(fact)
        if why is not None:
            return f"{where}: {why}"
    for dg in guards.derived:
        if byte_distance(constants[dg.index], constants[dg.base]) != dg.distance:  # type: ignore[arg-type]
            return (
                f"{guards.constant_label(dg.base)} was pointed at other memory since constant #{dg.index} was made "
                "as its view"
            )
    for ag in guards.attributes:
        why = ag.failure()
        if why is not None:
            return why
    for sg in guards.scalars:
        value = leaf_value(sg.path, args, constants)
        if classify(value) is not sg.kind:
            return f"argument '{sg.path.name}': expected {sg.kind.value}, got {type(value).__name__}"
        if sg.value is not None and sg.kind is not LeafKind.NONE and not _same_scalar(value, sg.value):
            return f"argument '{sg.path.name}': value mismatch: expected {sg.value!r}, got {value!r}"
        if sg.value is None and sg.kind is LeafKind.FLOAT and not math.isfinite(value):  # type: ignore[arg-type]
            return f"argument '{sg.path.name}': {value!r} is not finite; this specialization takes any finite float"
        if sg.value is None and sg.kind is LeafKind.INT and not INT64_MIN <= value <= INT64_MAX:  # type: ignore[operator]
            return f"argument '{sg.path.name}': {value} is outside int64; compiled code takes ints as int64"
    for ig in guards.identities:
        value = leaf_value(ig.path, args, constants)
        if value is not guards.identity_objects[ig.constant_index]:
            return f"argument '{ig.path.name}': not the same {ig.type_name} object as at capture"
    env: dict[sympy.Symbol, int] = {}
    for b in guards.bindings:
        env[b.symbol] = _property(leaf_value(b.path, args, constants), b.prop, b.dim)
    for pg in guards.properties:
        actual = _property(leaf_value(pg.path, args, constants), pg.prop, pg.dim)
        expected = _evaluate(pg.expr, env)
        if expected is None or actual != int(expected):  # type: ignore[call-overload]
            where = pg.path.name if pg.path.is_constant else f"argument '{pg.path.name}'"
            what = {"offset": "storage offset mismatch", "int": "value mismatch"}.get(
                pg.prop, f"{pg.prop} mismatch at dim {pg.dim}"
            )
            shown = f"{pg.expr}, which divides by zero here" if expected is None else int(expected)  # type: ignore[call-overload]
            return f"{where}: {what}: expected {shown}, got {actual}"
    if int64:
        overflow = native_int64_failure(guards.relations, {s: v for s, v in env.items() if isinstance(v, int)})
        if overflow is not None:
            return f"this call computes {overflow}, which leaves int64 (compiled code computes ints as int64)"
    for rg in guards.relations:
        holds = _evaluate(rg.expr, env)
        if not holds:
            values = ", ".join(f"{s} = {env[s]}" for s in sorted(rg.expr.free_symbols, key=str) if s in env)  # type: ignore[index]
            what = "does not hold" if holds is not None else "divides by zero"
            return f"size relation {rg.expr} {what} ({values}); {_symbol_sources(rg, guards)}"
    state = current_global_state()
    if state != guards.global_state.state:
        return (
            f"global state mismatch: expected {describe_global_state(guards.global_state.state)}, "
            f"got {describe_global_state(state)}"
        )
    modes = current_function_modes()
    if not same_function_modes(modes, guards.function_modes):
        return (
            f"torch function modes changed (torch.set_default_device, `with torch.device(...)`, a "
            f"TorchFunctionMode): captured under {describe_function_modes(guards.function_modes)}, called under "
            f"{describe_function_modes(modes)}"
        )
    return None


def native_int64_failure(relations: Sequence[RelationGuard], env: dict[sympy.Symbol, int]) -> str | None:
    """'expr = value' for the first range guard whose int leaves int64, or the first step of an int relation that
    holds in Python's ints but that the native guard cannot compute in int64 (symbolic_ints.SymbolicIntLowering:
    every Add and Mul folded left to right with checked arithmetic); else None. Relations with float symbols or
    unbound symbols are skipped."""
    for rg in relations:
        if not rg.expr.free_symbols <= set(env) or has_float(rg.expr, is_float_expr):
            continue
        try:
            if isinstance(rg, Int64RangeGuard):
                value = python_int_value(rg.value, env)
                if not INT64_MIN <= value <= INT64_MAX:
                    return f"{rg.value} = {value}"
            elif not bool(rg.expr.xreplace(env)):
                continue  # a mismatch, not an overflow
        except (TypeError, ZeroDivisionError):  # the program raises ZeroDivisionError itself, as Python does
            continue
        try:
            check_relation(rg.expr, env)
        except LeavesInt64 as e:
            return f"{e.expr} = {e.value}"
        except (ZeroDivisionError, KeyError, TypeError):
            continue
    return None


def _evaluate(expr: sympy.Basic, env: Mapping[sympy.Symbol, object]) -> sympy.Basic | None:
    """`expr` with the call's symbol values, or None where that divides by zero: the native guard computes such an
    expression as a miss, whatever the relation around it (lowering/symbolic_ints.py)."""
    try:
        return expr.xreplace(env)  # type: ignore[arg-type]
    except ZeroDivisionError:
        return None


def _symbol_sources(rg: RelationGuard, guards: GuardSet) -> str:
    symbols = guards.symbols()
    parts = []
    for s in sorted(rg.expr.free_symbols, key=str):
        b = symbols.get(s)  # type: ignore[call-overload]
        if b is not None:
            parts.append(f"{s} is {_property_name(b.path, b.prop, b.dim)}")
    return ", ".join(parts)


def _property_name(path: LeafPath, prop: str, dim: int) -> str:
    if prop in ("int", "float"):
        return f"'{path.name}'"
    if prop == "offset":
        return f"'{path.name}'.storage_offset()"
    return f"'{path.name}'.{prop}({dim})"


def _property(value: object, prop: str, dim: int) -> int | sympy.Float:
    if prop == "int":
        return int(value)  # type: ignore[call-overload]
    if prop == "float":
        return sympy.Float(value, 53)  # type: ignore[arg-type]  # the double exactly
    assert isinstance(value, torch.Tensor)
    if prop == "size":
        return int(value.size(dim))
    if prop == "stride":
        return int(value.stride(dim))
    return int(value.storage_offset())


def _same_scalar(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return float_bits(a) == float_bits(b)  # bitwise, as the native guard compares
    return type(a) is type(b) and a == b


def group_alike(lines: list[str]) -> list[str]:
    """explain's guard lines with equal descriptions merged: "x, y: Tensor float32 cpu rank 2". A model's
    32 cache tensors or 100 weights then take a line per kind instead of one each; a group of more than three
    names its first two and last members and how many it has. First-seen order; a line without a label stays
    (once)."""
    groups: dict[str, list[str]] = {}  # description -> labels; an unlabeled line is its own description
    for line in lines:
        label, sep, description = line.partition(": ")
        labels = groups.setdefault(description if sep else line, [])
        if sep:
            labels.append(label)
    out = []
    for description, labels in groups.items():
        if not labels:
            out.append(description)
        elif len(labels) <= 3:
            out.append(f"{', '.join(labels)}: {description}")
        else:
            out.append(f"{labels[0]}, {labels[1]}, ... {labels[-1]} ({len(labels)} alike): {description}")
    return out


def describe_guards(guards: GuardSet) -> list[str]:
    """The guards for trident.explain, alike ones merged (group_alike)."""
    return group_alike(_guard_lines(guards))


def _guard_lines(guards: GuardSet) -> list[str]:
    """One line per guard."""
    lines = [g.describe() for g in guards.sequences]
    for tg in guards.tensors:
        lines.append(tg.describe())
    for tg in guards.tensors:
        sizes, strides, offset = _shape_text(tg.path, guards)
        lines.append(f"{tg.path.name}: sizes {sizes} strides {strides} offset {offset}")
    fixed_ints = {(p.path.param, p.path.items): p.expr for p in guards.properties if p.prop == "int"}
    for g in guards.scalars:
        key = (g.path.param, g.path.items)
        lines.append(f"{g.path.name}: int == {fixed_ints[key]}" if key in fixed_ints else g.describe())
    lines += [g.describe() for g in guards.identities]
    lines += [g.describe() for g in guards.derived]
    lines += [g.describe() for g in guards.attributes]
    for b in guards.bindings:
        if b.prop in ("int", "float"):
            lines.append(f"{b.symbol} = {_property_name(b.path, b.prop, b.dim)}")
    lines += [f"relation: {g.describe()}" for g in guards.relations]
    lines.append(guards.global_state.describe())
    lines.append(f"torch function modes: {describe_function_modes(guards.function_modes)}")
    return lines


def _shape_text(path: LeafPath, guards: GuardSet) -> tuple[str, str, str]:
    values: dict[tuple[str, int], str] = {}
    for b in guards.bindings:
        if b.path == path:
            values[(b.prop, b.dim)] = str(b.symbol)
    for p in guards.properties:
        if p.path == path:
            values[(p.prop, p.dim)] = str(p.expr)
    rank = max([d for (prop, d) in values if prop == "size"], default=-1) + 1
    sizes = "[" + ", ".join(values.get(("size", d), "?") for d in range(rank)) + "]"
    strides = "[" + ", ".join(values.get(("stride", d), "?") for d in range(rank)) + "]"
    return sizes, strides, values.get(("offset", 0), "?")


def see_through_guards(report: Report) -> list[AttributeGuard]:
    """Pins for the Python kernels a capture traced into (python_kernels.Report.depends): each (operator,
    dispatch key) still has the function registered then (its token in KernelVersions), or still none."""
    out = []
    for name, value in report.depends.items():
        kind = LeafKind.INT if isinstance(value, int) else LeafKind.OBJECT  # ABSENT: must stay absent
        op, key = name.rsplit("/", 1)
        out.append(AttributeGuard(f"Python kernel of {op} for {key}", KernelVersions, name, False, kind, value))
    return out
