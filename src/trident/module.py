"""trident.jit(module): an nn.Module compiled as users write torch.compile(model).

The wrapper is the same module seen through a class of its own:
  - it shares the original's instance __dict__, so parameters, buffers, submodules, `training` and every other
    attribute are the original's: state_dict(), load_state_dict(), parameters(), .to(), train()/eval() and
    `wrapped.some_attr` act on (and read) the original, and the original sees what they do;
  - its class is a subclass of the module's class made for this wrapper alone, whose `__call__` is the native
    entry itself. Calling the wrapper goes from CPython's call slot straight into the entry (which binds like a
    method, so the wrapper arrives as a `self` argument guarded by identity): no Python frame on a hit.

A miss captures `module(*args, **kwargs)` on the original: its hooks and forward run as eager would run them.
A forward taking **kwargs (every Hugging Face model's) is bound keyword by keyword: each keyword only **kwargs
receives becomes a parameter of the entry once a call passes it (driver.JitFunction._add_keywords). A transformers
model's wrapper class also takes hf_generate's generate() and the answer that generate must not compile it.
Module state the forward reads (the `training` flags of the modules it calls, their other attributes, which
parameter or submodule object each name holds) is guarded natively (capture/module_state.py), so a
train()/eval() flip, also of one submodule, compiles or reuses the specialization of that mode. Parameters and
buffers are context constants fixed by reference: in-place updates (optimizer steps, load_state_dict) are seen;
.to(dtype/device) changes their metadata, which the constant guards check, and rebinding one is caught by the
module-state guards: either recompiles, never a stale result.
"""
from __future__ import annotations

import inspect
import sys
from typing import Any

from torch import nn

from . import exc
from .driver import JitFunction


class ModuleJitFunction(JitFunction):
    """The JitFunction of a wrapped module: its function is `forward_call(self, *forward's parameters)`."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        super().__init__(_forward_call(module))

    def on_miss(self, *args: object, **kwargs: object) -> object:
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError:
            # A wrong call: eager's own TypeError, in eager's words ("forward() missing 1 required positional
            # argument: 'x'"), by making the call eagerly.
            return self.fn(*args, **kwargs)
        return super().on_miss(*args, **kwargs)


def _forward_call(module: nn.Module) -> Any:
    """A function `(self, <forward's parameters>)` that calls the original module (hooks included); `self` is the
    wrapper, passed by the entry, whose state is the module's."""
    forward = module.forward
    try:
        forward_signature = inspect.signature(forward)
    except (TypeError, ValueError) as e:
        raise exc.UnsupportedSignature(f"trident.jit cannot read the signature of {type(module).__name__}.forward: {e}")
    self_parameter = inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)
    parameters = [self_parameter, *forward_signature.parameters.values()]

    def forward_call(self: nn.Module, *args: object, **kwargs: object) -> object:
        return module(*args, **kwargs)

    forward_call.__signature__ = forward_signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    forward_call.__name__ = "forward"
    forward_call.__qualname__ = f"{type(module).__qualname__}.forward"
    forward_call.__doc__ = getattr(forward, "__doc__", None)
    return forward_call


def jit_module(module: nn.Module) -> nn.Module:
    """The wrapper described in this module's docstring."""
    jit = ModuleJitFunction(module)
    cls = type(module)
    namespace: dict[str, object] = {
        "__module__": cls.__module__,
        "__qualname__": cls.__qualname__,
        "__doc__": cls.__doc__,
        "_trident": jit,  # trident.explain(wrapper); a class attribute, so never in the shared __dict__
        "_trident_module": module,
        "__reduce_ex__": _reduce_ex,
    }
    namespace.update(_generation_side(cls))
    wrapper_class = type(cls.__name__, (cls,), namespace)
    # Until the runtime is built, the first call builds it; then the entry takes the slot.
    wrapper_class.__call__ = _first_call  # type: ignore[assignment]
    jit.when_entry_exists(lambda entry: setattr(wrapper_class, "__call__", entry))
    wrapper = object.__new__(wrapper_class)
    object.__setattr__(wrapper, "__dict__", module.__dict__)
    return wrapper


def _generation_side(cls: type) -> dict[str, object]:
    """hf_generate's methods for a transformers model that generates (transformers is imported then)."""
    utils = sys.modules.get("transformers.generation.utils")
    mixin = getattr(utils, "GenerationMixin", None)
    if mixin is None or not issubclass(cls, mixin):
        return {}
    from .hf_generate import generation_methods

    return generation_methods(cls)


def _first_call(self: nn.Module, *args: object, **kwargs: object) -> object:
    return type(self)._trident.make_entry()(self, *args, **kwargs)  # type: ignore[attr-defined]


def _reduce_ex(self: nn.Module, protocol: int) -> tuple[object, tuple[object, ...]]:
    # The wrapper's class exists in this process only: pickling (torch.save, copy.deepcopy) stores the module
    # and jits it again when loaded.
    return jit_module, (type(self)._trident_module,)  # type: ignore[attr-defined]
