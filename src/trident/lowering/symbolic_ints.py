"""Lowering symbolic integer expressions (sympy, from the ShapeEnv) to arith on i64, and checked i64 arithmetic.

Semantics follow Python ints: FloorDiv rounds toward -inf, Mod takes the divisor's sign. Python ints never
wrap and `//` or `%` by zero raises, while i64 arithmetic wraps silently and a division by zero traps
(SIGFPE kills the process). So every operation that can go wrong reports its condition to the caller's
`fail_unless(ok, kind, message)`: guards turn a failure into a miss, the host program into Python's
exception (ZeroDivisionError) or OverflowError, never into a wrong value or a crash."""
from __future__ import annotations

from collections.abc import Callable

import sympy
from torch.utils._sympy import functions as torch_sympy

from .. import exc
from ..ir.mlir_text import F64, I1, I64, FunctionBuilder
from . import runtime_abi as abi

FailUnless = Callable[[str, int, str], None]  # (ok: i1 SSA value, TRIDENT_EXC_* kind, message)

_OVERFLOW_INTRINSIC = {"addi": "sadd", "subi": "ssub", "muli": "smul"}
INT64_MIN = -(2**63)


def checked_int_op(fb: FunctionBuilder, op: str, a: str, b: str, fail_unless: FailUnless, what: str) -> str:
    """a `op` b on i64 for op in addi/subi/muli/floordivsi/divsi/mod, failing where Python would not wrap."""
    too_wide = f"{what}: integer result does not fit in 64 bits (compiled code computes ints as int64)"
    if op in _OVERFLOW_INTRINSIC:
        value, overflow = fb.with_overflow(_OVERFLOW_INTRINSIC[op], a, b)
        fail_unless(fb.not_(overflow), abi.EXC_OVERFLOW, too_wide)
        return value
    fail_unless(fb.cmp("ne", b, fb.const(0)), abi.EXC_ZERO_DIVISION, "integer division or modulo by zero")
    # INT64_MIN // -1 is the one quotient that does not fit (and traps like a division by zero).
    wraps = fb.binary("andi", fb.cmp("eq", a, fb.const(INT64_MIN)), fb.cmp("eq", b, fb.const(-1)), I1)
    fail_unless(fb.not_(wraps), abi.EXC_OVERFLOW, too_wide)
    if op == "mod":
        return python_mod(fb, a, b)
    return fb.binary(op, a, b)


