"""See through Python-implemented operators at capture: their bodies join the host program.

Real Triton libraries hide their launches behind operators: a `torch.library.custom_op` whose implementation
for the device launches `kernel[grid]`, or a Python kernel registered for an ATen operator's dispatch key
(`torch.library.Library("aten", "IMPL").impl("add.Tensor", fn, "CUDA")`, as flag-gems' `enable()` does). To
make_fx such an op is one node; compiled code would call it through the dispatcher, which re-enters Python on
every call (the library's config lookup, autotune cache, `kernel[grid]`).

Mechanism. While a capture runs, `SeeThroughMode` (a TorchDispatchMode) sits above make_fx's proxy mode, so it
sees each operator call at the Python dispatch key, after autograd and autocast, where eager's dispatcher would
go on to the backend kernel. When the kernel eager would run for the call's backend key is a Python function
(`kernel_for`), the mode calls that function on the traced (fake, proxy-tracked) arguments under the same modes
as the user's code: its Triton launches are rerouted to HOP nodes (triton_launches.py), its ATen calls and views
are recorded, values it reads in Python are refused. Anything else passes through and is recorded as before.

Which Python function eager runs. The dispatcher holds Python kernels natively and gives no way to read them
back, so `watch()` (called at `import trident`) wraps `Library.impl` and notes each Python kernel registered
from then on with the library that made it; `custom_op`s defined earlier are found in torch's own table of them
(`CustomOpDef._backend_fns`). A noted kernel is used only if the dispatcher agrees: the kernel its computed
table holds for the backend key (or, for a `CompositeExplicitAutograd` registration, its default backend
kernel) was registered from that library's location, and the library is alive. Otherwise the op stays opaque.

When it stays opaque. The body must do what its schema declares (`mutates_args`, aliasing), since eager calls it
through that contract: a body that writes an argument the schema does not mark mutable, returns a view of an
argument from a non-view op, or returns a fresh tensor where the schema promises an alias of an argument is
kept opaque. So is a body capture refuses (`.item()`, a host sync, data-dependent Python, an operator without
a fake implementation, any exception): the capture is retried with that op opaque for this specialization
(`Retry`), so nothing the partial body recorded survives, and `explain` names the op and the reason.

What is fixed at capture. The body's Python state (config dicts, autotune caches) is read at capture like the
user's own code. Which kernel an op has is guarded: `KernelVersions` holds, per (op, dispatch key), a token of
the function registered there now (absent: none), updated on every registration and removal and read natively
like the hook counter in module_state.py. A specialization that traced into an op guards the token of the key
it found the function at and of the call's backend key, so removing the kernel, or registering another one,
recompiles; registering the same function again (flag-gems' `use_gems()` entered anew) does not. Tokens are
numbered in the order functions are first registered, so a new process that registers the same way gets the
same tokens (warm start).

Kernels the captured function registers itself (flag-gems' `use_gems()` inside a decode step) are traced into
like any other while they are registered; the specialization stands only if each is gone again when the
function returns and every call it affected was traced into (CaptureRegistrations). Else the call runs eagerly.

Knobs: TRIDENT_SEE_THROUGH=0 keeps every op opaque; TRIDENT_OPAQUE_OPS="ns::op[.overload],..." or
`keep_opaque(...)` keeps the named ones opaque (for a library whose body misbehaves under capture).
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import re
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..knobs import CompileOptions
from .inputs import ABSENT

# ---------------------------------------------------------------------------------------------------------
# Which Python kernels are registered


# The operators a compiled program may compute past their own dispatch (trident_pool_matmul: lowering/
# pooled_allocations.py), so that it would not reach a Python kernel registered for them: the lowering pools them
# only where none is, and guards/module_state.py's bypass_guards keep it so.
POOLED_MATMULS = ("aten::mm", "aten::addmm")


class KernelVersions:
    """One class attribute per (operator, dispatch key), named "ns::name.overload/Key": the token of the Python
    function registered there now (-1: a kernel Trident does not trace into; absent: none since trident was
    imported). Specializations that traced into an op guard it (module docstring)."""


@dataclasses.dataclass
class _Registration:
    fn: Callable[..., Any] | None  # None: a fallthrough, or a kernel taking a dispatch key set (not traced into)
    library: weakref.ref[Any]
    location: str  # "registered at FILE:LINE", as the dispatcher describes the library's kernels


_lock = threading.RLock()
_registrations: dict[tuple[str, str], list[_Registration]] = collections.defaultdict(list)  # (op, key) ->
_tokens: dict[int, tuple[Callable[..., Any], int]] = {}  # id(fn) -> (fn, token); holding fn keeps its id unique
_watched = False
_opaque_by_api: set[str] = set()


def _op_key(qualified: str) -> str:
    """'ns::name.overload' with the default overload spelled 'ns::name'."""
    return qualified[: -len(".default")] if qualified.endswith(".default") else qualified


def op_name(op: torch._ops.OpOverload) -> str:
    schema = op._schema
    return f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name


def _token(fn: Callable[..., Any] | None) -> int:
    if fn is None:
        return -1
    known = _tokens.get(id(fn))
    if known is None:
        known = _tokens[id(fn)] = (fn, len(_tokens) + 1)
    return known[1]


def _live(entry: _Registration) -> bool:
    library = entry.library()
    return library is not None and getattr(library, "m", None) is not None


def _refresh(op: str, key: str) -> None:
    """Set KernelVersions' attribute of (op, key) to the token of the newest live registration there."""
    with _lock:
        live = [e for e in _registrations.get((op, key), ()) if _live(e)]
        name = f"{op}/{key}"
        if live:
            setattr(KernelVersions, name, _token(live[-1].fn))
        elif name in KernelVersions.__dict__:
            delattr(KernelVersions, name)


