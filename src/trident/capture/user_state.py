"""The user's Python objects around a capture: what the traced function changed in them, undone.

A capture runs the user's Python for real, on fake tensors. Whatever it assigns into objects that outlive the call
(a cache it initializes lazily, `self.keys = torch.zeros(...)`; a list it appends to; a counter) is assigned
there for real, with the capture's values: FakeTensors and SymInts of a finished trace. Left in place, the next
eager call computes with them (wrong results or "closes over a FakeTensor") and the next capture reads them.

`snapshot` records, before the capture, the shallow state of every container the function can reach: the bound
`self`, its arguments, its closure cells and the globals its code names, and from those every list, dict and
object `__dict__` below them (modules included; not the insides of functions, classes, Python modules, tensors
or Triton kernels, which are code, not state). `UserState.restore` puts back what changed, by identity.

What the driver does with it (driver.py): a failed capture undoes everything, so the eager run that follows makes
each change once, as eager does. A capture that succeeded but left a traced value in the user's objects undoes
everything too and runs that call eagerly: compiled code cannot make a Python-level assignment, and the eager call
makes the real one (a lazily allocated cache is allocated for real, and the next call compiles against it).
Plain values a successful capture assigned (a string appended to a list) stay: such side effects happen once
per compile (docs/semantics.md).
"""
from __future__ import annotations

import dataclasses
import types
from collections.abc import Iterator, Sequence

import torch

# Bounds of the walk: a capture must not stall on a huge object graph. Past them the rest is not snapshotted
# (and `UserState.complete` says so).
_MAX_DEPTH = 24
_MAX_OBJECTS = 200_000

_CODE_TYPES = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               types.CodeType, torch.Tensor, torch.dtype, torch.device)


@dataclasses.dataclass
class _Saved:
    obj: object
    kind: str  # "list", "dict" or "attrs" (the object's __dict__)
    path: str  # how the user reaches it, for messages ("cache.layers[0]")
    items: object  # a shallow copy: list of values, or dict of key -> value


@dataclasses.dataclass(frozen=True)
class Change:
    path: str  # "cache.layers[0].keys"
    traced: bool  # the new value is, or holds, a value of the capture (FakeTensor, SymInt, ...)


class UserState:
    """The shallow state of every container reachable from a function, as it was before a capture."""

    def __init__(self, saved: list[_Saved], complete: bool) -> None:
        self._saved = saved
        self.complete = complete
        self._reached = {id(s.obj) for s in saved}  # `saved` holds the objects: their ids stay theirs

    def made_since(self, obj: object) -> bool:
        """Whether `obj` is no object the snapshot reached (one the call made), as far as a complete snapshot
        can tell: an incomplete one vouches for nothing."""
        return self.complete and id(obj) not in self._reached

    def changes(self) -> list[Change]:
        """What differs now from the snapshot, by identity of each value."""
        found: list[Change] = []
        for s in self._saved:
            now = _shallow(s.obj, s.kind)
            if s.kind == "list":
                before, after = s.items, now
                assert isinstance(before, list) and isinstance(after, list)
                if len(before) != len(after) or any(a is not b for a, b in zip(before, after)):
                    new = [v for v in after if not any(v is b for b in before)]
                    found.append(Change(s.path, any(holds_traced(v) for v in new)))
                continue
            before_d, after_d = s.items, now
            assert isinstance(before_d, dict) and isinstance(after_d, dict)
            for key in before_d.keys() | after_d.keys():
                old, new = before_d.get(key, _ABSENT), after_d.get(key, _ABSENT)
                if old is not new:
                    sep = f".{key}" if s.kind == "attrs" else f"[{key!r}]"
                    found.append(Change(s.path + sep, new is not _ABSENT and holds_traced(new)))
        return found

    def restore(self) -> None:
        """Put every snapshotted container back as it was (its values by identity)."""
        for s in self._saved:
            if s.kind == "list":
                list.__setitem__(s.obj, slice(None), s.items)  # type: ignore[arg-type]
            else:
                target = s.obj.__dict__ if s.kind == "attrs" else s.obj
                now = _shallow(s.obj, s.kind)
                assert isinstance(now, dict) and isinstance(s.items, dict)
                if now.keys() != s.items.keys() or any(now[k] is not v for k, v in s.items.items()):
                    dict.clear(target)  # type: ignore[arg-type]
                    dict.update(target, s.items)  # type: ignore[arg-type,call-overload]


