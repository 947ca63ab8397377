"""Structural fingerprints of the Python state a function closes over, and where its tensors live.

A warm start runs code compiled in another process, so everything that code took from Python at capture must be
the same now: the code that ran and the non-tensor values it read (a module's `training` flag, an `eps`
attribute, a config object, a global int). Tensors are different: compiled code receives them by reference
through its context table, so only their metadata (dtype, sizes, strides, device) is part of the fingerprint
and their values are re-resolved in the new process.

Capture does not record which attributes the function read, so the fingerprint covers everything reachable
from the function's roots (provenance.py lists them): a conservative superset. A walk visits each object once
(shared and cyclic references become back-references, so the encoding is canonical) and
  - hashes scalars by value, tensors by metadata, containers by their items in order;
  - hashes user functions by their code (code_digest), closure cells, defaults and attributes; user classes by
    their class dictionaries; user modules by their globals; objects by their type and instance state (also
    objects of torch.nn.Module and standard-library classes: an nn.Linear's in_features, a SimpleNamespace);
  - names library functions, classes and modules (torch, Triton, torch-mlir, Trident, sympy, numpy, the
    standard library): their behaviour is pinned by the versions in the lookup key (versions.py); and names
    other library objects (operator handles, loggers, locks, streams) by type, walking only a `__wrapped__`;
  - records the first path at which it met each tensor: the constant's provenance.
It never calls user code (no getattr on arbitrary objects, no repr of user objects). What it cannot see: state
held natively by objects it does not know (a random generator's seed), and class attributes of library types;
see cache/__init__.py.
"""
from __future__ import annotations

import collections
import datetime
import decimal
import enum
import functools
import hashlib
import operator
import re
import sys
import types
import weakref
from collections.abc import Iterator
from typing import Any

import torch

# Packages whose code and objects are identified by name: their versions are part of the lookup key.
LIBRARY_PACKAGES = frozenset({
    "torch", "triton", "torch_mlir", "trident", "sympy", "mpmath", "numpy", "functorch", "typing_extensions",
})  # fmt: skip
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) | frozenset(sys.builtin_module_names)

VISIT_LIMIT = 200_000  # values per walk (~0.3 s); a bigger state is not persisted (walking it costs too much)
DEPTH_LIMIT = 100  # nesting; a model is ~10 deep. Each level costs up to 3 Python frames of the recursion limit

# A path: a root (provenance.Root.key) followed by steps such as ("attr", "weight") or ("item", 3).
Path = tuple[Any, ...]


class Unfingerprintable(Exception):
    """The state reachable from a function's roots is too large or too deep to fingerprint."""


def is_library_module(name: str | None) -> bool:
    """Whether objects defined in module `name` are pinned by the versions in the key (or the Python version)."""
    if not name:
        return False
    top = name.partition(".")[0]
    return top in LIBRARY_PACKAGES or top in _STDLIB or top.startswith("_frozen") or top == "builtins"


@functools.lru_cache(maxsize=4096)
def code_digest(code: types.CodeType) -> str:
    """Hash of what a code object does: bytecode, exception table, constants (nested code by digest), names,
    argument layout, flags.

    Line numbers and file names are left out: moving a function does not change what it computes. In 3.11+
    `co_code` is the unspecialized bytecode, identical across processes. Cached by code object (code objects
    compare by value, so equal code shares a digest)."""
    h = hashlib.blake2b(digest_size=16)
    parts: list[object] = [
        code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars, code.co_argcount,
        code.co_posonlyargcount, code.co_kwonlyargcount, code.co_flags, getattr(code, "co_qualname", code.co_name),
        getattr(code, "co_exceptiontable", b""),  # 3.11+: which code handles an exception is not in co_code
    ]  # fmt: skip
    for part in parts:
        h.update(repr(part).encode() + b"\0")
    for const in code.co_consts:
        h.update(_const_text(const).encode() + b"\0")
    return h.hexdigest()


