"""Everything a function can reach, as a value two runs can be compared by (`from reachable_state import ...`).

`deep_state(*roots)` walks objects the way a program reaches them (attributes, list and dict items, module
parameters and buffers) and returns a nested structure of plain values: each tensor as its type, dtype, device,
sizes, strides, storage offset and bytes; each other object as its type and its walked contents. Two
structures are equal exactly when the reachable state is structurally and bitwise the same, and `first_difference`
says where they differ. Independent of trident's own snapshot (capture/user_state.py), so that a bug there cannot
hide itself.
"""
from __future__ import annotations

import types
from typing import Any

import torch

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.CodeType)


def tensor_state(t: torch.Tensor) -> tuple[Any, ...]:
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(t, FakeTensor):
        return ("FakeTensor", str(t.dtype), tuple(t.shape))
    raw = t.detach()
    data = raw.reshape(-1).contiguous().cpu().view(torch.uint8).numpy().tobytes() if raw.numel() else b""
    return (type(t).__name__, str(t.dtype), str(t.device), tuple(t.shape), tuple(t.stride()), t.storage_offset(), data)


def deep_state(*roots: object, depth: int = 16) -> Any:
    seen: dict[int, int] = {}

    def walk(obj: object, level: int) -> Any:
        if isinstance(obj, torch.Tensor):
            return tensor_state(obj)
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes, torch.dtype, torch.device)):
            return (type(obj).__name__, repr(obj))
        if isinstance(obj, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ("traced", type(obj).__name__)
        if isinstance(obj, _SKIP) or level > depth:
            return (type(obj).__name__, "not walked")
        if id(obj) in seen:
            return ("seen", seen[id(obj)])  # a cycle or a shared object: its first position
        seen[id(obj)] = len(seen)
        if isinstance(obj, (list, tuple)):
            return (type(obj).__name__, [walk(v, level + 1) for v in obj])
        if isinstance(obj, dict):
            return (type(obj).__name__, {f"[{k!r}]": walk(v, level + 1) for k, v in obj.items()})
        attrs = getattr(obj, "__dict__", None)
        if isinstance(attrs, dict):
            return (type(obj).__name__, {f".{k}": walk(v, level + 1) for k, v in attrs.items()})
        return (type(obj).__name__, "opaque")

    return [walk(r, 0) for r in roots]


def first_difference(a: Any, b: Any, path: str = "") -> str | None:
    """Where two deep_state values differ first ("[0][1].table[1]: ..."; a tuple's [1] is its contents), or
    None."""
    if type(a) is not type(b):
        return f"{path}: {a!r:.120} != {b!r:.120}"
    if isinstance(a, dict):
        for key in a.keys() | b.keys():
            if key not in a or key not in b:
                return f"{path}{key}: {'absent' if key not in a else 'present'} before, {'absent' if key not in b else 'present'} after"
            found = first_difference(a[key], b[key], f"{path}{key}")
            if found is not None:
                return found
        return None
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: {len(a)} items != {len(b)} items ({a!r:.200} vs {b!r:.200})"
        for i, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{path}[{i}]")
            if found is not None:
                return found
        return None
    return None if a == b else f"{path}: {a!r:.160} != {b!r:.160}"
