"""Which tensors of a host program share memory, as far as the buffer pool and view lowering need to know.

The questions are asked of torch-dialect IR before lowering: may an op's result alias one of its operands (a
view, an in-place result, or an op whose schema is unknown: assumed to); does a value reach the function's
return through such ops (then the caller keeps it); and is a view one of the call's private views.

A private view is a view of a tensor the call made itself (not of an argument or a constant) that nothing
outside the call can reach: neither the view nor anything else derived from that tensor is returned. Such a
view is made below the autograd and ADInplaceOrView layers (typed_ops.VIEW_OPS' second entries): it then has
no view metadata (`_base`) and its own version counter, which nothing can observe — no caller holds it or its
base, and no compiled call records autograd history (calls needing autograd run eagerly). It shares the base's
memory as any view does, so the buffer pool still sees it holding the base. (A custom operator reached through
the boxed dispatcher sees a plain tensor where eager passes a view; only code inspecting `_base` could tell.)
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch_mlir import ir

from ..typed_ops import is_view_op

AtenName = Callable[[ir.Operation], tuple[str, str]]
PRIVATE_VIEW = " (private view)"  # how a compiled specialization's aten_calls mark them, for explain


@functools.lru_cache(maxsize=None)
def op_schema(name: str, overload: str) -> torch.FunctionSchema | None:
    """The installed torch's schema of operator `name` ('aten::add') and `overload`, or None when it has none."""
    namespace, op_name = name.split("::")
    try:
        return getattr(getattr(getattr(torch.ops, namespace), op_name), overload or "default")._schema
    except (AttributeError, RuntimeError):
        return None


def _aten_schema(op: ir.Operation, aten_name: AtenName) -> torch.FunctionSchema | None:
    """The schema of a torch.aten.* op, or None when this torch does not have it."""
    name, overload = aten_name(op)
    return op_schema(name, overload) if name.startswith("aten::") else None


def aliases_an_operand(op: ir.Operation, aten_name: AtenName) -> bool:
    """Whether op's tensor result may share memory with an operand: a view, an in-place op, or an op whose
    schema is not known here (assumed to)."""
    if op.name.startswith("torch.prim."):  # a list holds its items; unpacking a list of views gives the views
        return op.name in ("torch.prim.ListConstruct", "torch.prim.ListUnpack")
    if op.name == "torch.operator" or not op.name.startswith("torch.aten."):
        return True
    schema = _aten_schema(op, aten_name)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def escapes(value: ir.Value, aten_name: AtenName) -> bool:
    """Whether the function returns `value`, or a view or in-place result of it (the caller would keep it)."""
    pending, seen = [value], set()
    while pending:
        v = pending.pop()
        for use in v.uses:
            user = use.owner.operation  # the generic Operation: an OpView's `name` may be an attribute's
            if user.name == "func.return":
                return True
            if user not in seen and aliases_an_operand(user, aten_name):
                seen.add(user)
                pending.extend(user.results)
    return False


def _aliased_operand(op: ir.Operation, aten_name: AtenName) -> int | None:
    """The operand an aliasing ATen op's (single) result shares memory with, by the schema's alias sets: `self`
    for views and in-place ops, `out` for out= variants; None when the schema does not say."""
    schema = _aten_schema(op, aten_name)
    if schema is None or len(schema.returns) != 1 or schema.returns[0].alias_info is None:
        return None
    sets = schema.returns[0].alias_info.before_set
    for index, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.before_set & sets:
            return index if index < len(op.operands) else None
    return None


def alias_root(value: ir.Value, aten_name: AtenName) -> ir.Value | None:
    """The fresh tensor `value` is a view or in-place result of (following each aliasing op to the operand its
    result aliases), or None when it derives from a function argument or a constant (block arguments), passes
    through an op other than an ATen operator, or through one whose aliasing the schema does not pin down."""
    while True:
        owner = value.owner
        if isinstance(owner, ir.Block):
            return None  # a block argument: an input or a lifted constant
        op = owner.operation
        # torch.operator: an ATen op torch-mlir does not model (index_copy_), whose schema still says what it aliases
        operator = op.name == "torch.operator" and aten_name(op)[0].startswith("aten::")
        if not (op.name.startswith("torch.aten.") or operator):
            return None
        if not aliases_an_operand(op, aten_name):
            return value
        aliased = _aliased_operand(op, aten_name)
        if aliased is None:
            return None
        value = op.operands[aliased]


def is_private_view(op: ir.Operation, aten_name: AtenName) -> bool:
    """Whether op is one of typed_ops.VIEW_OPS applied to a tensor the call made and keeps to itself."""
    if not is_view_op(*aten_name(op)):
        return False
    root = alias_root(op.operands[0], aten_name)
    return root is not None and not escapes(root, aten_name)
