"""Which symbolic inputs of a finished trace must be traced again as constants.

A symbolic leaf property (a size, stride, storage offset, int or float) stays symbolic only where compiled code
can reproduce, natively and exactly, everything the trace decided from it. Three things break that:

- a ShapeEnv guard the guard lowering cannot check exactly. Over int symbols that is whatever
  lowering/symbolic_ints.py cannot lower (asked of it by a dry run): int arithmetic and the floats Python computes
  from ints (n / 3 >= 2, math.floor(n / 2), int(n * 0.5)) lower with Python's exact results. For float symbols
  only a bare symbol compared (<, <=, >, >=, !=) with a number is kept. `t > 0.5` is kept: it is the comparison
  Python made on the double. `t * 3.0 > 1.0` is not: sympy rewrites it (zf > 1/3), which IEEE arithmetic need
  not agree with at the boundary. Equalities (float(t), `t == 0.5`) bake the value in: a constant, guarded
  bitwise;
- sympy folding float arithmetic to a number (t * 0.0 -> 0, t - t -> 0): the graph then holds a constant where
  eager computes -0.0 for a negative t. Seen while tracing, through ProxyTorchDispatchMode's sym dispatch;
- float arithmetic in the graph that the host program does not lower: + - * / and negation are lowered with
  Python's double semantics (lower_host_program.py), Python's scalar builtins (int / int, math.floor, round, **,
  math.sqrt, ...) as trident.scalar.<fn> where lowering/symbolic_ints.py lowers them (again a dry run); a float
  passed to a Triton constexpr (a kernel compiled per value) is never lowered.
"""
from __future__ import annotations

import contextlib
import operator
import threading
from collections.abc import Iterator
from typing import Protocol

import sympy
import torch
import torch.fx
from torch.utils._sympy import functions as torch_sympy
from torch.utils._sympy.symbol import SymT, symbol_is_type

from .scalar_functions import scalar_function_name

# Float arithmetic nodes the host program lowers (torch-mlir imports them as aten.{add,sub,mul,div,neg}.float,
# add.float_int and Float.Scalar); int / int (aten.div.int) is left out: Python rounds huge ints exactly.
FLOAT_GRAPH_OPS = frozenset({operator.add, operator.sub, operator.mul, operator.truediv, operator.neg, torch.sym_float})

_INT_FUNCTIONS = (
    sympy.Add, sympy.Mul, torch_sympy.FloorDiv, torch_sympy.CleanDiv, torch_sympy.PythonMod, torch_sympy.Mod,
    sympy.Mod, sympy.Max, sympy.Min, torch_sympy.Max, torch_sympy.Min, torch_sympy.BitwiseFn_bitwise_or,
    torch_sympy.BitwiseFn_bitwise_and, torch_sympy.BitwiseFn_bitwise_xor, torch_sympy.LShift, torch_sympy.RShift,
    sympy.Eq, sympy.Ne, sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan, sympy.GreaterThan,
    sympy.And, sympy.Or, sympy.Not,
)  # fmt: skip  -- what lowering/symbolic_ints.py lowers
_FLOAT_COMPARISONS = (sympy.StrictLessThan, sympy.LessThan, sympy.StrictGreaterThan, sympy.GreaterThan, sympy.Ne)


def is_float_symbol(symbol: sympy.Basic) -> bool:
    return isinstance(symbol, sympy.Symbol) and symbol_is_type(symbol, SymT.FLOAT)


def is_float_expr(expr: sympy.Basic) -> bool:
    """Whether a ShapeEnv expression denotes a Python float (a float symbol, torch's float-valued functions)."""
    if isinstance(expr, sympy.Float) or is_float_symbol(expr) or type(expr).__name__.startswith("OpaqueUnaryFn_"):
        return True
    if isinstance(expr, (torch_sympy.ToFloat, torch_sympy.IntTrueDiv, torch_sympy.FloatTrueDiv, torch_sympy.FloatPow)):
        return True
    if isinstance(expr, (sympy.Add, sympy.Mul, sympy.Max, sympy.Min)):
        return any(is_float_expr(a) for a in expr.args)
    return False


