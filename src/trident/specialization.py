"""A specialization as the jitted function keeps it: the one record, whether it was compiled now or loaded.

The driver makes it after a capture and a build (`compiled`), the disk cache after a load (`loaded`); the driver
installs either (`JitFunction._install` gives it its index) and the disk cache reads it to publish a record.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

from .capture.inputs import CallFacts
from .capture.trace import Trace
from .guards.guard_set import GuardSet
from .runtime.specialization import CompiledSpecialization

COMPILED, LOADED = "compiled", "loaded from the disk cache"  # Specialization.origin
NOT_INSTALLED = -1  # Specialization.index before JitFunction._install


@dataclasses.dataclass
class Specialization:
    guards: GuardSet
    facts: CallFacts  # the call's facts without its tensors
    trace: Trace | None  # None when loaded from the disk cache (no capture ran)
    compiled: CompiledSpecialization
    compile_seconds: float  # capture and build, or the load's checks and instantiation
    n_trace_constants: int  # compiled.constants[:n] are the trace's tensor constants (guard paths (-1, (i,)))
    origin: str = COMPILED
    index: int = NOT_INSTALLED  # its place in the jitted function's list and entry
    disk_cache: str = ""  # "persisted" or "not persisted: <why>" (trident.cache; empty when it is off)
    disk_record: Path | None = None  # its record in the disk cache, persisted or loaded (trident.export copies it)

    @property
    def trace_constants(self) -> list[object]:
        return self.compiled.constants[: self.n_trace_constants]
