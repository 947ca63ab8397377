"""How native code holds numbers, for the Python code that must agree with it: ints as int64 with checked
arithmetic, floats by their bits.

Compiled guards and host programs (lowering/symbolic_ints.py) compute symbolic int expressions node by node in
int64, every Add and Mul folded left to right with overflow checks, and compare floats bit for bit. The Python
side of the guards (trident/guards: first_failure, the int64 range guards) asks the same questions through
`checked_value` and `python_int_value`, so both sides agree on every call (tests/unit/test_guard_differential.py).
The bit helpers give a value as the 8-byte slot generated code and the runtime pass it in (MLIR literals, guard
constants, Triton parameter slots).

Next to abi.py at the bottom of the import graph: it imports nothing from trident, so the compiler and the runtime
can both use it.
"""
from __future__ import annotations

import struct
from collections.abc import Callable

import sympy
from torch.utils._sympy import functions as torch_sympy

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what compiled code computes ints in


def fits_int64(value: int) -> bool:
    return INT64_MIN <= value <= INT64_MAX


def int64_bits(value: int) -> int:
    """The int64 whose two's-complement bits are the low 64 bits of `value` (what a slot of 8 bytes holds)."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value > INT64_MAX else value


def float_bits(value: float) -> int:
    """The IEEE-754 bits of a double as a signed int64: -0.0 != 0.0 and a NaN equals the same NaN."""
    return struct.unpack("<q", struct.pack("<d", value))[0]


def float32_bits(value: float) -> int:
    """The IEEE-754 bits of `value` rounded to a float (single precision), as a non-negative int."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


class LeavesInt64(Exception):
    """A step of an expression whose value does not fit in int64: native code fails there."""

    def __init__(self, expr: sympy.Basic, value: int) -> None:
        self.expr, self.value = expr, value


def has_float(expr: sympy.Basic, is_float_expr: Callable[[sympy.Basic], bool]) -> bool:
    return is_float_expr(expr) or any(has_float(a, is_float_expr) for a in expr.args)


def check_relation(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> None:
    """Raise LeavesInt64 where computing relation `expr` natively leaves int64 (every operand is computed)."""
    if isinstance(expr, sympy.Rel):
        for side in expr.args:
            checked_value(side, env)
    elif isinstance(expr, (sympy.And, sympy.Or, sympy.Not)):  # the native code evaluates every operand
        for arg in expr.args:
            check_relation(arg, env)


def checked_value(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> int:
    """`expr` evaluated as the native code does; raises LeavesInt64 at the first step that leaves int64."""
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        values = [checked_value(a, env) for a in expr.args]
        result = values[0]
        for v in values[1:]:
            result = result + v if isinstance(expr, sympy.Add) else result * v
            if not fits_int64(result):
                raise LeavesInt64(expr, python_int_value(expr, env))
        return result
    if isinstance(expr, (sympy.Integer, sympy.Symbol)) or not expr.args:
        return python_int_value(expr, env)
    for a in expr.args:  # other operators: each operand as the native code computes it, then the exact value
        checked_value(a, env)
    value = python_int_value(expr, env)
    if not fits_int64(value):
        raise LeavesInt64(expr, value)
    return value


def python_int_value(expr: sympy.Basic, env: dict[sympy.Symbol, int]) -> int:
    """`expr` (an expression capture.specialize.lowers_as_int accepts) evaluated with Python's ints, exactly as the
    program's Python code would compute it (sympy's own evaluation turns large powers into infinities)."""
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
    if isinstance(expr, (sympy.Pow, torch_sympy.PowByNatural)):
        return args[0] ** args[1]
    if isinstance(expr, torch_sympy.FloorDiv | torch_sympy.CleanDiv):
        return args[0] // args[1]
    if isinstance(expr, sympy.Mod | torch_sympy.PythonMod | torch_sympy.Mod):
        return args[0] % args[1]
    if isinstance(expr, sympy.Max | torch_sympy.Max):
        return max(args)
    if isinstance(expr, sympy.Min | torch_sympy.Min):
        return min(args)
    return _BITWISE[type(expr)](args[0], args[1])


_BITWISE = {
    torch_sympy.BitwiseFn_bitwise_and: int.__and__, torch_sympy.BitwiseFn_bitwise_or: int.__or__,
    torch_sympy.BitwiseFn_bitwise_xor: int.__xor__, torch_sympy.LShift: int.__lshift__,
    torch_sympy.RShift: int.__rshift__,
}