def _refresh_all(pairs: Sequence[tuple[str, str]]) -> None:
    for op, key in pairs:
        _refresh(op, key)


def watch() -> None:
    """Note every Python kernel registered from now on, and registrations a capture refuses (wraps Library.impl
    and Library._destroy once)."""
    global _watched
    with _lock:
        if _watched:
            return
        from torch.library import Library, fallthrough_kernel

        original_impl, original_destroy = Library.impl, Library._destroy

        def impl(self, op_name, fn, dispatch_key="", *args, **kwargs):  # type: ignore[no-untyped-def]
            result = original_impl(self, op_name, fn, dispatch_key, *args, **kwargs)
            noted = None
            try:
                noted = _note(self, op_name, fn, dispatch_key or self.dispatch_key, kwargs.get("with_keyset", False), fallthrough_kernel)
            except Exception:  # noqa: BLE001 -- noting must never break a library's registration
                pass
            made = _capturing.made
            if made is not None:  # made while a capture runs (registered_during_capture)
                name = op_name if isinstance(op_name, str) else getattr(op_name, "__name__", str(op_name))
                made.append(_Made(f"{self.ns}::{name} for {dispatch_key or 'every key'}", noted, weakref.ref(self)))
            return result

        def destroy(self):  # type: ignore[no-untyped-def]
            try:
                return original_destroy(self)
            finally:
                _refresh_all(sorted(getattr(self, "_trident_keys", ())))

        impl.__wrapped__ = original_impl  # type: ignore[attr-defined]
        destroy.__wrapped__ = original_destroy  # type: ignore[attr-defined]
        Library.impl = impl  # type: ignore[method-assign]
        Library._destroy = destroy  # type: ignore[method-assign]
        _watched = True


class DispatcherRegistration(Exception):
    """The captured function registered operator kernels while it ran (torch.library IMPL, as flag-gems'
    `use_gems()` does) in a way compiled code cannot reproduce (registered_during_capture says which): capture
    fails with this, and the call runs eagerly (driver.py), with a warning saying why."""


@dataclasses.dataclass
class _Made:
    shown: str  # "ns::op for Key", for messages
    pair: tuple[str, str] | None  # (op, dispatch key) as noted; None: noting failed
    library: weakref.ref[Any]


class _Capturing(threading.local):
    made: list[_Made] | None = None  # registrations of this thread while it captures; None: not capturing


_capturing = _Capturing()
_DEVICE_TYPES = {"CPU": "cpu", "CUDA": "cuda", "XPU": "xpu", "MPS": "mps", "HIP": "hip"}  # backend key -> device
_BACKEND_KEYS = {*_DEVICE_TYPES, "CompositeExplicitAutograd"}  # the keys kernel_for finds Python kernels at


