"""Capture raw Triton launches (`kernel[grid](...)`) in a make_fx trace, and run recorded launches on CPU.

make_fx only sees calls that reach the dispatcher; a raw Triton launch does not, so it would run (and fail on
fake tensors). `torch.library.wrap_triton(kernel)[grid](...)` turns the launch into the higher-order op
`triton_kernel_wrapper_mutation`, which make_fx records. `intercept_triton_launches()` reroutes raw launches
there for the duration of a trace, so user code need not be edited.

A recorded node reads (torch 2.13, all keyword arguments):
    triton_kernel_wrapper_mutation(kernel_idx=int, constant_args_idx=int, grid=[(g0, g1, g2), ...],
                                   tma_descriptor_metadata={}, kwargs={name: fx.Node | int | float | ...})
torch 2.15 adds `launch_kwargs=(name, ...)` when the launch passed arguments by keyword.
`kernel_idx` / `constant_args_idx` index `kernel_side_table`; `grid` holds one 3-tuple per autotune config.

`run_recorded_launch_on_cpu` executes one such launch through Triton's interpreter (no TRITON_INTERPRET
needed), so CPU tests can check captured kernels numerically.

With TRITON_INTERPRET=1 set before Triton is imported (CPU Triton users set it), kernels are interpreter objects;
`compiled_form` gives each the JITFunction `@triton.jit` would have made, which is what gets recorded.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import logging
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._higher_order_ops.triton_kernel_wrap import generate_ttir, get_mutated_tensors, kernel_side_table

from .. import exc
from ..artifact import Operand
from .kernel_stores import stored_parameters

GridTuple = tuple[Any, ...]
Grid = GridTuple | Callable[[dict[str, Any]], GridTuple]

# One lock for every piece of global state this module swaps (class attributes, Triton's active driver, the
# interpreter's patching of triton.language). Reentrant: the contexts nest in the tracing thread, while a second
# tracing thread waits for the first to finish.
_lock = threading.RLock()


class _Interception:
    """Which thread's launches are rerouted, and how deeply its blocks nest (written under _lock)."""

    owner: int | None = None
    depth: int = 0


_interception = _Interception()


class _ThreadFlags(threading.local):
    rerouting: bool = False  # inside our own rerouted launch: nested launches take the original path


_flags = _ThreadFlags()


# ---------------------------------------------------------------------------------------------------------
# Exact mutation analysis without a GPU


class _AnalysisOnlyDriver:
    """Stands in for Triton's active driver so that torch can generate TTIR for its mutation analysis.

    torch's `identify_accessed_tensors` asks `triton.runtime.driver.active.get_current_target()`; without a GPU
    that raises "0 active drivers" and torch assumes every tensor argument is written. TTIR generation needs
    only a target, not a device, so this object answers that one question and refuses the rest."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("cuda", 90, 32)

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(
            f"Triton driver attribute {name!r} requested while Trident's analysis-only driver is active (no GPU "
            "on this machine): Triton kernels cannot be compiled or launched here; use the interpreter."
        )


def _real_driver_available(driver: Any) -> bool:
    from triton.backends import backends

    # `driver.active` would create the driver as a side effect; is_active() only asks torch.cuda.
    return driver._active is not None or sum(1 for b in backends.values() if b.driver.is_active()) == 1


@contextlib.contextmanager
def exact_mutation_analysis() -> Iterator[None]:
    """Make torch's Triton mutation analysis exact on a GPU-less machine, for the duration of the block.

    Where a driver is already active or creatable (a GPU machine, or an outer block) nothing changes."""
    from triton.runtime import driver

    with _lock:
        if _real_driver_available(driver):
            yield
            return
        # DriverConfig has no public way to go back to "not created yet"; `_active` is that state.
        previous = driver._active
        driver.set_active(_AnalysisOnlyDriver())
        try:
            yield
        finally:
            driver._active = previous


@dataclasses.dataclass(frozen=True)
class KernelWrites:
    """What a recorded launch writes: the tensor kwargs torch's analysis and Trident's own (kernel_stores.py) find
    it may store to, together; or, where neither can decide (`undecided`: why), every tensor kwarg."""

    names: list[str]
    undecided: str | None = None


class _AnalysisFailure(logging.Filter):
    """Takes the warning torch logs when its analysis of a kernel fails (it then counts every input as written
    rather than raise) off its logger, so that the reason reaches explain instead of stderr."""

    def __init__(self) -> None:
        super().__init__()
        self.reason: str | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith("Encountered an exception in identify_"):
            return True
        error = record.exc_info[1] if record.exc_info else None
        if self.reason is None and error is not None:
            self.reason = _failure(error)
        return False


def _failure(error: BaseException) -> str:
    """An analysis's failure in explain: the error's type and the first line of its message."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0][:300] if lines else ''}".rstrip(": ")


