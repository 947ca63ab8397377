"""Guards on sizes, strides, storage offsets, ints and floats traced as symbols, and on the relations among them.

Every symbol is bound from the first input property that is exactly that symbol (SymbolBinding); every other
property must equal its expression (PropertyGuard); then the ShapeEnv's relations and value ranges must hold
(RelationGuard), and every int the program computes must fit in int64 (Int64RangeGuard). Both sides compute the
expressions as compiled code does: ints as int64 with checked arithmetic (native_numbers.py), where an overflow or
a division by zero is a miss, whatever the relation around it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import sympy
import torch

from ..capture.inputs import LeafPath
from ..capture.specialize import is_float_expr
from ..ir.mlir_text import F64, I64, PTR
from ..lowering import runtime_abi as native_abi
from ..native_numbers import INT64_MAX, INT64_MIN, LeavesInt64, check_relation, has_float, python_int_value
from .base import Explain, Guard, LeafKey, NativeCheck, PythonCheck


@dataclasses.dataclass(frozen=True)
class SymbolBinding(Guard):
    """Symbol `symbol` takes the value of a property of a leaf ("size"/"stride"/"offset", or "int"/"float").
    Never fails by itself: the properties and relations after it compare with the values it binds."""

    symbol: sympy.Symbol
    path: LeafPath
    prop: str
    dim: int

    def describe(self) -> str:
        return f"{self.symbol} = {property_name(self.path, self.prop, self.dim)}"

    @classmethod
    def describe_all(cls, guards: Sequence[Guard], explain: Explain) -> list[str]:
        """The symbols of ints and floats; a tensor's show in its layout line (tensors.TensorGuard)."""
        return [g.describe() for g in guards if isinstance(g, SymbolBinding) and g.prop in ("int", "float")]

    def check(self, call: PythonCheck) -> str | None:
        call.env[self.symbol] = property_value(call.value(self.path), self.prop, self.dim)
        call.sources[self.symbol] = (self.path, self.prop, self.dim)
        return None

    def lower(self, native: NativeCheck) -> None:
        (native.floats if self.prop == "float" else native.env)[self.symbol] = read_property(
            native, self.path, self.prop, self.dim
        )


@dataclasses.dataclass(frozen=True)
class PropertyGuard(Guard):
    """size(dim) / stride(dim) / storage_offset() of a tensor leaf, or an int leaf's value ("int"), equals
    `expr` (a sympy integer or an expression over bound symbols). Shown in its leaf's explain line."""

    path: LeafPath
    prop: str  # "size", "stride", "offset", "int"
    dim: int
    expr: sympy.Expr

    @classmethod
    def describe_all(cls, guards: Sequence[Guard], explain: Explain) -> list[str]:
        return []  # in the lines of the tensors and ints they belong to (explain_symbols)

    def check(self, call: PythonCheck) -> str | None:
        actual = property_value(call.value(self.path), self.prop, self.dim)
        expected = _evaluate(self.expr, call.env)
        if expected is not None and actual == int(expected):  # type: ignore[call-overload]
            return None
        where = self.path.name if self.path.is_constant else f"argument '{self.path.name}'"
        what = {"offset": "storage offset mismatch", "int": "value mismatch"}.get(
            self.prop, f"{self.prop} mismatch at dim {self.dim}"
        )
        shown = f"{self.expr}, which divides by zero here" if expected is None else int(expected)  # type: ignore
        return f"{where}: {what}: expected {shown}, got {actual}"

    @classmethod
    def lower_all(cls, guards: Sequence[Guard], native: NativeCheck) -> None:
        """All properties in one check (one branch for a tensor's whole layout)."""
        fb = native.fb
        conditions = []
        for g in guards:
            assert isinstance(g, PropertyGuard)
            actual = read_property(native, g.path, g.prop, g.dim)
            conditions.append(fb.cmp("eq", actual, native.symbolic.int_expr(g.expr)))
        if conditions:
            fb.check(fb.all_of(conditions))