def _const_text(const: object) -> str:
    if isinstance(const, types.CodeType):
        return "code:" + code_digest(const)
    if isinstance(const, (tuple, frozenset)):
        items = [_const_text(c) for c in const]
        if isinstance(const, frozenset):
            items.sort()  # iteration order of a frozenset of str depends on the process's hash seed
        return f"{type(const).__name__}({','.join(items)})"
    if isinstance(const, float):
        return "float:" + const.hex()
    return f"{type(const).__name__}:{const!r}"


def nested_codes(code: types.CodeType) -> Iterator[types.CodeType]:
    """`code` and every code object nested in its constants (inner functions, lambdas, comprehensions, classes)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from nested_codes(const)


def _qualname(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


# Values whose str/repr is their whole value (library types that keep it natively, out of reach of a walk).
_NAMED_TYPES = (
    torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size, torch.finfo, torch.iinfo,
    torch._ops.OpOverloadPacket, range, slice, decimal.Decimal, datetime.date, datetime.time, datetime.timedelta,
    datetime.timezone, re.Pattern,
)  # fmt: skip
# Library types that keep their arguments natively but give them back through __reduce__ (no user code runs).
_REDUCED_TYPES = (operator.itemgetter, operator.attrgetter, operator.methodcaller)
# Standard-library modules whose objects are process handles (their state is the process's, not a value a trace
# reads, and changes by itself: a Logger's level cache): named by type. Other standard-library objects are walked.
_HANDLE_MODULES = frozenset({
    "logging", "threading", "_thread", "weakref", "_weakrefset", "multiprocessing", "concurrent", "asyncio",
    "queue", "socket", "ssl", "selectors", "subprocess", "contextvars", "io", "_io", "tempfile",
})  # fmt: skip
_SKIPPED_MODULE_NAMES = frozenset({"__builtins__", "__loader__", "__spec__", "__cached__", "__file__", "__doc__"})
_SKIPPED_CLASS_NAMES = frozenset({"__dict__", "__weakref__", "__doc__", "__module__"})
# Instance attributes whose value is different in every process, left out of the walk: Hugging Face's
# GenerationConfig keeps hash() of its JSON text (a str hash, randomized per process) to see later whether the
# user changed it; no forward reads it.
_PER_PROCESS_ATTRIBUTES = frozenset({("transformers.generation.configuration_utils.GenerationConfig",
                                       "_original_object_hash")})  # fmt: skip


class StateWalk:
    """Walks roots in order, hashing what it meets; `digest()` is the fingerprint, `tensor_paths` the provenance."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=20)
        self._visits = 0
        self._memo: dict[int, int] = {}  # id -> node number (back-references)
        self._alive: list[object] = []  # keeps walked objects alive so their ids stay unique during the walk
        self.tensor_paths: dict[int, Path] = {}  # id(tensor) -> first path
        self.tensors: dict[Path, torch.Tensor] = {}  # first path -> tensor
        self.object_paths: dict[int, Path] = {}  # id(object) -> first path, for every object walked (not scalars)
        self.objects: dict[Path, object] = {}  # first path -> object

    def digest(self) -> str:
        return self._hash.hexdigest()

    def walk_root(self, root: Path, value: object) -> None:
        self._emit("root", root)
        try:
            self._walk(value, (root,), 0)
        except RecursionError:
            # DEPTH_LIMIT bounds the nesting, but not the frames the caller already holds or a lowered limit; a
            # library reached as user code (one outside LIBRARY_PACKAGES, such as flag-gems' module state) can
            # nest that far. Not persisting is always correct; a RecursionError out of a call is not.
            raise Unfingerprintable(
                f"the state reachable from {format_path((root,))} nests deeper than Python's recursion limit allows"
            ) from None

    def walk_missing_root(self, root: Path, why: str) -> None:
        """A root that does not exist in this process: hashed as such, so it never matches one that does."""
        self._emit("missing-root", root, why)

    # -- the walk --------------------------------------------------------------------------------------------
    def _emit(self, *parts: object) -> None:
        self._hash.update(repr(parts).encode() + b"\0")

    def _walk(self, obj: object, path: Path, depth: int) -> None:
        if depth > DEPTH_LIMIT:
            raise Unfingerprintable(f"the state at {format_path(path)} is nested more than {DEPTH_LIMIT} levels deep")
        self._visits += 1
        if self._visits > VISIT_LIMIT:
            raise Unfingerprintable(f"more than {VISIT_LIMIT} values are reachable from the function's roots")
        t = type(obj)
        if obj is None or t in (bool, int, str, bytes):
            self._emit("v", t.__name__, obj)
            return
        if t is float:
            self._emit("f", obj.hex())  # type: ignore[attr-defined]
            return
        if t is complex:
            self._emit("c", obj.real.hex(), obj.imag.hex())  # type: ignore[attr-defined]
            return
        seen = self._memo.get(id(obj))
        if seen is not None:
            self._emit("ref", seen)
            return
        self._memo[id(obj)] = len(self._memo)
        self._alive.append(obj)
        self.object_paths[id(obj)] = path
        self.objects[path] = obj
        depth += 1
        if isinstance(obj, torch.Tensor):
            self._tensor(obj, path)
        elif isinstance(obj, _NAMED_TYPES):
            self._emit("named", _qualname(t), repr(obj))
        elif isinstance(obj, enum.Enum):
            self._emit("enum", _qualname(t), obj.name)
            if not is_library_module(t.__module__):  # a user enum's values can change with its source
                self._walk(obj._value_, path + (("value",),), depth)
        elif isinstance(obj, (int, float, complex, str, bytes)):  # a subclass: its value, then its object state
            base = next(b for b in (int, float, complex, str, bytes) if isinstance(obj, b))
            self._emit("scalar", base.__name__, base.__repr__(obj))
            self._other(obj, path, depth)
        elif isinstance(obj, weakref.ref):
            self._emit("weakref")
            self._walk(obj(), path + (("deref",),), depth)
        elif isinstance(obj, types.CodeType):
            self._emit("code", code_digest(obj))
        elif isinstance(obj, bytearray):
            self._emit("bytearray", bytes(obj))
        elif isinstance(obj, types.ModuleType):
            self._module(obj, path, depth)
        elif isinstance(obj, types.FunctionType):
            self._function(obj, path, depth)
        elif isinstance(obj, type):
            self._class(obj, path, depth)
        elif isinstance(obj, (list, tuple, collections.deque)):
            # The base class's iterator: a subclass's __iter__ or __len__ would be user code.
            base = list if isinstance(obj, list) else tuple if isinstance(obj, tuple) else collections.deque
            items = list(base.__iter__(obj))  # type: ignore[attr-defined]
            self._emit("seq", _qualname(t), len(items), obj.maxlen if isinstance(obj, collections.deque) else None)
            if t not in (list, tuple, collections.deque):
                self._walk(t, path + (("type",),), depth)
            for i, item in enumerate(items):
                self._walk(item, path + (("item", i),), depth)
        elif isinstance(obj, dict):
            self._mapping(obj, path, depth)
        elif isinstance(obj, (set, frozenset)):
            self._emit("set", _qualname(t), sorted(_set_item_text(item) for item in obj))
        else:
            self._other(obj, path, depth)

    def _tensor(self, t: torch.Tensor, path: Path) -> None:
        try:
            strides: object = tuple(t.stride())
            offset: object = t.storage_offset()
        except RuntimeError:  # sparse and other layouts without strides
            strides = offset = None
        self._emit(
            "tensor", _qualname(type(t)), str(t.dtype), tuple(t.shape), strides, offset, str(t.device), str(t.layout),
            t.requires_grad,
        )
        self.tensor_paths.setdefault(id(t), path)
        self.tensors.setdefault(path, t)

    def _mapping(self, obj: dict[Any, Any], path: Path, depth: int) -> None:
        t = type(obj)
        self._emit("map", _qualname(t), dict.__len__(obj))
        if t is not dict:
            self._walk(t, path + (("type",),), depth)
        if isinstance(obj, collections.defaultdict):
            self._walk(obj.default_factory, path + (("default_factory",),), depth)
        for i, (key, value) in enumerate(dict.items(obj)):
            scalar_key = key is None or type(key) in (str, int, bool, float)
            self._walk(key, path + (("key#", i),), depth)
            self._walk(value, path + (("key", key) if scalar_key else ("value#", i),), depth)

    def _module(self, module: types.ModuleType, path: Path, depth: int) -> None:
        name = getattr(module, "__name__", None)
        if not isinstance(name, str) or is_library_module(name):
            self._emit("module", str(name))
            return
        # A user module reached from the roots (`import mylib` then `mylib.W`): its globals are state too.
        self._emit("user-module", name)
        for key, value in dict.items(vars(module)):
            if key in _SKIPPED_MODULE_NAMES:
                continue
            self._emit("global", key)
            self._walk(value, path + (("attr", key),), depth)

    def _function(self, fn: types.FunctionType, path: Path, depth: int) -> None:
        module = fn.__module__
        if is_library_module(module):
            self._emit("library-function", module, fn.__qualname__)
            return
        code = fn.__code__
        self._emit("function", module, fn.__qualname__, code_digest(code))
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell (a variable not assigned yet)
                self._emit("empty-cell", name)
                continue
            self._emit("cell", name)
            self._walk(contents, path + (("closure", name),), depth)
        self._walk(fn.__defaults__, path + (("defaults",),), depth)
        self._walk(fn.__kwdefaults__, path + (("kwdefaults",),), depth)
        if fn.__dict__:  # attributes set on the function, __wrapped__ of a decorated one
            self._instance_dict(fn.__dict__, path, depth)

    def _class(self, cls: type, path: Path, depth: int) -> None:
        module = getattr(cls, "__module__", None)
        if not isinstance(module, str) or is_library_module(module):
            self._emit("library-class", str(module), getattr(cls, "__qualname__", "?"))
            return
        self._emit("class", module, cls.__qualname__, len(cls.__bases__))
        for base in cls.__bases__:
            self._walk(base, path + (("base",),), depth)
        for key, value in dict.items(dict(vars(cls))):
            if key in _SKIPPED_CLASS_NAMES:
                continue
            self._emit("class-attr", key)
            self._walk(value, path + (("attr", key),), depth)

    def _instance_dict(self, state: dict[str, Any], path: Path, depth: int, cls: type | None = None) -> None:
        self._emit("dict", len(state))
        owner = _qualname(cls) if cls is not None else ""
        for key, value in dict.items(state):
            self._emit("attr-name", key)
            if (owner, key) in _PER_PROCESS_ATTRIBUTES:
                self._emit("per-process")
                continue
            self._walk(value, path + (("attr", key),), depth)

    def _other(self, obj: object, path: Path, depth: int) -> None:
        t = type(obj)
        if isinstance(obj, (staticmethod, classmethod)):
            self._emit("wrapper", t.__name__)
            self._walk(obj.__func__, path + (("func",),), depth)
            return
        if isinstance(obj, property):
            self._emit("property")
            for name in ("fget", "fset", "fdel"):
                self._walk(getattr(obj, name), path + ((name,),), depth)
            return
        if isinstance(obj, types.MethodType):
            self._emit("method")
            self._walk(obj.__func__, path + (("func",),), depth)
            self._walk(obj.__self__, path + (("self",),), depth)
            return
        if isinstance(obj, functools.partial):
            self._emit("partial")
            self._walk(obj.func, path + (("func",),), depth)
            self._walk(obj.args, path + (("args",),), depth)
            self._walk(obj.keywords, path + (("keywords",),), depth)
            return
        if isinstance(obj, (types.BuiltinFunctionType, types.MethodWrapperType)):
            owner = getattr(obj, "__self__", None)
            self._emit("builtin", getattr(obj, "__module__", None), getattr(obj, "__qualname__", "?"))
            if owner is not None and not isinstance(owner, (types.ModuleType, type)):
                self._walk(owner, path + (("self",),), depth)  # a bound C method such as `some_list.append`
            return
        if isinstance(obj, _REDUCED_TYPES):
            self._emit("reduced", _qualname(t))
            self._walk(obj.__reduce__()[1], path + (("args",),), depth)
            return
        numpy_text = _numpy_text(obj)
        if numpy_text is not None:
            self._emit("numpy", numpy_text)
            return
        state = _instance_state(obj)
        if not _walks_instance_state(obj):
            # torch operator objects, generators, streams, loggers, locks...: named by type and name. Their
            # behaviour is pinned by the versions; what they hold is not state a trace reads as a Python value
            # (and walking it would reach most of the process: a Logger reaches every logger). A decorator's
            # `__wrapped__` (a nested trident.jit, a library decorator) is the user's function: walked.
            self._emit("library-object", _qualname(t), _plain_name(obj))
            if state is not None and "__wrapped__" in state:
                self._walk(state["__wrapped__"], path + (("attr", "__wrapped__"),), depth)
            return
        self._emit("object", _qualname(t))
        self._walk(t, path + (("type",),), depth)
        if state is not None:
            self._instance_dict(state, path, depth, t)
        for name in _slot_names(t):
            try:
                value = object.__getattribute__(obj, name)
            except AttributeError:
                self._emit("unset-slot", name)
                continue
            self._emit("slot", name)
            self._walk(value, path + (("slot", name),), depth)