class SymbolicIntLowering:
    def __init__(self, fb: FunctionBuilder, env: dict[sympy.Symbol, str], fail_unless: FailUnless) -> None:
        self.fb = fb
        self.env = env  # symbol -> i64 SSA value
        self.fail_unless = fail_unless
        # Lowered subexpressions: sympy does not share them (triton.next_power_of_2 of a size is a tree
        # that repeats each level), so without this the emitted code would grow exponentially.
        self._lowered: dict[sympy.Basic, str] = {}

    def int_expr(self, expr: sympy.Basic) -> str:
        if expr not in self._lowered:
            self._lowered[expr] = self._int_expr(expr)
        return self._lowered[expr]

    def _int_expr(self, expr: sympy.Basic) -> str:
        fb = self.fb
        if isinstance(expr, sympy.Integer) or (isinstance(expr, sympy.Number) and expr == int(expr)):
            return fb.const(int(expr))
        if isinstance(expr, sympy.Symbol):
            if expr not in self.env:
                raise exc.LoweringError(f"symbol {expr} is not bound to any input property")
            return self.env[expr]
        if isinstance(expr, sympy.Add):
            return self._fold_checked("addi", [self.int_expr(a) for a in expr.args], expr)
        if isinstance(expr, sympy.Mul):
            return self._fold_checked("muli", [self.int_expr(a) for a in expr.args], expr)
        division = {torch_sympy.FloorDiv: "floordivsi", torch_sympy.CleanDiv: "divsi", torch_sympy.PythonMod: "mod",
                    torch_sympy.Mod: "mod", sympy.Mod: "mod"}  # fmt: skip
        if type(expr) in division:
            a, b = self.int_expr(expr.args[0]), self.int_expr(expr.args[1])
            return checked_int_op(fb, division[type(expr)], a, b, self.fail_unless, str(expr))
        if isinstance(expr, (sympy.Max, torch_sympy.Max)):
            return self._fold("maxsi", [self.int_expr(a) for a in expr.args])
        if isinstance(expr, (sympy.Min, torch_sympy.Min)):
            return self._fold("minsi", [self.int_expr(a) for a in expr.args])
        bitwise = {torch_sympy.BitwiseFn_bitwise_or: "ori", torch_sympy.BitwiseFn_bitwise_and: "andi",
                   torch_sympy.BitwiseFn_bitwise_xor: "xori", torch_sympy.LShift: "shli",
                   torch_sympy.RShift: "shrsi"}  # fmt: skip
        if type(expr) in bitwise:  # Python's shifts and bitwise ops on ints match two's complement i64
            return fb.binary(bitwise[type(expr)], self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and 0 < int(expr.exp) <= 8:
            base = self.int_expr(expr.base)
            return self._fold_checked("muli", [base] * int(expr.exp), expr)
        raise exc.LoweringError(f"cannot lower symbolic integer expression {expr} ({type(expr).__name__})")

    def bool_expr(self, expr: sympy.Basic) -> str:
        fb = self.fb
        if expr is sympy.true or expr == sympy.true:
            return fb.const(True, I1)
        if expr is sympy.false or expr == sympy.false:
            return fb.const(False, I1)
        predicates = {
            sympy.Eq: "eq", sympy.Ne: "ne", sympy.StrictLessThan: "slt", sympy.LessThan: "sle",
            sympy.StrictGreaterThan: "sgt", sympy.GreaterThan: "sge",
        }  # fmt: skip
        for cls, predicate in predicates.items():
            if isinstance(expr, cls):
                return fb.cmp(predicate, self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, sympy.And):
            return self._fold("andi", [self.bool_expr(a) for a in expr.args], I1)
        if isinstance(expr, sympy.Or):
            return self._fold("ori", [self.bool_expr(a) for a in expr.args], I1)
        if isinstance(expr, sympy.Not):
            return fb.not_(self.bool_expr(expr.args[0]))
        raise exc.LoweringError(f"cannot lower symbolic condition {expr} ({type(expr).__name__})")

    def _fold_checked(self, op: str, values: list[str], expr: sympy.Basic) -> str:
        result = values[0]
        for v in values[1:]:
            result = checked_int_op(self.fb, op, result, v, self.fail_unless, str(expr))
        return result

    def _fold(self, op: str, values: list[str], type_: str = I64) -> str:
        result = values[0]
        for v in values[1:]:
            result = self.fb.binary(op, result, v, type_)
        return result


def python_mod(fb: FunctionBuilder, a: str, b: str) -> str:
    """a % b with Python's sign rule: a - floordiv(a, b) * b, for b != 0 and not (INT64_MIN, -1). The product
    may wrap, but the difference fits (it lies in [0, b) or (b, 0]), and wrapping arithmetic gets it right."""
    q = fb.binary("floordivsi", a, b)
    return fb.binary("subi", a, fb.binary("muli", q, b))


_FLOAT_PREDICATES = {
    sympy.StrictLessThan: "olt", sympy.LessThan: "ole", sympy.StrictGreaterThan: "ogt", sympy.GreaterThan: "oge",
    sympy.Ne: "une",
}  # fmt: skip


def float_relation(fb: FunctionBuilder, expr: sympy.Basic, env: dict[sympy.Symbol, str]) -> str:
    """An i1 for a relation over float symbols (f64 SSA values in env) of the one form the tracer keeps symbolic
    (capture/specialize.py): a symbol compared with a number, or and/or/not of such comparisons. The comparison
    is the one Python made on the double at capture, with IEEE semantics (NaN compares unequal)."""
    if isinstance(expr, (sympy.And, sympy.Or)):
        op = "andi" if isinstance(expr, sympy.And) else "ori"
        values = [float_relation(fb, a, env) for a in expr.args]
        result = values[0]
        for v in values[1:]:
            result = fb.binary(op, result, v, I1)
        return result
    if isinstance(expr, sympy.Not):
        return fb.not_(float_relation(fb, expr.args[0], env))
    predicate = _FLOAT_PREDICATES.get(type(expr))
    if predicate is None:
        raise exc.LoweringError(f"cannot lower float condition {expr} ({type(expr).__name__})")
    a, b = (_float_operand(fb, side, env) for side in expr.args)
    name = fb.fresh("ok")
    fb.emit(f"{name} = arith.cmpf {predicate}, {a}, {b} : f64")
    return name


def _float_operand(fb: FunctionBuilder, expr: sympy.Basic, env: dict[sympy.Symbol, str]) -> str:
    if isinstance(expr, sympy.Symbol) and expr in env:
        return env[expr]
    if isinstance(expr, sympy.Number):
        return fb.const(float(expr), F64)
    raise exc.LoweringError(f"cannot lower float operand {expr} ({type(expr).__name__})")
