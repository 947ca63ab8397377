"""The on-disk layout of the specialization cache: publish, list, read, evict, clear.

    <dir>/v1/<key[:2]>/<key>/<record digest>.spec     a record (record.py)
    <dir>/v1/<key[:2]>/<key>/<library digest>.so      the shared library it names

<dir> is TRIDENT_DISK_CACHE_DIR, else <TRIDENT_CACHE_DIR>/specializations (the runtime build lives next to it,
in runtime/, and is not this module's business).

Concurrency: every file is written to a temporary name in its final folder and published with os.replace,
so a reader sees a whole file or none. Files are named by the hash of their content, so two processes that
publish the same specialization write identical files under identical names, and different specializations
never collide. The library is published before the record that names it: a record a reader can see has its
library, unless eviction or clear() removed it since, which a reader treats as a miss.

Corruption: a record whose digest does not match (truncated, altered, other format) or whose library is
missing or does not match its hash is removed, and the caller compiles as if it were absent.

Trust (runtime/trust.py): folders are made 0700 and files written 0600. A record or library is read only when it and
every folder from the trust root (TRIDENT_DISK_CACHE_DIR, else TRIDENT_CACHE_DIR) down are owned by this user
or root and writable by no one else; otherwise trust.Untrusted is raised (one warning per path) and the caller
compiles. Nothing is published into an untrusted folder.

Size: after each publish, if the folder holds more than TRIDENT_DISK_CACHE_MAX_MB, the least recently used
records (and their libraries) are removed until it holds 90% of the limit. "Used" is the record's mtime,
which a load refreshes (os.utime): access times are often not maintained (noatime mounts).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from ..knobs import knobs
from ..runtime import trust
from .record import CorruptRecord, Record, decode, encode, library_digest

LAYOUT = "v1"
RECORD_SUFFIX = ".spec"
LIBRARY_SUFFIX = ".so"
TEMP_PREFIX = ".tmp-"
STALE_TEMP_SECONDS = 3600.0  # temporary files older than this were left by a writer that died


def cache_root() -> Path:
    return (knobs.disk_cache_dir or knobs.cache_dir / "specializations") / LAYOUT


def trust_root() -> Path:
    """The folder from which every folder down to a stored file must be trusted (runtime/trust.py)."""
    return knobs.disk_cache_dir or knobs.cache_dir


def key_folder(key: str) -> Path:
    return cache_root() / key[:2] / key


# Folders written by trident.export and added by trident.load (export.py): looked up after cache_root(), each
# its own trust root; nothing is published there.
_exports: list[Path] = []


def add_export(root: Path) -> None:
    if root not in _exports:
        _exports.append(root)


def _export_of(path: Path) -> Path | None:
    return next((root for root in _exports if path.is_relative_to(root / LAYOUT)), None)


def _trust_root_of(path: Path) -> Path:
    """The trust root of a stored file: the export it lies in, else the disk cache's."""
    return _export_of(path) or trust_root()


def write_atomically(path: Path, data: bytes) -> None:
    fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)  # mode 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # the content reaches the disk before the name does
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def publish(key: str, record: Record, library: bytes) -> Path:
    """Store a library and its record; returns the record's path. Raises trust.Untrusted (writing nothing)
    when a folder on the way is not trusted."""
    folder = key_folder(key)
    trust.make_private_folders(folder, trust_root())
    library_path = folder / record.library
    stored = trust.trusted(library_path, trust_root())  # one someone else could have written is replaced
    if not stored or library_digest(library_path.read_bytes()) != record.library_digest:
        write_atomically(library_path, library)
    data = encode(record)
    record_path = folder / (library_digest(data)[:40] + RECORD_SUFFIX)
    write_atomically(record_path, data)
    return record_path


def library_name(library: bytes) -> str:
    return library_digest(library)[:40] + LIBRARY_SUFFIX


def record_paths(key: str) -> list[Path]:
    """The records stored for a key, most recently used first (the likeliest to match again); then those of each
    loaded export."""
    paths = _record_paths(key_folder(key))
    for root in _exports:
        paths += _record_paths(root / LAYOUT / key[:2] / key)
    return paths