class CaptureRegistrations:
    """The kernels a captured function registered while it ran. Eager's later operators inside the function
    ran those kernels; compiled code does not run the function again, so a specialization is right only if the
    function registers them for its own length (each library gone again when it returns, as `use_gems()` does)
    and every call they affected was traced into (its kernel's launches and ATen calls are in the host program).
    Then nothing of the registration remains to reproduce, and the kernel-version guards hold what a later call
    starts from (registered nowhere), not what the capture saw midway."""

    def __init__(self) -> None:
        self.made: list[_Made] = []

    def settle(self, report: Report) -> None:
        """After the capture: raise DispatcherRegistration, or pin the report's guards to the state after."""
        if not self.made:
            return
        problem = self._problem(report)
        if problem is not None:
            shown = ", ".join(m.shown for m in self.made[:3]) + (f" and {len(self.made) - 3} more" if len(self.made) > 3 else "")
            raise DispatcherRegistration(
                f"the function registers operator kernels while it runs (torch.library: {shown}), as flag-gems' "
                f"use_gems() does, and {problem}; compiled code would call the operators without them"
            )
        for made in self.made:
            assert made.pair is not None
            name = "/".join(made.pair)
            if name in report.depends:
                report.depends[name] = KernelVersions.__dict__.get(name, ABSENT)

    def _problem(self, report: Report) -> str | None:
        for made in self.made:
            if made.pair is None:
                return f"Trident could not note {made.shown}"
            op, key = made.pair
            if key not in _BACKEND_KEYS:
                return f"{made.shown} is at a key Trident does not trace into"
            library = made.library()
            if library is not None and getattr(library, "m", None) is not None:
                return f"{made.shown} stays registered after it returns"
            if op in report.opaque:
                return f"{op} stays opaque ({report.opaque[op]})"
        return None


@contextlib.contextmanager
def registered_during_capture() -> Iterator[CaptureRegistrations]:
    """Let the captured function register kernels as it would eagerly (refusing midway could leave a library's
    context manager half-entered) and collect each registration (watch's Library.impl); the caller settles them
    against the capture's Report once the capture is done."""
    watch()
    registrations = CaptureRegistrations()
    outer, _capturing.made = _capturing.made, registrations.made
    try:
        yield registrations
    finally:
        _capturing.made = outer
        if outer is not None:
            outer += registrations.made


def _note(library: Any, name: object, fn: Any, key: str, with_keyset: bool, fallthrough: Any) -> tuple[str, str]:
    if isinstance(name, torch._ops.OpOverload):
        op = op_name(name)
    else:
        text = str(name)
        op = _op_key(text if "::" in text else f"{library.ns}::{text}")
    key = key or "CompositeImplicitAutograd"
    location = _registered_location(op, key)
    usable = fn if callable(fn) and fn is not fallthrough and not with_keyset else None
    with _lock:
        entries = _registrations[(op, key)]
        entries[:] = [e for e in entries if e.library() is not None]
        entries.append(_Registration(usable, weakref.ref(library), location or ""))
    keys = library.__dict__.get("_trident_keys")
    if keys is None:
        keys = library.__dict__["_trident_keys"] = set()
        weakref.finalize(library, _refresh_all, keys)  # a collected library's kernels leave the dispatcher
    keys.add((op, key))
    _refresh(op, key)
    return op, key


_ROW = re.compile(r"^(?P<key>[A-Za-z]+)(?:\[alias\])?: (?P<location>registered at \S+?)(?: ::.*| \[.*)?$")


def _rows(text: str) -> dict[str, tuple[str, str]]:
    """Key -> (location, rest of the row) of a dispatcher dump (`_dispatch_dump` or `_dispatch_dump_table`)."""
    rows = {}
    for line in text.splitlines():
        m = _ROW.match(line)
        if m and m["key"] not in rows:  # the first row of a key is the active one ("(inactive)" rows follow)
            rows[m["key"]] = (m["location"], line[m.end("location"):])
    return rows


