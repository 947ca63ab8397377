"""Describe a call's arguments as flat leaves with paths: what guards check and what the trace receives.

A leaf is a tensor, an int, a float, a bool, None, a str / torch.device / torch.dtype (compared by value), or
any other object (guarded by identity). Tuples, lists and dicts with str keys (exact types) are walked; their
kind and length (a dict's keys, in order) become guards themselves. A dict's items are addressed by position, as
Python iterates it.

State objects are walked too: instances of plain Python classes (a Hugging Face Cache and its layers, a
dataclass of tensors) are described by their class and their instance `__dict__`, walked like an argument dict.
Their tensors are then inputs of the program, read from the object on every call, instead of constants fixed by
the object's identity: a new cache of the same layout (each `generate()` makes one) runs the same specialization.
Modules, functions, classes, tensors and library objects stay objects guarded by identity (module state has its
own guards, capture/module_state.py), as does a state object too large to walk or reached a second time.
"""
from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import types
from collections.abc import Iterable, Iterator, Mapping, Sequence

import torch

from .. import abi


class LeafKind(enum.Enum):
    TENSOR = "tensor"
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    NONE = "none"
    VALUE = "value"  # str, torch.device, torch.dtype: immutable, compared by equality (no user code runs)
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
    kind: int  # abi.SEQ_TUPLE, abi.SEQ_LIST, abi.SEQ_DICT or abi.SEQ_OBJECT
    length: int
    keys: tuple[str, ...] = ()  # a dict's keys in order; a state object's instance __dict__ keys in order
    cls: type | None = None  # a state object's exact class (None in a disk-cache record: class_name names it)
    class_name: str = ""  # "module:qualname" of cls

    @staticmethod
    def name_of(cls: type) -> str:
        return f"{cls.__module__}:{cls.__qualname__}"

    def describe(self) -> str:
        if self.kind == abi.SEQ_OBJECT:
            return f"{self.class_name.partition(':')[2]} object with attributes {list(self.keys)}"
        if self.kind == abi.SEQ_DICT:
            return f"dict with keys {list(self.keys)}"
        return f"{'tuple' if self.kind == abi.SEQ_TUPLE else 'list'} of length {self.length}"


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
    if type(value) in _VALUE_TYPES:
        return LeafKind.VALUE
    return LeafKind.OBJECT


_VALUE_TYPES = (str, torch.device, torch.dtype)


def describe_call(param_names: Sequence[str], values: Sequence[object]) -> CallFacts:
    """Flatten bound argument values (in parameter order) into leaves and sequence facts."""
    leaves: list[Leaf] = []
    sequences: list[SequenceFact] = []
    walked: set[int] = set()  # state objects walked so far: one reached again is an object leaf
    for i, (name, value) in enumerate(zip(param_names, values)):
        _walk(value, LeafPath(i, (), name), leaves, sequences, walked)
    return CallFacts(tuple(leaves), tuple(sequences))


