"""Guards on state the function read outside its arguments while it was captured: module attributes, parameters,
buffers and submodules (capture/module_state.py records the reads), the hooks that module calls run, and the
Python kernels the capture traced into (capture/python_kernels.py). Each is one AttributeGuard: the entry read
again natively, without running Python, and compared by value or by identity."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch.utils.hooks

from ..capture.inputs import ABSENT, LeafKind, classify
from ..capture.module_state import GLOBAL_HOOK_DICTS, ModuleReads
from ..capture.python_kernels import POOLED_MATMULS, KernelVersions, Report, op_name
from ..lowering import runtime_abi as native_abi
from ..native_numbers import fits_int64
from .base import Guard, NativeCheck, PythonCheck
from .values import address, check_equal, lower_scalar, same_scalar


@dataclasses.dataclass(frozen=True)
class AttributeGuard(Guard):
    """Entry `name` of `owner`'s instance __dict__ (a module's `training`, `eps`, ...), or with `in_dict`, item
    `name` of the dict `owner` (a module's _parameters, _buffers or _modules), is still what capture saw: the same
    bool/int/float/None value, the same object otherwise (a parameter rebound, a submodule replaced), or still
    absent (ABSENT). With `keys`, the dict `owner` holds exactly these keys in this order (the children of an
    iterated container, which a program ran one by one: one added, removed or moved changes what it computes);
    name/kind/value unused."""

    label: str  # how the user names it: "layers.0.drop.training"
    owner: object
    name: str
    in_dict: bool
    kind: LeafKind  # BOOL, INT, FLOAT, NONE: compared by value; OBJECT: by identity
    value: object
    keys: tuple[str, ...] | None = None

    def current(self) -> object:
        """The entry now (ABSENT if there is none), read as the native guard reads it: no descriptors."""
        if self.in_dict:
            store = self.owner
        else:
            try:
                store = object.__getattribute__(self.owner, "__dict__")  # a class's: a mappingproxy of its dict
            except AttributeError:
                return ABSENT
        return store.get(self.name, ABSENT) if isinstance(store, Mapping) else ABSENT

    def describe(self) -> str:
        if self.keys is not None:
            return f"{self.label}: keys {list(self.keys)} in this order"
        if self.value is ABSENT:
            return f"{self.label}: absent"
        if self.kind is LeafKind.OBJECT:
            return f"{self.label}: the same {type(self.value).__name__} object as at capture"
        return f"{self.label}: {self.kind.value} == {self.value!r}"

    def check(self, call: PythonCheck) -> str | None:
        if self.keys is not None:
            now_keys = tuple(self.owner) if isinstance(self.owner, dict) else None
            return None if now_keys == self.keys else f"{self.label}: keys changed since capture ({now_keys})"
        now = self.current()
        if self.value is ABSENT:
            return None if now is ABSENT else f"{self.label}: added since capture"
        if now is ABSENT:
            return f"{self.label}: removed since capture"
        if self.kind is LeafKind.OBJECT:
            return None if now is self.value else f"{self.label}: rebound to another {type(now).__name__} since capture"
        if classify(now) is not self.kind or not same_scalar(now, self.value):
            return f"{self.label}: value mismatch: expected {self.value!r}, got {now!r}"
        return None

    def lower(self, native: NativeCheck) -> None:
        """Read the entry without running Python (trident_instance_attribute / trident_dict_item: NULL when
        absent), then compare it as an argument of its kind, or by address."""
        fb = native.fb
        if self.keys is not None:
            native.check_true(native_abi.DICT_KEYS_ARE, [native.constant(self.owner), native.constant(self.keys)])
            return
        reader = native_abi.DICT_ITEM if self.in_dict else native_abi.INSTANCE_ATTRIBUTE
        value = fb.call(reader, [native.constant(self.owner), native.constant(self.name)])
        assert value is not None
        found = address(native, value)
        if self.value is ABSENT:
            fb.check(fb.cmp("eq", found, fb.const(0)))
        elif self.kind is LeafKind.OBJECT:  # the context holds the object, so its address is never reused
            fb.check(fb.cmp("eq", found, address(native, native.constant(self.value))))
        elif self.kind is LeafKind.VALUE:
            fb.check(fb.cmp("ne", found, fb.const(0)))
            check_equal(native, value, native.constant(self.value))
        else:
            fb.check(fb.cmp("ne", found, fb.const(0)))
            lower_scalar(native, value, self.kind, self.value)


def module_state_guards(reads: ModuleReads, module_paths: dict[int, str]) -> list[AttributeGuard]:
    """One guard per module entry the capture read (first value per entry), named by the module's path; the hook
    guards with them when it read any."""
    out = hook_guards() if reads.reads else []
    for read in reads.reads.values():
        where = module_paths.get(id(read.module), f"<{type(read.module).__name__} object>")
        name = f"{read.store}[{read.name!r}]" if read.store else read.name
        label = f"{where}.{name}" if where else name
        if read.keys is not None:
            out.append(AttributeGuard(where or "<module>", read.owner, "", True, LeafKind.NONE, None, read.keys))
            continue
        kind = classify(read.value)
        beyond_int64 = kind is LeafKind.INT and not fits_int64(read.value)  # type: ignore[arg-type]
        if kind is LeafKind.TENSOR or beyond_int64:  # compared by identity, as compiled code cannot hold them
            kind = LeafKind.OBJECT
        out.append(AttributeGuard(label, read.owner, read.name, read.in_dict, kind, read.value))
    return out


def hook_guards() -> list[AttributeGuard]:
    """A hook registered after capture (on any module, or globally) must run too, and the compiled program does
    not call it: every registration takes a new id from RemovableHandle.next_id, a process-wide counter, so one
    guard on it catches them all (a registration anywhere, even on an unrelated module, recompiles once). Hooks
    present at capture are guarded one by one (their removal); the global ones here, modules' ones as read."""
    counter = torch.utils.hooks.RemovableHandle
    out = [AttributeGuard("hooks registered (RemovableHandle.next_id)", counter, "next_id", False, LeafKind.INT,
                          counter.next_id)]
    for name, hooks in GLOBAL_HOOK_DICTS:
        out += [AttributeGuard(f"torch.nn.modules.module.{name}[{key}]", hooks, key, True, LeafKind.OBJECT, hook)
                for key, hook in hooks.items()]
    return out


def bypass_guards(graph: torch.fx.Graph, report: Report) -> list[AttributeGuard]:
    """For each operator the program calls that trident_pool_matmul computes past its own dispatch (so that a
    Python kernel registered for it later would not be reached, where eager reaches it), on each device key it
    calls it for: still no Python kernel registered there (a library's `enable()` after the compile misses, and the
    new specialization traces into its kernel). Those the capture traced into or saw are see_through_guards'."""
    names = {}
    for node in graph.nodes:
        value = node.meta.get("val") if node.op == "call_function" else None
        if isinstance(node.target, torch._ops.OpOverload) and isinstance(value, torch.Tensor):
            op = op_name(node.target)
            if op in POOLED_MATMULS:
                names.setdefault((op, value.device.type.upper()), None)
    return [AttributeGuard(f"Python kernel of {op} for {key}", KernelVersions, f"{op}/{key}", False,
                           LeafKind.OBJECT, ABSENT)
            for op, key in names if f"{op}/{key}" not in report.depends and f"{op}/{key}" not in vars(KernelVersions)]


def see_through_guards(report: Report) -> list[AttributeGuard]:
    """Pins for the Python kernels a capture traced into (python_kernels.Report.depends): each (operator,
    dispatch key) still has the function registered then (its token in KernelVersions), or still none."""
    out = []
    for name, value in report.depends.items():
        kind = LeafKind.INT if isinstance(value, int) else LeafKind.OBJECT  # ABSENT: must stay absent
        op, key = name.rsplit("/", 1)
        out.append(AttributeGuard(f"Python kernel of {op} for {key}", KernelVersions, name, False, kind, value))
    return out