def _registered_location(op: str, key: str) -> str | None:
    try:
        row = _rows(torch._C._dispatch_dump(op)).get(key)
    except RuntimeError:
        return None
    return row[0] if row else None


@dataclasses.dataclass(frozen=True)
class Kernel:
    """The Python function eager's dispatcher runs for an op on one backend key."""

    op: str
    fn: Callable[..., Any]
    key: str  # the backend key ("CPU", "CUDA")
    kind: str  # "custom op" or "Python kernel" (Library.impl)
    registered_key: str  # where it is registered: the backend key or CompositeExplicitAutograd


def kernel_for(op: torch._ops.OpOverload, backend_key: str) -> Kernel | None:
    """The Python function the dispatcher runs for `op` on `backend_key`, or None (a native kernel, or one
    Trident cannot identify)."""
    name = op_name(op)
    known = any((name, k) in _registrations for k in (backend_key, "CompositeExplicitAutograd"))
    opdef = _custom_op(name)
    if not known and opdef is None:
        return None
    found = _backend_kernel(name, backend_key)
    if found is None:
        return None
    location, registered_key = found
    with _lock:
        entries = list(_registrations.get((name, registered_key), ()))
    for entry in reversed(entries):  # the newest registration of a live library wins, as in the dispatcher
        if not _live(entry):
            continue
        if entry.location != location:
            return None  # the dispatcher runs something else (a C++ registration made later?)
        if entry.fn is None:
            return None
        kind = "custom op" if opdef is not None else "Python kernel"
        return Kernel(name, entry.fn, backend_key, kind, registered_key)
    if opdef is not None and "torch/_library/" in location.replace("\\", "/"):
        # A custom_op defined before trident was imported: torch's own table has its implementations.
        device = None if registered_key == "CompositeExplicitAutograd" else _device_type(backend_key)
        fn = opdef._backend_fns.get(device)
        if fn is not None:
            return Kernel(name, fn, backend_key, "custom op", registered_key)
    return None


def _backend_kernel(name: str, backend_key: str) -> tuple[str, str] | None:
    """(where it was registered, the key it was registered at) of the kernel the dispatcher runs for op `name` on
    `backend_key`: one registered at that key, or a CompositeExplicitAutograd one as its default backend kernel.
    None for anything else (a fallthrough, a composite implicit decomposition, no kernel)."""
    try:
        row = _rows(torch._C._dispatch_dump_table(name)).get(backend_key)
    except RuntimeError:
        return None
    if row is None:
        return None
    location, rest = row
    registered_key = {"[kernel]": backend_key, "[default backend kernel]": "CompositeExplicitAutograd"}.get(rest.strip())
    return (location, registered_key) if registered_key is not None else None


_PYTHON_LOCATION = re.compile(r"registered at (?P<where>\S+\.py:\d+|<[^>]+>:\d+)$")


def unreadable_python_kernel(op: torch._ops.OpOverload, backend_key: str) -> str | None:
    """Why `op` stays opaque on `backend_key` when the dispatcher runs a Python kernel there that kernel_for
    could not identify (registered before `import trident`, so never noted), or None when it runs native code."""
    found = _backend_kernel(op_name(op), backend_key)
    match = _PYTHON_LOCATION.match(found[0]) if found is not None else None
    if match is None:
        return None
    return (f"its Python kernel for {backend_key} was registered at {match['where']} before trident was imported, "
            "and the dispatcher gives no way to read it back; import trident before the library registers it")


def _custom_op(name: str) -> Any:
    from torch._library.custom_ops import OPDEFS

    return OPDEFS.get(name)  # custom ops have one overload, the default: "ns::name"


def _device_type(key: str) -> str:
    return _DEVICE_TYPES.get(key, key.lower())


# ---------------------------------------------------------------------------------------------------------
# Opting out


def keep_opaque(*names: str) -> None:
    """Keep these ops opaque in captures from now on ("mylib::gemv" for every overload, or
    "aten::add.Tensor"): they are recorded as one call through the dispatcher, as without see-through.
    Specializations compiled before are not affected."""
    for name in names:
        if "::" not in name:
            raise ValueError(f"keep_opaque: {name!r} is not a qualified operator name like 'mylib::gemv'")
        _opaque_by_api.add(_op_key(name))