def _walks_instance_state(obj: object) -> bool:
    """Whether an object's instance state is walked: objects of user classes, torch.nn.Modules (an nn.Linear's
    in_features and parameters are the user's), standard-library objects other than process handles."""
    module = getattr(type(obj), "__module__", None)
    if not is_library_module(module) or isinstance(obj, torch.nn.Module):
        return True
    top = str(module).partition(".")[0]
    return (top in _STDLIB or top == "builtins") and top not in _HANDLE_MODULES


def _instance_state(obj: object) -> dict[str, Any] | None:
    try:
        state = object.__getattribute__(obj, "__dict__")
    except (AttributeError, TypeError):
        return None
    return state if isinstance(state, dict) else None


def _slot_names(t: type) -> list[str]:
    names: list[str] = []
    for cls in t.__mro__:
        slots = cls.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        names += [s for s in slots if s not in ("__dict__", "__weakref__") and s not in names]
    return names


def _plain_name(obj: object) -> str:
    for attribute in ("__qualname__", "__name__", "_name"):
        try:
            value = object.__getattribute__(obj, attribute)
        except (AttributeError, TypeError):
            continue
        if isinstance(value, str):
            return value
    return ""


def _numpy_text(obj: object) -> str | None:
    numpy = sys.modules.get("numpy")
    if numpy is None or not isinstance(obj, (numpy.ndarray, numpy.generic)):
        return None
    array = numpy.asarray(obj)
    if array.dtype.hasobject:  # its items are Python objects, not bytes
        raise Unfingerprintable("a numpy array of Python objects is reachable from the function's roots")
    data = hashlib.blake2b(array.tobytes(), digest_size=16).hexdigest()
    return f"{type(obj).__name__} {array.dtype} {array.shape} {data}"


