"""Int64 range guards: every symbolic int a specialization computes must fit in int64.

Compiled code computes ints as int64 with checked arithmetic, while Python's ints grow. A call for which one of
the program's symbolic int expressions (`x.shape[0] * n`, a grid, a view's size) would leave int64 must not
start running: it would raise OverflowError mid-call, after earlier operators ran, where eager computes on. So
each such expression becomes a guard. Its native lowering computes the expression with the same checked
arithmetic (an overflow anywhere fails the guard: a miss, before anything ran), and `int64_overflow` tells the
driver, in Python's exact ints, that the call missed for that reason and runs eagerly.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import sympy
import torch

from .guards import GuardSet, RelationGuard, _property, first_failure, leaf_value
from .trace import Trace

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# Nodes that read a tensor's metadata rather than compute: their values are sizes of live tensors.
_METADATA_READS = frozenset({
    torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
})  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Int64RangeGuard(RelationGuard):
    """`value`, an int the program computes, fits in int64 (`expr` is `value <= INT64_MAX`, lowered like every
    relation: computing `value` with checked arithmetic is the check)."""

    value: sympy.Expr = sympy.Integer(0)

    def describe(self) -> str:
        return f"{self.value} fits in int64"


def int64_range_guards(trace: Trace, guards: GuardSet) -> list[RelationGuard]:
    """One guard per distinct symbolic int expression the traced program computes from its inputs."""
    from ..lowering.symbolic_ints import lowers_as_int

    bound = set(guards.symbols())
    seen: set[sympy.Expr] = set()
    result: list[RelationGuard] = []
    for node in trace.graph_module.graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not isinstance(value, torch.SymInt) or node.target in _METADATA_READS:
            continue
        expr = trace.shape_env.simplify(value.node.expr)
        if isinstance(expr, (sympy.Number, sympy.Symbol)) or expr in seen:
            continue  # constants were computed at capture; a bare symbol is an input, in range by definition
        if not expr.free_symbols <= bound or not lowers_as_int(expr):
            continue  # not checkable here (float steps): the host program's own checks still raise
        seen.add(expr)
        result.append(Int64RangeGuard(sympy.Le(expr, INT64_MAX, evaluate=False), expr))
    return result


def int64_overflow(guards: GuardSet, args: Sequence[object], constants: Sequence[object]) -> str | None:
    """'expr = value' for the first range guard this call fails while all other guards of the specialization
    hold (the call would run it but for an int that leaves int64), else None."""
    ranges = [g for g in guards.relations if isinstance(g, Int64RangeGuard)]
    if not ranges:
        return None
    others = dataclasses.replace(guards, relations=[g for g in guards.relations if not isinstance(g, Int64RangeGuard)])
    try:
        if first_failure(others, args, constants) is not None:
            return None
        env = {b.symbol: _property(leaf_value(b.path, args, constants), b.prop, b.dim) for b in guards.bindings}
    except (IndexError, TypeError, KeyError):  # an argument path of that specialization is absent here
        return None
    for g in ranges:
        try:
            value = python_int_value(g.value, env)
        except ZeroDivisionError:  # the program raises that itself, as Python does: not an overflow
            continue
        if not INT64_MIN <= value <= INT64_MAX:
            return f"{g.value} = {value}"
    return None


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