def _walk(value: object, path: LeafPath, leaves: list[Leaf], sequences: list[SequenceFact], walked: set[int]) -> None:
    """describe_call's walk of one value. A module-level function, not a closure that calls itself: such a closure
    is a reference cycle that would keep the call's arguments (a cache's tensors) alive until the garbage collector
    ran, and a CUDA graph recorded on the next call's cache would find it elsewhere."""
    if _is_argument_dict(value):
        keys = tuple(value)  # type: ignore[arg-type]
        sequences.append(SequenceFact(path, abi.SEQ_DICT, len(keys), keys))
        for i, (key, item) in enumerate(value.items()):  # type: ignore[attr-defined]
            _walk(item, LeafPath(path.param, path.items + (i,), f"{path.name}[{key!r}]"), leaves, sequences, walked)
        return
    if type(value) in (tuple, list):
        kind = abi.SEQ_TUPLE if type(value) is tuple else abi.SEQ_LIST
        sequences.append(SequenceFact(path, kind, len(value)))  # type: ignore[arg-type]
        for i, item in enumerate(value):  # type: ignore[arg-type]
            _walk(item, LeafPath(path.param, path.items + (i,), f"{path.name}[{i}]"), leaves, sequences, walked)
        return
    if id(value) not in walked and _walkable_state(value, walked):
        walked.add(id(value))
        attributes = vars(value)
        cls = type(value)
        sequences.append(SequenceFact(path, abi.SEQ_OBJECT, len(attributes), tuple(attributes), cls,
                                      SequenceFact.name_of(cls)))
        for i, (key, item) in enumerate(list(attributes.items())):
            _walk(item, LeafPath(path.param, path.items + (i,), f"{path.name}.{key}"), leaves, sequences, walked)
        return
    kind = classify(value)
    fact = tensor_fact(value) if kind is LeafKind.TENSOR else None  # type: ignore[arg-type]
    if kind is LeafKind.TENSOR and fact is None:
        kind = LeafKind.OBJECT  # subclasses, sparse, meta: never handled natively as tensors
    leaves.append(Leaf(path, kind, value, fact))


# A state object is walked only when everything below it is small: a call's guards read every leaf it has.
_MAX_STATE_ITEMS = 2048
_MAX_STATE_DEPTH = 8


def is_state_object(value: object) -> bool:
    """An instance of a plain Python class whose instance __dict__ (str keys) is its state: not a module, a
    function, a class, a tensor, a container or an object of torch's, Triton's or Python's own."""
    cls = type(value)
    if isinstance(value, _NOT_STATE) or cls.__module__ in ("builtins", "functools", "enum") or \
            cls.__module__.startswith(("torch.", "torch_mlir", "triton.", "trident.", "sympy.")):
        return False
    attributes = getattr(value, "__dict__", None)
    return type(attributes) is dict and all(type(k) is str for k in attributes) and _all_state_in_dict(cls)


_PLAIN_SIZE = type("_Plain", (), {}).__basicsize__


@functools.lru_cache(maxsize=1024)
def _all_state_in_dict(cls: type) -> bool:
    """No state outside the instance dict: no __slots__ (their values would be read as constants, unguarded) and
    no C base with a layout of its own (an ndarray subclass keeps its data there)."""
    if cls.__basicsize__ > _PLAIN_SIZE or cls.__itemsize__:
        return False
    for c in cls.__mro__[:-1]:
        slots = c.__dict__.get("__slots__")
        names = (slots,) if isinstance(slots, str) else tuple(slots or ())
        if any(name not in ("__dict__", "__weakref__") for name in names):
            return False
    return True


def bounded_state_object(value: object) -> bool:
    """A state object whose walk stays within the bounds and reaches no state object twice (no cycle)."""
    return _walkable_state(value, set())


def _walkable_state(value: object, walked: set[int]) -> bool:
    """A state object whose walk stays within the bounds, reaching no state object twice (a cycle, a shared
    layer): such an object is guarded by identity instead, as a whole."""
    if not is_state_object(value):
        return False
    count = 0
    seen = set(walked)

    def fits(obj: object, depth: int) -> bool:
        nonlocal count
        count += 1
        if count > _MAX_STATE_ITEMS or depth > _MAX_STATE_DEPTH:
            return False
        if type(obj) in (tuple, list) or _is_argument_dict(obj):
            items = obj.values() if type(obj) is dict else obj  # type: ignore[union-attr]
            return all(fits(item, depth + 1) for item in items)  # type: ignore[union-attr]
        if is_state_object(obj):
            if id(obj) in seen:
                return False
            seen.add(id(obj))
            return all(fits(item, depth + 1) for item in vars(obj).values())
        return True

    return fits(value, 0)


_NOT_STATE = (torch.nn.Module, torch.Tensor, type, types.ModuleType, types.FunctionType, types.MethodType,
              types.BuiltinFunctionType, functools.partial, enum.Enum, BaseException, tuple, list, dict, set,
              frozenset)


