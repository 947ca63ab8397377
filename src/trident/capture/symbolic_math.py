"""`math.sqrt(n)` on a symbolic int or float stays symbolic while capturing.

math's functions convert their argument with `float()`, which on a SymInt reads its value: the trace would
guard on it (`Eq(n, 4)`) and recompile for every new value. While a capture runs, the math functions torch has
symbolic versions of (torch._sym_sqrt, ...) and the host program lowers (lowering/symbolic_ints.py) take the
symbolic path for symbolic arguments; every other argument reaches the original function. Patched on the
`math` module, so `math.sqrt(n)` is covered and `from math import sqrt` (bound before the capture) is not.
`float(n)` itself cannot stay symbolic (Python requires `__float__` to return a real float): it specializes
on n's value; `n * 1.0` or `torch.sym_float(n)` stays symbolic.
"""
from __future__ import annotations

import contextlib
import functools
import math
import threading
from collections.abc import Callable, Iterator

import torch

_SYMBOLIC = {"sqrt": "_sym_sqrt", "cos": "_sym_cos", "sin": "_sym_sin", "log2": "_sym_log2"}
_lock = threading.Lock()
_depth = 0
_originals: dict[str, Callable[[float], float]] = {}


def _symbolic_aware(original: Callable[[float], float], symbolic: Callable[[object], object]) -> Callable[..., object]:
    @functools.wraps(original)
    def call(x: object) -> object:
        if isinstance(x, (torch.SymInt, torch.SymFloat)):
            return symbolic(x)
        return original(x)  # type: ignore[arg-type]

    return call


@contextlib.contextmanager
def symbolic_math() -> Iterator[None]:
    """Nestable and thread-safe: the outermost block patches `math`, the last one out restores it."""
    global _depth
    with _lock:
        if _depth == 0:
            for name, symbolic in _SYMBOLIC.items():
                if hasattr(torch, symbolic):
                    _originals[name] = getattr(math, name)
                    setattr(math, name, _symbolic_aware(_originals[name], getattr(torch, symbolic)))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                for name, original in _originals.items():
                    setattr(math, name, original)
                _originals.clear()
