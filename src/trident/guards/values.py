"""Guards on a call's values: the structure of its tuples, lists, dicts and state objects, its scalars, the objects
it passes that are compared by identity, and the truths of tensors the function read in Python."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from .. import abi
from ..capture.inputs import LeafKind, LeafPath, SequenceFact, classify
from ..capture.value_reads import ValueProgram, truth_of
from ..ir.mlir_text import I32, I64, PTR, Extern
from ..lowering import runtime_abi as native_abi
from ..native_numbers import fits_int64, float_bits
from .base import Explain, Guard, NativeCheck, PythonCheck

_SEQUENCE_KINDS = {abi.SEQ_TUPLE: "tuple", abi.SEQ_LIST: "list", abi.SEQ_DICT: "dict"}


@dataclasses.dataclass(frozen=True)
class SequenceGuard(Guard):
    """A tuple, list or dict of the call (its kind and length, a dict's keys in order), or a state object (its
    class and attribute names in order): what decides which leaf each position holds."""

    fact: SequenceFact

    def describe(self) -> str:
        return f"{self.fact.path.name}: {self.fact.describe()}"

    def check(self, call: PythonCheck) -> str | None:
        fact, where = self.fact, f"argument '{self.fact.path.name}'"
        try:
            value = call.value(fact.path)
        except (IndexError, TypeError):
            return f"{where}: missing"
        if fact.kind == abi.SEQ_OBJECT:
            assert fact.cls is not None
            if type(value) is not fact.cls:
                return f"{where}: expected a {fact.cls.__qualname__}, got {type(value).__qualname__}"
            now = tuple(getattr(value, "__dict__", {}))
            if now != fact.keys:
                return f"{where}: attributes mismatch: expected {list(fact.keys)}, got {list(now)}"
            return None
        kind = _SEQUENCE_KINDS[fact.kind]
        if type(value).__name__ != kind:
            return f"{where}: expected a {kind}, got {type(value).__name__}"
        if fact.kind == abi.SEQ_DICT and tuple(value) != fact.keys:  # type: ignore[arg-type]
            return f"{where}: keys mismatch: expected {list(fact.keys)}, got {list(value)}"  # type: ignore[arg-type]
        if len(value) != fact.length:  # type: ignore[arg-type]
            return f"{where}: length mismatch: expected {fact.length}, got {len(value)}"  # type: ignore[arg-type]
        return None

    def lower(self, native: NativeCheck) -> None:
        fact, obj = self.fact, native.access.object(self.fact.path)
        if fact.kind == abi.SEQ_OBJECT:  # its class and attribute names, in order
            native.check_true(native_abi.CHECK_OBJECT, [obj, native.constant(fact.cls), native.constant(fact.keys)])
            return
        native.check_true(native_abi.CHECK_SEQUENCE, [obj, native.fb.const(fact.kind), native.fb.const(fact.length)])
        if fact.kind == abi.SEQ_DICT:  # its keys, in order: they decide which value each position holds
            native.check_true(native_abi.DICT_KEYS_ARE, [native.access.object(fact.path), native.constant(fact.keys)])


@dataclasses.dataclass(frozen=True)
class ScalarGuard(Guard):
    """An int / float / bool / None leaf, or a str / torch.device / torch.dtype (VALUE: equal, of the same type).
    value None on an int or float means any int, any finite float (bound to a symbol)."""

    path: LeafPath
    kind: LeafKind
    value: object

    def describe(self) -> str:
        if self.kind is LeafKind.NONE:
            return f"{self.path.name}: None"
        if self.value is None:  # a symbolic float excludes inf and NaN (capture/trace.py _float_traced)
            return f"{self.path.name}: any {'finite ' if self.kind is LeafKind.FLOAT else ''}{self.kind.value}"
        return f"{self.path.name}: {self.kind.value} == {self.value!r}"

    @classmethod
    def describe_all(cls, guards: Sequence[Guard], explain: Explain) -> list[str]:
        """An int equal to an expression of other symbols (a PropertyGuard) shows that expression."""
        lines = []
        for g in guards:
            assert isinstance(g, ScalarGuard)
            fixed = explain.fixed_ints.get((g.path.param, g.path.items))
            lines.append(f"{g.path.name}: int == {fixed}" if fixed is not None else g.describe())
        return lines

    def check(self, call: PythonCheck) -> str | None:
        value, where = call.value(self.path), f"argument '{self.path.name}'"
        if classify(value) is not self.kind:
            return f"{where}: expected {self.kind.value}, got {type(value).__name__}"
        if self.value is not None and self.kind is not LeafKind.NONE and not same_scalar(value, self.value):
            return f"{where}: value mismatch: expected {self.value!r}, got {value!r}"
        if self.value is None and self.kind is LeafKind.FLOAT and not math.isfinite(value):  # type: ignore[arg-type]
            return f"{where}: {value!r} is not finite; this specialization takes any finite float"
        if self.value is None and self.kind is LeafKind.INT and not fits_int64(value):  # type: ignore[arg-type]
            return f"{where}: {value} is outside int64; compiled code takes ints as int64"
        return None

    def lower(self, native: NativeCheck) -> None:
        if self.kind is LeafKind.VALUE:
            check_equal(native, native.access.object(self.path), native.constant(self.value))
        else:
            lower_scalar(native, native.access.object(self.path), self.kind, self.value)


@dataclasses.dataclass(frozen=True)
class IdentityGuard(Guard):
    """Any other object: the very object seen at capture (held in the context's constants, so its address is
    never reused while the specialization lives)."""

    path: LeafPath
    constant_index: int  # into GuardSet.identity_objects
    type_name: str

    def describe(self) -> str:
        return f"{self.path.name}: the same {self.type_name} object as at capture"

    def check(self, call: PythonCheck) -> str | None:
        if call.value(self.path) is not call.identity_objects[self.constant_index]:
            return f"argument '{self.path.name}': not the same {self.type_name} object as at capture"
        return None

    def lower(self, native: NativeCheck) -> None:
        fb = native.fb
        expected = native.constant(native.identity_objects[self.constant_index])
        got = fb.fresh()
        fb.emit(f"{got} = llvm.ptrtoint {native.access.object(self.path)} : !llvm.ptr to i64")
        fb.check(fb.cmp("eq", got, address(native, expected)))


def same_scalar(a: object, b: object) -> bool:
    """Equal as the native guard compares scalars: floats bit for bit, others of the same type and equal."""
    if isinstance(a, float) and isinstance(b, float):
        return float_bits(a) == float_bits(b)
    return type(a) is type(b) and a == b


def address(native: NativeCheck, ptr: str) -> str:
    value = native.fb.fresh()
    native.fb.emit(f"{value} = llvm.ptrtoint {ptr} : !llvm.ptr to i64")
    return value


@dataclasses.dataclass(frozen=True)
class ValueGuard(Guard):
    """A tensor's truth that the function read in Python (`if mask.all():`, capture/value_reads.py): its value
    program, run on this call's tensors, must give the truth the compiling call gave. It computes on the device
    and reads the result back, as eager's read does, so these guards come last."""

    program: ValueProgram
    inputs: tuple[LeafPath, ...]  # the program's placeholders: the call's leaves, then constants (-1, (i,))
    number: int  # its place among the specialization's value programs: NativeCheck.value_programs names its code

    def describe(self) -> str:
        return f"{self.program.where} -> {self.program.truth} (a truth read from the call's tensors)"

    def check(self, call: PythonCheck) -> str | None:
        try:
            truth = truth_of(self.program, [call.value(path) for path in self.inputs])
        except Exception as e:  # noqa: BLE001 - the native form misses on any failure too
            return f"{self.program.where}: reading it failed ({type(e).__name__}: {e})"
        if truth is None:
            return f"{self.program.where}: not read while a CUDA stream is capturing (the read would end the capture)"
        if truth != self.program.truth:
            return f"{self.program.where} -> {truth}, compiled for {self.program.truth}"
        return None

    def lower(self, native: NativeCheck) -> None:
        fb = native.fb
        result = fb.alloca(1, PTR, "value")
        fb.store(fb.null(), PTR, result)
        program = Extern(native.value_programs[self.number], (PTR, PTR, PTR), I32)
        status = fb.call(program, [native.access.ctx, native.access.slots, result])
        truth = fb.call(native_abi.VALUE_TRUTH, [status, fb.load(result, PTR)])  # type: ignore[list-item]
        fb.check(fb.cmp("eq", truth, fb.const(int(self.program.truth), I32), I32))  # type: ignore[arg-type]