def lowers_as_int(expr: sympy.Basic) -> bool:
    """Whether `expr` is pure int arithmetic over symbols (what lowering/symbolic_ints.py's
    SymbolicIntLowering.int_expr lowers)."""
    if isinstance(expr, (sympy.Integer, sympy.Symbol)):
        return True
    if isinstance(expr, sympy.Pow):
        return isinstance(expr.exp, sympy.Integer) and 0 < int(expr.exp) <= 8 and lowers_as_int(expr.base)
    if isinstance(expr, (*_INT_NODES, torch_sympy.PowByNatural)):
        return all(lowers_as_int(a) for a in expr.args)
    return False


_INT_NODES = (
    sympy.Add, sympy.Mul, sympy.Max, sympy.Min, sympy.Mod, torch_sympy.FloorDiv, torch_sympy.CleanDiv,
    torch_sympy.PythonMod, torch_sympy.Mod, torch_sympy.Max, torch_sympy.Min, torch_sympy.BitwiseFn_bitwise_or,
    torch_sympy.BitwiseFn_bitwise_and, torch_sympy.BitwiseFn_bitwise_xor, torch_sympy.LShift, torch_sympy.RShift,
)  # fmt: skip


class ScalarLowering(Protocol):
    """What the lowering compiles exactly, asked by capture to decide which symbols stay symbolic. The lowering
    itself answers (lowering/symbolic_ints.py, SCALAR_LOWERING: a dry run), so the two cannot disagree; the
    caller of trace_function passes it, so capture does not import the lowering."""

    def lowers_condition(self, expr: sympy.Basic) -> bool:
        """Whether the guard lowering checks a relation over int symbols exactly."""

    def lowers_scalar_op(self, fn: str, kinds: list[str]) -> bool:
        """Whether the host program lowers Python's scalar builtin `fn` on operands of these kinds."""


def lowerable_relation(expr: sympy.Basic, lowering: ScalarLowering) -> bool:
    """Whether the guard lowering checks `expr` exactly (see the module docstring)."""
    if any(is_float_symbol(s) for s in expr.free_symbols):
        return _float_comparisons(expr)
    if _int_expression(expr):
        return True
    # Over int symbols, floats computed from them (n / 3 >= 2, math.floor(n / 2)) lower with Python's exact
    # results (lowering/symbolic_ints.py).
    return lowering.lowers_condition(expr)


def _int_expression(expr: sympy.Basic) -> bool:
    if isinstance(expr, sympy.Integer) or expr in (sympy.true, sympy.false):
        return True
    if isinstance(expr, sympy.Symbol):
        return not is_float_symbol(expr)
    if isinstance(expr, sympy.Pow):
        return isinstance(expr.exp, sympy.Integer) and 0 < int(expr.exp) <= 8 and _int_expression(expr.base)
    return isinstance(expr, _INT_FUNCTIONS) and all(_int_expression(a) for a in expr.args)


def _float_comparisons(expr: sympy.Basic) -> bool:
    if isinstance(expr, (sympy.And, sympy.Or, sympy.Not)):
        return all(_float_comparisons(a) for a in expr.args)
    if not isinstance(expr, _FLOAT_COMPARISONS):
        return False
    sides = expr.args
    symbols = [s for s in sides if is_float_symbol(s)]
    numbers = [s for s in sides if isinstance(s, (sympy.Float, sympy.Integer))]  # exact doubles (not 1/3)
    return len(symbols) == 1 and len(numbers) == 1


def graph_float_symbols(gm: torch.fx.GraphModule, lowering: ScalarLowering) -> set[sympy.Symbol]:
    """Free symbols of float arithmetic in the graph the host program does not lower, or hands to a Triton
    constexpr (a kernel compiled per value)."""
    found: set[sympy.Symbol] = set()
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
        floats = [v for v in vals if isinstance(v, torch.SymFloat)]
        if not floats:
            continue
        if isinstance(node.target, torch._ops.OpOverload):
            continue  # an ATen operator takes the double as eager passes it
        supported = node.target in FLOAT_GRAPH_OPS or _scalar_builtin_lowered(node, lowering)
        if isinstance(node.target, torch._ops.HigherOrderOperator):
            supported = not _constexpr_floats(node)
        if not supported:
            for v in vals:
                if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                    found |= v.node.expr.free_symbols
    return found


