"""A specialization's native code as a loadable shared library: link, check, load, call its guard.

Persisting: LLVM's object file for the specialization (the compiler's NativeModule.write_object, handed in as a
function so that loading a record never imports the compiler) is linked with
`g++ -shared` (the toolchain that built the runtime) against the runtime library it was compiled against (the
ExecutionEngine's shared_libs). The library then names the runtime in DT_NEEDED by that path, so loading it
binds the runtime functions to the runtime instance this process already loaded (the dynamic loader matches it
by path or file identity) and never to a second copy. The runtime path is in the lookup key, so a record is
only loaded by processes using that same runtime file.

No process addresses: generated code reads everything process-specific from its context table (see
csrc/trident_runtime.h). `baked_addresses` checks it on every library before it is stored: no 8-byte window of
the file may equal an address of a live object the specialization uses, nor fall into a readable region mapped in
this process above 4 GiB (heap, libraries, Python objects). Below 4 GiB values are too often plain integers
(sizes in guards) to be told apart from the few addresses a non-PIE Python maps there.

Loading: ctypes.CDLL (RTLD_NOW: an unresolved symbol fails the load, not a call). The handle is never closed,
as JIT engines are never freed while a specialization may run.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from ..runtime.build import COMPILER as LINKER


class LinkError(Exception):
    """Linking the object into a shared library failed."""


def link_shared_library(write_object: Callable[[str], None], runtime_library: str) -> bytes:
    """The specialization's code as the bytes of a shared library; `write_object(path)` writes its object file."""
    with tempfile.TemporaryDirectory(prefix="trident-link-") as work:
        obj = os.path.join(work, "spec.o")
        lib = os.path.join(work, "spec.so")
        write_object(obj)
        # -Bsymbolic: the library's own symbols bind inside it, never to a same-named one loaded earlier.
        command = [LINKER, "-shared", "-Wl,-Bsymbolic", obj, "-o", lib, runtime_library]
        try:
            result = subprocess.run(command, capture_output=True, text=True)
        except OSError as e:  # no linker on this machine
            raise LinkError(f"{LINKER} cannot run: {e}") from e
        if result.returncode != 0:
            raise LinkError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
        return Path(lib).read_bytes()


def _mapped_regions() -> list[tuple[int, int]]:
    """Readable mappings only: an address compiled code could use points at memory it reads. Inaccessible
    mappings are address-space reservations, such as the CUDA driver's at 0x200000000 (many GiB wide), where
    plain integers of generated code (packed tags and sizes: 2 << 32) would otherwise look like addresses."""
    regions = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, _, rest = line.partition(" ")
            if not rest.startswith("r"):
                continue
            start, _, end = span.partition("-")
            regions.append((int(start, 16), int(end, 16)))
    return regions


def baked_addresses(data: bytes, known: Iterable[int]) -> list[int]:
    """Process addresses found in `data` (see the module docstring for the rule); empty when the code is clean."""
    raw = np.frombuffer(data, dtype=np.uint8)
    if raw.size < 8:
        return []
    n = raw.size - 7
    words = np.zeros(n, dtype=np.uint64)
    for i in range(8):  # every byte offset: immediates in code need not be aligned
        words |= raw[i : i + n].astype(np.uint64) << np.uint64(8 * i)
    found: set[int] = set()
    wanted = np.array(sorted({int(a) for a in known if a}), dtype=np.uint64)
    if wanted.size:
        found.update(int(w) for w in words[np.isin(words, wanted)])
    try:
        regions = [(s, e) for s, e in _mapped_regions() if s >= 1 << 32]
    except OSError:  # not Linux: the known addresses are still checked
        regions = []
    if regions:
        starts = np.array([s for s, _ in regions], dtype=np.uint64)
        ends = np.array([e for _, e in regions], dtype=np.uint64)
        slot = np.searchsorted(starts, words, side="right").astype(np.int64) - 1
        valid = slot >= 0
        inside = np.zeros(n, dtype=bool)
        inside[valid] = words[valid] < ends[slot[valid]]
        found.update(int(w) for w in words[inside])
    return sorted(found)


class LoadedLibrary:
    """A loaded specialization library; the keepalive its Entry spec holds (the handle is never closed)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lib = ctypes.CDLL(path)

    def address(self, symbol: str) -> int:
        return ctypes.cast(getattr(self._lib, symbol), ctypes.c_void_p).value or 0


# The guard's C signature; PYFUNCTYPE keeps the GIL held, as the runtime ABI requires of every call.
_GUARD = ctypes.PYFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


def guard_accepts(guard_address: int, context_address: int, slots: Sequence[object]) -> bool:
    """Run a specialization's native guard on bound argument values (parameter order, defaults applied), before
    the specialization joins an entry: an entry cannot drop one specialization again."""
    array = (ctypes.py_object * max(len(slots), 1))(*slots) if slots else (ctypes.py_object * 1)()
    return bool(_GUARD(guard_address)(context_address, ctypes.cast(array, ctypes.c_void_p)))