def rebuild_arguments(values: Sequence[object], facts: CallFacts, leaf_values: Sequence[object]) -> list[object]:
    """The argument values with every leaf replaced by leaf_values[i] (same structure as `values`). State
    objects are the objects themselves, holding what `installed_in_state` put there."""
    by_path, objects = _values_by_path(facts, leaf_values), state_attribute_names(facts.sequences)
    return [_rebuild(v, LeafPath(i, (), ""), by_path, objects) for i, v in enumerate(values)]


def _values_by_path(facts: CallFacts, leaf_values: Sequence[object]) -> dict[tuple[int, tuple[int, ...]], object]:
    return {_key(leaf.path): v for leaf, v in zip(facts.leaves, leaf_values)}


def _rebuild(
    value: object, path: LeafPath, by_path: Mapping[tuple[int, tuple[int, ...]], object],
    objects: Mapping[tuple[int, tuple[int, ...]], object],
) -> object:  # fmt: skip
    """rebuild_arguments' walk of one value (a function of its own: a closure calling itself is a cycle)."""
    if _is_argument_dict(value):
        return {k: _rebuild(v, LeafPath(path.param, path.items + (i,), ""), by_path, objects)
                for i, (k, v) in enumerate(value.items())}  # type: ignore[attr-defined]
    if type(value) in (tuple, list):
        items = [_rebuild(item, LeafPath(path.param, path.items + (i,), ""), by_path, objects)
                 for i, item in enumerate(value)]  # type: ignore[arg-type]
        return tuple(items) if type(value) is tuple else items
    if _key(path) in objects:
        return value
    return by_path[_key(path)]


def state_attribute_names(sequences: Iterable[SequenceFact]) -> dict[tuple[int, tuple[int, ...]], tuple[str, ...]]:
    """(param, items) -> attribute names in order, of each state object among a call's sequences."""
    return {_key(s.path): s.keys for s in sequences if s.kind == abi.SEQ_OBJECT}


def state_objects(values: Sequence[object], facts: CallFacts) -> dict[int, LeafPath]:
    """id -> path of the call's state objects (the objects themselves are the caller's, alive through the call)."""
    return {id(leaf_value(s.path, values, ())): s.path for s in facts.sequences if s.kind == abi.SEQ_OBJECT}


class InstalledState:
    """The call's state objects while a trace runs (installed_in_state): what the function assigned into them."""

    def __init__(self) -> None:
        self.objects: list[tuple[LeafPath, object, dict[str, object], dict[str, object]]] = []  # path, obj, own, put

    def assigned(self) -> list[tuple[LeafPath, str, object]]:
        """(object path, attribute, value) of each attribute the function assigned, in the order the object's
        instance dict now holds them: compiled code makes the same assignments after its run (a DynamicCache's
        `self.keys = torch.cat(...)`). Deleting an attribute is not something it reproduces."""
        out: list[tuple[LeafPath, str, object]] = []
        for path, obj, _, put in self.objects:
            now = vars(obj)
            gone = [k for k in put if k not in now]
            if gone:
                from .. import exc

                raise exc.UnsupportedConstruct(
                    f"the function deletes attribute {gone[0]!r} of '{path.name}', which compiled code does not reproduce"
                )
            out += [(path, k, v) for k, v in now.items() if k not in put or put[k] is not v]
        return out