@dataclasses.dataclass(frozen=True)
class RelationGuard(Guard):
    """A relation among symbols the traced program relied on (from the ShapeEnv: its guards and value ranges)."""

    expr: sympy.Basic

    def describe(self) -> str:
        return f"relation: {self.expr}"

    @classmethod
    def check_all(cls, guards: Sequence[Guard], call: PythonCheck) -> str | None:
        """First whether computing any of them leaves int64 natively (a miss there, whatever the relation), then
        whether each holds in Python's exact ints."""
        relations = [g for g in guards if isinstance(g, RelationGuard)]
        if call.int64:
            overflow = native_int64_failure(relations, {s: v for s, v in call.env.items() if isinstance(v, int)})
            if overflow is not None:
                return f"this call computes {overflow}, which leaves int64 (compiled code computes ints as int64)"
        return super().check_all(relations, call)

    def check(self, call: PythonCheck) -> str | None:
        holds = _evaluate(self.expr, call.env)
        if holds:
            return None
        env = call.env
        symbols = sorted(self.expr.free_symbols, key=str)
        values = ", ".join(f"{s} = {env[s]}" for s in symbols if s in env)  # type: ignore[index]
        what = "does not hold" if holds is not None else "divides by zero"
        sources = ", ".join(
            f"{s} is {property_name(*call.sources[s])}" for s in symbols if s in call.sources  # type: ignore[index]
        )
        return f"size relation {self.expr} {what} ({values}); {sources}"

    def lower(self, native: NativeCheck) -> None:
        # Float symbols compare as Python compared the double (IEEE, NaN unequal).
        native.fb.check(native.symbolic.bool_expr(self.expr))


@dataclasses.dataclass(frozen=True)
class Int64RangeGuard(RelationGuard):
    """`value`, an int the program computes, fits in int64 (`expr` is `value <= INT64_MAX`, lowered like every
    relation: computing `value` with checked arithmetic is the check). Made by int64_ranges.py."""

    value: sympy.Expr = sympy.S.Zero

    def describe(self) -> str:
        return f"relation: {self.value} fits in int64"


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


def explain_symbols(bindings: Sequence[SymbolBinding], properties: Sequence[PropertyGuard]) -> Explain:
    """What explain shows of the symbol guards in their leaves' lines: each property's symbol or expression, and
    the ints fixed to an expression."""
    layout: dict[LeafPath, dict[tuple[str, int], str]] = {}
    for b in bindings:
        layout.setdefault(b.path, {})[(b.prop, b.dim)] = str(b.symbol)
    for p in properties:
        layout.setdefault(p.path, {})[(p.prop, p.dim)] = str(p.expr)
    fixed_ints: dict[LeafKey, sympy.Expr] = {
        (p.path.param, p.path.items): p.expr for p in properties if p.prop == "int"
    }
    return Explain(layout, fixed_ints)


def property_value(value: object, prop: str, dim: int) -> int | sympy.Float:
    """A leaf's property as the native guard reads it (a float as the double it is, exactly)."""
    if prop == "int":
        return int(value)  # type: ignore[call-overload]
    if prop == "float":
        return sympy.Float(value, 53)  # type: ignore[arg-type]
    assert isinstance(value, torch.Tensor)
    if prop == "size":
        return int(value.size(dim))
    if prop == "stride":
        return int(value.stride(dim))
    return int(value.storage_offset())


def property_name(path: LeafPath, prop: str, dim: int) -> str:
    if prop in ("int", "float"):
        return f"'{path.name}'"
    if prop == "offset":
        return f"'{path.name}'.storage_offset()"
    return f"'{path.name}'.{prop}({dim})"


def read_property(native: NativeCheck, path: LeafPath, prop: str, dim: int) -> str:
    """The property's value in the guard function: an int or float leaf read (a miss if it is none), or a field of
    the tensor's meta its TensorGuard read."""
    fb = native.fb
    if prop in ("float", "int"):
        type_, reader = (F64, native_abi.READ_FLOAT) if prop == "float" else (I64, native_abi.READ_INT)
        tmp = fb.alloca(1, type_, prop)
        native.check_true(reader, [native.access.object(path), tmp])
        return fb.load(tmp, type_)
    meta = native.metas[(path.param, path.items)]
    if prop == "offset":
        return fb.load(fb.gep(meta, native_abi.META_STORAGE_OFFSET))
    field = native_abi.META_SIZES if prop == "size" else native_abi.META_STRIDES
    if (meta, field) not in native.arrays:
        native.arrays[(meta, field)] = fb.load(fb.gep(meta, field), PTR)
    return fb.load(fb.gep(native.arrays[(meta, field)], dim))


def _evaluate(expr: sympy.Basic, env: Mapping[sympy.Symbol, object]) -> sympy.Basic | None:
    """`expr` with the call's symbol values, or None where that divides by zero: the native guard computes such an
    expression as a miss, whatever the relation around it (lowering/symbolic_ints.py)."""
    try:
        return expr.xreplace(env)  # type: ignore[arg-type]
    except ZeroDivisionError:
        return None
