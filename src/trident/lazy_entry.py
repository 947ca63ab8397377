"""What trident.jit returns before the native runtime is loaded (issue 15: decorating must stay cheap).

The runtime's first build takes ~40 s (once per torch version) and the compiler's imports (torch._dynamo,
torch-mlir) seconds more, so a module of decorated functions must import without either. trident.jit returns
the native entry itself only when this process has loaded the runtime already; otherwise a LazyEntry, which
holds the function until its first call (or until `_trident` is read, e.g. by trident.explain): then it makes
the JitFunction (checking the signature: an unsupported one raises there), builds or loads the runtime, and
makes the native entry, which becomes its class's `__call__`. Later calls go from CPython's call slot to the
entry with no Python frame (benchmarks/module_overhead_cpu.py: ~20-30 ns over calling the entry directly).
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import JitFunction

_lock = threading.Lock()


class LazyEntry:
    """Stands in for a jitted function's native entry until the first call; one class per LazyEntry, since the
    class's `__call__` becomes that function's entry."""

    _fn: Callable[..., object]
    _jit: JitFunction | None = None

    @staticmethod
    def wrapping(fn: Callable[..., object]) -> LazyEntry:
        cls = type("LazyEntry", (LazyEntry,), {"__call__": LazyEntry._first_call, "_fn": staticmethod(fn)})
        lazy = cls()
        functools.update_wrapper(lazy, fn)  # __wrapped__, __name__, __doc__ as the entry will have them
        return lazy

    @property
    def _trident(self) -> JitFunction:
        """The JitFunction, made on first use (it imports the compiler)."""
        cls = type(self)
        with _lock:
            if cls._jit is None:
                from .driver import JitFunction

                jit = JitFunction(cls._fn)
                jit.when_entry_exists(lambda entry: setattr(cls, "__call__", staticmethod(entry)))
                cls._jit = jit
        return cls._jit

    def _first_call(self, *args: object, **kwargs: object) -> object:
        return self._trident.entry(*args, **kwargs)

    def __getattr__(self, name: str) -> object:
        # The entry's own methods (hits(), try_call(), ...), as on the entry trident.jit returns once the runtime
        # is loaded; they make the entry (and so build the runtime) as a call would. Dunder and private names are
        # left alone: introspection (inspect.signature, copy, pickle probes) must not build anything.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._trident.entry, name)

    def __get__(self, obj: object, objtype: type | None = None) -> object:
        # Jitted in a class body: bind like a function (instance.f(x) calls f(instance, x)), as the entry does.
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<trident.jit {getattr(type(self)._fn, '__qualname__', '?')!r}: native entry made at the first call>"
