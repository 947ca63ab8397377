"""Which FX nodes apply a Python scalar builtin or torch.sym_* function that Trident imports itself.

Capture asks it (capture/specialize.py: may a float stay symbolic through this node?) and the torch-dialect
import asks it (ir/fx_import.py emits such a node as `torch.operator "trident.scalar.<fn>"`): one answer for both,
kept on the capture side since the import reads capture's graph.
"""
from __future__ import annotations

import builtins
import math
import operator

import torch
import torch.fx

# Int ops torch-mlir imports as aten.<op>.int, which the host program lowers with checked i64 arithmetic.
_TORCH_MLIR_INT_OPS = frozenset({"add", "sub", "mul", "floordiv", "mod", "neg", "eq", "ne", "lt", "le", "gt", "ge"})
_SYM_FUNCTIONS = frozenset(
    f for f in (torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, getattr(torch, "sym_ite", None),
                *(getattr(torch, f"_sym_{n}", None) for n in ("sqrt", "cos", "sin", "log2", "exp", "log")))
    if f is not None
)  # fmt: skip
_BUILTIN_MODULES = (operator, math, builtins)


def scalar_kind(value: object) -> str:
    if isinstance(value, (torch.SymBool, bool)):
        return "bool"
    if isinstance(value, (torch.SymInt, int)):
        return "int"
    return "float"


def scalar_function_name(node: torch.fx.Node) -> str | None:
    """The name of the builtin / torch.sym_* function a node applies to symbolic scalars, if Trident imports
    it itself (not the all-int arithmetic torch-mlir maps to aten.<op>.int)."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    if node.op != "call_function" or not isinstance(node.meta.get("val"), symbolic):
        return None
    target = node.target
    if target is operator.getitem:  # an operator's int result (flash attention's max_k): the import unpacks it
        return None
    name = getattr(target, "__name__", "")
    if target in _SYM_FUNCTIONS:
        return name
    if not any(getattr(module, name, None) is target for module in _BUILTIN_MODULES):
        return None
    kinds = {scalar_kind(a.meta.get("val") if isinstance(a, torch.fx.Node) else a) for a in node.args}
    if name in _TORCH_MLIR_INT_OPS and kinds == {"int"} and not isinstance(node.meta["val"], torch.SymFloat):
        return None
    return name