@contextlib.contextmanager
def installed_in_state(
    values: Sequence[object], facts: CallFacts, leaf_values: Sequence[object]
) -> Iterator[InstalledState]:
    """While the trace runs, the call's state objects hold leaf_values[i] in place of their leaves (a cache's
    tensors are the trace's inputs): their instance dicts and the lists and dicts inside them are written in
    place, tuples inside them replaced. Afterwards each state object's instance dict is its own again, whatever
    the function assigned (the trace records those assignments: InstalledState.assigned); the lists and dicts
    inside get their own values back where they still hold what was put there (what the function changed in
    them is the caller's to see: user_state.py)."""
    installer = _Installer(facts, leaf_values)
    try:
        if installer.names:
            for i, value in enumerate(values):
                installer.install(value, LeafPath(i, (), ""), False)
        yield installer.installed
    finally:
        for store, k, own, put in reversed(installer.written):
            try:
                if store[k] is put:  # type: ignore[index]
                    store[k] = own  # type: ignore[index]
            except (IndexError, KeyError):
                continue  # the function removed it: that is its change to make
        for _, obj, own, _ in installer.installed.objects:
            attributes = vars(obj)
            attributes.clear()
            attributes.update(own)


class _Installer:
    """installed_in_state's walk, an object rather than a closure that calls itself: such a closure is a reference
    cycle, which would keep the call's objects (a cache and its tensors) alive until the garbage collector ran."""

    def __init__(self, facts: CallFacts, leaf_values: Sequence[object]) -> None:
        self.by_path = _values_by_path(facts, leaf_values)
        self.names = {_key(s.path): s.path for s in facts.sequences if s.kind == abi.SEQ_OBJECT}
        self.written: list[tuple[object, object, object, object]] = []  # (list or dict, key, own value, put there)
        self.installed = InstalledState()

    def install(self, value: object, path: LeafPath, inside_state: bool) -> object:
        key = _key(path)
        if key in self.by_path:
            return self.by_path[key]
        if key in self.names:
            own = dict(vars(value))
            put = {k: self.install(item, LeafPath(path.param, path.items + (i,), ""), True)
                   for i, (k, item) in enumerate(own.items())}
            self.installed.objects.append((self.names[key], value, own, put))
            vars(value).update(put)
            return value
        if inside_state and type(value) in (list, dict):
            entries = list(value.items()) if type(value) is dict else list(enumerate(value))  # type: ignore[union-attr,arg-type]
            for i, (k, item) in enumerate(entries):
                new = self.install(item, LeafPath(path.param, path.items + (i,), ""), True)
                if new is not item:
                    self.written.append((value, k, item, new))
                    value[k] = new  # type: ignore[index]
            return value
        # A tuple (rebuilt), or a container outside every state object (rebuild_arguments rebuilds it).
        items = list(value.values()) if type(value) is dict else list(value)  # type: ignore[union-attr,call-overload]
        new_items = [self.install(item, LeafPath(path.param, path.items + (i,), ""), inside_state)
                     for i, item in enumerate(items)]
        if type(value) is tuple and any(a is not b for a, b in zip(new_items, items)):
            return tuple(new_items)
        return value


def _is_argument_dict(value: object) -> bool:
    """A dict walked like a tuple (Hugging Face passes per-layer-type attention masks so): exactly a dict, str keys."""
    return type(value) is dict and all(type(k) is str for k in value)  # type: ignore[union-attr]


def leaf_value(path: LeafPath, args: Sequence[object], constants: Sequence[object]) -> object:
    """The value at `path` in a call's arguments (or among a specialization's constants)."""
    if path.is_constant:
        return constants[path.items[0]]
    value = args[path.param]
    for i in path.items:
        value = item_at(value, i)
    return value


def item_at(container: object, index: int) -> object:
    """The item a leaf path's step `index` names: a tuple's or list's item, a dict's value at that position, a
    state object's attribute at that position of its instance __dict__."""
    if type(container) is dict:
        return list(container.values())[index]  # type: ignore[union-attr]
    if type(container) in (tuple, list):
        return container[index]  # type: ignore[index]
    return list(vars(container).values())[index]


def _key(path: LeafPath) -> tuple[int, tuple[int, ...]]:
    return (path.param, path.items)


class _Absent:
    """AttributeGuard.value (guards/module_state.py) of an entry that must not exist; pickles as this module's
    ABSENT (disk cache). Defined in capture, which the guards import, so that python_kernels.py can use it too."""

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
