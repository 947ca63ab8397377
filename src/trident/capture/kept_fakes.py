"""Fake tensors a program keeps from one capture to the next (library caches), and how a later capture
recomputes them.

Capture runs the function on fake tensors. A library that memoizes a tensor it computed keeps the fake of
that capture: fla's `@tensor_cache` (`prepare_lens(cu_seqlens)` keyed by the identity of a closed-over
`cu_seqlens`), a table built lazily and kept per size or device. A later capture of the same function (new
shapes, an int that became symbolic) gets that fake back from the cache. It belongs to a finished trace: no
live tensor stands behind it, and make_fx records it as a constant that no compiled code could be given
(it used to fail with "closes over a FakeTensor that is not a plain strided tensor").

What the earlier specialization does with such a value is exact: it is part of that graph, recomputed on every
call from the live tensors it read. A later capture does the same. `remember_constant_computations` notes,
for every fake of a finished trace that was computed from constants only (closed-over tensors and factory
calls, through ATen ops that write nothing, and never written afterwards by another op of that trace), the
ATen calls that made it; `ConstantRecomputation.replay` runs them again inside the new trace when the
function hands that fake to an op. A kept fake computed from the call's arguments, or written in place, has
no such recipe: capturing raises UnsupportedConstruct saying so.
"""
from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils.weak import WeakIdKeyDictionary


@dataclasses.dataclass(frozen=True)
class _Live:
    """A tensor the earlier trace read as a constant (closed over, or a literal it created)."""

    tensor: torch.Tensor


@dataclasses.dataclass(frozen=True, eq=False)
class ConstantComputation:
    """One ATen call of an earlier trace whose inputs are constants or other such calls."""

    target: Callable[..., object]
    args: tuple[object, ...]  # leaves: _Live, ConstantComputation, or Python values
    kwargs: dict[str, object]


# Fake of a finished trace -> how to compute it again. Keyed by identity, weakly: an entry lives as long as
# whatever keeps the fake (the library's cache, or the specialization's graph).
_recipes: WeakIdKeyDictionary = WeakIdKeyDictionary()


def remember_constant_computations(
    gm: torch.fx.GraphModule, real_of: dict[int, torch.Tensor], produced: list[tuple[FakeTensor, torch.fx.Node]]
) -> None:
    """Record the recipe of every fake the function saw (`produced`: each op result with the node that made it,
    the latest last) that `gm` computed from constants only (see the module docstring).

    Call it on make_fx's graph before constants are lifted (they are still get_attr nodes)."""
    computed: dict[torch.fx.Node, object] = {}  # node -> _Live | ConstantComputation
    written: set[torch.fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            value = getattr(gm, node.target)  # type: ignore[arg-type]
            live = real_of.get(id(value), value)
            if isinstance(live, torch.Tensor) and not isinstance(live, FakeTensor):
                computed[node] = _Live(live)
        elif node.op == "call_function":
            inputs = [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
            if _writes_nothing(node.target):
                if all(i in computed for i in inputs):
                    args, kwargs = pytree.tree_map_only(torch.fx.Node, computed.__getitem__, (node.args, node.kwargs))
                    computed[node] = ConstantComputation(node.target, tuple(args), dict(kwargs))
            else:
                written.update(_written_inputs(node))
    # A value written after it was made (by an in-place op or a kernel) is not what its recipe computes; nor
    # is anything computed from it, or a view of it (a write through the view changes it).
    tainted = _derived_closure(gm, written)
    latest = {id(fake): (fake, node) for fake, node in produced}
    for fake, node in latest.values():
        recipe = computed.get(node)
        if isinstance(recipe, ConstantComputation) and node not in tainted:
            _recipes[fake] = recipe


def recipe_of(fake: FakeTensor) -> ConstantComputation | None:
    return _recipes.get(fake)


def replay(recipe: ConstantComputation, live: Callable[[torch.Tensor], torch.Tensor],
           memo: dict[int, torch.Tensor]) -> torch.Tensor:
    """Run a recipe's ATen calls in the current trace; `live` turns a constant into the current trace's
    value of it. `memo` (per trace, by recipe identity) makes a shared sub-computation run once."""
    def value_of(item: object) -> object:
        if isinstance(item, _Live):
            return live(item.tensor)
        if isinstance(item, ConstantComputation):
            return replay(item, live, memo)
        return item

    done = memo.get(id(recipe))
    if done is None:
        args, kwargs = pytree.tree_map_only((_Live, ConstantComputation), value_of, (recipe.args, recipe.kwargs))
        done = memo[id(recipe)] = recipe.target(*args, **kwargs)  # type: ignore[assignment]
    return done


def _writes_nothing(target: object) -> bool:
    if target is operator.getitem:
        return True
    return isinstance(target, torch._ops.OpOverload) and not target._schema.is_mutable


def _written_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The tensor inputs `node` may write: by its schema for ATen ops; any other op (a Triton launch) is assumed
    to write all of them (asking torch's analysis of the kernel would cost a TTIR compile per capture)."""
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        written = []
        for arg, value in zip(target._schema.arguments, _bound(node, target)):
            if arg.alias_info is not None and arg.alias_info.is_write:
                written += [v for v in pytree.tree_leaves(value) if isinstance(v, torch.fx.Node)]
        return written
    return [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]


def _bound(node: torch.fx.Node, target: torch._ops.OpOverload) -> list[object]:
    """node's argument values in schema order (None where an argument was left to its default)."""
    values: list[object] = []
    for i, arg in enumerate(target._schema.arguments):
        if i < len(node.args):
            values.append(node.args[i])
        else:
            values.append(node.kwargs.get(arg.name))
    return values


def _derived_closure(gm: torch.fx.GraphModule, roots: set[torch.fx.Node]) -> set[torch.fx.Node]:
    """`roots`, their inputs' view chains back to where the written memory was made, and everything computed
    from any of them (a conservative answer to "may this value differ from its recipe")."""
    # Walk back through view-like producers: writing a view writes its base.
    pending, tainted = list(roots), set()
    while pending:
        node = pending.pop()
        if node in tainted:
            continue
        tainted.add(node)
        if node.op == "call_function" and _may_alias_input(node.target):
            pending += [a for a in pytree.tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
    # Then forward: whatever reads a tainted value (in program order) is tainted too.
    for node in gm.graph.nodes:
        if node not in tainted and any(
            isinstance(a, torch.fx.Node) and a in tainted for a in pytree.tree_leaves((node.args, node.kwargs))
        ):
            tainted.add(node)
    return tainted


def _may_alias_input(target: object) -> bool:
    if target is operator.getitem:
        return True
    if not isinstance(target, torch._ops.OpOverload):
        return False
    return any(r.alias_info is not None for r in target._schema.returns)
