"""The compile driver: what happens on a miss.

A jitted function is one native entry (runtime.Entry). A call that hits never reaches this module. A call
that misses arrives in `JitFunction.on_miss`, which binds the arguments as Python would (raising eager's
TypeError for a bad call), decides what to specialize on, compiles, adds the specialization to the entry,
and runs the call through it.

Automatic dynamic: a specialization first takes every size and int as a constant. When a later call of the
same structure differs in a size or an int, that size or int is traced symbolically from then on (sticky),
so a decode loop whose position grows compiles twice, not once per step.
"""
from __future__ import annotations

import collections
import functools
import inspect
import logging
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch

from . import exc
from .cache import warm_start
from .capture import module_state, user_state
from .capture.inputs import CallFacts, LeafKind
from .capture.trace import Dynamism, Trace, capture_failure, is_tracing, trace_function
from .eager import call_eagerly
from .fallback import EagerFallbacks, report_fallback
from .frames import user_stacklevel
from .graphs.recorder import GraphRecorder
from .guards.build import guard_set
from .guards.guard_set import GuardSet, describe_guards, first_failure
from .guards.int64_ranges import int64_overflow
from .knobs import CompileOptions, knobs, log_enabled
from .lowering.aliasing import PRIVATE_VIEW
from .lowering.pipeline import compile_specialization
from .lowering.pooled_allocations import describe_pool
from .lowering.symbolic_ints import SCALAR_LOWERING
from .native_numbers import fits_int64, float_bits
from .runtime.specialization import CompiledSpecialization, instantiate
from .runtime.triton_native import describe_launch_site
from .specialization import Specialization

log = logging.getLogger("trident")

_compile_count = 0
_compile_count_lock = threading.Lock()
_entry_lock = threading.RLock()  # making entries (and building the runtime) once
# Captures with the same objects that may leave traced values in them (each undone, its call run eagerly)
# before calls with objects of those types run eagerly without capturing. A lazy cache does it once per cache
# object, so it never counts twice; a function that assigns a traced value on every call where compiled code
# cannot (appending to a list it holds; assignments into state-object arguments are compiled, inputs.py) does it
# again with the same objects, and then also for the next ones: capturing each would cost a capture per call.
_PYTHON_STATE_CAPTURES = 2
# Specializations of one call structure whose trace kept the same changing sizes or ints constant (it needed the
# values: `range(x.shape[0])`, a guard the lowering cannot check, an operator that reads concrete sizes) before
# calls with new values of them run eagerly. Automatic dynamic would otherwise compile once per value: per token,
# for a decode loop whose cache length is such a size. A few layouts or feature sizes fit under it (torch.compile's
# recompile limit is 8 as well).
_KEPT_CONSTANT_COMPILES = 8
_IR_DIRECTORY = re.compile(r"\S*/trident-[^/\s]+/")  # the new temporary folder of a failed compile's IR


def runtime_loaded() -> bool:
    """Whether this process has loaded the native runtime (then making an entry costs microseconds)."""
    from .runtime import build

    return build._module is not None


def compile_count() -> int:
    return _compile_count


def _signature_facts(fn: Callable[..., object]) -> tuple[inspect.Signature, list[str], int, dict[int, object], str | None]:
    """The signature, parameter names in slot order, how many are positional, defaults by slot, and the name of
    the **kwargs parameter (None: there is none; it has no slot: each keyword it receives gets its own)."""
    signature = inspect.signature(fn)
    names: list[str] = []
    n_positional = 0
    defaults: dict[int, object] = {}
    var_keyword: str | None = None
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            var_keyword = p.name
            continue
        if p.kind is p.VAR_POSITIONAL:
            raise exc.UnsupportedSignature(
                f"trident.jit cannot compile '{fn.__qualname__}': its parameter '{p.name}' is *{p.name}; list the "
                "parameters explicitly"
            )
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            if len(names) != n_positional:
                raise exc.UnsupportedSignature(f"unexpected parameter order in '{fn.__qualname__}'")
            n_positional += 1
        if p.default is not p.empty:
            defaults[len(names)] = p.default
        names.append(p.name)
    return signature, names, n_positional, defaults, var_keyword