def _set_item_text(item: object) -> str:
    """Items of a set hashed on their own (sets have no stable order): a sorted list of their fingerprints."""
    walk = StateWalk()
    walk.walk_root(("set-item",), item)
    return walk.digest()


def format_path(path: Path) -> str:
    """A path as the user would write it: `self.layers[2]._parameters['weight']`."""
    if not path:
        return "?"
    root, steps = path[0], path[1:]
    text = _format_root(root)
    for step in steps:
        kind = step[0]
        if kind == "attr" or kind == "slot":
            text += f".{step[1]}"
        elif kind == "item":
            text += f"[{step[1]}]"
        elif kind == "key":
            text += f"[{step[1]!r}]"
        elif kind == "closure":
            text += f".<closure {step[1]}>"
        else:
            text += f".<{kind}{''.join(f' {s}' for s in step[1:])}>"
    return text


def _format_root(root: object) -> str:
    if not isinstance(root, tuple) or not root:
        return str(root)
    kind = root[0]
    if kind == "global":
        return str(root[1])
    if kind == "closure":
        return f"<closure {root[1]}>"
    if kind == "self":
        return "self"
    if kind == "argument":
        return f"<argument {root[1]}{''.join(f'[{i}]' for i in root[2])}>"
    if kind == "module":
        return f"{root[1]}.{root[2]}"
    return repr(root)