def _opted_out(name: str, opaque_ops: frozenset[str]) -> str | None:
    base = name.split("::")[0] + "::" + name.split("::")[1].split(".")[0]
    from_env = {_op_key(n) for n in opaque_ops}
    for source, names in (("TRIDENT_OPAQUE_OPS", from_env), ("trident.keep_opaque", _opaque_by_api)):
        if name in names or base in names:
            return f"kept opaque by {source}"
    return None


# ---------------------------------------------------------------------------------------------------------
# The mode


class Retry(Exception):
    """The capture must start again with `op` opaque: its body did something capture refuses or its schema
    does not declare. Raised out of the trace (trace.py catches it) so that nothing the body recorded stays."""

    def __init__(self, op: str, reason: str) -> None:
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason


@dataclasses.dataclass
class Report:
    """What a capture did with Python-implemented ops: those traced into (with call counts) and those kept
    opaque (with why). Carried by the Trace; `explain` prints it; `guards()` pins the kernels traced into."""

    traced: dict[str, int] = dataclasses.field(default_factory=dict)
    kinds: dict[str, str] = dataclasses.field(default_factory=dict)  # op -> "custom op, CPU kernel"
    opaque: dict[str, str] = dataclasses.field(default_factory=dict)  # op -> reason
    # "op/Key" attributes of KernelVersions the traced-into kernels were found through, with their value then.
    depends: dict[str, object] = dataclasses.field(default_factory=dict)

    def describe(self) -> list[str]:
        lines = [f"traced into {op} ({self.kinds[op]}): {n} call(s)" for op, n in self.traced.items()]
        lines += [f"opaque {op}: {reason}; called through the dispatcher" for op, reason in self.opaque.items()]
        return lines


_VALUE_READ_OPS = {"aten::_local_scalar_dense", "aten::item"}