def _scalar_builtin_lowered(node: torch.fx.Node, lowering: ScalarLowering) -> bool:
    """A Python scalar builtin on symbolic values (int / int, math.floor, round, **, ...) that the host program
    imports as trident.scalar.<fn> and lowers with Python's results: asked of the lowering itself (a dry run)."""
    name = scalar_function_name(node)
    if name is None:
        return False
    kinds = []
    for a in node.args:
        v = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        if v is None:
            kinds.append("none")
        elif isinstance(v, (torch.SymBool, bool)):
            kinds.append("bool")
        elif isinstance(v, (torch.SymInt, int)):
            kinds.append("int")
        elif isinstance(v, (torch.SymFloat, float)):
            kinds.append("float")
        else:
            return False
    return lowering.lowers_scalar_op(name, kinds)


def _constexpr_floats(node: torch.fx.Node) -> bool:
    """Whether a Triton launch passes a symbolic float to a constexpr parameter."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    kwargs = node.kwargs.get("kwargs", {})
    kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])  # type: ignore[arg-type]
    while not hasattr(kernel, "params"):
        kernel = kernel.fn
    constexprs = {p.name for p in kernel.params if p.is_constexpr}
    return any(
        name in constexprs and isinstance(v, torch.fx.Node) and isinstance(v.meta.get("val"), torch.SymFloat)
        for name, v in kwargs.items()  # type: ignore[union-attr]
    )


# ---------------------------------------------------------------------------------------------------------
# Watching sympy fold float arithmetic while tracing


class _Watch(threading.local):
    folded: set[sympy.Symbol] | None = None


_watch = _Watch()
_install_lock = threading.Lock()
_installed = False


def _install() -> None:
    """Wrap ProxyTorchDispatchMode.__sym_dispatch__ once per process; the wrapper only records, and only in a
    thread inside watch_float_folds (other threads' make_fx traces are untouched)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

        original = ProxyTorchDispatchMode.__sym_dispatch__

        def sym_dispatch(self, func, types, args, kwargs):  # type: ignore[no-untyped-def]
            out = original(self, func, types, args, kwargs)
            folded = _watch.folded
            if folded is not None and isinstance(out, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                if out.node.expr.is_number and any(
                    isinstance(a, torch.SymFloat) and a.node.expr.free_symbols for a in args
                ):
                    for a in args:
                        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                            folded |= a.node.expr.free_symbols
            return out

        ProxyTorchDispatchMode.__sym_dispatch__ = sym_dispatch  # type: ignore[method-assign]
        _installed = True


@contextlib.contextmanager
def watch_float_folds() -> Iterator[set[sympy.Symbol]]:
    """Symbols whose float arithmetic sympy folded to a number during the block (this thread)."""
    _install()
    previous, _watch.folded = _watch.folded, set()
    try:
        yield _watch.folded
    finally:
        _watch.folded = previous


def symbols_to_specialize(
    gm: torch.fx.GraphModule, shape_env: object, folded: set[sympy.Symbol], lowering: ScalarLowering
) -> set[sympy.Symbol]:
    """Every symbol that must be a constant for this trace to be compiled exactly (module docstring)."""
    found = set(folded) | graph_float_symbols(gm, lowering)
    for guard in shape_env.guards:  # type: ignore[attr-defined]
        expr = shape_env.simplify(guard.expr)  # type: ignore[attr-defined]
        if expr == sympy.false:
            # The ShapeEnv's later knowledge contradicts a guard it recorded (seen with an input passed twice,
            # whose second fake shares the first's storage, and a symbolic offset): trace those as constants.
            found |= guard.expr.free_symbols
        elif not lowerable_relation(expr, lowering):
            found |= expr.free_symbols
    for symbol in shape_env.replacements:  # type: ignore[attr-defined]
        if is_float_symbol(symbol):  # an Eq guard pinned it to a value: Python read the float itself
            found.add(symbol)
    return found
