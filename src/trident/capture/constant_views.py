"""Constant folding of views of constants: `w.t()` of a weight is made once, at capture, not on every call.

A host program calls an ATen view op through the dispatcher on every call (measured on the H200 host:
`t()` about 1.7 µs); a Llama-shaped decode step transposes each of its 65 weight matrices for F.linear, every
step. When a view op's only tensor input is a constant (a tensor the function closes over) and its other
arguments are fixed at capture, its result is itself a constant: it is computed here on the live tensor and
becomes a new trace constant, a *derived* constant of that base.

A derived constant shares the base's storage, so in-place updates of the base (`w.copy_(...)`,
load_state_dict) are seen through it exactly as through a view made at call time. What it cannot follow is
the base being pointed at other memory (`w.data = other`, `w.set_(...)`); the base's metadata is guarded
like every constant's, and a DerivedConstantGuard (guards/tensors.py) checks on every call that the derived
constant still starts at the same byte distance from the base's data pointer: otherwise the call misses and
recompiles against the new memory.
"""
from __future__ import annotations

import torch
import torch.fx
from torch.utils import _pytree as pytree


def is_view_op(target: object) -> bool:
    """An ATen overload returning one tensor that aliases an input without writing to it (t, view, slice, ...)."""
    if not isinstance(target, torch._ops.OpOverload):
        return False
    schema = target._schema
    if schema.is_mutable or len(schema.returns) != 1:
        return False
    ret = schema.returns[0]
    return ret.alias_info is not None and not ret.alias_info.is_write and str(ret.type) == "Tensor"


def fold_constant_views(
    gm: torch.fx.GraphModule, n_leaf_placeholders: int, constants: list[torch.Tensor], fakes: list[torch.Tensor]
) -> dict[int, int]:
    """Replace view ops of constants by new constants (appended to `constants` and `fakes`, with a placeholder
    each); returns {derived constant index: index of the constant it is a view of}."""
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    live: dict[torch.fx.Node, int] = {node: i for i, node in enumerate(placeholders[n_leaf_placeholders:])}
    derived: dict[int, int] = {}
    last = placeholders[-1] if placeholders else None
    for node in list(graph.nodes):
        if node.op != "call_function" or not is_view_op(node.target):
            continue
        inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
        if len(inputs) != 1 or inputs[0] not in live:  # another tensor, or a size known only at run time
            continue
        source = live[inputs[0]]
        args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: constants[live[n]], (node.args, node.kwargs))
        with torch.no_grad():
            value = node.target(*args, **kwargs)
        base = derived.get(source, source)
        if not _same_memory(value, constants[base]):
            continue
        with graph.inserting_after(last):
            replacement = graph.placeholder(f"constant_{len(constants)}")
        replacement.meta["val"] = node.meta["val"]
        last = replacement
        live[replacement] = len(constants)
        derived[len(constants)] = base
        constants.append(value)
        fakes.append(node.meta["val"])
        node.replace_all_uses_with(replacement)
        graph.erase_node(node)
    if derived:
        gm.recompile()
    return derived


def _same_memory(view: object, base: torch.Tensor) -> bool:
    return isinstance(view, torch.Tensor) and type(view) is torch.Tensor and (
        view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    )


def byte_distance(view: torch.Tensor, base: torch.Tensor) -> int:
    """How far the derived constant's data pointer is from its base's: what DerivedConstantGuard checks."""
    return view.data_ptr() - base.data_ptr()