class SeeThroughMode(TorchDispatchMode):
    """Traces into Python kernels (module docstring). `body_modes` enters the modes the user's code runs under
    (the TorchFunctionMode of trace.py, popped while an operator is handled); `opaque` are the ops this capture
    keeps opaque (refused in an earlier attempt)."""

    supports_higher_order_operators = True  # HOPs (Triton launches) pass through unchanged

    def __init__(self, body_modes: Callable[[], contextlib.AbstractContextManager[Any]], opaque: dict[str, str],
                 options: CompileOptions) -> None:
        super().__init__()
        self.body_modes = body_modes
        self.see_through, self.opaque_ops = options.see_through, options.opaque_ops
        self.report = Report(opaque=dict(opaque))
        self._kernels: dict[tuple[object, str], Kernel | None] = {}
        self._bodies: list[str] = []  # the ops whose bodies are running, outermost first
        # Refusals, also those the user's code caught (`try: op(x) except Exception`): the capture retries anyway.
        self.refusals: list[Retry] = []

    def check(self) -> None:
        """Raise the first refusal of this attempt (after make_fx returned)."""
        if self.refusals:
            raise self.refusals[0]

    def in_body(self) -> bool:
        """Whether the body of a Python kernel being traced into is running."""
        return bool(self._bodies)

    def _refuse(self, op: str, reason: str) -> Retry:
        retry = Retry(op, reason)
        self.refusals.append(retry)
        return retry

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if not isinstance(func, torch._ops.OpOverload):
            return func(*args, **kwargs)
        if self._bodies and op_name(func) in _VALUE_READ_OPS:
            raise self._refuse(self._bodies[-1], "its kernel reads a tensor's value in Python (.item(), .tolist(), a host "
                        "sync or data-dependent control flow)")
        kernel = self._kernel(func, args, kwargs)
        if kernel is None:
            return func(*args, **kwargs)
        name = kernel.op
        if name in self.report.opaque:
            return func(*args, **kwargs)
        reason = None if self.see_through else "TRIDENT_SEE_THROUGH=0"
        reason = reason or _opted_out(name, self.opaque_ops)
        if reason is not None:
            self.report.opaque[name] = reason
            return func(*args, **kwargs)
        return self._trace_into(kernel, func, args, kwargs)

    def _kernel(self, func: torch._ops.OpOverload, args: Sequence[object], kwargs: dict[str, object]) -> Kernel | None:
        from torch._library.triton import triton_ops_to_kernels

        name = op_name(func)
        if name.split(".")[0] in triton_ops_to_kernels:
            return None  # torch.library.triton_op: traced into by triton_launches.py already
        devices = {t.device.type for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        if not devices and isinstance(kwargs.get("device"), (str, torch.device)):
            devices = {torch.device(kwargs["device"]).type}  # type: ignore[arg-type]
        if devices == {"cpu", "cuda"}:
            devices = {"cuda"}  # CPU scalars beside CUDA tensors (x + 1.0): the dispatcher picks CUDA's kernel
        if len(devices) != 1 or "meta" in devices:
            # No tensor (a factory without a device), tensors on other mixes of devices, or meta tensors (whose
            # kernels are fake implementations): recorded as is.
            return None
        key = torch._C._dispatch_key_for_device(devices.pop())
        memo = (func, key)
        if memo not in self._kernels:
            self._kernels[memo] = kernel = kernel_for(func, key)
            unreadable = unreadable_python_kernel(func, key) if kernel is None else None
            if unreadable is not None:
                self.report.opaque.setdefault(op_name(func), unreadable)
        return self._kernels[memo]

    def _trace_into(self, kernel: Kernel, func: torch._ops.OpOverload, args: Sequence[object], kwargs: dict[str, object]) -> object:
        from torch.fx.experimental.proxy_tensor import get_proxy_mode

        from .. import exc

        if kernel.op in self._bodies:
            # Eager reaches it again only below the Python kernel's key (a redispatch), which tracing cannot
            # follow: as one call, eager's way.
            raise self._refuse(kernel.op, f"its {kernel.key} kernel calls the op itself")
        proxy_mode = get_proxy_mode()
        graph = proxy_mode.tracer.graph if proxy_mode is not None else None
        last = graph._root.prev if graph is not None else None  # the body's nodes are the ones after this
        self._bodies.append(kernel.op)
        try:
            with self.body_modes(), self:
                result = kernel.fn(*args, **kwargs)
        except Retry:
            raise
        except exc.UnsupportedConstruct as e:
            raise self._refuse(kernel.op, f"its {kernel.key} kernel: {_first_line(e)}") from None
        except Exception as e:  # noqa: BLE001 -- whatever the body cannot do on traced tensors, eager does opaquely
            raise self._refuse(kernel.op, f"its {kernel.key} kernel raised {type(e).__name__} under capture: "
                        f"{_first_line(e)}") from None
        finally:
            self._bodies.pop()
        mismatch = _schema_mismatch(func, args, kwargs, result, _written(graph, last))
        if mismatch is not None:
            raise self._refuse(kernel.op, mismatch)
        self.report.traced[kernel.op] = self.report.traced.get(kernel.op, 0) + 1
        self.report.kinds[kernel.op] = f"{kernel.kind}, {kernel.key} kernel"
        for key in dict.fromkeys((kernel.registered_key, kernel.key)):
            name = f"{kernel.op}/{key}"
            self.report.depends.setdefault(name, KernelVersions.__dict__.get(name, ABSENT))
        return result


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0][:200] if lines else type(e).__name__


# ---------------------------------------------------------------------------------------------------------
# The body against its schema


def _storage(t: torch.Tensor) -> StorageWeakRef:
    return StorageWeakRef(t.untyped_storage())


def _argument(arg: Any, index: int, args: Sequence[object], kwargs: dict[str, object]) -> object:
    """The value a call passed for schema argument `arg` (the index-th), positionally or by keyword."""
    return args[index] if index < len(args) and not arg.kwarg_only else kwargs.get(arg.name)


