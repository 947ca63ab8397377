"""What trident.jit returns before the native runtime is built (issue 15: decorating must stay cheap).

The runtime's first build takes ~40 s (once per torch version), so a module of decorated functions must import
without it: JitFunction makes its native entry at decoration only when this process has loaded the runtime
already; otherwise trident.jit returns a LazyEntry, whose first call builds the runtime and makes the entry.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .driver import JitFunction


class LazyEntry:
    """What trident.jit returns before the runtime is built: its first call builds the runtime and makes the
    native entry, which then becomes this object's class's __call__ (a staticmethod, so the entry gets the
    call's own arguments): later calls reach the entry through the class slot, with no Python frame. Each
    LazyEntry has a class of its own for that reason."""

    _trident: JitFunction

    @staticmethod
    def wrapping(jit: JitFunction) -> LazyEntry:
        cls = type("LazyEntry", (LazyEntry,), {"__call__": LazyEntry._first_call, "_trident": jit})
        lazy = cls()
        functools.update_wrapper(lazy, jit.fn)  # type: ignore[arg-type]
        jit._on_entry.append(lambda entry: setattr(cls, "__call__", staticmethod(entry)))
        return lazy

    def _first_call(self, *args: object, **kwargs: object) -> object:
        return self._trident.make_entry()(*args, **kwargs)

    def __get__(self, obj: object, objtype: type | None = None) -> object:
        # Jitted in a class body: bind like a function (instance.f(x) calls f(instance, x)), as the entry does.
        return self if obj is None else functools.partial(self, obj)

    def __repr__(self) -> str:
        return f"<trident.jit {self._trident.name!r}: native entry made at the first call>"