class JitFunction:
    """One jitted function: its native entry (built on first use) and the miss path."""

    def __init__(self, fn: Callable[..., object], name: str | None = None) -> None:
        self.fn = fn
        # How messages and explain name it: the function's own name unless the caller knows a better one (a
        # torch.compile graph, dynamo.py).
        self.name = name or getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        self.signature, self.param_names, self.n_positional, self._defaults, self._var_keyword = _signature_facts(fn)
        # Slots [0, _n_named) are the named parameters; then each keyword only **kwargs received in some call,
        # appended as it is first seen (_add_keywords; param_names is replaced, never changed in place).
        self._n_named = len(self.param_names)
        # The native entry needs the runtime, whose first build takes ~40 s: decorating (importing a module of
        # jitted functions) must not pay that, so the entry is made here only when this process has loaded the
        # runtime already, else at the first call (make_entry; lazy_entry.py, module.py).
        self._entry: object | None = None
        self._on_entry: list[Callable[[object], None]] = []  # told the entry once it exists (to take a call slot)
        self.specializations: list[Specialization] = []
        # The entry's graph recorder (graphs/recorder.py).
        self.graphs = GraphRecorder(lambda index: self.specializations[index])
        if runtime_loaded():
            self.make_entry()
        self.dynamism = Dynamism()
        self.misses = 0
        self.eager_calls = 0
        self.last_miss_reason: str | None = None
        self.eager_reason: str | None = None
        self._lock = threading.RLock()  # one compile at a time per function; hits never take it
        self._warned: set[str] = set()
        self._constants_require_grad: str | None = None  # the eager reason, once a trace has shown it
        # Captures that left traced values in the user's objects (undone), per call structure with objects by
        # identity (_objects_key); and, per structure with objects by type, the eager reason once one of them
        # did so _PYTHON_STATE_CAPTURES times.
        self._python_state_captures: collections.Counter[object] = collections.Counter()
        self._assigns_python_state: dict[object, str] = {}
        self._failed_once: set[object] = set()  # call structures (_objects_key) whose compile failed
        # Call structures whose new calls run eagerly without a capture -> why: their compile failed twice, or
        # _KEPT_CONSTANT_COMPILES of their specializations kept the same changing properties constant.
        self._eager_structures: dict[object, str] = {}
        # Per call structure and the changing properties a trace kept constant: how many specializations did.
        self._kept_constant_compiles: collections.Counter[object] = collections.Counter()

    # -- the native entry ---------------------------------------------------------------------------------------
    @property
    def entry(self) -> Any:
        """The native entry (runtime.Entry), built with the runtime on first use."""
        return self._entry if self._entry is not None else self.make_entry()

    def make_entry(self) -> Any:
        with _entry_lock:
            if self._entry is None:
                from .runtime import load_runtime, runtime_library_path

                runtime = load_runtime()  # builds the runtime the first time, once per torch version
                self._runtime_library = str(runtime_library_path())
                entry = runtime.Entry(self.name, self.on_miss, tuple(self.param_names), self.n_positional, self._defaults)
                functools.update_wrapper(entry, self.fn)  # type: ignore[arg-type]
                entry._trident = self
                self._entry = entry
                if knobs.cuda_graphs:
                    self.use_cuda_graphs(True)
                for tell in self._on_entry:
                    tell(entry)
        return self._entry

    def when_entry_exists(self, tell: Callable[[Any], None]) -> None:
        """`tell(entry)` now if the native entry exists, else once it is made (a wrapper class takes its call
        slot: module.py, lazy_entry.py)."""
        with _entry_lock:
            if self._entry is None:
                self._on_entry.append(tell)
                return
        tell(self._entry)

    @property
    def runtime_library(self) -> str:
        """The path of the native runtime library this function's code links against (warm start links it)."""
        self.make_entry()
        return self._runtime_library

    def use_cuda_graphs(self, on: bool) -> None:
        """Record and replay CUDA graphs for this function's specializations (TRIDENT_CUDA_GRAPHS=1 turns it on
        for every function; graphs/recorder.py). Off drops no graph already recorded."""
        self.entry.set_graph_recorder(self.graphs if on else None)

    # -- the miss path ----------------------------------------------------------------------------------------
    @functools.cached_property
    def fallbacks(self) -> EagerFallbacks:
        """Guard sets whose capture or compile failed: they run eagerly without another attempt (fallback.py)."""
        return EagerFallbacks()

    def on_miss(self, *args: object, **kwargs: object) -> object:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            # A wrong call: calling the function raises exactly eager's TypeError (Python binds the arguments
            # before the body runs), worded as eager words it.
            return call_eagerly(self.fn, args, kwargs)
        bound.apply_defaults()
        if knobs.disable or is_tracing():
            # Called from another jitted function being captured: inline into that capture.
            return self.fn(*args, **kwargs)
        from .capture.inputs import describe_call

        extra: dict[str, object] = bound.arguments.pop(self._var_keyword) if self._var_keyword else {}
        if any(name not in self.param_names[self._n_named :] for name in extra):
            clash = self._add_keywords(extra)
            if clash is not None:
                return self._run_eagerly(clash, args, kwargs)
        values = self._bound_values(bound.arguments, extra)
        facts = describe_call(self.param_names[: len(values)], values)
        remembered = self.fallbacks.lookup(facts)  # no lock: a dict read; eager needs no compile
        if remembered is not None:
            self.misses += 1
            remembered.calls += 1
            return self._run_eagerly(remembered.reason, args, kwargs)
        with self._lock:
            # Another thread may have compiled what this call needs while we waited.
            hit, result = self.entry.try_call(*args, **kwargs)
            if hit:
                return result
            self.misses += 1
            if len(values) != len(self.param_names):  # another thread added a keyword since: not passed here
                values = self._bound_values(bound.arguments, extra)
                facts = describe_call(self.param_names, values)
            eager = self._eager_reason(facts, values)
            if eager is None:
                self.last_miss_reason = self._miss_reason(values, facts)
                if log_enabled("recompiles") and self.specializations:
                    log.warning("trident: recompiling '%s': %s", self.name, self.last_miss_reason)
                spec, unpublished = self._compile(values, facts)
                if spec is None:
                    eager = self.eager_reason or "not compiled"
        if eager is not None:
            return self._run_eagerly(eager, args, kwargs)
        try:
            hit, result = self.entry.try_call(*args, **kwargs)
        except BaseException:
            if unpublished is not None:  # a specialization whose first call fails is not worth a warm start
                with self._lock:
                    unpublished.abandon(spec, "its first call raised")
            raise
        if not hit:
            # A Trident bug (the guards reject the call they were compiled for), but nothing ran yet: eager is
            # still correct. Remembered, so the same inputs do not compile again.
            reason = first_failure(spec.guards, values, spec.trace_constants)
            with self._lock:
                eager = self._remember_eager(facts, (
                    f"internal error: the specialization compiled for this call of '{self.name}' does not accept "
                    f"it ({reason}); please report this. Calls with these inputs run eagerly"
                ))
            return self._run_eagerly(eager, args, kwargs)
        if unpublished is not None:  # now with the Triton variants that call compiled (warm_start.py)
            with self._lock:
                unpublished.publish(spec)
        return result

    def _bound_values(self, arguments: dict[str, object], extra: dict[str, object]) -> list[object]:
        """The call's value of each slot: named parameters (defaults applied), then the keywords of **kwargs."""
        from .capture.inputs import NOT_PASSED

        names = self.param_names
        return [arguments[n] for n in names[: self._n_named]] + [extra.get(n, NOT_PASSED) for n in names[self._n_named :]]

    def _add_keywords(self, extra: dict[str, object]) -> str | None:
        """Give each keyword of **kwargs not seen before a slot of its own, in the entry (whose earlier
        specializations stop matching: their guards do not read it) and in param_names; or say why this call
        runs eagerly: a keyword that names a parameter the entry would bind it to (a positional-only one)."""
        from .capture.inputs import NOT_PASSED

        with self._lock:
            for name in extra:
                if name in self.param_names[: self._n_named]:
                    return (
                        f"'{self.name}' is called with keyword '{name}', which names a positional-only parameter and "
                        "goes to its **kwargs; such calls run eagerly"
                    )
            for name in extra:
                if name not in self.param_names:
                    self.entry.add_keyword(name, NOT_PASSED)
                    self.param_names = [*self.param_names, name]
        return None

    def _eager_reason(self, facts: CallFacts, values: Sequence[object]) -> str | None:
        """Why this call runs eagerly without a capture, or None (capture and compile it)."""
        if len(self.specializations) + len(self.fallbacks) >= knobs.max_specializations:
            return (
                f"'{self.name}' reached TRIDENT_MAX_SPECIALIZATIONS={knobs.max_specializations} "
                "specializations; further new inputs run eagerly"
            )
        for leaf in facts.leaves:
            if leaf.kind is LeafKind.OBJECT and isinstance(leaf.value, torch.Tensor):
                t = leaf.value
                return (
                    f"argument '{leaf.path.name}' is a {type(t).__name__} with layout {t.layout} on {t.device}; "
                    "Trident compiles plain strided torch.Tensor / nn.Parameter arguments (not subclasses, "
                    "sparse or meta tensors), so calls with it run eagerly"
                )
        for leaf in facts.leaves:
            if leaf.kind is LeafKind.INT and not fits_int64(leaf.value):  # type: ignore[arg-type]
                return (
                    f"argument '{leaf.path.name}' is an int outside int64; compiled code computes ints as int64, "
                    "so calls with such ints run eagerly"
                )
        if self._eager_structures:
            decided = self._eager_structures.get(_objects_key(facts))
            if decided is not None:
                return decided
        if self._assigns_python_state:
            decided = self._assigns_python_state.get(_objects_key(facts, by_type=True))
            if decided is not None:
                return decided
        if torch.is_grad_enabled():
            if self._constants_require_grad:
                return self._constants_require_grad
            for leaf in facts.leaves:
                if leaf.kind is LeafKind.TENSOR and leaf.tensor is not None and leaf.tensor.requires_grad:
                    return (
                        f"argument '{leaf.path.name}' requires grad while grad mode is on; Trident compiles "
                        "inference only, so this call runs eagerly. Call it under torch.no_grad() or "
                        "torch.inference_mode()"
                    )
        for spec in self.specializations:  # a miss of one only because an int it computes leaves int64
            if not _same_structure(spec.facts, facts):
                continue
            overflow = int64_overflow(spec.guards, values, spec.trace_constants)
            if overflow is not None:
                return (
                    f"'{self.name}' computes {overflow} for this call, which leaves int64 (compiled code computes "
                    "ints as int64, Python's grow), so this call runs eagerly"
                )
        return None

    def _remember_eager(self, facts: CallFacts, reason: str) -> str:
        """Record that calls with this call's guard set run eagerly (under self._lock); returns the reason."""
        self.fallbacks.add(facts, reason).calls += 1
        self.eager_reason = reason
        return reason

    def _run_eagerly(self, reason: str, args: Sequence[object], kwargs: dict[str, object]) -> object:
        self.eager_calls += 1
        self.eager_reason = reason
        report_fallback(self.name, reason)  # strict mode (tests) raises here
        once = _IR_DIRECTORY.sub("", reason)  # each failed compile writes its IR into a folder of its own
        if once not in self._warned:
            self._warned.add(once)
            warnings.warn(f"trident: {reason}", stacklevel=user_stacklevel())  # the user's line that called
        return call_eagerly(self.fn, args, kwargs)

    def _miss_reason(self, values: Sequence[object], facts: CallFacts) -> str:
        """Why the closest specialization (the newest of the same argument structure) rejected this call."""
        if not self.specializations:
            return "first call"
        same = [s for s in self.specializations if _same_structure(s.facts, facts)]
        spec = (same or self.specializations)[-1]
        try:
            reason = first_failure(spec.guards, values, spec.trace_constants)
        except (IndexError, TypeError, KeyError):  # an argument path of that specialization is absent here
            reason = None
        if reason is None:
            return f"argument structure differs from specialization {spec.index}"
        return reason

    # -- compiling: the miss pipeline after binding -------------------------------------------------------------
    # dynamism (_newly_dynamic) -> load (warm_start) or capture (_capture: the trace and its complete guard set)
    # and build (_build) -> install (_install) -> publish (_publish). Each step that cannot go on says why in the
    # fallbacks and returns None.
    def _compile(
        self, values: Sequence[object], facts: CallFacts
    ) -> tuple[Specialization | None, warm_start.Session | None]:
        """The specialization for this call (None: run it eagerly), and the disk-cache session that publishes it
        after its first call (None: published already, or loaded)."""
        global _compile_count
        self.dynamism = self.dynamism.union(self._newly_dynamic(facts))
        persisted = warm_start.begin(self, values, facts)  # warm start: a specialization an earlier process stored
        if persisted.loaded is not None:
            spec = self._install(values, persisted.loaded)
            persisted.loaded_as(spec)
            return spec, None
        start = time.perf_counter()
        options = CompileOptions.current()  # read once: the capture and the passes get them as a value
        captured = self._capture(values, facts, persisted, options)
        if captured is None:
            return None, None
        trace, guards, reachable = captured
        self._count_kept_constant(facts, guards)
        compiled = self._build(values, facts, trace, guards, reachable, options)
        if compiled is None:
            return None, None
        spec = self._install(values, Specialization(guards, facts.without_tensors(), trace, compiled,
                                                    time.perf_counter() - start, len(trace.constants)))
        with _compile_count_lock:
            _compile_count += 1
        if log_enabled("compile"):
            log.warning("trident: compiled specialization %d of '%s' in %.1f ms", spec.index, self.name,
                        spec.compile_seconds * 1e3)  # fmt: skip
        if log_enabled("guards"):
            log.warning("trident: guards of '%s' #%d:\n  %s", self.name, spec.index, "\n  ".join(describe_guards(guards)))
        return spec, self._publish(spec, persisted)

    def _capture(
        self, values: Sequence[object], facts: CallFacts, persisted: warm_start.Session, options: CompileOptions,
    ) -> tuple[Trace, GuardSet, user_state.UserState] | None:  # fmt: skip
        """Trace the function on this call: (the trace, its complete guard set, a snapshot of the user state it
        reaches), or None when the call runs eagerly (capture failed, left traced values in user objects, or its
        guards cannot be stated)."""
        reachable = user_state.snapshot(self.fn, values, self.param_names)
        try:
            with persisted.recording_code(), module_state.recording() as module_reads:
                trace = trace_function(
                    self.fn, self.n_positional, self.param_names, values, facts, self.dynamism, SCALAR_LOWERING,
                    reachable, options,
                )
        except exc.KeptFromEarlierCapture:
            reachable.restore()
            raise  # eager would compute with that capture's fake tensor: the user must move the cache out
        except Exception as e:  # noqa: BLE001 -- an operator (or the function itself) failed while capturing
            # What the partial run assigned into the user's objects is undone: the eager run makes it once.
            reachable.restore()
            # Data-dependent Python (`.item()`, `if x.sum() > 0`, `.data_ptr()`: UnsupportedConstruct) too: eager
            # runs such a program, so Trident does, warning once with the construct and the user's line.
            # Capture runs torch's meta functions and decompositions on fake tensors, not eager's kernels: the
            # error type can differ, and some calls eager accepts fail there. Running this call eagerly gives
            # eager's result or exception, with eager's partial in-place effects; nothing is compiled for it.
            self._remember_eager(facts, capture_failure(self.name, e))
            return None
        if self._left_traced_values(reachable, facts):
            return None
        if torch.is_grad_enabled() and any(c.requires_grad for c in trace.constants):
            # Remembered, so later calls with grad on run eagerly without tracing again.
            self._constants_require_grad = self.eager_reason = (
                f"'{self.name}' reads tensors that require grad (module parameters?) while grad mode is on; "
                "Trident compiles inference only, so calls run eagerly. Call it under torch.no_grad() or "
                "torch.inference_mode()"
            )
            return None
        try:
            guards = guard_set(self.fn, self.param_names, values, facts, trace, module_reads)
        except (exc.UnsupportedArgument, exc.LoweringError) as e:  # e.g. an int this call computes leaves int64
            self._compile_failed(facts, reachable, e)
            return None
        return trace, guards, reachable

    def _count_kept_constant(self, facts: CallFacts, guards: GuardSet) -> None:
        """Count a specialization whose trace kept constant what this call asked to trace symbolically (it
        changed between calls); the _KEPT_CONSTANT_COMPILES-th decides that new values of it run eagerly."""
        kept = kept_constant(guards, self.dynamism)
        if not kept:
            return
        structure = _objects_key(facts)
        self._kept_constant_compiles[structure, tuple(kept)] += 1
        if log_enabled("recompiles"):
            log.warning("trident: '%s' traced %s as constants although they change between calls", self.name,
                        ", ".join(kept))
        if self._kept_constant_compiles[structure, tuple(kept)] >= _KEPT_CONSTANT_COMPILES:
            listing = " and ".join(kept) if len(kept) <= 2 else f"{kept[0]}, {kept[1]} and {len(kept) - 2} more"
            self._eager_structures[structure] = (
                f"'{self.name}': the trace needs the value of {listing} (e.g. `range(x.shape[0])`, or an operator "
                f"that reads concrete sizes), which changes between calls, so each value compiled a specialization "
                f"of its own; after {_KEPT_CONSTANT_COMPILES} of them, calls with new values run eagerly"
            )

    def _build(
        self, values: Sequence[object], facts: CallFacts, trace: Trace, guards: GuardSet,
        reachable: user_state.UserState, options: CompileOptions,
    ) -> CompiledSpecialization | None:  # fmt: skip
        """The instantiated native code of a trace and its guards, or None when compiling failed (the call and its
        structure then run eagerly, _compile_failed)."""
        index = len(self.specializations)
        try:
            artifact = compile_specialization(self.name, index, trace, facts, guards, self.runtime_library, options)
            try:
                return instantiate(artifact)
            except ValueError as e:  # an operator this libtorch does not register
                raise exc.LoweringError(f"cannot resolve the operators of '{self.name}': {e}") from e
        except (exc.UnsupportedArgument, exc.LoweringError) as e:
            self._compile_failed(facts, reachable, e)
            return None

    def _compile_failed(self, facts: CallFacts, reachable: user_state.UserState, e: exc.TridentError) -> None:
        """Eager runs what Trident cannot compile: a LoweringError (a Trident gap or bug, its IR written to a file
        the message names) or an argument it cannot pass natively never reaches a user whose program eager runs.
        Remembered for this guard set; a second failure with the same structure (the same objects, tensors of the
        same dtype, device and rank) decides every call of that structure: another size or int value fails the
        same way (a decode loop would pay a capture per step). Other dtypes or objects still get their own attempt."""
        reachable.restore()  # the eager run makes the capture's Python side effects once
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        details = "; ".join(line for line in lines if not line.startswith("this is a bug in Trident"))
        what = details or type(e).__name__
        reason = self._remember_eager(
            facts, f"compiling '{self.name}' failed ({what}); calls with these inputs run eagerly"
        )
        structure = _objects_key(facts)
        if structure in self._failed_once:
            self._eager_structures[structure] = reason
        self._failed_once.add(structure)

    @staticmethod
    def _publish(spec: Specialization, persisted: warm_start.Session) -> warm_start.Session | None:
        """Store a new specialization to the disk cache now, or return the session that stores it after its first
        call (when that call compiles its Triton variants, which the record carries)."""
        if persisted.publishes_after_first_call(spec):
            persisted.snapshot_state()  # the record describes the state before the first call
            return persisted
        persisted.publish(spec)  # to the disk cache, or log why not (TRIDENT_LOG=cache)
        return None

    def _left_traced_values(self, reachable: user_state.UserState, facts: CallFacts) -> bool:
        """After a capture that succeeded: if it assigned values of the trace into the user's objects (a cache
        allocated lazily on the first call), undo every change it made and say that this call runs eagerly,
        where the assignments happen for real (capture/user_state.py). When the same objects do so again (a list
        appended to at every step), calls with objects of those types are no longer captured."""
        left = [c for c in reachable.changes() if c.traced]
        if not left:
            return False
        reachable.restore()
        key = _objects_key(facts)
        self._python_state_captures[key] += 1
        reason = (
            f"capturing '{self.name}' assigned traced values into Python objects it reaches "
            f"({user_state.describe(left)}), which compiled code cannot reproduce; the call runs eagerly, which "
            "makes those assignments for real"
        )
        if self._python_state_captures[key] >= _PYTHON_STATE_CAPTURES:
            self._assigns_python_state[_objects_key(facts, by_type=True)] = reason = (
                f"{reason}. It did so in {self._python_state_captures[key]} captures with the same objects: calls "
                "with objects of these types run eagerly from now on, without capturing again"
            )
        self.eager_reason = reason
        return True

    def _install(self, values: Sequence[object], spec: Specialization) -> Specialization:
        """Add a specialization (compiled now, or loaded from the disk cache) to the entry, under the structural key
        of the call it was made for, and to this function's list, whose index it takes."""
        positional, keywords = self._call_args(values)
        key = self.entry.structural_key(*positional, **keywords)
        compiled = spec.compiled
        self.entry.add_spec(key, compiled.guard_address, compiled.run_address, compiled.context, compiled.native)
        spec.index = len(self.specializations)
        self.specializations.append(spec)
        return spec

    def _call_args(self, values: Sequence[object]) -> tuple[list[object], dict[str, object]]:
        """Bound values as a call would pass them (keyword-only parameters by keyword, keywords of **kwargs the
        call did not pass left out): same slots."""
        from .capture.inputs import NOT_PASSED

        n = self.n_positional
        return list(values[:n]), {k: v for k, v in zip(self.param_names[n:], values[n:]) if v is not NOT_PASSED}

    def _newly_dynamic(self, facts: CallFacts) -> Dynamism:
        """What differs from the latest specialization of the same structure: sizes, ints and floats by value
        (a bool is a constant: LeafKind.BOOL), storage offsets, and strides that changed for another reason than
        their sizes (a transposed, sliced or expanded layout; a contiguous tensor that grows keeps strides
        inferred from its sizes)."""
        for spec in reversed(self.specializations):
            if not _same_structure(spec.facts, facts):
                continue
            sizes, ints, floats, strides, offsets = set(), set(), set(), set(), set()
            for old, new in zip(spec.facts.leaves, facts.leaves):
                key = (new.path.param, new.path.items)
                if new.kind is LeafKind.TENSOR and old.tensor is not None and new.tensor is not None:
                    a, b = old.tensor, new.tensor
                    sizes.update((*key, d) for d, (x, y) in enumerate(zip(a.sizes, b.sizes)) if x != y)
                    strides.update((*key, d) for d in _layout_changes(a.sizes, a.strides, b.sizes, b.strides))
                    if a.storage_offset != b.storage_offset:
                        offsets.add(key)
                elif new.kind is LeafKind.INT and old.value != new.value:
                    ints.add(key)
                elif new.kind is LeafKind.FLOAT and float_bits(old.value) != float_bits(new.value):  # type: ignore
                    # bitwise, as float guards compare: 0.0 and -0.0 differ, a NaN equals itself
                    floats.add(key)
            return Dynamism(*(frozenset(x) for x in (sizes, ints, floats, strides, offsets)))
        return Dynamism()

    # -- introspection ----------------------------------------------------------------------------------------
    def explain(self) -> str:
        hits = self._entry.hits() if self._entry is not None else []  # type: ignore[attr-defined]
        lines = [
            f"trident.jit '{self.name}': {len(self.specializations)} specialization(s), "
            f"{sum(hits)} native hit(s), {self.misses} miss(es), {self.eager_calls} eager call(s)"
        ]
        for spec in self.specializations:
            lines.append(
                f"specialization {spec.index}: {hits[spec.index] if spec.index < len(hits) else 0} hit(s), "
                f"{spec.origin} in {spec.compile_seconds * 1e3:.1f} ms, {len(spec.compiled.aten_calls)} ATen call(s) "
                f"({len(spec.compiled.ops)} through the boxed dispatcher, "
                f"{sum(call.endswith(PRIVATE_VIEW) for call in spec.compiled.aten_calls)} private view(s) below autograd)"
            )
            lines += [f"    {line}" for line in describe_guards(spec.guards)]
            if spec.trace is not None:
                lines += [f"    {line}" for line in spec.trace.see_through.describe()]
            sites = collections.Counter(describe_launch_site(site) for site in spec.compiled.launch_sites)
            lines += [f"    {text}" + (f" ({n} sites)" if n > 1 else "") for text, n in sites.items()]
            pool = spec.compiled.buffer_pool
            if pool is not None:
                lines += [f"    {line}" for line in describe_pool(pool)]
            if spec.disk_cache:
                lines.append(f"    disk cache: {spec.disk_cache}")
            lines += [f"    {line}" for line in self.graphs.describe(self._entry, spec.index)]
        if self.last_miss_reason is not None:
            lines.append(f"last miss: {self.last_miss_reason}")
        if self.eager_reason is not None:
            lines.append(f"eager fallback: {self.eager_reason}")
        if len(self.fallbacks):
            lines.append(f"{len(self.fallbacks)} guard set(s) run eagerly, without capturing again:")
            lines += self.fallbacks.describe()
        return "\n".join(lines)


