"""Sticky eager fallback: calls whose capture or compile failed run eagerly from then on, without trying again.

When capturing or compiling a call fails for inputs eager accepts (an operator rejects fake tensors, an
argument Trident cannot pass natively, a lowering gap), the driver runs the call eagerly and records the
decision here, keyed on what a specialization of that call would have guarded: every leaf's guarded facts
(tensor dtype, device, sizes, strides, offset, alignment and flags; int/float/bool values; other objects by
identity), the argument structure and the global state. A later call with the same key runs eagerly straight
away (a dict lookup on the miss path instead of a new capture); a call that differs in any guarded fact gets
its own attempt, so nothing that would compile is caught. Running eagerly is always correct, so the key only
has to be precise enough not to cost a compile.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Hashable

from .capture.guards import current_function_modes, current_global_state
from .capture.inputs import CallFacts, LeafKind


@dataclasses.dataclass
class EagerEntry:
    """One guard set that runs eagerly, and why."""

    reason: str
    calls: int = 0
    # Objects the key names by identity, kept alive so that their ids are not reused by other objects.
    keepalive: tuple[object, ...] = ()


def fallback_key(facts: CallFacts) -> tuple[Hashable, tuple[object, ...]]:
    """The key of a call (what its specialization would guard) and the objects it names by identity."""
    parts: list[Hashable] = []
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
    modes = tuple(id(m) for m in current_function_modes())
    return (tuple(parts), facts.sequences, current_global_state(), modes), tuple(identities)


class EagerFallbacks:
    """The guard sets of one jitted function that run eagerly. Lookups take no lock (one dict read)."""

    def __init__(self) -> None:
        self._entries: dict[Hashable, EagerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, facts: CallFacts) -> EagerEntry | None:
        if not self._entries:
            return None
        key, _ = fallback_key(facts)
        return self._entries.get(key)

    def add(self, facts: CallFacts, reason: str) -> EagerEntry:
        key, identities = fallback_key(facts)
        entry = self._entries.setdefault(key, EagerEntry(reason, keepalive=identities))
        return entry

    def describe(self) -> list[str]:
        """explain's lines: each guard set that runs eagerly, with its reason and how many calls it took."""
        return [f"  runs eagerly ({e.calls} call(s)): {e.reason}" for e in self._entries.values()]
