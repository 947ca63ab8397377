"""GuardSet: every guard of one specialization, by kind, and the order in which each form visits the kinds.

Made once (build.guard_set) and frozen: nothing adds to a guard set after it is built. The disk cache stores it
(cache/record.py, stripped of live objects) and rebinds those objects in a loading process.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence

import sympy

from .base import Guard, NativeCheck, PythonCheck
from .global_state import FunctionModesGuard, GlobalStateGuard
from .module_state import AttributeGuard
from .symbols import PropertyGuard, RelationGuard, SymbolBinding, explain_symbols
from .tensors import DerivedConstantGuard, TensorGuard
from .values import IdentityGuard, ScalarGuard, SequenceGuard, ValueGuard


@dataclasses.dataclass(frozen=True)
class GuardSet:
    sequences: tuple[SequenceGuard, ...]
    tensors: tuple[TensorGuard, ...]
    derived: tuple[DerivedConstantGuard, ...]
    attributes: tuple[AttributeGuard, ...]  # module state, hooks and Python kernels the capture read
    scalars: tuple[ScalarGuard, ...]
    identities: tuple[IdentityGuard, ...]
    bindings: tuple[SymbolBinding, ...]
    properties: tuple[PropertyGuard, ...]
    relations: tuple[RelationGuard, ...]
    global_state: GlobalStateGuard
    function_modes: FunctionModesGuard
    identity_objects: tuple[object, ...] = ()  # IdentityGuard's objects, held by the context
    # How explain and the disk cache name each tensor constant: its module path ("layers.0.attn.q_proj.weight")
    # where one is known, else "constant #i".
    constant_labels: Mapping[int, str] = dataclasses.field(default_factory=dict)
    values: tuple[ValueGuard, ...] = ()  # truths of tensors the function read in Python

    # The kinds in the order each form visits them (field names, or the splits below). Natively, what tells two
    # specializations of one structure apart before what they share: process-wide state; a sequence before its
    # items; scalars and identities (a specialization compiled for another value of an int misses at once); the
    # call's own tensors and the sizes, strides and offsets they have as constants (a model's prefill
    # specialization rejects a decode step's call there, not after its ~150 weights and its module state); then
    # module state, the tensors the function closes over, symbols bound before the properties and relations that
    # use them. A tensor's type and rank are checked before its layout is loaded. Last, the truths read from
    # tensors: they compute on the device and read back, and their programs read the tensors checked before. In
    # Python, the order gives the most direct miss reason first.
    NATIVE_ORDER = ("global_state", "function_modes", "sequences", "scalars", "identities", "argument_tensors",
                    "argument_constant_layouts", "attributes", "constant_tensors", "derived", "bindings",
                    "other_properties", "relations", "values")  # fmt: skip
    CHECK_ORDER = ("sequences", "tensors", "derived", "attributes", "scalars", "identities", "bindings", "properties",
                   "relations", "global_state", "function_modes", "values")  # fmt: skip
    EXPLAIN_ORDER = ("sequences", "tensors", "scalars", "identities", "derived", "attributes", "bindings",
                     "properties", "relations", "global_state", "function_modes", "values")  # fmt: skip

    @property
    def argument_tensors(self) -> tuple[TensorGuard, ...]:
        return tuple(g for g in self.tensors if not g.path.is_constant)

    @property
    def constant_tensors(self) -> tuple[TensorGuard, ...]:
        return tuple(g for g in self.tensors if g.path.is_constant)

    @property
    def argument_constant_layouts(self) -> tuple[PropertyGuard, ...]:
        """Sizes, strides and offsets of the call's tensors that are plain integers (no symbol to bind first)."""
        return tuple(p for p in self.properties if _argument_constant_layout(p))

    @property
    def other_properties(self) -> tuple[PropertyGuard, ...]:
        return tuple(p for p in self.properties if not _argument_constant_layout(p))

    def constant_label(self, index: int) -> str:
        return self.constant_labels.get(index, f"constant #{index}")

    def kinds(self, order: Sequence[str]) -> Iterator[tuple[type[Guard], Sequence[Guard]]]:
        """(kind, its guards) for each field in `order`."""
        for name in order:
            value = getattr(self, name)
            yield _KINDS[SPLITS.get(name, name)], (value,) if isinstance(value, Guard) else value

    def lower(self, native: NativeCheck) -> None:
        """Emit every guard's native check into the guard function (lowering/lower_guards.py)."""
        for kind, guards in self.kinds(self.NATIVE_ORDER):
            kind.lower_all(guards, native)


def _argument_constant_layout(p: PropertyGuard) -> bool:
    return not p.path.is_constant and p.prop != "int" and isinstance(p.expr, sympy.Integer)


_KINDS: dict[str, type[Guard]] = {
    "sequences": SequenceGuard, "tensors": TensorGuard, "derived": DerivedConstantGuard, "attributes": AttributeGuard,
    "scalars": ScalarGuard, "identities": IdentityGuard, "bindings": SymbolBinding, "properties": PropertyGuard,
    "relations": RelationGuard, "global_state": GlobalStateGuard, "function_modes": FunctionModesGuard,
    "values": ValueGuard,
}  # fmt: skip
# The parts NATIVE_ORDER visits a field in, each the field's guards that satisfy a test (together: all of them).
SPLITS: dict[str, str] = {
    "argument_tensors": "tensors", "constant_tensors": "tensors",
    "argument_constant_layouts": "properties", "other_properties": "properties",
}  # fmt: skip


def first_failure(
    guards: GuardSet, args: Sequence[object], constants: Sequence[object], *, int64: bool = True
) -> str | None:
    """Why a call does not match, in the user's words, or None if every guard holds: None exactly when the native
    guard accepts the call (tests/unit/test_guard_differential.py holds the two to that).

    The native guard computes ints as int64 with checked arithmetic: an int argument outside int64, or a relation
    whose computation leaves int64 on the way, fails it. `int64=False` leaves out the second (base.PythonCheck)."""
    call = PythonCheck(args, constants, guards.identity_objects, guards.constant_labels, int64=int64)
    for kind, group in guards.kinds(GuardSet.CHECK_ORDER):
        why = kind.check_all(group, call)
        if why is not None:
            return why
    return None


def describe_guards(guards: GuardSet) -> list[str]:
    """The guards for trident.explain, alike ones merged (group_alike)."""
    return group_alike(guard_lines(guards))


def guard_lines(guards: GuardSet) -> list[str]:
    """One line per guard (the symbol guards of tensors and ints within those leaves' lines)."""
    explain = explain_symbols(guards.bindings, guards.properties)
    return [line for kind, group in guards.kinds(GuardSet.EXPLAIN_ORDER) for line in kind.describe_all(group, explain)]


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
