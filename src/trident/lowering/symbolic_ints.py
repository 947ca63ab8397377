"""Lowering symbolic integer expressions (sympy, from the ShapeEnv) to arith on i64.

Semantics follow Python ints: FloorDiv rounds toward -inf, Mod takes the divisor's sign."""
from __future__ import annotations

import sympy
from torch.utils._sympy import functions as torch_sympy

from .. import exc
from ..ir.mlir_text import I1, I64, FunctionBuilder


class SymbolicIntLowering:
    def __init__(self, fb: FunctionBuilder, env: dict[sympy.Symbol, str]) -> None:
        self.fb = fb
        self.env = env  # symbol -> i64 SSA value
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
            return self._fold("addi", [self.int_expr(a) for a in expr.args])
        if isinstance(expr, sympy.Mul):
            return self._fold("muli", [self.int_expr(a) for a in expr.args])
        if isinstance(expr, torch_sympy.FloorDiv):
            return fb.binary("floordivsi", self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, (torch_sympy.CleanDiv,)):
            return fb.binary("divsi", self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, (torch_sympy.PythonMod, torch_sympy.Mod, sympy.Mod)):
            return python_mod(fb, self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
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
            return self._fold("muli", [base] * int(expr.exp))
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
            return fb.binary("xori", self.bool_expr(expr.args[0]), fb.const(True, I1), I1)
        raise exc.LoweringError(f"cannot lower symbolic condition {expr} ({type(expr).__name__})")

    def _fold(self, op: str, values: list[str], type_: str = I64) -> str:
        result = values[0]
        for v in values[1:]:
            result = self.fb.binary(op, result, v, type_)
        return result


def python_mod(fb: FunctionBuilder, a: str, b: str) -> str:
    """a % b with Python's sign rule: a - floordiv(a, b) * b."""
    q = fb.binary("floordivsi", a, b)
    return fb.binary("subi", a, fb.binary("muli", q, b))
