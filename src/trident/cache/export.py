"""Ahead-of-time export: a function's specializations written to a folder that another process loads from.

    trident.export(step, "/srv/model/trident")      # in a process that compiled (and called) step
    trident.load("/srv/model/trident")              # in a fresh server process, before its first call

`export` copies the record and the library of each of the function's specializations, as the disk cache stored
them, into the folder (the disk cache's own layout, store.py), so a disk cache pointed at the folder
(TRIDENT_DISK_CACHE_DIR) also loads them. `load` adds the folder to the places this process's disk cache looks
up (after its own folder), without writing there. A loaded export goes through every check a disk-cache record
does (the lookup key, code dependencies, state fingerprint, guards, the native guard): a mismatch compiles.

Only what the disk cache persisted can be exported: a specialization compiled with the disk cache off, or one it
refused (trident.explain says why), makes export raise before anything is written.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from .. import exc
from ..runtime import trust
from ..specialization import Specialization
from . import store


class ExportError(exc.TridentError):
    """A specialization of the function cannot be exported (nothing was written)."""


def export(jitted: object, path: str | os.PathLike[str]) -> list[Path]:
    """Write every specialization of the jitted function `jitted` under `path`; returns the records written."""
    state = getattr(jitted, "_trident", None)
    if state is None:
        raise ExportError(f"trident.export expects a function returned by trident.jit, got {jitted!r}")
    specializations: Sequence[Specialization] = state.specializations
    if not specializations:
        raise ExportError(f"'{state.name}' has no specialization to export: call it first")
    missing = [
        f"specialization {spec.index}: {spec.disk_cache or 'the disk cache is off (TRIDENT_DISK_CACHE=0)'}"
        for spec in specializations if spec.disk_record is None
    ]  # fmt: skip
    if missing:
        raise ExportError(
            f"cannot export '{state.name}': only specializations the disk cache persisted can be exported\n  "
            + "\n  ".join(missing)
        )
    root = Path(path)
    written = []
    for spec in specializations:
        source: Path = spec.disk_record
        record = store.read_record(source)
        if record is None:
            raise ExportError(f"specialization {spec.index} of '{state.name}' was evicted from the disk cache "
                              f"({source}); call the function again to compile it")
        library = store.read_library(source, record)
        key = source.parent.name
        folder = root / store.LAYOUT / key[:2] / key
        trust.make_private_folders(folder, root)
        store.write_atomically(folder / record.library, library.read_bytes())
        store.write_atomically(folder / source.name, source.read_bytes())
        written.append(folder / source.name)
    return written


def load(path: str | os.PathLike[str]) -> int:
    """Look up this process's misses in the export at `path` too; returns how many specializations it holds."""
    from ..knobs import knobs

    if not knobs.disk_cache:
        raise ExportError("trident.load needs the disk cache, which TRIDENT_DISK_CACHE=0 turned off")
    root = Path(path)
    if not (root / store.LAYOUT).is_dir():
        raise ExportError(f"{root} holds no exported specializations (no {store.LAYOUT}/ folder): write it with "
                          "trident.export(fn, path)")
    store.add_export(root)
    return sum(1 for _ in (root / store.LAYOUT).rglob("*" + store.RECORD_SUFFIX))
