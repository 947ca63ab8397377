"""The disk cache's part in a miss: load a persisted specialization, or persist the one just compiled.

driver.JitFunction._compile, after deciding dynamism:

    session = warm_start.begin(jit, values, facts)
    if session.loaded is not None:          # a record whose checks and native guard accept this call
        install session.loaded              # no capture, lowering or LLVM
    with session.recording_code():          # the user code that runs during capture (code_deps.py)
        trace = trace_function(...)
    ... lower, JIT, add to the entry ...
    session.publish(spec)                   # link, check, store; or log why it is not persisted

A specialization that launches Triton kernels is published after its first call instead (driver.on_miss,
Session.publishes_after_first_call): on CUDA, the variants Triton compiles during that call are stored with it
(launch_sites.py), so a process that loads it launches them natively from its first call. If that call raises,
nothing is published (Session.abandon).

Loading a record, cheapest checks first: its code dependencies are unchanged; walking its roots in this process
gives the same state fingerprint and finds a tensor at each constant's provenance path; its guards accept this
call and those constants (in Python, before its library is loaded); its library loads and its operators
resolve; then its native guard accepts this call's arguments. Launch sites are rebuilt only for a record whose
Python guards accepted the call (rebuilding imports kernel modules, hashes kernels and loads CUDA binaries).
A record becomes an Artifact (trident/artifact.py) whose constants are resolved in this process, instantiated by the
same runtime function as a fresh compile (runtime/specialization.py); the driver installs it as it installs a
compiled one (driver.JitFunction._install). Anything that fails is a
miss for that record: the call compiles normally, and TRIDENT_LOG=cache says why.

The fingerprint of the state reachable from the function's own roots is taken before capture and again after:
a function that changes Python state it closes over while being captured (a counter it increments) is not
persisted, because a later process would start from the changed state.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import torch

from ..artifact import Artifact, NoReplayPlan
from ..capture.inputs import CallFacts
from ..capture.trace import Trace
from ..guards.guard_set import first_failure
from ..knobs import knobs, log_enabled
from ..runtime import trust
from ..runtime.specialization import instantiate
from ..specialization import LOADED, Specialization
from . import code_deps, launch_sites, store
from .fingerprint import StateWalk, Unfingerprintable
from .key import lookup_key
from .native_library import LinkError, LoadedLibrary, baked_addresses, guard_accepts, link_shared_library
from .provenance import Root, argument_roots, function_roots, walk_roots
from .record import CorruptRecord, Record, library_digest, strip_live_objects
from .constants import (
    Rejected, bind_attributes, bind_call_objects, constant_recipes, persisted_attributes, resolve_constants,
)  # fmt: skip
from .counters import stats

log = logging.getLogger("trident")


def _log(message: str, *args: object) -> None:
    if log_enabled("cache"):
        log.warning("trident: cache: " + message, *args)


class JitFunction(Protocol):
    """What the disk cache reads of a jitted function (driver.JitFunction)."""

    fn: Any
    name: str
    param_names: list[str]
    n_positional: int
    dynamism: Any
    runtime_library: str


@dataclasses.dataclass(frozen=True)
class _CapturedState:
    code_dependencies: list[code_deps.CodeDependency]
    roots: list[Root]  # the function's own roots, then those of the user code that ran during capture
    walk: StateWalk  # over `roots`: the record's state digest and each constant's provenance


@dataclasses.dataclass
class Session:
    """One miss of one jitted function, as the disk cache sees it."""

    jit: JitFunction | None  # None: the disk cache is off
    values: Sequence[object]  # the call's bound argument values
    key: str | None = None
    fn_roots: list[Root] = dataclasses.field(default_factory=list)
    state_before: str | None = None  # fingerprint of the fn_roots state before capture
    reason: str | None = None  # why nothing is loaded or persisted for this miss (None: both are tried)
    loaded: Specialization | None = None  # not yet installed (index NOT_INSTALLED)
    recorder: code_deps.CodeRecorder = dataclasses.field(default_factory=code_deps.CodeRecorder)
    captured_state: _CapturedState | str | None = None  # snapshot_state(): the state right after capture, or why not

    @contextlib.contextmanager
    def recording_code(self) -> Iterator[None]:
        with code_deps.recording_code(enabled=self.reason is None) as recorder:
            self.recorder = recorder
            yield

    def snapshot_state(self) -> None:
        """Fingerprint the state the function reads as it is right after capture, for a publish after the first
        call: the record must describe what a new process sees before its first call, not what that call left
        behind (Triton's interpreter adds its own names to a kernel module's globals the first time it runs a
        kernel from there)."""
        if self.jit is None or self.reason is not None:
            return
        try:
            self.captured_state = self._state_after_capture()
        except Unfingerprintable as e:
            self.captured_state = str(e)

    def _state_after_capture(self) -> _CapturedState | str:
        """The code the capture ran, the roots it read and their walk; or why the state cannot be persisted."""
        assert self.jit is not None
        deps, dep_roots, reason = code_deps.dependencies(self.recorder, self.jit.fn)
        if reason is not None:
            return reason
        walk = walk_roots(self.fn_roots, self.jit.fn, self.values)
        if walk.digest() != self.state_before:
            return "the function changed Python state it closes over while it was captured"
        walk = walk_roots(dep_roots, self.jit.fn, self.values, walk)  # continues: the digest covers all the roots
        return _CapturedState(deps, self.fn_roots + dep_roots, walk)

    def loaded_as(self, spec: Specialization) -> None:
        """The driver installed `loaded` (as `spec`, with its index)."""
        assert self.jit is not None and spec.disk_record is not None
        store.touch(spec.disk_record)
        stats.loads += 1
        _log("loaded specialization %d of '%s' from %s in %.1f ms", spec.index, self.jit.name, spec.disk_record,
             spec.compile_seconds * 1e3)

    def publishes_after_first_call(self, spec: Specialization) -> bool:
        """Whether `spec` is published after its first call (see the module docstring) rather than at once."""
        return self.jit is not None and bool(spec.compiled.launch_sites)

    def publish(self, spec: Specialization) -> None:
        """Persist a specialization just compiled, or say why not (TRIDENT_LOG=cache, trident.explain)."""
        if self.jit is None:  # the disk cache is off
            return
        name = f"specialization {spec.index} of '{self.jit.name}'"
        self._outcome(spec, self.reason if self.reason is not None else self._try_publish(name, spec))

    def abandon(self, spec: Specialization, reason: str) -> None:
        """Do not persist `spec` (its first call raised), and say why."""
        if self.jit is not None:
            self._outcome(spec, reason)

    def _outcome(self, spec: Specialization, reason: str | None) -> None:
        assert self.jit is not None
        spec.disk_cache = "persisted" if reason is None else f"not persisted: {reason}"
        if reason is not None:
            stats.not_persisted += 1
            _log("specialization %d of '%s' not persisted: %s", spec.index, self.jit.name, reason)

    def _try_publish(self, name: str, spec: Specialization) -> str | None:
        try:
            return self._publish(spec)
        except Unfingerprintable as e:
            return str(e)
        except trust.Untrusted as e:  # warned already, once per path
            stats.untrusted += 1
            return f"the disk cache folder is not trusted: {e}"
        except OSError as e:  # the folder is not writable, the disk is full: say so once, then under the topic
            reason = f"cannot write to the disk cache folder {store.cache_root()}: {e}"
            if not stats.write_failures:
                log.warning("trident: %s not persisted: %s", name, reason)
            stats.write_failures += 1
            return reason
        except Exception as e:  # never fail a compile for the cache's sake; but say so, this is a Trident bug
            log.warning("trident: %s was compiled but not persisted to the disk cache: %s: %s", name, type(e).__name__,
                        e)
            return f"{type(e).__name__}: {e}"

    def _publish(self, spec: Specialization) -> str | None:
        assert self.jit is not None and self.key is not None
        jit, trace, compiled = self.jit, spec.trace, spec.compiled
        assert trace is not None  # only compiled specializations are published
        reason = _collective_reason(trace)
        if reason is not None:
            return reason
        if spec.guards.function_modes.modes:
            return "it was captured under torch function mode(s) (a default device, a TorchFunctionMode): " \
                   "objects of this process"
        state = self.captured_state if self.captured_state is not None else self._state_after_capture()
        if isinstance(state, str):
            return state
        deps, roots, walk = state.code_dependencies, state.roots, state.walk
        assert compiled.artifact is not None
        recipes, reason = constant_recipes(spec.guards, trace, compiled.artifact.constants, compiled.constants, walk)
        if reason is not None:
            return reason
        attributes, reason = persisted_attributes(spec.guards, walk)
        if reason is not None:
            return reason
        start = time.perf_counter()
        try:
            library = link_shared_library(compiled.native.write_object, jit.runtime_library)
        except LinkError as e:
            return str(e)
        known = [id(c) for c in compiled.constants] + [compiled.guard_address, compiled.run_address]
        known += [c.data_ptr() for c in compiled.constants if isinstance(c, torch.Tensor)]
        baked = baked_addresses(library, known)
        if baked:
            return (
                f"its native code contains process addresses ({', '.join(hex(a) for a in baked[:4])}); generated "
                "code must reach process-specific objects only through its context table. Please report this"
            )
        guards, facts = strip_live_objects(spec.guards, spec.facts)
        guards = dataclasses.replace(guards, attributes=tuple(attributes))
        record = Record(
            name=jit.name, library=store.library_name(library), library_digest=library_digest(library),
            guard_symbol=compiled.guard_symbol, run_symbol=compiled.run_symbol, ops=list(compiled.ops),
            aten_calls=list(compiled.aten_calls), constants=recipes, n_trace_constants=len(trace.constants),
            guards=guards, facts=facts, outputs=trace.outputs, roots=roots, state_digest=walk.digest(),
            code_dependencies=deps, replay_plan=compiled.artifact.replay_plan if compiled.artifact else NoReplayPlan("not stored"),
            state_writes=compiled.artifact.state_writes if compiled.artifact else (),
        )  # fmt: skip
        path = spec.disk_record = store.publish(self.key, record, library)
        evicted = store.evict()
        stats.stores += 1
        _log(
            "persisted specialization %d of '%s' (%d bytes of code, %d constants, %d code dependencies) in %.1f ms "
            "as %s%s", spec.index, jit.name, len(library), len(recipes), len(deps), (time.perf_counter() - start) * 1e3,
            path, f"; evicted {len(evicted)} least recently used" if evicted else "",
        )  # fmt: skip
        return None


def begin(jit: JitFunction, values: Sequence[object], facts: CallFacts) -> Session:
    """Look the miss up in the disk cache; the session's `loaded` is set when a persisted specialization fits."""
    if not knobs.disk_cache:
        return Session(None, values, reason="the disk cache is off")
    stats.lookups += 1
    fn_roots: list[Root] = []
    try:
        fn_roots = function_roots(jit.fn) + argument_roots(facts)
        key = lookup_key(jit.fn, jit.param_names, jit.n_positional, jit.runtime_library, facts, jit.dynamism)
    except Exception as e:  # the cache must never fail a call: compile as without it, and say why
        log.warning("trident: the disk cache cannot handle '%s' (compiling without it): %s: %s", jit.name,
                    type(e).__name__, e)
        return Session(jit, values, fn_roots=fn_roots, reason=f"{type(e).__name__}: {e}")
    session = Session(jit, values, key, fn_roots)
    session.loaded = _load(session)
    if session.loaded is None:  # capture follows: fingerprint the state it starts from (see the module docstring)
        try:
            session.state_before = walk_roots(fn_roots, jit.fn, values).digest()
        except Unfingerprintable as e:
            session.key, session.reason = None, str(e)
    return session