def kernel_writes(node: torch.fx.Node) -> KernelWrites:
    """What a recorded triton_kernel_wrapper_mutation node writes, from the kernel's TTIR on the node's fake values
    (node.meta["val"]; make_fx does not functionalize, so the node carries no mutation facts of its own).

    Two readings, both over-approximations when they succeed: torch's analysis, and Trident's (kernel_stores.py),
    which decides where torch's stops at an op it does not model and refuses where torch would answer "nothing"
    for a store through a pointer loaded from memory. Their union is the answer; when Trident's finds a store it
    cannot trace, or neither decides, every tensor counts as written (`undecided` says why)."""
    hop_kwargs = node.kwargs
    values = {
        k: (v.meta["val"] if isinstance(v, torch.fx.Node) else v)
        for k, v in hop_kwargs["kwargs"].items()  # type: ignore[union-attr]
    }
    kernel_idx, constant_args_idx = hop_kwargs["kernel_idx"], hop_kwargs["constant_args_idx"]
    tma = hop_kwargs["tma_descriptor_metadata"]
    failure = _AnalysisFailure()
    module = sys.modules[get_mutated_tensors.__module__]
    log = getattr(module, "log", None) or logging.getLogger(module.__name__)  # torch 2.13: "torch._dynamo"
    log.addFilter(failure)
    try:
        with exact_mutation_analysis():
            names = get_mutated_tensors(kernel_idx, constant_args_idx, values, tma)  # type: ignore[arg-type]
            own, untraceable = _own_writes(kernel_idx, constant_args_idx, values, tma)  # type: ignore[arg-type]
    finally:
        log.removeFilter(failure)
    tensors = [name for name, value in values.items() if isinstance(value, torch.Tensor)]
    if isinstance(own, str) and untraceable:
        return KernelWrites(tensors, f"Trident's analysis: {own}")
    if isinstance(own, str):  # no TTIR here: torch's answer stands alone (its reason when it has none either)
        both = failure.reason is None or own == failure.reason
        return KernelWrites(names, failure.reason if both else f"{failure.reason}; Trident's analysis: {own}")
    own_tensors = [name for name in own if name in tensors]
    if failure.reason is not None:  # torch's answer is "every tensor": Trident's decides
        return KernelWrites(own_tensors)
    return KernelWrites(names + [name for name in own_tensors if name not in names])


def jit_function(kernel: Any) -> Any:
    """The JITFunction under a kernel's Autotuner / Heuristics wrappers."""
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction):
        kernel = kernel.fn
    return kernel


