"""Int64 range guards: every symbolic int a specialization computes must fit in int64.

Compiled code computes ints as int64 with checked arithmetic, while Python's ints grow. A call for which one of
the program's symbolic int expressions (`x.shape[0] * n`, a grid, a view's size) would leave int64 must not
start running: it would raise OverflowError mid-call, after earlier operators ran, where eager computes on. So
each such expression becomes a guard (symbols.Int64RangeGuard). Its native check computes the expression with
the same checked arithmetic (an overflow anywhere fails the guard: a miss, before anything ran), and
`int64_overflow` tells the driver, in Python's exact ints, that the call missed for that reason and runs eagerly.

A guard computes an expression as the program does, node by node ((hi - lo) * n, not the expansion
hi*n - lo*n, whose terms can leave int64 where the program's values do not). Any relation guard can still fail
natively for a call whose values Python compares exactly (an intermediate sum of the relation leaves int64):
symbols.native_int64_failure finds such a relation by evaluating it as the native guard does, so such a call is
reported as leaving int64 (it runs eagerly, by design) instead of compiling a specialization that rejects its
own call.
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence

import sympy
import torch

from .. import exc
from ..capture.inputs import leaf_value
from ..capture.specialize import lowers_as_int
from ..capture.trace import Trace
from ..native_numbers import INT64_MAX
from .guard_set import GuardSet, first_failure
from .symbols import Int64RangeGuard, RelationGuard, native_int64_failure, property_value

# Nodes that read a tensor's metadata rather than compute: their values are sizes of live tensors.
_METADATA_READS = frozenset({
    torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
    torch.ops.aten.sym_storage_offset.default,
})  # fmt: skip


def int64_range_guards(
    trace: Trace, bound: set[sympy.Symbol], relations: Sequence[RelationGuard]
) -> list[RelationGuard]:
    """One guard per distinct symbolic int expression the traced program computes from its inputs (`bound`: the
    symbols the guard set binds; `relations`: its other relations).

    Raises UnsupportedArgument when the call being compiled fails them (an int it computes leaves int64, or a
    guard's own arithmetic does): the specialization would reject the very call it was compiled for."""
    seen: set[sympy.Expr] = set()
    result: list[RelationGuard] = []
    as_computed: dict[torch.fx.Node, sympy.Expr] = {}
    for node in trace.graph_module.graph.nodes:
        value = node.meta.get("val")
        if node.op != "call_function" or not isinstance(value, torch.SymInt) or node.target in _METADATA_READS:
            continue
        expr = _as_computed(node, trace, as_computed)
        if isinstance(expr, (sympy.Number, sympy.Symbol)) or expr in seen:
            continue  # constants were computed at capture; a bare symbol is an input, in range by definition
        if not expr.free_symbols <= bound or not lowers_as_int(expr):
            continue  # not checkable here (float steps): the host program's own checks still raise
        seen.add(expr)
        result.append(Int64RangeGuard(sympy.Le(expr, INT64_MAX, evaluate=False), expr))
    env = trace.shape_env
    known = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val  # renamed in torch 2.13
    hints = {s: int(v) for s, v in known.items() if s in bound and v.is_integer}  # this call's values
    failure = native_int64_failure([*relations, *result], hints)
    if failure is not None:
        raise exc.UnsupportedArgument(
            f"this call computes {failure}, which leaves int64 (compiled code computes ints as int64, Python's grow)"
        )
    return result


# Python's int operators on SymInts as the host program computes them: one checked int64 step per node.
_STEPS: dict[object, Callable[..., sympy.Expr]] = {
    operator.add: lambda a, b: sympy.Add(a, b, evaluate=False),
    operator.mul: lambda a, b: sympy.Mul(a, b, evaluate=False),
    operator.sub: lambda a, b: sympy.Add(a, sympy.Mul(-1, b, evaluate=False), evaluate=False),
    operator.neg: lambda a: sympy.Mul(-1, a, evaluate=False),
}


def _as_computed(node: torch.fx.Node, trace: Trace, memo: dict[torch.fx.Node, sympy.Expr]) -> sympy.Expr:
    """The node's value as the program computes it, step by step; the ShapeEnv's simplified (expanded) form for
    metadata reads, inputs and operators not in _STEPS."""
    if node in memo:
        return memo[node]
    simplified = trace.shape_env.simplify(node.meta["val"].node.expr)
    step = _STEPS.get(node.target) if node.op == "call_function" and not node.kwargs else None
    operands: list[sympy.Expr] = []
    for arg in node.args if step is not None else ():
        if isinstance(arg, torch.fx.Node) and isinstance(arg.meta.get("val"), torch.SymInt):
            operands.append(_as_computed(arg, trace, memo))
        elif type(arg) is int:
            operands.append(sympy.Integer(arg))
        else:
            step = None
            break
    memo[node] = step(*operands) if step is not None else simplified
    return memo[node]


def int64_overflow(guards: GuardSet, args: Sequence[object], constants: Sequence[object]) -> str | None:
    """'expr = value' for the first range guard this call fails while all other guards of the specialization
    hold (the call would run it but for an int that leaves int64), or for a relation that holds but that the
    native guard cannot compute in int64; else None."""
    relations = tuple(g for g in guards.relations if not isinstance(g, Int64RangeGuard))
    others = dataclasses.replace(guards, relations=relations)
    try:
        if first_failure(others, args, constants, int64=False) is not None:
            return None
        env = {b.symbol: property_value(leaf_value(b.path, args, constants), b.prop, b.dim) for b in guards.bindings}
    except (IndexError, TypeError, KeyError):  # an argument path of that specialization is absent here
        return None
    return native_int64_failure(guards.relations, {s: v for s, v in env.items() if isinstance(v, int)})
