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
the file may equal an address of a live object the specialization uses, and no 8-byte value where code or data
can hold one may fall into a readable region mapped in this process above 4 GiB (heap, libraries, Python objects).
Below 4 GiB values are too often plain integers (sizes in guards) to be told apart from the few addresses a
non-PIE Python maps there. Where x86-64 code holds a 64-bit value is known: a `movabs` immediate, or the data
sections (constant pools). Other windows of machine code are instruction bytes, and a large host program's
`mov rax, [rsp + 0x7f40]` (48 8b 84 24 40 7f 00 00) reads like a library address, `[rsp + 0x20140]` like one in
the CUDA driver's readable mappings at 0x200000000: those are not looked at. Other files (another machine's
code, raw bytes) are scanned at every offset.

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


_EM_X86_64 = 62
_SHF_EXECINSTR = 0x4
_SHT_NOBITS = 8
_DATA_SECTIONS = (".rodata", ".data", ".lrodata", ".ldata")  # what the compiler emits constants into


def _value_windows(data: bytes, raw: np.ndarray, n: int) -> np.ndarray:
    """Which of the `n` 8-byte windows of an ELF x86-64 file (`data`, and `raw` its bytes as an array) can hold a
    64-bit value the code uses: every window inside a data section, and in executable sections the imm64 of a
    movabs (REX.W, then B8+r). Every window of any other file."""
    every = np.ones(n, dtype=bool)
    if len(data) < 64 or data[:5] != b"\x7fELF\x02" or int.from_bytes(data[18:20], "little") != _EM_X86_64:
        return every
    shoff = int.from_bytes(data[0x28:0x30], "little")
    shentsize, shnum, shstrndx = (int.from_bytes(data[o : o + 2], "little") for o in (0x3A, 0x3C, 0x3E))
    if shentsize != 64 or shnum == 0 or shoff + shnum * 64 > len(data) or shstrndx >= shnum:
        return every

    def section(i: int) -> tuple[int, int, int, int, int]:  # name offset, type, flags, file offset, size
        h = data[shoff + 64 * i : shoff + 64 * (i + 1)]
        return (int.from_bytes(h[0:4], "little"), int.from_bytes(h[4:8], "little"),
                int.from_bytes(h[8:16], "little"), int.from_bytes(h[24:32], "little"),
                int.from_bytes(h[32:40], "little"))  # fmt: skip

    names_at = section(shstrndx)[3]
    windows = np.zeros(n, dtype=bool)
    for i in range(shnum):
        name_offset, kind, flags, offset, size = section(i)
        if kind == _SHT_NOBITS or size == 0 or offset + size > len(data):
            continue
        end = data.find(b"\0", names_at + name_offset)
        if end < 0:  # not a well-formed name table: look everywhere
            return every
        name = data[names_at + name_offset : end].decode("latin-1")
        last = min(offset + size - 8, n - 1)  # the last window that lies inside the section
        if flags & _SHF_EXECINSTR:
            code = raw[offset : offset + size]
            starts = np.flatnonzero(((code[:-9] & 0xF8) == 0x48) & ((code[1:-8] & 0xF8) == 0xB8)) + offset + 2
            windows[starts[starts <= last]] = True
        elif name.startswith(_DATA_SECTIONS) and last >= offset:
            windows[offset : last + 1] = True
    return windows


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
        words = words[_value_windows(data, raw, n)]
        n = words.size
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
    # addressof, not ctypes.cast: a cast's result and the array refer to each other, a cycle that would keep the
    # call's arguments (a Hugging Face cache, megabytes of device memory) alive until the garbage collector runs.
    return bool(_GUARD(guard_address)(context_address, ctypes.addressof(array)))
