"""Every TRIDENT_* environment variable, typed, read once.

Tests scope a change with `knobs.override(name=value)`; nothing else in Trident reads os.environ.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _cache_dir() -> Path:
    if "TRIDENT_CACHE_DIR" in os.environ:
        return Path(os.environ["TRIDENT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trident"


@dataclasses.dataclass
class Knobs:
    # TRIDENT_DISABLE=1: jit returns functions that run eagerly (for bisecting a suspected Trident bug).
    disable: bool
    # TRIDENT_DUMP_IR=DIR: write the IR of every stage of every compile under DIR.
    dump_ir: Path | None
    # TRIDENT_LOG=recompiles,guards,compile: comma-separated topics logged to stderr.
    log: frozenset[str]
    # TRIDENT_CACHE_DIR: where the native runtime (and, later, compiled specializations) are cached.
    cache_dir: Path
    # TRIDENT_MAX_SPECIALIZATIONS: past this many specializations of one function, calls run eagerly.
    max_specializations: int


def _read() -> Knobs:
    dump = os.environ.get("TRIDENT_DUMP_IR", "").strip()
    topics = os.environ.get("TRIDENT_LOG", "")
    return Knobs(
        disable=_flag("TRIDENT_DISABLE"),
        dump_ir=Path(dump) if dump else None,
        log=frozenset(t.strip() for t in topics.split(",") if t.strip()),
        cache_dir=_cache_dir(),
        max_specializations=int(os.environ.get("TRIDENT_MAX_SPECIALIZATIONS", "64")),
    )


KNOB_DOCS = {
    "TRIDENT_DISABLE": "1 runs every jitted function eagerly",
    "TRIDENT_DUMP_IR": "directory; every compile writes its torch-dialect, lowered and LLVM-dialect IR there",
    "TRIDENT_LOG": "comma list of recompiles, guards, compile: logs those events to stderr",
    "TRIDENT_CACHE_DIR": "cache root (default ~/.cache/trident): the native runtime build",
    "TRIDENT_MAX_SPECIALIZATIONS": "specializations per function before calls run eagerly (default 64)",
}

knobs = _read()


@contextlib.contextmanager
def override(**changes: object) -> Iterator[Knobs]:
    """Temporarily change knobs (tests)."""
    saved = dataclasses.replace(knobs)
    for name, value in changes.items():
        if not hasattr(knobs, name):
            raise AttributeError(f"no knob named {name!r}")
        setattr(knobs, name, value)
    try:
        yield knobs
    finally:
        for field in dataclasses.fields(Knobs):
            setattr(knobs, field.name, getattr(saved, field.name))


def log_enabled(topic: str) -> bool:
    return topic in knobs.log or "all" in knobs.log