# ---------------------------------------------------------------------------------------------------------
# Loading


def _load(session: Session) -> Specialization | None:
    assert session.jit is not None and session.key is not None
    walks: dict[tuple[Root, ...], StateWalk] = {}  # what one miss computes once for all the records it reads
    code_indexes: dict[str, dict[tuple[str, int], str]] = {}
    for path in store.record_paths(session.key):
        record: Record | None = None
        try:
            record = store.read_record(path)
            if record is None:  # removed meanwhile (eviction, clear)
                continue
            return _load_record(session, path, record, walks, code_indexes)
        except trust.Untrusted:  # warned already, once per path; nothing is removed there
            stats.untrusted += 1
        except Rejected as e:
            stats.rejected += 1
            _log("record %s of '%s' does not fit: %s", path.name, session.jit.name, e)
        except CorruptRecord as e:
            stats.corrupt += 1
            store.remove(path, record)
            _log("removed corrupt record %s of '%s': %s", path, session.jit.name, e)
        except Exception as e:  # a record that fails in an unforeseen way must not fail the call: compile instead
            stats.rejected += 1
            log.warning("trident: could not load %s from the disk cache (compiling instead): %s: %s", path,
                        type(e).__name__, e)
    return None


def _load_record(
    session: Session, path: Path, record: Record, walks: dict[tuple[Root, ...], StateWalk],
    code_indexes: dict[str, dict[tuple[str, int], str]],
) -> Specialization:  # fmt: skip
    jit = session.jit
    assert jit is not None
    start = time.perf_counter()
    reason = code_deps.verify(record.code_dependencies, code_indexes)
    if reason is not None:
        raise Rejected(reason)
    roots = tuple(record.roots)
    if roots not in walks:
        try:
            walks[roots] = walk_roots(roots, jit.fn, session.values)
        except Unfingerprintable as e:
            raise Rejected(str(e)) from e
    walk = walks[roots]
    if walk.digest() != record.state_digest:
        raise Rejected("the state the function closes over (attributes, globals, closure cells) differs")
    n = record.n_trace_constants
    constants = resolve_constants(record.constants[:n], [], walk, session.values)
    guards, facts = bind_call_objects(record, session.values)
    guards = bind_attributes(guards, walk)
    # The Python twin of the guard first (it also checks each resolved constant's dtype, device, sizes, strides
    # and alignment): a record for other shapes is rejected without loading its library (a loaded library stays
    # mapped for the life of the process) or rebuilding its launch sites. The native guard below has the last word.
    why = first_failure(guards, session.values, constants)
    if why is not None:
        raise Rejected(f"its guards reject this call ({why})")
    constants = resolve_constants(record.constants[n:], constants, walk, session.values)
    library_path = store.read_library(path, record)
    try:
        library = LoadedLibrary(str(library_path))
    except OSError as e:
        raise CorruptRecord(f"its library does not load: {e}") from e
    artifact = Artifact(
        library, record.guard_symbol, record.run_symbol, list(record.ops), list(record.aten_calls), constants,
        replay_plan=record.replay_plan, state_writes=record.state_writes,
    )  # fmt: skip
    try:
        compiled = instantiate(artifact)
    except AttributeError as e:  # a symbol the library lacks
        raise CorruptRecord(f"its library does not load: {e}") from e
    except ValueError as e:  # an operator this libtorch does not register
        raise Rejected(f"its operators do not resolve: {e}") from e
    if not guard_accepts(compiled.guard_address, compiled.context.address, session.values):
        raise Rejected("its native guard rejects this call")
    launches = [recipe.value for recipe in record.constants if recipe.kind == "triton_launch"]
    try:
        for site, launch in zip(compiled.launch_sites, launches):  # both in context (program) order
            launch_sites.load_variants(site, launch)  # type: ignore[arg-type]
    except launch_sites.LaunchSiteMismatch as e:
        raise Rejected(str(e)) from e
    seconds = time.perf_counter() - start
    return Specialization(guards, facts, None, compiled, seconds, n, origin=LOADED, disk_record=path)


# ---------------------------------------------------------------------------------------------------------
# Persisting


_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d", "_dtensor")


def _collective_reason(trace: Trace) -> str | None:
    """Why a specialization that calls torch.distributed collectives is not persisted, or None when it calls none.

    Its graph names process groups by this process's group names and bakes in their sizes (all_gather's
    group_size): another process (another world size, groups created in another order) would reuse them
    under the same key, since neither is part of it."""
    ops = sorted({
        str(node.target) for node in trace.graph_module.graph.nodes
        if node.op == "call_function" and getattr(node.target, "namespace", None) in _COLLECTIVE_NAMESPACES
    })
    if not ops:
        return None
    return (
        f"it calls collective(s) {', '.join(ops)}; specializations with torch.distributed collectives are not "
        "persisted (process group names and sizes belong to this process)"
    )
