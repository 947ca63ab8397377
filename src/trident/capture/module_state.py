"""Module state a function reads while it is captured, recorded for its guards (guards/module_state.py).

A traced program bakes in every non-tensor value it read in Python: `self.training` decided whether dropout is
in the graph, `self.eps` is a constant of layer_norm, `self.weight` is a context constant fixed by reference.
So each such read becomes a native guard: the entry read again, without running Python, compared by value
(bool/int/float/None) or by identity (anything else: a parameter rebound by `load_state_dict(assign=True)`, a
submodule replaced, a tensor attribute reassigned). A `train()`/`eval()` flip, also on one submodule, then misses
and compiles (or reuses) the specialization of the other mode, as eager would behave.

How reads are seen: while a capture runs, nn.Module gets a `__getattribute__` that records (module, attribute)
pairs read on the capturing thread (other threads read through it unrecorded); it is removed when the last
capture ends, so no module read pays for it otherwise. Recorded are
  - entries of a module's instance __dict__ (not nn.Module's own bookkeeping: hook dicts and the like);
  - parameters, buffers and submodules, which nn.Module.__getattr__ finds in _parameters/_buffers/_modules;
  - for a ModuleList / Sequential / ModuleDict whose children were iterated or indexed: each child, and its
    keys in order (none added, removed or moved).
  - hooks: each hook present at capture, and one process-wide counter of hook registrations
    (guards/module_state.py hook_guards).
Not guarded (fixed at capture, as docs/semantics.md states): contents of other mutable containers (lists, dicts) a
module holds, attributes reached through a class's own __getattribute__.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator

import torch
import torch.fx
from torch import nn

# nn.Module's own bookkeeping (hook dicts, _parameters, ...): read on every module call, not program state.
# `training` is the exception: it is what modules read.
_BOOKKEEPING = frozenset(nn.Module().__dict__) - {"training"}
_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)
_HOOK_DICTS = frozenset(name for name in _BOOKKEEPING if name.endswith("_hooks"))
# Module calls also run the process-wide hooks (nn.modules.module.register_module_forward_hook, ...).
GLOBAL_HOOK_DICTS = tuple(
    (name, value) for name, value in sorted(vars(torch.nn.modules.module).items())
    if name.startswith("_global_") and name.endswith("_hooks") and isinstance(value, dict)
)
_STORES = ("_parameters", "_buffers", "_modules")


@dataclasses.dataclass(frozen=True)
class Read:
    module: nn.Module
    owner: object  # the module (instance __dict__ entry) or one of its _parameters/_buffers/_modules dicts
    name: str
    in_dict: bool
    value: object  # ABSENT: the entry must stay absent
    store: str = ""  # for a dict item read directly (hooks, a container's children): the dict's attribute name
    keys: tuple[str, ...] | None = None  # an iterated container's children: owner holds exactly these keys


class ModuleReads:
    """The reads of one capture, first value per entry (what the program baked in)."""

    def __init__(self) -> None:
        self.reads: dict[tuple[int, str, bool], Read] = {}
        # Modules constructed while the capture ran (`self.layers[:n]` builds a new ModuleList each call): their
        # state is the program's own work, redone by every call, not state a later call could find changed. Held
        # (not their ids) so that an id cannot be reused by another module before the capture ends.
        self.created: list[nn.Module] = []

    def note(self, module: nn.Module, owner: object, name: str, in_dict: bool, value: object, store: str = "",
             keys: tuple[str, ...] | None = None) -> None:
        if type(module) is nn.Module or isinstance(module, torch.fx.GraphModule):
            return  # make_fx's own modules (its tracer's root, graph modules), not the user's state
        if any(module is made for made in self.created):
            return
        self.reads.setdefault((id(owner), name, in_dict), Read(module, owner, name, in_dict, value, store, keys))


_local = threading.local()
_install_lock = threading.Lock()
_installed = 0


def _current() -> ModuleReads | None:
    return getattr(_local, "reads", None)


def _recording_getattribute(self: nn.Module, name: str) -> object:
    try:
        value = object.__getattribute__(self, name)
    except AttributeError:
        # Next comes nn.Module.__getattr__, which finds parameters, buffers and submodules in these dicts. It is
        # not wrapped here: make_fx's tracer replaces it while it traces (and restores whatever was there).
        reads = _current()
        if reads is not None:
            state = object.__getattribute__(self, "__dict__")
            for store in _STORES:
                items = state.get(store)
                if items is not None and name in items:
                    reads.note(self, items, name, True, items[name])
                    break
        raise
    reads = _current()
    if reads is not None:
        _note_attribute(reads, self, name, value)
    return value


_module_init = nn.Module.__init__


def _recording_init(self: nn.Module, *args: object, **kwargs: object) -> None:
    reads = _current()
    if reads is not None:
        reads.created.append(self)
    _module_init(self, *args, **kwargs)


def _note_attribute(reads: ModuleReads, module: nn.Module, name: str, value: object) -> None:
    state = object.__getattribute__(module, "__dict__")
    if name not in state or state[name] is not value or _is_data_descriptor(type(module), name):
        return  # a class attribute, a property, or the __dict__ itself
    if name == "_modules" and isinstance(module, _CONTAINERS):  # its children are iterated or indexed
        for key, child in value.items():  # type: ignore[attr-defined]
            reads.note(module, value, key, True, child)
        # Which children, in which order: a ModuleDict's child added under a new name (or one removed and added
        # back at the end) changes what iterating it runs, and no per-child guard sees that.
        reads.note(module, value, "<keys>", True, None, keys=tuple(value))  # type: ignore[arg-type]
        return
    if name in _HOOK_DICTS:  # hooks present at capture ran in it: each must stay (new ones: the hook counter)
        for key, hook in value.items():  # type: ignore[attr-defined]
            reads.note(module, value, key, True, hook, name)
    elif name not in _BOOKKEEPING:
        reads.note(module, module, name, False, value)


def _is_data_descriptor(cls: type, name: str) -> bool:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            attr = type(klass.__dict__[name])
            return hasattr(attr, "__set__") or hasattr(attr, "__delete__")
    return False


@contextlib.contextmanager
def recording() -> Iterator[ModuleReads]:
    """Record the module attributes this thread reads until the block ends."""
    global _installed
    reads = ModuleReads()
    outer = _current()
    with _install_lock:
        if _installed == 0:
            nn.Module.__getattribute__ = _recording_getattribute  # type: ignore[method-assign]
            nn.Module.__init__ = _recording_init  # type: ignore[method-assign]
        _installed += 1
    _local.reads = reads
    try:
        yield reads
    finally:
        _local.reads = outer
        with _install_lock:
            _installed -= 1
            if _installed == 0:
                del nn.Module.__getattribute__  # back to object's: no Python frame per attribute read
                nn.Module.__init__ = _module_init  # type: ignore[method-assign]
        if outer is not None:  # a nested capture's reads are the outer one's too
            outer.reads.update({k: v for k, v in reads.reads.items() if k not in outer.reads})
            outer.created += reads.created


def module_paths(roots: list[tuple[str, nn.Module]]) -> dict[int, str]:
    """id(module) -> its dotted path from the first root that reaches it ("" for a root without prefix)."""
    paths: dict[int, str] = {}
    for prefix, root in roots:
        for path, module in root.named_modules(remove_duplicate=False):
            full = ".".join(p for p in (prefix, path) if p)
            paths.setdefault(id(module), full)
    return paths


def tensor_names(roots: list[tuple[str, nn.Module]]) -> dict[int, str]:
    """id(parameter or buffer) -> its path ("layers.0.attn.q_proj.weight"), for explain."""
    names: dict[int, str] = {}
    for prefix, root in roots:
        for path, t in [*root.named_parameters(remove_duplicate=False), *root.named_buffers(remove_duplicate=False)]:
            names.setdefault(id(t), ".".join(p for p in (prefix, path) if p))
    return names


def module_roots(fn: object, param_names: list[str], values: list[object]) -> list[tuple[str, nn.Module]]:
    """The modules a function reaches first, with the name the user knows them by: the bound self of a method
    (no prefix: "layers.0.weight"), modules passed as arguments, closed over, or named as globals."""
    roots: list[tuple[str, nn.Module]] = []
    bound = getattr(fn, "__self__", None)
    if isinstance(bound, nn.Module):
        roots.append(("", bound))
    # `self` of a jitted method (or of trident.jit(module)) is the module the user names paths from.
    # A trident.jit(module) wrapper stands for its module (module.py), whose reads are the ones recorded.
    roots += [
        ("" if name == "self" else name, getattr(type(v), "_trident_module", v))
        for name, v in zip(param_names, values) if isinstance(v, nn.Module)
    ]
    func = getattr(fn, "__func__", fn)
    code = getattr(func, "__code__", None)
    if code is not None:
        for name, cell in zip(code.co_freevars, getattr(func, "__closure__", None) or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if isinstance(value, nn.Module):
                roots.append((name, value))
        scope = getattr(func, "__globals__", {})
        roots += [(name, scope[name]) for name in code.co_names if isinstance(scope.get(name), nn.Module)]
    return roots
