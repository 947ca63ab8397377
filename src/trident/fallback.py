"""Sticky eager fallback: calls whose capture or compile failed run eagerly from then on, without trying again.

When capturing or compiling a call fails for inputs eager accepts (an operator rejects fake tensors, an
argument Trident cannot pass natively, a lowering gap), the driver runs the call eagerly and records the
decision here, keyed on what a specialization of that call would have guarded: every leaf's guarded facts
(tensor dtype, device, sizes, strides, offset, alignment and flags; int/float/bool values; other objects by
identity), the argument structure and the global state. A later call with the same key runs eagerly straight
away (a dict lookup on the miss path instead of a new capture); a call that differs in any guarded fact gets
its own attempt, so nothing that would compile is caught. Running eagerly is always correct, so the key only
has to be precise enough not to cost a compile.

Objects other than tensors and scalars are guarded by identity, so a program fed a new numpy array on every
call would capture again on every call. As sizes and ints become symbolic once they change, such an argument
is generalized once it changes: when a second guard set that differs from a remembered one only in which
objects (of the same types) it passes fails too, calls matching it up to those objects' identities run eagerly
as well (`explain` shows the entry as "any <type>").
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
from collections.abc import Hashable, Iterator

from .capture.inputs import CallFacts, LeafKind
from .guards.global_state import current_function_modes, current_global_state
from .knobs import knobs


@dataclasses.dataclass
class EagerEntry:
    """One guard set that runs eagerly, and why."""

    reason: str
    calls: int = 0
    scope: str = ""  # "" (these very objects) or "'a' any ndarray, ..." (objects generalized to their types)
    # Objects the key names by identity, kept alive so that their ids are not reused by other objects.
    keepalive: tuple[object, ...] = ()


@dataclasses.dataclass(frozen=True)
class _Key:
    exact: Hashable  # objects by identity
    general: Hashable | None  # objects by type; None when the call passes no such object
    identities: tuple[object, ...]


def fallback_key(facts: CallFacts) -> _Key:
    """The keys of a call (what its specialization would guard, with objects by identity and by type)."""
    parts: list[Hashable] = []
    general: list[Hashable] = []
    identities: list[object] = []
    for leaf in facts.leaves:
        payload: Hashable
        if leaf.kind is LeafKind.TENSOR:
            payload = leaf.tensor
        elif leaf.kind is LeafKind.OBJECT:
            payload = id(leaf.value)
            identities.append(leaf.value)
        elif leaf.kind is LeafKind.FLOAT:
            payload = float.hex(leaf.value)  # type: ignore[arg-type]  # bitwise, as guards compare: -0.0, nan
        else:
            payload = leaf.value  # type: ignore[assignment]
        parts.append((leaf.path.param, leaf.path.items, leaf.kind, payload))
        if leaf.kind is LeafKind.OBJECT:
            general.append((leaf.path.param, leaf.path.items, leaf.kind, type(leaf.value)))
        else:
            general.append(parts[-1])
    state = (facts.sequences, current_global_state(), tuple(id(m) for m in current_function_modes()))
    return _Key((tuple(parts), state), (tuple(general), state) if identities else None, tuple(identities))


class EagerFallbacks:
    """The guard sets of one jitted function that run eagerly. Lookups take no lock (dict reads)."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, EagerEntry] = {}
        self._by_general: dict[Hashable, int] = {}  # general key -> exact entries remembered under it

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, facts: CallFacts) -> EagerEntry | None:
        if not self._entries:
            return None
        key = fallback_key(facts)
        entry = self._entries.get(key.exact)
        if entry is None and key.general is not None:
            entry = self._entries.get(("any", key.general))
        return entry

    def add(self, facts: CallFacts, reason: str) -> EagerEntry:
        key = fallback_key(facts)
        if key.general is not None:
            seen = self._by_general.get(key.general, 0)
            if seen >= 1:  # a second object of the same types failed the same way: generalize (see above)
                general = ("any", key.general)
                return self._entries.setdefault(general, EagerEntry(reason, scope=_any_objects(facts)))
            self._by_general[key.general] = seen + 1
        return self._entries.setdefault(key.exact, EagerEntry(reason, keepalive=key.identities))

    def describe(self) -> list[str]:
        """explain's lines: each guard set that runs eagerly, with its reason and how many calls it took."""
        return [
            f"  runs eagerly ({e.calls} call(s)){' for ' + e.scope if e.scope else ''}: {e.reason}"
            for e in self._entries.values()
        ]


def _any_objects(facts: CallFacts) -> str:
    objects = [leaf for leaf in facts.leaves if leaf.kind is LeafKind.OBJECT]
    return ", ".join(f"'{leaf.path.name}' any {type(leaf.value).__name__}" for leaf in objects)


# -- strict mode (tests): an eager fallback nobody expected is an error ---------------------------------------------
class UnexpectedFallback(AssertionError):
    """Raised in strict mode (TRIDENT_STRICT=1, trident.testing.strict()) when a call runs eagerly outside
    trident.testing.expect_fallback(). An AssertionError: it is a test failure, not a Trident diagnosis."""


@dataclasses.dataclass
class FallbackEvent:
    function: str
    reason: str


RECENT_EVENTS = 1024  # fallback_events() keeps this many: a server that runs eagerly for hours must not grow
_recent: collections.deque[FallbackEvent] = collections.deque(maxlen=RECENT_EVENTS)
_collectors: list[list[FallbackEvent]] = []  # the open allowing() blocks' lists; each gets every event
_unexpected: list[FallbackEvent] = []  # strict violations (only in strict mode), kept where a caller swallowed one
_lock = threading.Lock()


def report_fallback(function: str, reason: str) -> None:
    """Called by the driver each time a call runs eagerly (not for TRIDENT_DISABLE, not for eager's own
    TypeError on a wrong call). In strict mode outside an allowing() block, raises UnexpectedFallback."""
    event = FallbackEvent(function, reason)
    with _lock:
        _recent.append(event)
        for seen in _collectors:
            seen.append(event)
        # The open blocks are global, not per thread: threads a test starts are covered by its block.
        unexpected = knobs.strict and not _collectors
        if unexpected:
            _unexpected.append(event)
    if unexpected:
        raise UnexpectedFallback(
            f"trident strict mode: '{function}' ran eagerly: {reason}. A test that means to exercise the eager "
            "fallback wraps the call in trident.testing.expect_fallback()"
        )


@contextlib.contextmanager
def allowing() -> Iterator[list[FallbackEvent]]:
    """Fallbacks inside are not strict-mode violations; yields the list of those that happen (of any thread)
    while the block is open."""
    seen: list[FallbackEvent] = []
    with _lock:
        _collectors.append(seen)
    try:
        yield seen
    finally:
        with _lock:  # by identity: list.remove compares by value, and two open blocks' lists may be equal
            del _collectors[next(i for i, c in enumerate(_collectors) if c is seen)]


def events() -> list[FallbackEvent]:
    """The most recent RECENT_EVENTS eager fallbacks of this process, oldest first."""
    with _lock:
        return list(_recent)


def violations() -> list[FallbackEvent]:
    with _lock:
        return list(_unexpected)
