"""How compiled code computes numbers, in Python: ints as int64 with checked arithmetic, floats by their bits.

The native guards (lowering/lower_guards.py, lowering/symbolic_ints.py) compute symbolic int expressions node by
node in int64, every Add and Mul folded left to right with overflow checks, and compare floats bit for bit. The
Python side (capture/guards.py's first_failure, capture/int64_ranges.py) asks the same questions through these
helpers, so both sides agree on every call (tests/unit/test_guard_differential.py).
"""
from __future__ import annotations

import struct
from collections.abc import Callable

import sympy

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what compiled code computes ints in


def float_bits(value: float) -> int:
    """The IEEE-754 bits of a double as a signed int64: -0.0 != 0.0 and a NaN equals the same NaN."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


class LeavesInt64(Exception):
    def __init__(self, expr: sympy.Basic, value: int) -> None:
        self.expr, self.value = expr, value


def has_float(expr: sympy.Basic, is_float_expr: Callable[[sympy.Basic], bool]) -> bool:
    return is_float_expr(expr) or any(has_float(a, is_float_expr) for a in expr.args)


def check_relation(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> None:
    if isinstance(expr, sympy.Rel):
        for side in expr.args:
            checked_value(side, env)
    elif isinstance(expr, (sympy.And, sympy.Or, sympy.Not)):  # the native code evaluates every operand
        for arg in expr.args:
            check_relation(arg, env)


def checked_value(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> int:
    """`expr` evaluated as the native guard does; raises LeavesInt64 at the first step that leaves int64."""
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        values = [checked_value(a, env) for a in expr.args]
        result = values[0]
        for v in values[1:]:
            result = result + v if isinstance(expr, sympy.Add) else result * v
            if not INT64_MIN <= result <= INT64_MAX:
                raise LeavesInt64(expr, python_int_value(expr, env))
        return result
    if isinstance(expr, (sympy.Integer, sympy.Symbol)) or not expr.args:
        return python_int_value(expr, env)
    for a in expr.args:  # other operators: each operand as the native code computes it, then the exact value
        checked_value(a, env)
    value = python_int_value(expr, env)
    if not INT64_MIN <= value <= INT64_MAX:
        raise LeavesInt64(expr, value)
    return value


def python_int_value(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> int:
    """`expr` (an expression lowers_as_int accepts) evaluated with Python's ints, exactly as the program's
    Python code would compute it (sympy's own evaluation turns large powers into infinities)."""
    from torch.utils._sympy import functions as f

    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Symbol):
        return env[expr]
    args = [python_int_value(a, env) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sum(args)
    if isinstance(expr, sympy.Mul):
        product = 1
        for a in args:
            product *= a
        return product
    if isinstance(expr, (sympy.Pow, f.PowByNatural)):
        return args[0] ** args[1]
    if isinstance(expr, f.FloorDiv | f.CleanDiv):
        return args[0] // args[1]
    if isinstance(expr, sympy.Mod | f.PythonMod | f.Mod):
        return args[0] % args[1]
    if isinstance(expr, sympy.Max | f.Max):
        return max(args)
    if isinstance(expr, sympy.Min | f.Min):
        return min(args)
    binary = {f.BitwiseFn_bitwise_and: int.__and__, f.BitwiseFn_bitwise_or: int.__or__,
              f.BitwiseFn_bitwise_xor: int.__xor__, f.LShift: int.__lshift__, f.RShift: int.__rshift__}  # fmt: skip
    return binary[type(expr)](args[0], args[1])