def snapshot(fn: object, values: Sequence[object], names: Sequence[str] = ()) -> UserState:
    """The state reachable from `fn` (bound self, closure cells, globals its code names) and its arguments
    (`names`: the parameters', for messages)."""
    saved: list[_Saved] = []
    seen: set[int] = set()
    pending = list(_roots(fn, values, names))
    complete = True
    while pending:
        path, obj, depth = pending.pop()
        if id(obj) in seen or _is_leaf(obj):
            continue
        if len(seen) >= _MAX_OBJECTS or depth > _MAX_DEPTH:
            complete = False
            continue
        seen.add(id(obj))
        for kind, items in _containers(obj):
            if kind != "tuple":  # immutable: only walked through
                saved.append(_Saved(obj, kind, path, items))
            pending += [(_child_path(path, kind, k), v, depth + 1) for k, v in _children(kind, items)]
    return UserState(saved, complete)


_ABSENT = object()


def holds_traced(value: object, depth: int = 0, seen: set[int] | None = None) -> bool:
    """Whether `value` is, or holds in its containers, a value only a capture makes: a FakeTensor, a SymInt,
    SymFloat or SymBool, or an FX proxy."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, (FakeTensor, torch.SymInt, torch.SymFloat, torch.SymBool, torch.fx.Proxy)):
        return True
    if _is_leaf(value) or depth > _MAX_DEPTH:
        return False
    seen = set() if seen is None else seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    return any(holds_traced(v, depth + 1, seen) for kind, items in _containers(value) for _, v in _children(kind, items))


def describe(changes: Sequence[Change], limit: int = 3) -> str:
    shown = ", ".join(c.path for c in changes[:limit])
    return shown + (f" and {len(changes) - limit} more" if len(changes) > limit else "")


def _roots(fn: object, values: Sequence[object], names: Sequence[str]) -> Iterator[tuple[str, object, int]]:
    bound = getattr(fn, "__self__", None)
    if bound is not None:
        yield "self", bound, 0
    for i, value in enumerate(values):
        yield names[i] if i < len(names) else f"argument {i}", value, 0
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if code is None:
        return
    for name, cell in zip(code.co_freevars, getattr(func, "__closure__", None) or ()):
        try:
            yield name, cell.cell_contents, 0
        except ValueError:  # an empty cell
            continue
    scope = getattr(func, "__globals__", {})
    for name in _global_names(code):
        if name in scope:
            yield name, scope[name], 0


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for const in code.co_consts:  # lambdas, comprehensions and nested functions name globals too
        if isinstance(const, types.CodeType):
            yield from _global_names(const)


def _is_leaf(obj: object) -> bool:
    """Values the walk does not enter: scalars, strings, code, tensors (their data is not Python state; a
    capture never writes a live tensor) and Triton kernels (their variant caches are Triton's)."""
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, torch.SymInt, torch.SymFloat,
                                       torch.SymBool, *_CODE_TYPES)):
        return True
    module = type(obj).__module__ or ""
    return module.startswith(("triton.", "torch._", "torch.fx", "torch.utils", "threading", "_thread"))


def _containers(obj: object) -> Iterator[tuple[str, object]]:
    if isinstance(obj, list):
        yield "list", list(obj)
    elif isinstance(obj, dict):
        yield "dict", dict(obj)
    elif isinstance(obj, tuple):
        yield "tuple", tuple(obj)
    if not isinstance(obj, (list, dict, tuple)) or type(obj) not in (list, dict, tuple):
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            yield "attrs", dict(attrs)


def _children(kind: str, items: object) -> Iterator[tuple[object, object]]:
    if kind in ("list", "tuple"):
        yield from enumerate(items)  # type: ignore[call-overload]
    else:
        yield from items.items()  # type: ignore[attr-defined]


def _child_path(path: str, kind: str, key: object) -> str:
    return f"{path}.{key}" if kind == "attrs" else f"{path}[{key!r}]"


def _shallow(obj: object, kind: str) -> object:
    if kind == "list":
        return list(obj)  # type: ignore[call-overload]
    if kind == "attrs":
        return dict(obj.__dict__)
    return dict(obj)  # type: ignore[call-overload]