def _written(graph: torch.fx.Graph | None, last: torch.fx.Node | None) -> list[tuple[torch.Tensor, str | None]]:
    """Tensors the nodes recorded after `last` write, each with None, or why it only counts as written: mutable
    arguments of operators (schema), and what Triton launches store to (triton_launches.kernel_writes; every
    tensor a launch gets where no analysis of the kernel decides)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table, triton_kernel_wrapper_mutation

    from .triton_launches import kernel_writes

    if graph is None or last is None:
        return []
    out: list[tuple[torch.Tensor, str | None]] = []

    def value(a: object) -> list[torch.Tensor]:
        vals = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
        return [v for v in pytree.tree_leaves(vals) if isinstance(v, torch.Tensor)]

    node = last.next
    while node is not graph._root:
        if node.target is triton_kernel_wrapper_mutation:
            writes = kernel_writes(node)
            why = None
            if writes.undecided is not None:
                kernel = kernel_side_table.get_kernel(node.kwargs["kernel_idx"])  # type: ignore[arg-type]
                name = getattr(getattr(kernel, "fn", kernel), "__name__", str(kernel))
                why = f"the analysis of what Triton kernel '{name}' stores to failed ({writes.undecided})"
            for arg_name in writes.names:
                out += [(v, why) for v in value(node.kwargs["kwargs"][arg_name])]  # type: ignore[index]
        elif isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            for i, arg in enumerate(schema.arguments):
                if arg.alias_info is not None and arg.alias_info.is_write:
                    given = _argument(arg, i, node.args, node.kwargs)
                    out += [(v, None) for a in pytree.tree_leaves(given) for v in value(a)]
        node = node.next
    return out


def _schema_mismatch(
    func: torch._ops.OpOverload, args: Sequence[object], kwargs: dict[str, object], result: object,
    written: list[tuple[torch.Tensor, str | None]],
) -> str | None:
    """How the traced body breaks its op's schema, or None."""
    schema = func._schema
    declared: dict[str, list[torch.Tensor]] = {}
    mutable: set[StorageWeakRef] = set()
    alias_sets: dict[str, set[StorageWeakRef]] = collections.defaultdict(set)
    for i, arg in enumerate(schema.arguments):
        given = _argument(arg, i, args, kwargs)
        tensors = [t for t in pytree.tree_leaves(given) if isinstance(t, torch.Tensor)]
        declared[arg.name] = tensors
        if arg.alias_info is not None:
            for t in tensors:
                if arg.alias_info.is_write:
                    mutable.add(_storage(t))
                for s in arg.alias_info.before_set:
                    alias_sets[s].add(_storage(t))
    owner = {_storage(t): name for name, ts in declared.items() for t in ts}
    for t, why in written:
        s = _storage(t)
        if s in owner and s not in mutable and why is not None:
            return (f"{why}, so it counts as writing every tensor it gets, argument '{owner[s]}' too, which the "
                    f"schema does not declare mutable ({schema})")
        if s in owner and s not in mutable:
            return (f"its kernel writes argument '{owner[s]}', which the schema does not declare mutable "
                    f"({schema})")
    returns = schema.returns
    values = [result] if len(returns) == 1 else (list(result) if isinstance(result, (tuple, list)) else None)
    if len(returns) == 0:
        return None if result is None else f"its kernel returns a {type(result).__name__} where the schema returns nothing"
    if values is None or len(values) != len(returns):
        return f"its kernel returns {type(result).__name__}, not the {len(returns)} value(s) of the schema ({schema})"
    for ret, out in zip(returns, values):
        outs = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if "Tensor" in str(ret.type) and not outs and out is not None:
            return f"its kernel returns a {type(out).__name__} where the schema returns {ret.type}"
        for t in outs:
            s = _storage(t)
            if ret.alias_info is None:
                if s in owner:
                    return (f"its kernel returns a view of argument '{owner[s]}' where the schema returns a new "
                            f"tensor ({schema})")
            elif not any(s in alias_sets[a] for a in ret.alias_info.before_set):
                return f"its kernel returns a new tensor where the schema returns an alias of an argument ({schema})"
    return None


@contextlib.contextmanager
def seeing_through(body_modes: Callable[[], contextlib.AbstractContextManager[Any]], opaque: dict[str, str],
                   options: CompileOptions) -> Iterator[SeeThroughMode]:
    """The mode for one capture attempt, entered (inside make_fx, around the user's function); `options`: the
    compile's (TRIDENT_SEE_THROUGH, TRIDENT_OPAQUE_OPS)."""
    mode = SeeThroughMode(body_modes, opaque, options)
    with mode:
        yield mode
