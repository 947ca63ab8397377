"""The protocol every guard kind follows, and what one check of a call carries from guard to guard.

A kind is a frozen dataclass deriving from Guard, with its three forms side by side: describe (explain),
check (Python) and lower (native). GuardSet (guard_set.py) holds a specialization's guards by kind and calls the
group forms (describe_all, check_all, lower_all) kind by kind, in the order of each form; the group forms run the
per-guard ones unless a kind's guards are read together.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import sympy

from ..capture.inputs import LeafPath, leaf_value
from ..ir.mlir_text import Extern, FunctionBuilder
from ..lowering.leaf_access import ConstantPool, LeafAccess
from ..lowering.symbolic_ints import SymbolicIntLowering

LeafKey = tuple[int, tuple[int, ...]]  # a leaf path without its name: (param, items)


class Guard:
    """One guard kind. Subclasses implement the three per-guard forms, or override a group form."""

    def describe(self) -> str:
        """Its line in trident.explain: "<what>: <what it must be>" (guard_set.group_alike merges alike lines)."""
        raise NotImplementedError

    def check(self, call: PythonCheck) -> str | None:
        """Why `call` fails this guard, in the user's words; None if it holds."""
        raise NotImplementedError

    def lower(self, native: NativeCheck) -> None:
        """Emit the native check into the guard function: it exits to the miss block unless the guard holds."""
        raise NotImplementedError

    @classmethod
    def describe_all(cls, guards: Sequence[Guard], explain: Explain) -> list[str]:
        return [g.describe() for g in guards]

    @classmethod
    def check_all(cls, guards: Sequence[Guard], call: PythonCheck) -> str | None:
        for g in guards:
            why = g.check(call)
            if why is not None:
                return why
        return None

    @classmethod
    def lower_all(cls, guards: Sequence[Guard], native: NativeCheck) -> None:
        for g in guards:
            g.lower(native)


class Explain:
    """What the explain lines of one guard set share: what the symbol guards say of each leaf, shown in the lines
    of the tensors and ints they belong to (symbols.explain_symbols makes it)."""

    def __init__(
        self, layout: Mapping[LeafPath, Mapping[tuple[str, int], str]], fixed_ints: Mapping[LeafKey, sympy.Expr]
    ) -> None:
        self.layout = layout  # leaf -> (property, dim) -> its symbol or expression, as text
        self.fixed_ints = fixed_ints  # int leaf -> the expression it must equal


class PythonCheck:
    """One call checked in Python (first_failure): its values, and what the guards checked so far learned.

    `int64=False` leaves out the int64 arithmetic of relations (symbols.RelationGuard.check_all), so relations hold
    or not in Python's exact ints alone: int64_ranges.int64_overflow asks that first, then which int leaves int64."""

    def __init__(
        self, args: Sequence[object], constants: Sequence[object], identity_objects: Sequence[object],
        constant_labels: Mapping[int, str], *, int64: bool = True,
    ) -> None:  # fmt: skip
        self.args = args
        self.constants = constants
        self.identity_objects = identity_objects
        self.constant_labels = constant_labels
        self.int64 = int64
        self.env: dict[sympy.Symbol, int | sympy.Float] = {}  # symbol -> this call's value (symbols.SymbolBinding)
        self.sources: dict[sympy.Symbol, tuple[LeafPath, str, int]] = {}  # symbol -> (leaf, property, dim) it is

    def value(self, path: LeafPath) -> object:
        return leaf_value(path, self.args, self.constants)

    def constant_label(self, index: int) -> str:
        return self.constant_labels.get(index, f"constant #{index}")


class NativeCheck:
    """The guard function being emitted: its builder, its reads of the call's leaves, and what earlier guards read
    that later ones use (each tensor's TridentTensorMeta, the symbols' values).

    Every check exits early to a block returning a miss, so the order of the kinds (GuardSet.NATIVE_ORDER) is a
    matter of safety: a leaf is read only after what it is read through was checked."""

    def __init__(
        self, fb: FunctionBuilder, access: LeafAccess, pool: ConstantPool, identity_objects: Sequence[object],
        value_programs: Sequence[str] = (),
    ) -> None:
        self.fb = fb
        self.access = access
        self.pool = pool
        self.identity_objects = identity_objects
        self.value_programs = value_programs  # the symbols of the specialization's value programs (ValueGuard)
        self.metas: dict[LeafKey, str] = {}  # a tensor leaf's meta, filled by its TensorGuard
        self.arrays: dict[tuple[str, int], str] = {}  # (meta, sizes/strides field) -> the loaded array pointer
        self.env: dict[sympy.Symbol, str] = {}  # int symbols -> i64
        self.floats: dict[sympy.Symbol, str] = {}  # float symbols -> f64
        # An expression that overflows or divides by zero for these inputs cannot prove the guard: a miss.
        self.symbolic = SymbolicIntLowering(fb, self.env, lambda ok, kind, message: fb.check(ok), self.floats)

    def constant(self, obj: object) -> str:
        """PyObject* of `obj`, held by the specialization's context (so its address is never reused)."""
        return self.access.constant(self.pool.add(obj))

    def check_true(self, extern: Extern, args: list[str]) -> None:
        """Call a runtime function that answers 1 or 0, and miss on 0."""
        ok = self.fb.call(extern, args)
        assert ok is not None
        self.fb.check_nonzero(ok)
