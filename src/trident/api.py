"""@trident.jit and trident.explain."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from . import exc
from .knobs import knobs

F = TypeVar("F", bound=Callable[..., object])


def jit(fn: F) -> F:
    """Compile `fn` into one native Specialization Cache Module.

    The result is called like `fn`. The first call with new inputs captures and compiles a specialization;
    later calls that match one run entirely in native code. With TRIDENT_DISABLE=1, `fn` is returned as is.
    """
    if knobs.disable:
        return fn
    if not callable(fn):
        raise TypeError(f"trident.jit expects a function, got {type(fn).__name__}")
    from .driver import JitFunction

    return JitFunction(fn).entry  # type: ignore[return-value]


def explain(f: Callable[..., object]) -> str:
    """Each specialization of a jitted function with its guards and hits, and why the last call missed."""
    state = getattr(f, "_trident", None)
    if state is None:
        raise exc.TridentError(f"trident.explain expects a function returned by trident.jit, got {f!r}")
    return state.explain()
