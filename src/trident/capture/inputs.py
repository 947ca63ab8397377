"""Describe a call's arguments as flat leaves with paths: what guards check and what the trace receives.

A leaf is a tensor, an int, a float, a bool, None, or any other object (guarded by identity). Tuples, lists and
dicts with str keys (exact types) are walked; their kind and length (a dict's keys, in order) become guards
themselves. A dict's items are addressed by position, as Python iterates it.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence

import torch

from .. import abi


class LeafKind(enum.Enum):
    TENSOR = "tensor"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    NONE = "none"
    OBJECT = "object"  # anything else: guarded by identity, passed to the trace as itself


@dataclasses.dataclass(frozen=True)
class LeafPath:
    """Where a leaf lives: parameter `param` then `items` indices into nested tuples/lists.

    Constants the function closes over use param == -1 and items == (constant index,)."""

    param: int
    items: tuple[int, ...]
    name: str  # how the user reads it: "x", "caches[3]", "constant W"

    @property
    def is_constant(self) -> bool:
        return self.param < 0


@dataclasses.dataclass(frozen=True)
class SequenceFact:
    path: LeafPath
    kind: int  # abi.SEQ_TUPLE, abi.SEQ_LIST or abi.SEQ_DICT
    length: int
    keys: tuple[str, ...] = ()  # a dict's keys in order


@dataclasses.dataclass(frozen=True)
class TensorFact:
    type_tag: int  # abi.TYPE_TENSOR or abi.TYPE_PARAMETER
    dtype: torch.dtype
    device: torch.device
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    storage_offset: int
    aligned: bool  # data pointer % 16 == 0
    requires_grad: bool
    is_conj: bool
    is_neg: bool


@dataclasses.dataclass(frozen=True)
class Leaf:
    path: LeafPath
    kind: LeafKind
    value: object  # the live object of this call (never stored in a specialization)
    tensor: TensorFact | None = None


@dataclasses.dataclass(frozen=True)
class CallFacts:
    leaves: tuple[Leaf, ...]
    sequences: tuple[SequenceFact, ...]

    def without_tensors(self) -> CallFacts:
        """These facts with tensor values dropped (their TensorFacts stay): what a specialization may keep
        without holding the compiling call's tensors alive."""
        leaves = tuple(
            dataclasses.replace(leaf, value=None) if leaf.kind is LeafKind.TENSOR else leaf for leaf in self.leaves
        )
        return CallFacts(leaves, self.sequences)


ALIGNMENT = 16  # bytes; what Triton specializes pointer arguments on


def tensor_fact(t: torch.Tensor) -> TensorFact | None:
    """The guarded facts of a tensor, or None for a tensor the native path does not take."""
    if type(t) is torch.Tensor:
        tag = abi.TYPE_TENSOR
    elif type(t) is torch.nn.Parameter:
        tag = abi.TYPE_PARAMETER
    else:
        return None
    if t.layout != torch.strided or t.device.type == "meta":
        return None
    return TensorFact(
        type_tag=tag,
        dtype=t.dtype,
        device=t.device,
        sizes=tuple(t.shape),
        strides=tuple(t.stride()),
        storage_offset=t.storage_offset(),
        aligned=t.data_ptr() % ALIGNMENT == 0,
        requires_grad=t.requires_grad,
        is_conj=t.is_conj(),
        is_neg=t.is_neg(),
    )


def classify(value: object) -> LeafKind:
    if isinstance(value, torch.Tensor):
        return LeafKind.TENSOR
    if type(value) is bool:
        return LeafKind.BOOL
    if type(value) is int:
        return LeafKind.INT
    if type(value) is float:
        return LeafKind.FLOAT
    if value is None:
        return LeafKind.NONE
    return LeafKind.OBJECT


def describe_call(param_names: Sequence[str], values: Sequence[object]) -> CallFacts:
    """Flatten bound argument values (in parameter order) into leaves and sequence facts."""
    leaves: list[Leaf] = []
    sequences: list[SequenceFact] = []

    def walk(value: object, path: LeafPath) -> None:
        if _is_argument_dict(value):
            keys = tuple(value)  # type: ignore[arg-type]
            sequences.append(SequenceFact(path, abi.SEQ_DICT, len(keys), keys))
            for i, (key, item) in enumerate(value.items()):  # type: ignore[attr-defined]
                walk(item, LeafPath(path.param, path.items + (i,), f"{path.name}[{key!r}]"))
            return
        if type(value) in (tuple, list):
            kind = abi.SEQ_TUPLE if type(value) is tuple else abi.SEQ_LIST
            sequences.append(SequenceFact(path, kind, len(value)))  # type: ignore[arg-type]
            for i, item in enumerate(value):  # type: ignore[arg-type]
                walk(item, LeafPath(path.param, path.items + (i,), f"{path.name}[{i}]"))
            return
        kind = classify(value)
        fact = tensor_fact(value) if kind is LeafKind.TENSOR else None  # type: ignore[arg-type]
        if kind is LeafKind.TENSOR and fact is None:
            kind = LeafKind.OBJECT  # subclasses, sparse, meta: never handled natively as tensors
        leaves.append(Leaf(path, kind, value, fact))

    for i, (name, value) in enumerate(zip(param_names, values)):
        walk(value, LeafPath(i, (), name))
    return CallFacts(tuple(leaves), tuple(sequences))


def rebuild_arguments(values: Sequence[object], facts: CallFacts, leaf_values: Sequence[object]) -> list[object]:
    """The argument values with every leaf replaced by leaf_values[i] (same structure as `values`)."""
    def build(value: object, path: LeafPath) -> object:
        if _is_argument_dict(value):
            return {k: build(v, LeafPath(path.param, path.items + (i,), "")) for i, (k, v) in enumerate(value.items())}  # type: ignore[attr-defined]
        if type(value) in (tuple, list):
            items = [build(item, LeafPath(path.param, path.items + (i,), "")) for i, item in enumerate(value)]  # type: ignore[arg-type]
            return tuple(items) if type(value) is tuple else items
        return by_path[_key(path)]

    by_path = {_key(leaf.path): v for leaf, v in zip(facts.leaves, leaf_values)}
    return [build(v, LeafPath(i, (), "")) for i, v in enumerate(values)]


def _is_argument_dict(value: object) -> bool:
    """A dict walked like a tuple (Hugging Face passes per-layer-type attention masks so): exactly a dict, str keys."""
    return type(value) is dict and all(type(k) is str for k in value)  # type: ignore[union-attr]


def item_at(container: object, index: int) -> object:
    """The item a leaf path's step `index` names: a tuple's or list's item, a dict's value at that position."""
    if type(container) is dict:
        return list(container.values())[index]  # type: ignore[union-attr]
    return container[index]  # type: ignore[index]


def _key(path: LeafPath) -> tuple[int, tuple[int, ...]]:
    return (path.param, path.items)


class _Absent:
    """AttributeGuard.value (guards.py) of an entry that must not exist; pickles as this module's ABSENT (disk
    cache). Defined here, below guards.py, so that python_kernels.py, which trace.py imports, can use it."""

    def __reduce__(self) -> str:
        return "ABSENT"

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


class KeywordNotPassed:
    """The value of a keyword that only **kwargs receives, in a call that does not pass it: the entry's default
    for such a keyword (driver.JitFunction binds each one seen as a parameter of its own), an object leaf
    guarded by identity; module.py's forward call passes on only the keywords that are not it."""

    def __reduce__(self) -> str:
        return "NOT_PASSED"

    def __repr__(self) -> str:
        return "<keyword not passed>"


NOT_PASSED = KeywordNotPassed()
