"""Every TRIDENT_* environment variable, typed, read once.

Each knob is declared once, as a field of `Knobs` made by `knob(...)`: its name (the field), environment variable,
type (the annotation, and `parse` for the variable's text), default, the README's text for it, and whether it
changes what a compile produces. Everything else is derived from those declarations:
  - `from_environment()`, which fills `knobs` when trident is imported;
  - `KNOB_DOCS` and `markdown_table()`, the README's knob table (tests/unit/test_docs.py keeps them equal);
  - `CompileOptions`, what one compile reads of the knobs, and its `key()`, the knobs that change what a compile
    produces, which is part of the disk cache's key (cache/key.py);
  - the options of `torch.compile(..., backend="trident", options=...)` (dynamo.py): each knob by name, its value
    checked by `Knob.value` (from `parse`), except those declared with `not_an_option`, which says why.

Tests scope a change with `knobs.override(name=value)`; nothing else in Trident reads os.environ.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def flag(text: str) -> bool:
    """A flag that defaults to off: 1/true/yes/on turns it on."""
    return text.strip().lower() in _ON


def flag_on_unless_off(text: str) -> bool:
    """A flag that defaults to on: 0/false/no/off turns it off."""
    return text.strip().lower() not in _OFF


def comma_names(text: str) -> frozenset[str]:
    """The names of a comma-separated list, as TRIDENT_LOG and TRIDENT_OPAQUE_OPS spell them."""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def path_or_none(text: str) -> Path | None:
    """A directory; empty (or blank) means none."""
    return Path(text.strip()) if text.strip() else None


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trident"


# What a knob set by name from Python (a torch.compile option) must be, checked and converted; one per `parse`.
def _as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("a bool")
    return value


def _as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("an int")
    return value


def _as_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("a number")
    return float(value)


def _as_path_or_none(value: object) -> Path | None:
    if value is None or isinstance(value, (str, Path)):
        return Path(value) if value else None
    raise TypeError("a path (str or pathlib.Path) or None")


def _as_path(value: object) -> Path:
    if isinstance(value, (str, Path)) and str(value):
        return Path(value)
    raise TypeError("a path (str or pathlib.Path)")


def _as_names(value: object) -> frozenset[str]:
    """A comma list as the environment variable spells it, or an iterable of names."""
    if isinstance(value, str):
        return comma_names(value)
    if isinstance(value, Iterable) and all(isinstance(n, str) for n in value):
        return frozenset(value)
    raise TypeError("a comma-separated str or an iterable of str")


_VALUE_OF: dict[Callable[[str], object], Callable[[object], object]] = {
    flag: _as_bool, flag_on_unless_off: _as_bool, comma_names: _as_names, path_or_none: _as_path_or_none,
    Path: _as_path, int: _as_int, float: _as_number,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Knob:
    """One knob's declaration. The field of `Knobs` it is attached to names it."""

    env: str  # the environment variable
    setting: str  # the value the README shows it set to: `{env}={setting}`
    doc: str  # what that setting does: the README's "effect" cell (markdown)
    parse: Callable[[str], object]  # the variable's text, when it is set at all, -> the value
    default: object  # the value when the variable is unset (see default_factory)
    default_factory: Callable[[], object] | None = None  # a default that depends on the environment
    # Changes what a compile produces: part of CompileOptions.key(), so of the disk cache's lookup key.
    compiles: bool = False
    # What of the value a compile depends on, given the compile's CompileOptions (None: the value itself).
    compiled_as: Callable[[CompileOptions], object] | None = None
    # Why torch.compile's options cannot set it per graph (empty: they can).
    not_an_option: str = ""

    def value(self, value: object) -> object:
        """`value` set from Python, checked and converted as the variable's text would be parsed; raises TypeError
        naming what it must be."""
        return _VALUE_OF[self.parse](value)

    def read(self, environ: Mapping[str, str]) -> object:
        if self.env in environ:
            return self.parse(environ[self.env])
        return self.default_factory() if self.default_factory is not None else self.default


_KNOB = "trident.knob"  # the key of a declaration in its field's metadata


def knob(
    env: str, setting: str, doc: str, *, parse: Callable[[str], object], default: object = None,
    default_factory: Callable[[], object] | None = None, compiles: bool = False,
    compiled_as: Callable[[CompileOptions], object] | None = None, not_an_option: str = "",
) -> Any:  # Any, as dataclasses.field is: the field's annotation is its type
    """Declares the knob of the `Knobs` field it is assigned to."""
    if parse not in _VALUE_OF:
        raise TypeError(f"{env}: no Python value check for parse={parse!r} (knobs._VALUE_OF)")
    declaration = Knob(env, setting, doc, parse, default, default_factory, compiles, compiled_as, not_an_option)
    metadata = {_KNOB: declaration}
    if default_factory is not None:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass
class Knobs:
    # In the README's order (markdown_table()).
    disable: bool = knob(
        "TRIDENT_DISABLE", "1", "`trident.jit` returns the function unchanged (plain eager, for bisecting)",
        parse=flag, default=False,
    )  # fmt: skip
    dump_ir: Path | None = knob(
        "TRIDENT_DUMP_IR", "DIR", "every compile writes its torch-dialect, lowered and LLVM-dialect IR under `DIR`",
        parse=path_or_none, default=None,
    )  # fmt: skip
    log: frozenset[str] = knob(
        "TRIDENT_LOG", "recompiles,guards,compile,cache",
        "logs recompile reasons, guards of each new specialization, compile times, disk-cache decisions",
        parse=comma_names, default=frozenset(),
    )  # fmt: skip
    # The native runtime build (runtime/) and, unless TRIDENT_DISK_CACHE_DIR says otherwise, compiled
    # specializations (specializations/).
    cache_dir: Path = knob(
        "TRIDENT_CACHE_DIR", "DIR",
        "cache root (default `~/.cache/trident`), writable only by you: the runtime build and compiled "
        "specializations",
        parse=Path, default_factory=_default_cache_dir,
        not_an_option="the native runtime is built and loaded once per process, under TRIDENT_CACHE_DIR",
    )  # fmt: skip
    max_specializations: int = knob(
        "TRIDENT_MAX_SPECIALIZATIONS", "N",
        "specializations per function, compiled or remembered as eager, before new inputs run eagerly (default 64)",
        parse=int, default=64,
    )  # fmt: skip
    disk_cache: bool = knob(
        "TRIDENT_DISK_CACHE", "0", "neither load compiled specializations from disk nor store new ones (default on)",
        parse=flag_on_unless_off, default=True,
        # Measured: a record stored for a graph never fits in another process (the state a GraphModule holds
        # differs per process), so storing them would only fill the disk. Graphs are compiled in each process.
        not_an_option="warm start does not cover torch.compile graphs: they compile in each process",
    )  # fmt: skip
    # Its own knob so that tests and tools can use a fresh specialization cache without rebuilding the runtime.
    disk_cache_dir: Path | None = knob(
        "TRIDENT_DISK_CACHE_DIR", "DIR",
        "where compiled specializations persist (default `<TRIDENT_CACHE_DIR>/specializations`)",
        parse=path_or_none, default=None, not_an_option="warm start does not cover torch.compile graphs",
    )  # fmt: skip
    disk_cache_max_mb: float = knob(
        "TRIDENT_DISK_CACHE_MAX_MB", "N",
        "size limit of that cache; least recently used entries are evicted first (default 1024)",
        parse=float, default=1024.0, not_an_option="warm start does not cover torch.compile graphs",
    )  # fmt: skip
    # Kept buffers are reused when nothing else holds them (csrc/buffer_pool.cpp). A compile depends only on
    # whether allocations are pooled; the size is read when a specialization is instantiated.
    buffer_pool_mb: float = knob(
        "TRIDENT_BUFFER_POOL_MB", "N",
        "intermediate buffers each specialization keeps for reuse between calls, and the memory of the last static "
        "cache it made (default 256; 0 allocates every call)",
        parse=float, default=256.0, compiles=True, compiled_as=lambda options: options.pool_allocations,
    )  # fmt: skip
    # For bisecting; lowering/aliasing.py says why a call's own views need no autograd metadata.
    private_views: bool = knob(
        "TRIDENT_PRIVATE_VIEWS", "0",
        "views of a call's own intermediates keep autograd's view metadata (default: made below autograd)",
        parse=flag_on_unless_off, default=True, compiles=True,
    )  # fmt: skip
    # Each site makes a cuBLASLt plan on its first call and keeps it if it computes ATen's bits
    # (csrc/matmul_plan.cpp); read when a specialization is instantiated, not compiled.
    matmul_plans: bool = knob(
        "TRIDENT_MATMUL_PLANS", "0",
        "pooled bf16/fp16 CUDA matmuls always call ATen's kernel instead of a per-site cuBLASLt plan (default on)",
        parse=flag_on_unless_off, default=True,
    )  # fmt: skip
    # Python-implemented operators: custom_op implementations, Python kernels registered for ATen operators
    # (capture/python_kernels.py).
    see_through: bool = knob(
        "TRIDENT_SEE_THROUGH", "0", "custom ops and ATen overrides stay opaque dispatcher calls (default: traced into)",
        parse=flag_on_unless_off, default=True, compiles=True,
    )  # fmt: skip
    # Names as written (ns::op[.overload]); capture/python_kernels.py reads `ns::op.default` as `ns::op`.
    opaque_ops: frozenset[str] = knob(
        "TRIDENT_OPAQUE_OPS", "ns::op,...", "these ops stay opaque (also `trident.keep_opaque(...)`)",
        parse=comma_names, default=frozenset(), compiles=True,
    )  # fmt: skip
    # graphs/recorder.py. A compile depends on it only through whether a replay plan is lowered.
    cuda_graphs: bool = knob(
        "TRIDENT_CUDA_GRAPHS", "0",
        "no CUDA graph replay (default on: from its third hit, each CUDA specialization replays as one CUDA graph "
        "with the kernel parameters that changed patched; per function, `f._trident.use_cuda_graphs(False)`; for "
        '`torch.compile`, `options={"cuda_graphs": False}`)',
        parse=flag_on_unless_off, default=True, compiles=True,
        compiled_as=lambda options: options.lowers_replay_plan,
    )  # fmt: skip
    # lowering/replay_plan.py, csrc/graphs/replay_plan.cpp.
    replay_plan: bool = knob(
        "TRIDENT_REPLAY_PLAN", "0",
        "every CUDA graph replay runs the host program to find what to patch (default on: a program whose changing "
        "kernel and operator arguments follow from the call's ints and argument addresses replays its graph "
        "without running the host program, once its plan has proven itself against three replays through it)",
        parse=flag_on_unless_off, default=True, compiles=True,
        compiled_as=lambda options: options.lowers_replay_plan,
    )  # fmt: skip
    # hf_generate.py: read at each generate() of a jitted transformers model. Off until a GPU measurement shows the
    # gain (transformers' own reason to keep it to MPS); the GPU test and benchmarks/hf_generate.py turn it on.
    hf_defer_stop: bool = knob(
        "TRIDENT_HF_DEFER_STOP", "1",
        "`generate()` of a `trident.jit` Hugging Face model on CUDA reads its stop flag one token late with "
        "transformers' own `DeferredStopCheck`, so the host queues the next step while the device runs the last one "
        "(default off: transformers waits for the device every token there)",
        parse=flag, default=False,
        not_an_option="it is about HF's generate() around trident.jit(model), not a compiled graph",
    )  # fmt: skip
    # Unless inside trident.testing.expect_fallback(); the test suite sets it in its conftest.
    strict: bool = knob(
        "TRIDENT_STRICT", "1",
        "(tests) a call that runs eagerly raises `trident.testing.UnexpectedFallback` instead of warning",
        parse=flag, default=False,
    )  # fmt: skip