def _ttir_arguments(kernel: Any, kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The JITFunction and exactly its parameters, for generate_ttir: an autotuner's first config merged as torch
    merges it (any config stores through the same parameters), keys of that config that are no parameter of the
    kernel left out (Triton passes them on as compile options; gemlite's configs carry some), and parameters with
    defaults the launch and the config leave out given those. torch's own analysis counts every key and refuses
    ("Incorrect number of arguments") where this one decides."""
    from triton.runtime.autotuner import Autotuner

    if isinstance(kernel, Autotuner):
        kwargs = {**kwargs, **(kernel.configs[0].kwargs if kernel.configs else {})}
        kernel = kernel.fn
    fn = jit_function(kernel)
    bound = {name: kwargs[name] for name in fn.arg_names if name in kwargs}
    _bind_defaults(fn, (), bound)
    return fn, bound


def _own_writes(kernel_idx: int, constant_args_idx: int, values: dict[str, Any], tma: Any
                ) -> tuple[list[str] | str, bool]:
    """Trident's reading of the kernel's TTIR (kernel_stores.py) on the arguments torch's analysis gets: the
    parameters it may store through, or (why not, whether a store was found that cannot be traced)."""
    kernel, kwargs = _ttir_arguments(
        kernel_side_table.get_kernel(kernel_idx), {**values, **kernel_side_table.get_constant_args(constant_args_idx)}
    )
    try:
        ttir, arg_names = generate_ttir(kernel, kwargs, tma)
    except Exception as e:  # noqa: BLE001 -- the TTIR cannot be made here: torch's answer stands alone
        return _failure(e), False
    try:
        answer = stored_parameters(ttir, jit_function(kernel).fn.__name__, list(arg_names))
    except Exception as e:  # noqa: BLE001 -- IR bindings this Triton lacks: no answer of Trident's, torch's stands
        return _failure(e), False
    return answer, isinstance(answer, str)


# ---------------------------------------------------------------------------------------------------------
# Kernels decorated under TRITON_INTERPRET=1


# Interpreter-mode object -> its compiled-mode twin, by id (kernels live as long as their module; the entry
# holds the object too, so its id is not reused while the entry exists). One twin per object: torch's side
# table, the launch-site cache and the warm-start locator compare kernels by identity.
_twins: dict[int, tuple[Any, Any]] = {}


def compiled_form(kernel: Any) -> Any:
    """`kernel` as `@triton.jit` would have built it without TRITON_INTERPRET.

    With the variable set when a kernel is decorated, `@triton.jit` returns an InterpretedFunction (which
    launches through numpy and touches data pointers, so it cannot run on fake tensors) and torch's wrap_triton
    passes such kernels through untraced. The twin is a JITFunction of the same Python function and options,
    under copies of the Autotuner / Heuristics wrappers around it: what torch records and the side table holds,
    what runs through the interpreter at execution on CPU (as a JITFunction would), and what the warm-start
    locator checks. Its cache_key is the one Triton computes without the variable. Other kernels are returned
    as they are."""
    with _lock:
        twin = _twin(kernel)
        if twin is not kernel:
            _hash_as_compiled(twin)
        return twin


def _twin(kernel: Any) -> Any:
    """The memoized twin of `kernel` (itself when no InterpretedFunction is on its `.fn` chain), not hashed."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if not isinstance(kernel, (InterpretedFunction, Autotuner, Heuristics)):
        return kernel
    known = _twins.get(id(kernel))
    if known is not None and known[0] is kernel:
        return known[1]
    if isinstance(kernel, InterpretedFunction):
        twin = JITFunction(kernel.fn, **kernel.kwargs)
    else:
        inner = _twin(kernel.fn)
        if inner is kernel.fn:
            return kernel  # no interpreter object on the chain
        twin = copy.copy(kernel)  # hooks, configs and heuristics shared: they read only the launch's arguments
        twin.fn = inner
        if isinstance(twin, Autotuner):
            twin.cache = {}  # the twin tunes (on CUDA) on its own
    _twins[id(kernel)] = (kernel, twin)
    _twin_ids.add(id(twin))
    return twin


_twin_ids: set[int] = set()  # of every twin made (each kept alive by _twins)


def made_under_interpreter(kernel: Any) -> bool:
    """Whether a recorded kernel (or a wrapper torch made around it) is the twin of an interpreter object: its
    launches run through Triton's interpreter on every device, as the user's kernel does in eager."""
    while kernel is not None:
        if id(kernel) in _twin_ids:
            return True
        kernel = getattr(kernel, "fn", None)
    return False


def _hash_as_compiled(twin: Any) -> None:
    """Compute the innermost JITFunction's cache_key (Triton's hash of its source and of the @triton.jit
    functions and constexpr globals it uses) with the @triton.jit helpers it calls, InterpretedFunctions
    themselves, hashed as their twins: Triton's DependenciesFinder rejects interpreter objects."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import DependenciesFinder, JITFunction

    jit = jit_function(twin)
    if jit.hash is not None:
        return
    original = DependenciesFinder.__dict__["record_reference"]

    def record_reference(self: Any, val: Any, var_dict: Any = None, name: Any = None) -> None:
        if isinstance(val, InterpretedFunction):
            with _lock:  # another thread hashing meanwhile waits here instead of racing on _twins
                val = _twin(val)
        return original(self, val, var_dict, name)

    DependenciesFinder.record_reference = record_reference  # under _lock; only interpreter objects differ
    try:
        jit.cache_key
    except BaseException:
        # Triton leaves its recursion placeholder behind on failure, in the kernel and in any helper it reached.
        for _, made in _twins.values():
            if isinstance(made, JITFunction) and str(made.hash).startswith("recursion:"):
                made.hash = None
        raise
    finally:
        DependenciesFinder.record_reference = original


# ---------------------------------------------------------------------------------------------------------
# Rerouting launches during a trace


def _launch_classes() -> list[type]:
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return [JITFunction, Autotuner, Heuristics, InterpretedFunction]


def _apply_heuristics(kernel: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """Strip outer @triton.heuristics wrappers the way Heuristics.run does: each adds computed kwargs.

    wrap_triton accepts only JITFunction and Autotuner; torch itself handles heuristics *inside* an autotuner."""
    from triton.runtime.autotuner import Heuristics

    while isinstance(kernel, Heuristics):
        for name, heuristic in kernel.values.items():
            kwargs[name] = heuristic({**dict(zip(kernel.arg_names, args)), **kwargs})
        kernel = kernel.fn
    return kernel


def _bind_defaults(kernel: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    """Add the default values of the parameters the launch leaves out, as Triton's own binding does, except those
    an autotune config or a heuristic supplies: the recorded launch then names every parameter, which torch's
    analysis of what the kernel writes needs (it generates the kernel's TTIR, and refuses "Incorrect number of
    arguments passed to kernel" otherwise, counting every tensor as written)."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    supplied: set[str] = set()
    fn = kernel
    while isinstance(fn, (Autotuner, Heuristics)):
        if isinstance(fn, Autotuner):
            supplied.update(name for config in fn.configs for name in config.kwargs)
        else:
            supplied.update(fn.values)
        fn = fn.fn
    if not isinstance(fn, JITFunction):
        return
    given = set(fn.arg_names[: len(args)]) | set(kwargs) | supplied
    for param in fn.params:
        if param.name not in given and param.default is not inspect.Parameter.empty:
            kwargs[param.name] = param.default


def _make_rerouted_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        from torch._library.triton import is_wrap_triton_enabled

        # Other threads, our own nested launches (e.g. the HOP's eager implementation), warmups and
        # wrap_triton-disabled regions (torch.library.triton_op in eager) launch as they would without us.
        if (
            _interception.owner != threading.get_ident()
            or _flags.rerouting
            or kwargs.get("warmup", False)
            or not is_wrap_triton_enabled()
        ):
            return original(self, *args, **kwargs)
        grid = kwargs.pop("grid")
        kwargs.pop("warmup", None)
        _refuse_tensor_holders(self, args, kwargs)
        _flags.rerouting = True
        try:
            kernel = _apply_heuristics(compiled_form(self), args, kwargs)
            _bind_defaults(kernel, args, kwargs)
            return torch.library.wrap_triton(kernel)[grid](*args, **kwargs)
        finally:
            _flags.rerouting = False

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


def _refuse_tensor_holders(kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise UnsupportedArgument for a launch argument that holds a tensor without being one (a host-side
    `TensorDescriptor`): torch records it as a constant, so compiled code would launch every call with the
    descriptor of the capture's fake tensor. The call runs eagerly instead, through Triton's launcher."""
    names = getattr(kernel, "arg_names", None) or [f"#{i}" for i in range(len(args))]
    for name, value in [*zip(names, args), *kwargs.items()]:
        if isinstance(value, torch.Tensor) or not hasattr(value, "__dict__"):
            continue
        if any(isinstance(v, torch.Tensor) for v in vars(value).values()):
            raise exc.UnsupportedArgument(
                f"Triton kernel '{getattr(kernel, '__name__', kernel)}' gets argument '{name}' of type "
                f"{type(value).__name__}, which holds a tensor (a host-side tensor descriptor?); compiled code "
                "passes only tensors and scalars to kernels, so calls making it run eagerly"
            )


def _trace_into_triton_ops() -> None:
    """Make ops registered with torch.library.triton_op trace into their implementation (its launches become
    HOP nodes), as torch does only under FunctionalTensorMode. make_fx would otherwise keep the custom op,
    whose eager implementation launches through Triton's Python launcher on every call (and cannot run on CPU
    tensors). Registered once per op; outside an intercepting thread the op traces as before."""
    from torch._library.custom_ops import OPDEFS
    from torch._library.triton import triton_ops_to_kernels
    from torch.fx.experimental.proxy_tensor import ProxyTorchDispatchMode

    for name in list(triton_ops_to_kernels):
        opdef = OPDEFS.get(name)
        if opdef is None or name in _traced_triton_ops:
            continue
        implementation = opdef._abstract_fn  # triton_op registers the user's function as the fake kernel

        def trace_into(mode: Any, op: Any, types: Any, args: Any, kwargs: Any, fn: Any = implementation) -> Any:
            if _interception.owner != threading.get_ident():
                return mode.__torch_dispatch__(op, types, args, kwargs)
            with mode:
                return fn(*args, **kwargs)

        opdef.register_torch_dispatch(ProxyTorchDispatchMode, trace_into)
        _traced_triton_ops.add(name)


_traced_triton_ops: set[str] = set()


@contextlib.contextmanager
def intercept_triton_launches() -> Iterator[None]:
    """While active, `kernel[grid](...)` / `kernel.run(..., grid=...)` in this thread record a
    triton_kernel_wrapper_mutation HOP (through torch.library.wrap_triton) instead of launching.

    Covers JITFunction, Autotuner and Heuristics kernels. Patches each class's `run` (the single point both
    launch spellings reach) on entry of the outermost block and restores it exactly on exit. Other threads keep
    launching normally; a second thread entering the block waits until the first leaves. Also keeps
    `exact_mutation_analysis()` active, so a functionalizing trace clones only what kernels store to.
    Ops made with torch.library.triton_op are traced into, so their launches are recorded too."""
    with _lock, exact_mutation_analysis():
        if _interception.depth == 0:
            _trace_into_triton_ops()
            saved = [(cls, cls.__dict__["run"]) for cls in _launch_classes()]
            for cls, original in saved:
                cls.run = _make_rerouted_run(original)
            _interception.owner = threading.get_ident()
        _interception.depth += 1
        try:
            yield
        finally:
            _interception.depth -= 1
            if _interception.depth == 0:
                _interception.owner = None
                for cls, original in saved:
                    cls.run = original


# ---------------------------------------------------------------------------------------------------------
# Running a recorded launch on CPU through Triton's interpreter


def _interpreted(fn: Callable[..., Any]) -> Any:
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(fn)  # cheap: the interpreter caches the rewritten source per function


def _call_jit_function_interpreted(self: Any, *args: Any, **kwargs: Any) -> Any:
    """JITFunction.__call__ while interpreting: @triton.jit helpers and triton.language's own jit functions
    (tl.sum, tl.cdiv, ...) were decorated without TRITON_INTERPRET, so calling them raises by design.

    Run them as TRITON_INTERPRET would have built them, patching triton.language for their module too."""
    from triton.runtime.interpreter import _patch_lang

    scope = _patch_lang(self.fn)
    try:
        return _interpreted(self.fn).rewrite()(*args, **kwargs)
    finally:
        scope.restore()


def _patch_lang_tensor_numpy_safe(original: Callable[..., None]) -> Callable[..., None]:
    """The interpreter turns a scalar into an int with int(ndarray of shape (1,)), deprecated in numpy 2.3 and
    an error from 2.4 (`range(0, n, BLOCK)` over a runtime n fails): convert through .item() instead."""

    def patch(tensor: Any, scope: Any) -> None:
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.item()))

    return patch


def _resolve_kernel(kernel: Any, args: dict[str, Any]) -> Any:
    """The JITFunction to interpret; merges the first autotune config's kwargs and any heuristics into args
    the way Autotuner.run / Heuristics.run would. Every config computes the same result, and torch records one
    grid per config in config order, so the caller launches with grid[0]."""
    from triton.runtime.autotuner import Autotuner, Heuristics
    from triton.runtime.jit import JITFunction

    while not isinstance(kernel, JITFunction):
        if isinstance(kernel, Autotuner):
            args.update(kernel.configs[0].all_kwargs())
        elif isinstance(kernel, Heuristics):
            for name, heuristic in kernel.values.items():
                args[name] = heuristic(dict(args))
        else:
            raise TypeError(f"not a Triton kernel: {kernel!r}")
        kernel = kernel.fn
    return kernel


def _scalar_args_as_compiled(kernel: Any, args: dict[str, Any]) -> dict[str, Any]:
    """Python floats reach compiled kernels as fp32 scalars but stay Python floats in the 3.6 interpreter
    (`eps.to(tl.float32)` fails there); hand the interpreter fp32 scalars instead."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    out = dict(args)
    for param in kernel.params:
        value = out.get(param.name)
        if type(value) is float and not param.is_constexpr:
            out[param.name] = tl.tensor(TensorHandle(np.array([value], dtype=np.float32), tl.float32), tl.float32)
    return out


def run_recorded_launch_on_cpu(
    kernel_idx: int,
    constant_args_idx: int,
    grid: Sequence[Grid] | Grid,
    tma_descriptor_metadata: Mapping[str, Any],
    kwargs: Mapping[str, Any],
    launch_kwargs: Sequence[str] | None = None,
) -> None:
    """Execute one recorded launch on CPU tensors through Triton's interpreter (mutates the tensors in kwargs).

    Takes the HOP node's keyword arguments with concrete values: tensors for tensor nodes, ints for SymInts.
    `grid` is the node's list of grids (one per autotune config), or a single tuple / `lambda META: ...`.
    `launch_kwargs` (torch >= 2.15 records it when the launch passed keywords) names the arguments the launch
    passed by keyword; this runner passes every argument by keyword, so it changes nothing here."""
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    if tma_descriptor_metadata:
        raise NotImplementedError("TMA descriptor arguments are not supported by the CPU runner")
    args = {**kwargs, **kernel_side_table.get_constant_args(constant_args_idx)}
    run_kernel_on_cpu(kernel_side_table.get_kernel(kernel_idx), args, grid[0] if isinstance(grid, list) else grid)


def run_kernel_on_cpu(kernel: Any, args: dict[str, Any], grid: Grid) -> None:
    """Launch `kernel` (a JITFunction, possibly inside Autotuner / Heuristics wrappers) with arguments by name
    on CPU tensors through Triton's interpreter, patched for the 3.6 interpreter's gaps."""
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    kernel = _resolve_kernel(kernel, args)
    launch_grid = grid
    if callable(launch_grid):
        launch_grid = launch_grid(dict(args))  # META: every kernel argument, constexprs and config kwargs
    launch_grid = tuple(int(g) for g in launch_grid)  # type: ignore[union-attr]
    with _lock:  # the interpreter itself patches triton.language globally while it runs
        original_call = JITFunction.__dict__["__call__"]
        original_patch = interpreter._patch_lang_tensor
        JITFunction.__call__ = _call_jit_function_interpreted  # type: ignore[method-assign]
        interpreter._patch_lang_tensor = _patch_lang_tensor_numpy_safe(original_patch)
        # This launch is ours: an interpret_cpu_launches() block around compiled code (an opaque op's body
        # launching through Python beside recorded launches) must not reroute it again.
        rerouting, _flags.rerouting = _flags.rerouting, True
        try:
            # GridExecutor drops kwargs the kernel does not take (num_warps, num_stages, ...), as Triton does.
            _interpreted(kernel.fn)[launch_grid](**_scalar_args_as_compiled(kernel, args))
        finally:
            _flags.rerouting = rerouting
            interpreter._patch_lang_tensor = original_patch
            JITFunction.__call__ = original_call  # type: ignore[method-assign]


# ---------------------------------------------------------------------------------------------------------
# Eager calls: Triton launches on CPU tensors through the interpreter, as compiled code runs them


def _make_interpreting_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        # Only threads running an eager call, and only their outermost launch object (an Autotuner's inner
        # JITFunction is reached by run_kernel_on_cpu itself).
        if threading.get_ident() not in _cpu_launches.threads or _flags.rerouting or kwargs.get("warmup", False):
            return original(self, *args, **kwargs)
        named = {**dict(zip(self.arg_names, args)), **kwargs}
        tensors = [v for v in named.values() if isinstance(v, torch.Tensor)]
        if not tensors or any(t.device.type != "cpu" for t in tensors):
            return original(self, *args, **kwargs)  # CUDA (or no tensors): Triton's own launcher, as eager
        grid = named.pop("grid")
        named.pop("warmup", None)
        _flags.rerouting = True
        try:
            run_kernel_on_cpu(self, named, grid)
        finally:
            _flags.rerouting = False
        return None

    run.__wrapped__ = original  # type: ignore[attr-defined]
    return run


class _CpuLaunches:
    """Threads whose eager launches on CPU tensors are interpreted, and what their patch replaced (under _lock)."""

    threads: dict[int, int] = {}  # thread id -> nesting depth
    saved: list[tuple[type, Any]] = []
    classes: list[type] = []
    wrappers: dict[Any, Any] = {}  # original run -> its interpreting wrapper (made once: this is per eager call)


_cpu_launches = _CpuLaunches()


@contextlib.contextmanager
def interpret_cpu_launches() -> Iterator[None]:
    """While active, this thread's `kernel[grid](...)` launches whose tensors are all on the CPU run through
    Triton's interpreter with the same gap patches as compiled code's CPU launches (`run_kernel_on_cpu`),
    where eager Triton on a GPU-less machine raises "0 active drivers". Launches on CUDA tensors, and those of
    other threads, go through Triton's own launcher unchanged. A user who set TRITON_INTERPRET=1 has
    interpreted kernels already (InterpretedFunction, not JITFunction): nothing is patched then.

    The classes' `run` is patched while any thread is inside (the lock is held only to patch and restore, so
    eager calls of several threads run concurrently)."""
    import triton

    if triton.knobs.runtime.interpret:
        yield
        return
    me = threading.get_ident()
    with _lock:
        if not _cpu_launches.threads:
            # This runs on every eager call: the classes are imported once.
            _cpu_launches.classes = _cpu_launches.classes or _launch_classes()
            _cpu_launches.saved = [(cls, cls.__dict__["run"]) for cls in _cpu_launches.classes]
            for cls, original in _cpu_launches.saved:
                wrapper = _cpu_launches.wrappers.get(original)
                if wrapper is None:
                    wrapper = _cpu_launches.wrappers[original] = _make_interpreting_run(original)
                cls.run = wrapper
        _cpu_launches.threads[me] = _cpu_launches.threads.get(me, 0) + 1
    try:
        yield
    finally:
        with _lock:
            depth = _cpu_launches.threads.pop(me) - 1
            if depth:
                _cpu_launches.threads[me] = depth
            elif not _cpu_launches.threads:
                for cls, original in _cpu_launches.saved:
                    cls.run = original


# ---------------------------------------------------------------------------------------------------------
# Replaying a captured launch from compiled code (interim: through Python, until launches go native)


@dataclasses.dataclass
class Launched:
    """What one launch of a record did: the CompiledKernel Triton's launcher ran (None when nothing launched or
    Triton's interpreter ran it), the keyword arguments it was given, and whether it was interpreted on device
    tensors (a kernel decorated under TRITON_INTERPRET=1)."""

    compiled: Any
    kwargs: dict[str, Any]
    interpreted_on_device: bool = False


@dataclasses.dataclass
class RecordedLaunch:
    """One kernel launch of a captured program, as plain data. Compiled code calls it with the launch's runtime
    operands (tensors and symbolic ints, in Operand order) for CPU tensors, which run through Triton's
    interpreter. A grid with a zero dimension launches nothing, as in Triton.

    A CUDA launch site is a runtime object built from the record (runtime/triton_native.py, LaunchSite): it
    launches natively and calls `launch` for what it has no native variant of."""

    kernel_name: str
    kernel_idx: int
    constant_args_idx: int
    grid: list[tuple[Any, ...]]  # one per autotune config; entries are ints or Operands
    tma_descriptor_metadata: dict[str, Any]
    kwargs: dict[str, Any]  # literals or Operands
    operand_kinds: list[str] = dataclasses.field(default_factory=list)  # "tensor", "int", "float", "bool"
    device_type: str = "cpu"  # of the launch's tensors

    def constants(self) -> dict[str, Any]:
        """Arguments torch kept out of the graph (constexprs, literals), by name."""
        return dict(kernel_side_table.get_constant_args(self.constant_args_idx))

    def __call__(self, *operands: Any) -> None:
        self.launch(operands)

    def launch(self, operands: Sequence[Any]) -> Launched:
        """Launch the kernel on `operands` as eager would: Triton's interpreter for CPU tensors (and for a kernel
        decorated under TRITON_INTERPRET=1), Triton's own launcher otherwise."""

        def fill(value: Any) -> Any:
            return operands[value.index] if isinstance(value, Operand) else value

        kwargs = {name: fill(v) for name, v in self.kwargs.items()}
        grid = [tuple(fill(d) for d in dims) for dims in self.grid]
        if any(d == 0 for d in grid[0]):
            return Launched(None, kwargs)
        on_cpu = all(t.device.type == "cpu" for t in kwargs.values() if isinstance(t, torch.Tensor))
        interpreted = not on_cpu and made_under_interpreter(kernel_side_table.get_kernel(self.kernel_idx))
        try:
            if on_cpu or interpreted:
                # The interpreter copies device tensors to the host and back, as eager's interpreted launch does.
                run_recorded_launch_on_cpu(
                    self.kernel_idx, self.constant_args_idx, grid, self.tma_descriptor_metadata, kwargs
                )
                return Launched(None, kwargs, interpreted_on_device=interpreted)
            return Launched(self._launch_with_triton(grid, kwargs), kwargs)
        except Exception as e:
            # Triton's own exception (the one eager raises), with where it came from.
            e.add_note(f"trident: raised by Triton while launching kernel '{self.kernel_name}' from compiled code")
            raise

    def _launch_with_triton(self, grid: list[tuple[Any, ...]], kwargs: dict[str, Any]) -> Any:
        """Triton's own launcher (it checks its specialization itself): the side-table kernel, which torch
        may have wrapped in an Autotuner carrying num_warps / heuristics as configs. Returns the
        CompiledKernel Triton launched."""
        kernel = kernel_side_table.get_kernel(self.kernel_idx)
        constants = self.constants()
        configs = getattr(kernel, "configs", None) or []
        # The autotuner passes its config's arguments itself; torch may have recorded them among the launch's
        # (gemlite's EVEN_M), and passing them again is a TypeError.
        from_configs = {name for config in configs for name in config.kwargs}
        kwargs = {name: v for name, v in kwargs.items() if name not in from_configs}
        constants = {name: v for name, v in constants.items() if name not in from_configs}
        if len(configs) > 1:
            # One recorded grid per config: pick the one of the config the autotuner runs.
            def launch_grid(meta: Mapping[str, Any]) -> tuple[Any, ...]:
                for config, dims in zip(configs, grid):
                    if all(meta.get(k) == v for k, v in config.kwargs.items()):
                        return dims
                return grid[0]

            return kernel[launch_grid](**kwargs, **constants)
        return kernel[grid[0]](**kwargs, **constants)
