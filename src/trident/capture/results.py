"""How compiled code gives back what the traced function returned (trace.py records it; the lowering builds it).

Tensors and symbolic scalars the function returns become graph outputs; Python constants, the call's own
arguments (a tensor, or an object guarded by identity: a Hugging Face Cache returned as itself) and nested tuples
and lists are rebuilt around them. An object of a plain class the call created and filled with results (the
DynamicCache a forward without a cache makes) is made again for each call, with the attributes the traced call
left. A result Python builds from parts (a dataclass such as Hugging Face's
ModelOutput, a named tuple, a dict with str keys) is flattened into its parts, headed by a ResultBuilderConstant from
which the runtime makes the entry's ResultBuilder (artifact.py), checked at capture to rebuild an object of the
same type holding the same objects.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import torch

from .. import exc
from ..artifact import ResultBuilderConstant
from .inputs import Leaf, LeafKind, LeafPath, bounded_state_object
from .user_state import holds_traced


@dataclasses.dataclass(frozen=True)
class OutputTree:
    """How to rebuild the function's result: a tuple/list of subtrees, or one leaf.

    A leaf is ("graph", i): the i-th graph output; ("const", v): a Python value fixed at capture;
    ("input", leaf_index): an argument returned as itself (a tensor, or an object guarded by identity);
    a tensor's "graph" or "input" leaf has as `value` the marks the function set on it (TENSOR_MARKS), or None;
    ("state", value=LeafPath): a state object of the call (capture/inputs.py) returned as itself.
    A result Python builds from parts (a dataclass such as Hugging Face's ModelOutput, a named tuple, a dict)
    is a tuple whose first child is the ResultBuilderConstant the native entry builds it with (_flatten_output)."""

    kind: str  # "tuple", "list", "graph", "const", "input", "state"
    children: tuple[OutputTree, ...] = ()
    index: int = 0
    value: object = None


# Attributes torch reads from a tensor's instance __dict__ that the traced function may set on a tensor it makes:
# the tensor compiled code makes in its place gets them too, as eager's would have them. The static-address mark
# (torch._dynamo.mark_static_address) is the one callers rely on: a Hugging Face StaticCache marks the tensors it
# allocates at its first update, and torch.compile and Trident's graph recorder read a marked tensor in place.
STATIC_MARK = "_dynamo_static_input_type"
TENSOR_MARKS = (STATIC_MARK,)


def tensor_marks(value: torch.Tensor) -> tuple[tuple[str, str], ...]:
    """(attribute, value) of each of TENSOR_MARKS a traced tensor carries."""
    marks = ((name, value.__dict__.get(name)) for name in TENSOR_MARKS)
    return tuple((name, mark) for name, mark in marks if type(mark) is str)


@dataclasses.dataclass(frozen=True)
class StateWrite:
    """An attribute the traced function assigned into a state object of the call (capture/inputs.py): compiled
    code assigns `value` (built like a result) to attribute `name` of the object at `path` after its run."""

    path: LeafPath
    name: str
    value: OutputTree


def flatten_output(
    value: object, graph_outputs: list[object], placeholders: Sequence[object], traced: Sequence[int],
    leaves: Sequence[Leaf] = (), state: Mapping[int, LeafPath] | None = None,
    created: Callable[[object], bool] = lambda obj: False,
) -> OutputTree:
    """How compiled code rebuilds `value`, the function's result; its tensors and symbolic scalars are appended
    to graph_outputs. A result with a built part somewhere below a tuple or list is headed by a builder without
    a type, which tells the entry to look for the parts (csrc/entry.cpp, build_nested). `created(obj)`: whether
    an object did not exist before the call (none of the user's objects reached it), so that a new one may be
    made for each call."""
    tree, built = _flatten_value(value, graph_outputs, placeholders, traced, leaves, state or {}, created)
    if built and not _is_built(tree):
        tree = OutputTree("tuple", (OutputTree("const", value=ResultBuilderConstant(None, (), True)), tree))
    return tree


def _flatten_value(
    value: object, graph_outputs: list[object], placeholders: Sequence[object], traced: Sequence[int],
    leaves: Sequence[Leaf], state: Mapping[int, LeafPath], created: Callable[[object], bool],
) -> tuple[OutputTree, bool]:
    """The tree of `value`, and whether it holds a built result."""
    if type(value) in (tuple, list):
        items = [_flatten_value(v, graph_outputs, placeholders, traced, leaves, state, created) for v in value]  # type: ignore[union-attr]
        kind = "tuple" if type(value) is tuple else "list"
        return OutputTree(kind, tuple(tree for tree, _ in items)), any(built for _, built in items)
    if isinstance(value, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)):
        marks = (tensor_marks(value) if isinstance(value, torch.Tensor) else ()) or None
        for p, leaf_index in zip(placeholders, traced):
            if p is value:  # an argument returned as itself keeps its identity (and gets the marks set on it)
                return OutputTree("input", index=leaf_index, value=marks), False
        graph_outputs.append(value)  # symbolic floats and bools come back as Python floats and bools
        return OutputTree("graph", index=len(graph_outputs) - 1, value=marks), False
    if value is None or type(value) in (int, float, bool, str, torch.device, torch.dtype):
        return OutputTree("const", value=value), False
    if isinstance(value, type):  # a class (a cache's layer class): the same object every call
        return OutputTree("const", value=value), False
    for leaf_index, leaf in enumerate(leaves):
        if leaf.kind is LeafKind.OBJECT and leaf.value is value:  # guarded by identity: the call's own object
            return OutputTree("input", index=leaf_index), False
    if id(value) in state:  # a state object of the call (a Hugging Face Cache): read from the call again
        return OutputTree("state", value=state[id(value)]), False
    parts = _constructor_parts(value)
    fresh = parts is None and bounded_state_object(value) and created(value) and holds_traced(value)
    if fresh:  # an object the call made and filled (a DynamicCache): a new one each call, with its attributes
        parts = type(value), tuple(vars(value)), list(vars(value).values())
    if parts is None:
        raise exc.UnsupportedConstruct(
            f"the function returns a {type(value).__name__}; Trident returns tensors, Python scalars, the objects "
            "passed in, objects of plain classes the call creates and fills, and (nested) tuples, lists, dicts, "
            "named tuples and dataclasses of them natively. Return a tuple instead."
        )
    cls, names, items = parts
    children = [_flatten_value(v, graph_outputs, placeholders, traced, leaves, state, created) for v in items]
    nested = any(built for _, built in children)
    head = OutputTree("const", value=ResultBuilderConstant(cls, names, nested, fresh))
    return OutputTree("tuple", (head, *(tree for tree, _ in children))), True


def _is_built(tree: OutputTree) -> bool:
    head = tree.children[0] if tree.kind == "tuple" and tree.children else None
    return head is not None and head.kind == "const" and isinstance(head.value, ResultBuilderConstant)


def _constructor_parts(value: object) -> tuple[type, tuple[str, ...], list[object]] | None:
    """(type, keywords, values) such that `type(**dict(zip(keywords, values)))` makes an object equal to `value`
    (its type, its fields and items the same objects), for a dict with str keys, a named tuple or a dataclass
    (Hugging Face's ModelOutput is an OrderedDict and a dataclass); None for anything else, or when calling the
    constructor again does not give such an object (a __post_init__ that transforms what it receives)."""
    cls = type(value)
    if cls is dict:
        if not all(type(k) is str for k in value):  # type: ignore[attr-defined]
            return None
        names, items = tuple(value), list(value.values())  # type: ignore[call-overload,attr-defined]
    elif isinstance(value, tuple) and isinstance(getattr(cls, "_fields", None), tuple):
        names, items = tuple(cls._fields), list(value)  # type: ignore[attr-defined]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f for f in dataclasses.fields(value) if f.init]
        names, items = tuple(f.name for f in fields), [getattr(value, f.name) for f in fields]
    else:
        return None
    try:
        rebuilt = cls(**dict(zip(names, items)))
    except Exception:  # noqa: BLE001 -- a constructor that does not take its own fields back
        return None
    return (cls, names, items) if _same_parts(value, rebuilt) else None


def _same_parts(value: object, rebuilt: object) -> bool:
    """Whether `rebuilt` has the type of `value` and holds the same objects: items, dataclass fields and
    instance attributes."""
    if type(rebuilt) is not type(value):
        return False
    if isinstance(value, (dict, tuple)):
        pairs = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        again = list(rebuilt.items()) if isinstance(rebuilt, dict) else list(enumerate(rebuilt))  # type: ignore[union-attr,arg-type]
        if len(pairs) != len(again) or any(k != k2 or v is not v2 for (k, v), (k2, v2) in zip(pairs, again)):
            return False
    if dataclasses.is_dataclass(value):
        if any(getattr(value, f.name) is not getattr(rebuilt, f.name) for f in dataclasses.fields(value)):
            return False
    state, state_again = getattr(value, "__dict__", None), getattr(rebuilt, "__dict__", None)
    if isinstance(state, dict) and isinstance(state_again, dict):
        if state.keys() != state_again.keys() or any(state[k] is not state_again[k] for k in state):
            return False
    return True
