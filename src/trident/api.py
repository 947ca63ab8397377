"""@trident.jit and trident.explain."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from . import exc
from .knobs import knobs

F = TypeVar("F", bound=Callable[..., object])


def jit(fn: F) -> F:
    """Compile `fn` (a function, a bound method, or an nn.Module) into one native Specialization Cache Module.

    The result is called like `fn`; for a module it is still that module (module.py). The first call with new
    inputs captures and compiles a specialization; later calls that match one run entirely in native code. The
    native runtime is built (once per torch version) at the first call, not here. With TRIDENT_DISABLE=1, `fn`
    is returned as is.
    """
    if knobs.disable:
        return fn
    if not callable(fn):
        raise TypeError(f"trident.jit expects a function or an nn.Module, got {type(fn).__name__}")
    if isinstance(fn, type):
        raise TypeError(
            f"trident.jit got the class {fn.__qualname__}; jit an instance (`trident.jit({fn.__name__}(...))`) or "
            "decorate its forward method"
        )
    import torch

    if isinstance(fn, torch.nn.Module):
        from .module import jit_module

        return jit_module(fn)  # type: ignore[return-value]
    from .runtime import build

    if build._module is None:  # no runtime in this process yet: build nothing, import no compiler (lazy_entry.py)
        from .lazy_entry import LazyEntry

        return LazyEntry.wrapping(fn)  # type: ignore[return-value]
    from .driver import JitFunction

    return JitFunction(fn).entry  # type: ignore[no-any-return]


def explain(f: Callable[..., object]) -> str:
    """Each specialization of a jitted function with its guards and hits, and why the last call missed."""
    state = getattr(f, "_trident", None)
    if state is None:
        raise exc.TridentError(f"trident.explain expects a function returned by trident.jit, got {f!r}")
    return state.explain()