def _record_paths(folder: Path) -> list[Path]:
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(RECORD_SUFFIX) and not e.name.startswith(".")]
    except FileNotFoundError:
        return []
    stamped = []
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            stamped.append((entry.stat().st_mtime, entry.name, Path(entry.path)))
    return [path for _, _, path in sorted(stamped, reverse=True)]


def read_record(path: Path) -> Record | None:
    """The record at `path`, or None if it vanished meanwhile; raises CorruptRecord for a damaged one and
    trust.Untrusted for one someone else could have written."""
    trust.check(path, _trust_root_of(path))
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data)


def read_library(path: Path, record: Record) -> Path:
    """The path of the record's library after checking its bytes; raises CorruptRecord if missing or altered,
    trust.Untrusted if someone else could have written it."""
    library_path = path.parent / record.library
    trust.check(library_path, _trust_root_of(library_path))
    try:
        data = library_path.read_bytes()
    except FileNotFoundError as e:
        raise CorruptRecord(f"its library {record.library} is missing") from e
    if library_digest(data) != record.library_digest:
        raise CorruptRecord(f"its library {record.library} is truncated or altered")
    return library_path


def remove(path: Path, record: Record | None = None) -> None:
    """Remove a record (and, when known, its library): corrupt or evicted. An export is left as it is."""
    if _export_of(path) is not None:
        return
    with contextlib.suppress(OSError):
        path.unlink()
    if record is not None:
        with contextlib.suppress(OSError):
            (path.parent / record.library).unlink()


def touch(path: Path) -> None:
    """Mark a record as used now (LRU order; not in an export)."""
    if _export_of(path) is not None:
        return
    with contextlib.suppress(OSError):
        os.utime(path)


def _files(root: Path) -> Iterator[os.DirEntry[str]]:
    try:
        shards = list(os.scandir(root))
    except FileNotFoundError:
        return
    for shard in shards:
        if not shard.is_dir():
            continue
        for folder in os.scandir(shard.path):
            if folder.is_dir():
                yield from os.scandir(folder.path)


def evict() -> list[Path]:
    """Remove least recently used records (with their libraries) until the cache fits; returns removed records.

    A library shared by two records of one key (same code) is removed with the first of them; the other then
    reads as corrupt once and is recompiled. Stale temporary files are swept on the way."""
    limit = knobs.disk_cache_max_mb * 1024 * 1024
    now = time.time()
    records: list[tuple[float, str, int]] = []  # (mtime, record path, record + library bytes)
    total = 0
    sizes: dict[str, int] = {}
    for entry in _files(cache_root()):
        try:
            stat = entry.stat()
        except FileNotFoundError:
            continue
        if entry.name.startswith(TEMP_PREFIX):
            if now - stat.st_mtime > STALE_TEMP_SECONDS:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            continue
        total += stat.st_size
        sizes[entry.path] = stat.st_size
        if entry.name.endswith(RECORD_SUFFIX):
            records.append((stat.st_mtime, entry.path, stat.st_size))
    if total <= limit:
        return []
    removed: list[Path] = []
    target = 0.9 * limit
    for _, record_path, size in sorted(records):
        if total <= target:
            break
        path = Path(record_path)
        try:
            record = read_record(path)
        except CorruptRecord:
            record = None
        except trust.Untrusted:
            continue  # nothing is changed in an untrusted folder
        remove(path, record)
        total -= size
        if record is not None:
            total -= sizes.pop(str(path.parent / record.library), 0)
        removed.append(path)
    return removed


def clear() -> None:
    """Remove every stored specialization (the runtime build, elsewhere, is kept)."""
    root = cache_root()
    if not root.exists():
        return
    # Rename first, so concurrent readers and writers see an empty cache at once, then delete at leisure.
    doomed = root.parent / f"{TEMP_PREFIX}cleared-{os.getpid()}-{time.time_ns()}"
    try:
        os.replace(root, doomed)
    except OSError:
        doomed = root
    shutil.rmtree(doomed, ignore_errors=True)


def size_bytes() -> int:
    total = 0
    for entry in _files(cache_root()):
        with contextlib.suppress(FileNotFoundError):
            total += entry.stat().st_size
    return total