def check_equal(native: NativeCheck, obj: str, expected: str) -> None:
    """`obj` == `expected` as Python compares them, for values compared by equality (str, device, dtype)."""
    native.check_true(native_abi.EQUALS, [obj, expected])


def lower_scalar(native: NativeCheck, obj: str, kind: LeafKind, value: object) -> None:
    """`obj` is a None, or an int / float / bool equal to `value` (None: any int, any finite float)."""
    fb = native.fb
    if kind is LeafKind.NONE:
        native.check_true(native_abi.IS_NONE, [obj])
        return
    reader = {LeafKind.INT: native_abi.READ_INT, LeafKind.FLOAT: native_abi.READ_FLOAT,
              LeafKind.BOOL: native_abi.READ_BOOL}[kind]  # fmt: skip
    tmp = fb.alloca(1, I64, "scalar")
    native.check_true(reader, [obj, tmp])
    if value is None and kind is LeafKind.FLOAT:  # any finite float: exponent bits not all ones (inf, NaN)
        exponent = fb.binary("andi", fb.load(tmp), fb.const(0x7FF0_0000_0000_0000))
        fb.check(fb.cmp("ne", exponent, fb.const(0x7FF0_0000_0000_0000)))
        return
    if value is None:  # any int: its value is bound to a symbol
        return
    if kind is LeafKind.FLOAT:
        # Compare bit patterns: -0.0 != 0.0 and NaN == the same NaN, as Python's capture saw the value.
        expected = float_bits(float(value))  # type: ignore[arg-type]
    else:
        expected = int(value)  # type: ignore[call-overload]
    fb.check(fb.cmp("eq", fb.load(tmp), fb.const(expected)))
