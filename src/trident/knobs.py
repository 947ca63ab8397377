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


def _flag_on_unless_off(name: str) -> bool:
    """A flag that defaults to on; 0/false/no/off turns it off."""
    return os.environ.get(name, "").strip().lower() not in ("0", "false", "no", "off")


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
    # TRIDENT_LOG=recompiles,guards,compile,cache: comma-separated topics logged to stderr.
    log: frozenset[str]
    # TRIDENT_CACHE_DIR: cache root: the native runtime build (runtime/) and, unless TRIDENT_DISK_CACHE_DIR
    # says otherwise, compiled specializations (specializations/).
    cache_dir: Path
    # TRIDENT_MAX_SPECIALIZATIONS: past this many specializations of one function, calls run eagerly.
    max_specializations: int
    # TRIDENT_DISK_CACHE=0: neither load compiled specializations from disk nor persist new ones (warm start off;
    # trident.cache). On by default.
    disk_cache: bool = True
    # TRIDENT_DISK_CACHE_DIR: where compiled specializations persist; None means <cache_dir>/specializations.
    # Its own knob so that tests and tools can use a fresh specialization cache without rebuilding the runtime.
    disk_cache_dir: Path | None = None
    # TRIDENT_DISK_CACHE_MAX_MB: size limit of the specialization cache; past it, the least recently used
    # specializations are evicted (default 1024).
    disk_cache_max_mb: float = 1024.0
    # TRIDENT_BUFFER_POOL_MB: each specialization keeps up to this many MB of its intermediate buffers between
    # calls and reuses them when nothing else holds them (csrc/buffer_pool.cpp); 0 allocates every call.
    buffer_pool_mb: float = 256.0
    # TRIDENT_MATMUL_PLANS=0: pooled CUDA matmuls always call ATen's kernel; by default each site makes a cuBLASLt
    # plan on its first call and keeps it if it computes ATen's bits (csrc/matmul_plan.cpp).
    matmul_plans: bool = True
    # TRIDENT_PRIVATE_VIEWS=0: views of a call's own intermediates keep autograd's view metadata (for bisecting;
    # lowering/aliasing.py says why they need none).
    private_views: bool = True
    # TRIDENT_STRICT=1 (tests): a call that runs eagerly raises trident.testing.UnexpectedFallback instead of
    # warning, unless inside trident.testing.expect_fallback() (the test suite sets it in its conftest).
    strict: bool = False
    # TRIDENT_SEE_THROUGH=0: Python-implemented operators (custom_op implementations, Python kernels registered for
    # ATen operators) stay one opaque dispatcher call in captures; by default their bodies are traced into
    # (capture/python_kernels.py).
    see_through: bool = True
    # TRIDENT_OPAQUE_OPS=ns::op[.overload],...: these operators stay opaque even with see-through on (names as
    # written; capture/python_kernels.py reads `ns::op.default` as `ns::op`).
    opaque_ops: frozenset[str] = frozenset()
    # TRIDENT_CUDA_GRAPHS=0: no CUDA graph replay. By default a CUDA specialization's host program is recorded as a
    # CUDA graph at its third hit, proven against the direct run, and replayed with patched kernel parameters from
    # then on (runtime/cuda_graphs.py).
    cuda_graphs: bool = True
    # TRIDENT_REPLAY_PLAN=0: every CUDA graph replay runs the host program in replay mode. By default a program whose
    # changing step arguments follow from the call's ints and argument addresses replays its CUDA graph, once the
    # plan is learned and proven, without running the host program (lowering/replay_plan.py, csrc/replay_plan.cpp).
    replay_plan: bool = True