# Knobs field name -> its declaration, in declaration order.
DECLARED: dict[str, Knob] = {field.name: field.metadata[_KNOB] for field in dataclasses.fields(Knobs)}
# The knobs that change what a compile produces (CompileOptions.key()).
COMPILED: tuple[str, ...] = tuple(name for name, declared in DECLARED.items() if declared.compiles)
KNOB_DOCS: dict[str, str] = {declared.env: declared.doc for declared in DECLARED.values()}


def from_environment(environ: Mapping[str, str] | None = None) -> Knobs:
    """Every knob as `environ` (default: os.environ) sets it."""
    environ = os.environ if environ is None else environ
    return Knobs(**{name: declared.read(environ) for name, declared in DECLARED.items()})


def markdown_table() -> str:
    """The README's knob table (its '## Knobs' section)."""
    rows = ["| variable | effect |", "|---|---|"]
    rows += [f"| `{declared.env}={declared.setting}` | {declared.doc} |" for declared in DECLARED.values()]
    return "\n".join(rows) + "\n"


@dataclasses.dataclass(frozen=True)
class CompileOptions:
    """What one compile reads of the knobs: read once when it starts (lowering/pipeline.py) and handed to the
    passes as values, so a pass never reads the process-wide knobs. The fields are knob names: every knob declared
    `compiles=True` (checked below, at import), then the ones that say how a compile runs, not what it produces."""

    # compiles=True, in declaration order
    buffer_pool_mb: float
    private_views: bool
    see_through: bool  # read by capture (capture/python_kernels.py); here for the key
    opaque_ops: frozenset[str]  # likewise
    cuda_graphs: bool
    replay_plan: bool
    # how the compile runs
    dump_ir: Path | None
    strict: bool  # a bug in an optional stage (the replay plan) fails the compile instead of being logged
    disk_cache: bool  # the compile keeps its object code for the disk cache

    @classmethod
    def current(cls) -> CompileOptions:
        """The options the knobs say now (override() included)."""
        return cls(**{field.name: getattr(knobs, field.name) for field in dataclasses.fields(cls)})

    @property
    def pool_allocations(self) -> bool:
        """Intermediate allocations go through the specialization's buffer pool."""
        return self.buffer_pool_mb > 0

    @property
    def lowers_replay_plan(self) -> bool:
        """A replay plan is lowered (it runs only where CUDA graphs replay)."""
        return self.cuda_graphs and self.replay_plan

    def key(self) -> tuple[tuple[str, object], ...]:
        """(knob, what of it the compile depends on) for every knob declared compiles=True: a record compiled
        under other values is not what this compile would produce."""
        parts = []
        for name in COMPILED:
            declared = DECLARED[name]
            value = declared.compiled_as(self) if declared.compiled_as is not None else getattr(self, name)
            parts.append((name, tuple(sorted(value)) if isinstance(value, frozenset) else value))
        return tuple(parts)


# A knob declared compiles=True must be among a compile's options, or the key could not hold it.
if _unread := set(COMPILED) - {field.name for field in dataclasses.fields(CompileOptions)}:
    raise TypeError(f"knobs declared compiles=True are not fields of CompileOptions: {sorted(_unread)}")

knobs = from_environment()


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
