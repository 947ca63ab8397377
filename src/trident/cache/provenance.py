"""The roots from which a jitted function reaches Python state, found again in another process.

A root is where the function's own lookups start, named so that a new process can find it without capture:
  ("global", name)              a global the function's code names (fn.__globals__)
  ("closure", name)             a closure cell of the function
  ("self",)                     the bound `self` of a jitted method, or a jitted callable object itself
  ("argument", param, items)    an argument guarded by identity (a module or other object passed in)
  ("module", module, name)      a global named by other user code that ran during capture (code_deps.py)
Walking the roots (fingerprint.StateWalk) gives the state fingerprint and, for each tensor, the first path that
reaches it: a constant's provenance is that path, and loading resolves it by walking the same roots in the new
process. A name that is not bound (an attribute name among co_names, a builtin) is recorded as missing, so that
binding it later (a global shadowing a builtin) changes the fingerprint.
"""
from __future__ import annotations

import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

from ..capture.inputs import CallFacts, LeafKind, is_state_object, item_at
from .fingerprint import StateWalk, nested_codes

Root = tuple[Any, ...]
_MISSING = object()


def function_parts(fn: Callable[..., object]) -> tuple[types.FunctionType | None, object]:
    """(the Python function whose code runs, the object bound as self or _MISSING)."""
    if isinstance(fn, types.MethodType):
        func = fn.__func__
        return (func if isinstance(func, types.FunctionType) else None), fn.__self__
    if isinstance(fn, types.FunctionType):
        return fn, _MISSING
    return None, fn  # a callable object (an nn.Module, a functools.partial): its state is its own


def function_roots(fn: Callable[..., object]) -> list[Root]:
    """Roots of the function itself, in a fixed order: self, closure cells, then globals its code names."""
    func, bound_self = function_parts(fn)
    roots: list[Root] = []
    if bound_self is not _MISSING:
        roots.append(("self",))
    if func is not None:
        roots += [("closure", name) for name in func.__code__.co_freevars]
        roots += [("global", name) for name in code_names(func.__code__)]
    return roots


def code_names(code: types.CodeType) -> list[str]:
    """Names a code object (and the code nested in it) looks up, in first-use order, without duplicates."""
    names: dict[str, None] = {}
    for nested in nested_codes(code):
        for name in nested.co_names:
            names.setdefault(name, None)
    return list(names)


def argument_roots(facts: CallFacts) -> list[Root]:
    """Arguments guarded by identity: their state is walked like a closure's (their object is this call's)."""
    return [("argument", leaf.path.param, leaf.path.items) for leaf in facts.leaves if leaf.kind is LeafKind.OBJECT]


def resolve_root(root: Root, fn: Callable[..., object], values: Sequence[object]) -> object:
    """The object at `root` in this process, or _MISSING."""
    kind = root[0]
    func, bound_self = function_parts(fn)
    if kind == "self":
        return bound_self
    if kind == "closure":
        if func is None or root[1] not in func.__code__.co_freevars:
            return _MISSING
        cell = (func.__closure__ or ())[func.__code__.co_freevars.index(root[1])]
        try:
            return cell.cell_contents
        except ValueError:
            return _MISSING
    if kind == "global":
        if func is None:
            return _MISSING
        return func.__globals__.get(root[1], _MISSING)
    if kind == "argument":
        value: object = values[root[1]] if root[1] < len(values) else _MISSING
        for i in root[2]:
            if type(value) in (tuple, list, dict):
                if i >= len(value):  # type: ignore[arg-type]
                    return _MISSING
            elif not is_state_object(value) or i >= len(vars(value)):
                return _MISSING
            value = item_at(value, i)
        return value
    if kind == "module":
        module = sys.modules.get(root[1])
        return _MISSING if module is None else vars(module).get(root[2], _MISSING)
    return _MISSING


def walk_roots(
    roots: Sequence[Root], fn: Callable[..., object], values: Sequence[object], walk: StateWalk | None = None
) -> StateWalk:
    """Walk every root, continuing `walk` if given (raises fingerprint.Unfingerprintable when the state is too
    large)."""
    walk = walk or StateWalk()
    for root in roots:
        value = resolve_root(root, fn, values)
        if value is _MISSING:
            walk.walk_missing_root(root, "unbound")
        else:
            walk.walk_root(root, value)
    return walk