def comma_names(text: str) -> frozenset[str]:
    """The names of a comma-separated list, as TRIDENT_LOG and TRIDENT_OPAQUE_OPS spell them."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def _read() -> Knobs:
    dump = os.environ.get("TRIDENT_DUMP_IR", "").strip()
    disk_dir = os.environ.get("TRIDENT_DISK_CACHE_DIR", "").strip()
    return Knobs(
        disable=_flag("TRIDENT_DISABLE"),
        dump_ir=Path(dump) if dump else None,
        log=comma_names(os.environ.get("TRIDENT_LOG", "")),
        cache_dir=_cache_dir(),
        max_specializations=int(os.environ.get("TRIDENT_MAX_SPECIALIZATIONS", "64")),
        disk_cache=_flag_on_unless_off("TRIDENT_DISK_CACHE"),
        disk_cache_dir=Path(disk_dir) if disk_dir else None,
        disk_cache_max_mb=float(os.environ.get("TRIDENT_DISK_CACHE_MAX_MB", "1024")),
        buffer_pool_mb=float(os.environ.get("TRIDENT_BUFFER_POOL_MB", "256")),
        matmul_plans=_flag_on_unless_off("TRIDENT_MATMUL_PLANS"),
        private_views=_flag_on_unless_off("TRIDENT_PRIVATE_VIEWS"),
        strict=_flag("TRIDENT_STRICT"),
        see_through=_flag_on_unless_off("TRIDENT_SEE_THROUGH"),
        opaque_ops=comma_names(os.environ.get("TRIDENT_OPAQUE_OPS", "")),
        cuda_graphs=_flag_on_unless_off("TRIDENT_CUDA_GRAPHS"),
        replay_plan=_flag_on_unless_off("TRIDENT_REPLAY_PLAN"),
    )


KNOB_DOCS = {
    "TRIDENT_DISABLE": "1 runs every jitted function eagerly",
    "TRIDENT_DUMP_IR": "directory; every compile writes its torch-dialect, lowered and LLVM-dialect IR there",
    "TRIDENT_LOG": "comma list of recompiles, guards, compile, cache: logs those events to stderr",
    "TRIDENT_CACHE_DIR": "cache root (default ~/.cache/trident): the native runtime build, compiled specializations",
    "TRIDENT_MAX_SPECIALIZATIONS": "specializations per function before calls run eagerly (default 64)",
    "TRIDENT_DISK_CACHE": "0 turns off the on-disk cache of compiled specializations (warm start; default on)",
    "TRIDENT_DISK_CACHE_DIR": "where compiled specializations persist (default <TRIDENT_CACHE_DIR>/specializations)",
    "TRIDENT_DISK_CACHE_MAX_MB": "size limit of that cache in MB; least recently used entries go first (default 1024)",
    "TRIDENT_BUFFER_POOL_MB": "intermediate buffers each specialization keeps for reuse between calls, in MB "
    "(default 256; 0: allocate every call)",
    "TRIDENT_MATMUL_PLANS": "0: pooled bf16/fp16 CUDA matmuls always go through ATen's kernel instead of a per-site "
    "cuBLASLt plan verified against ATen's bits (default on)",
    "TRIDENT_PRIVATE_VIEWS": "0: views of a call's own intermediates are made through autograd's layers like other "
    "views (default on: below them)",
    "TRIDENT_STRICT": "1 (tests): a call that runs eagerly raises instead of warning, unless the test expects it "
    "(trident.testing.expect_fallback)",
    "TRIDENT_SEE_THROUGH": "0: Python-implemented operators (custom_op implementations, Python kernels registered for "
    "ATen operators, as flag-gems does) stay one opaque dispatcher call instead of being traced into (default on)",
    "TRIDENT_OPAQUE_OPS": "comma list of operators kept opaque even with see-through on (mylib::gemv for every "
    "overload, aten::add.Tensor for one); also trident.keep_opaque(...)",
    "TRIDENT_CUDA_GRAPHS": "0: no CUDA graph replay (default on: each CUDA specialization is replayed as a CUDA graph "
    "from its third hit, kernel parameters that changed patched, after proving itself bit for bit against the "
    "direct run)",
    "TRIDENT_REPLAY_PLAN": "0: every CUDA graph replay runs the host program (default on: a program whose changing "
    "kernel and operator arguments follow from the call's ints and argument addresses replays its graph without "
    "running the host program, once its plan has proven itself against three replays through it)",
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
