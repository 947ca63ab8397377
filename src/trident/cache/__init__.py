"""Warm start: a persistent on-disk cache of compiled specializations.

A serving process that restarts would pay capture, lowering and LLVM again for every specialization. With the
disk cache (on by default; TRIDENT_DISK_CACHE=0 turns it off), each compiled specialization is stored, and a
later process whose call matches one loads it instead: its first call costs a few milliseconds, not a compile.

What is stored, per specialization (record.py, store.py):
  - its native code as a shared library: LLVM's object file linked against the runtime library
    (native_library.py). The code holds no process address: everything process-specific reaches it through
    its context table, which the loading process rebuilds;
  - how to rebuild that context: the operators to resolve, and for each constant a recipe: a provenance path
    from the function's roots for tensors it read (weights are re-resolved, never baked), the value of a
    tensor literal the trace created, the call's own object for identity-guarded arguments, or a scalar;
  - for each Triton launch site (launch_sites.py): the launch's recorded arguments, where to find its kernel
    by module and name, the kernel's Triton cache_key, and on CUDA the binaries of the variants Triton
    compiled for it during the specialization's first call (it is stored after that call), so a loading
    process launches them natively at once;
  - the guards and call facts (for explain, miss reasons and automatic dynamism), the output structure.

When a stored specialization may be used (key.py, code_deps.py, fingerprint.py, provenance.py):
  - the lookup key matches: versions of torch, Triton, torch-mlir, Trident (and a hash of its sources), the
    runtime library, the Python ABI, the host CPU's features, the GPU architecture of the call's CUDA tensors,
    the function's code, signature, argument structure and dynamism state, torch's default device;
  - the user code that ran during capture is unchanged (code objects, found again by name);
  - the Python state reachable from the function's roots has the same structural fingerprint (scalars by
    value, tensors by metadata, code by digest), and each constant's path leads to a tensor;
  - its guards accept the call, exactly as in the process that compiled it: sizes, strides, int values,
    alignment, grad mode / autocast / default dtype, and the dtype, sizes and strides of every constant;
  - each Triton kernel it launches is found by name and unchanged: its source and the @triton.jit functions
    and constexpr globals it uses (Triton's cache_key), its decorators' settings, and Triton's
    cache-invalidating environment variables.
Any difference is a miss and the call compiles normally; TRIDENT_LOG=cache logs every decision, and
trident.explain says of each specialization whether it was loaded, persisted, or why it was not persisted.

Not persisted (logged under TRIDENT_LOG=cache): specializations that launch a Triton kernel another process
cannot find by name (defined inside a function) or rebuild (an autotuner torch made around one with pruning or
hooks), or whose first call raised; ones that call torch.distributed collectives (process group names and
sizes are this process's), ones whose constants cannot be found from the roots, ones whose capture changed
the state it reads, and ones whose capture ran code that cannot be found again by name.

Not covered by the key or the fingerprint (a warm start trusts these to be as they were at capture):
  - values read during capture from outside Python state reachable from the roots: environment variables,
    files, the clock, random generators (their state is native), torch's global flags (torch.backends.*);
  - state held natively by objects the fingerprint does not know, and class attributes of library classes
    (a monkeypatched torch class);
  - module globals read by user code other than the jitted function are fingerprinted after capture, so a
    capture that mutates them is not detected.
An in-process specialization trusts the same things; across processes they are likelier to differ.

Trusted like code (runtime/trust.py): records unpickle and libraries load native code, so a record, a library or the
runtime is loaded only when it and every folder from the cache root down are owned by this user (or root) and
writable by no one else, its real path is inside the cache, and no parent of the root is writable by everyone
without the sticky bit. Otherwise: one UntrustedCacheWarning naming the path, what was found and the fix; the
call compiles, and nothing is written there. Folders are made 0700, files 0600. A root-owned read-only cache (a
container image) is used.

Knobs: TRIDENT_DISK_CACHE, TRIDENT_DISK_CACHE_DIR, TRIDENT_DISK_CACHE_MAX_MB (knobs.py).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

# The submodules import the compiler (capture, lowering); `import trident` must stay cheap, so the functions
# below import them when called.


def clear() -> None:
    """Remove every specialization stored on disk. Specializations already loaded in this process stay."""
    from . import store

    store.clear()


def directory() -> Path:
    """The folder the disk cache uses now (TRIDENT_DISK_CACHE_DIR, else <TRIDENT_CACHE_DIR>/specializations)."""
    from . import store

    return store.cache_root().parent


def size_bytes() -> int:
    """Bytes the stored specializations take on disk."""
    from . import store

    return store.size_bytes()


def stats() -> dict[str, float]:
    """This process's counts: lookups, loads, stores, not_persisted, rejected, corrupt, write_failures,
    untrusted, triton_binaries_loaded, and triton_binary_load_ms."""
    from .counters import stats as counts

    return dataclasses.asdict(counts)


__all__ = ["clear", "directory", "size_bytes", "stats"]