def kept_constant(guards: GuardSet, dynamism: Dynamism) -> list[str]:
    """The leaf properties `dynamism` asked to trace symbolically that the trace kept constant anyway (a guard
    pinned them to their value), as explain names them. 0 and 1 are left out: a size or int of 0 or 1 is a
    constant by design (torch's 0/1 specialization), not a value the trace needed."""
    asked = {
        "size": lambda g: dynamism.size_dynamic(g.path, g.dim),
        "stride": lambda g: dynamism.stride_dynamic(g.path, g.dim),
        "offset": lambda g: dynamism.offset_dynamic(g.path),
        "int": lambda g: dynamism.int_dynamic(g.path),
    }
    kept = []
    for g in guards.properties:
        if g.path.is_constant or not isinstance(g.expr, sympy.Integer) or int(g.expr) in (0, 1):
            continue
        if g.prop in asked and asked[g.prop](g):
            kept.append(f"{g.prop} {g.dim} of '{g.path.name}'" if g.prop in ("size", "stride") else
                        f"{g.prop} of '{g.path.name}'")
    return kept


def _objects_key(facts: CallFacts, by_type: bool = False) -> object:
    """A call's structure with its objects by identity (or by type) and its tensors by dtype, device and rank
    (sizes and values left out): the calls of one decode loop over one cache object share it."""
    return tuple(
        (leaf.path.param, leaf.path.items, leaf.kind,
         (type(leaf.value) if by_type else id(leaf.value)) if leaf.kind is LeafKind.OBJECT else
         (leaf.tensor.dtype, leaf.tensor.device, len(leaf.tensor.sizes)) if leaf.tensor is not None else None)
        for leaf in facts.leaves
    )


def _same_structure(a: CallFacts, b: CallFacts) -> bool:
    if len(a.leaves) != len(b.leaves) or a.sequences != b.sequences:
        return False
    for x, y in zip(a.leaves, b.leaves):
        if x.path != y.path or x.kind is not y.kind:
            return False
        if x.tensor is not None and y.tensor is not None:
            if (x.tensor.dtype, x.tensor.device, len(x.tensor.sizes)) != (y.tensor.dtype, y.tensor.device, len(y.tensor.sizes)):
                return False
    return True


def _layout_changes(
    old_sizes: Sequence[int], old_strides: Sequence[int], new_sizes: Sequence[int], new_strides: Sequence[int]
) -> list[int]:
    """Dims whose stride changed, unless the tensor is contiguous in both calls: a contiguous tensor that grows
    keeps strides inferred from its sizes (expressions of them), any other layout change makes them symbols."""

    def contiguous(sizes: Sequence[int], strides: Sequence[int]) -> bool:
        expected = 1
        for size, stride in reversed(list(zip(sizes, strides))):
            if size != 1 and stride != expected:
                return False
            expected *= size
        return True

    if contiguous(old_sizes, old_strides) and contiguous(new_sizes, new_strides):
        return []
    return [d for d in range(len(new_strides)) if old_strides[d] != new_strides[d]]
