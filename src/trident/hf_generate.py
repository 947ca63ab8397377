"""Hugging Face's `generate()` around a `trident.jit` model: the two things Trident changes in HF's loop.

module.py adds `generation_methods` to the wrapper class when the module is a transformers `GenerationMixin`, so
`jitted.generate(...)` is the model's own generate with these two differences:

1. **No compile of its own.** On CUDA with a static cache, generate() compiles the model's `__call__` with
   torch.compile (inductor, reduce-overhead) unless told `disable_compile=True`: on a jitted model that would stack
   Dynamo and Inductor on a forward Trident already compiles. The wrapper answers generate's
   `_valid_auto_compile_criteria` with no, so generate calls the jitted forward itself, as the user wrote it.
2. **With the knob `hf_defer_stop` on (TRIDENT_HF_DEFER_STOP=1; off by default until a GPU measurement shows the
   gain), the stop check reads the device's flag one token late.** generate()'s `StopCheck` reads
   `unfinished_sequences.max() == 0` every token, which waits for the device to finish the step: the host's work
   between that wait and the next step's launch is never hidden, and inside generate every system (a hand-captured
   graph too) ran 1.17-1.36x the device time of its step on an H100 (benchmarks/README.md, fourteenth session).
   transformers ships the remedy, `DeferredStopCheck` (copies the flag asynchronously and reads it on the next
   token; at an EOS stop one extra forward runs and generate undoes it), and enables it only on MPS ("enable it for
   cuda if we observe perf gains"). Inside a jitted model's generate on CUDA, Trident asks transformers' own
   `is_supported` as if the device were MPS, so every other condition stays transformers' (not for an assistant
   model, nor for a returned cache that cannot be cropped back).

The patch of `DeferredStopCheck.is_supported` is installed once, at the first jitted generate with the knob on (with
it off, transformers is left untouched), and answers as transformers does everywhere else: outside a jitted model's
generate, off CUDA, and with the knob off. A transformers whose `is_supported` takes other parameters is left alone
(its own decision stands).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import torch

from .knobs import knobs

# True while a jitted model's generate() runs with the knob on (per thread and task: generate may run in several).
_DEFER_STOP = contextvars.ContextVar("trident_defer_stop", default=False)
_IS_SUPPORTED_PARAMETERS = ("device", "cache", "cache_is_returned", "is_assistant")
_install_lock = threading.Lock()
_MPS = torch.device("mps")  # a device object only: nothing runs on it


@contextlib.contextmanager
def deferring_stop(on: bool) -> Iterator[None]:
    """Inside: a DeferredStopCheck decision on CUDA is transformers' decision for MPS, where `on`."""
    token = _DEFER_STOP.set(on)
    try:
        yield
    finally:
        _DEFER_STOP.reset(token)


def install_deferred_stop() -> bool:
    """Wraps transformers' `DeferredStopCheck.is_supported` (once); whether the wrapper is in place."""
    utils = sys.modules.get("transformers.generation.utils")
    check = getattr(utils, "DeferredStopCheck", None)
    if check is None:  # a transformers without it: its generate waits every token
        return False
    with _install_lock:
        original = inspect.getattr_static(check, "is_supported", None)
        if isinstance(original, staticmethod) and getattr(original.__func__, "_trident_original", None):
            return True
        if not isinstance(original, staticmethod):
            return False
        try:
            names = tuple(inspect.signature(original.__func__).parameters)
        except (TypeError, ValueError):
            return False
        if names != _IS_SUPPORTED_PARAMETERS:
            return False
        check.is_supported = staticmethod(_deferred_on_cuda(original.__func__))
    return True


def _deferred_on_cuda(is_supported: Any) -> Any:
    def deferred_is_supported(device: torch.device, cache: Any, cache_is_returned: bool, is_assistant: bool) -> bool:
        if _DEFER_STOP.get() and torch.device(device).type == "cuda":
            device = _MPS  # transformers' own conditions, besides the device type: asked as on MPS
        return is_supported(device, cache, cache_is_returned, is_assistant)

    deferred_is_supported._trident_original = is_supported  # type: ignore[attr-defined]
    deferred_is_supported.__doc__ = is_supported.__doc__
    return deferred_is_supported


def generation_methods(cls: type) -> dict[str, Any]:
    """The wrapper class's methods for a transformers model class `cls` (this module's docstring): generate(), with
    cls.generate's name, docstring and signature, and _valid_auto_compile_criteria()."""

    @functools.wraps(cls.generate)
    def generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        with deferring_stop(knobs.hf_defer_stop and install_deferred_stop()):
            return cls.generate(self, *args, **kwargs)

    def _valid_auto_compile_criteria(self: Any, model_kwargs: dict[str, Any], generation_config: Any) -> bool:
        if getattr(generation_config, "compile_config", None) is not None and not generation_config.disable_compile:
            warnings.warn(
                "trident: generate(compile_config=...) of a trident.jit model does not compile the forward again: "
                "Trident compiles it (pass the original model to compile it with torch.compile instead)",
                stacklevel=_user_level(generate.__code__),
            )
        return False

    return {"generate": generate, "_valid_auto_compile_criteria": _valid_auto_compile_criteria}


def _user_level(generate: Any) -> int:
    """The stacklevel of the line that called a jitted model's generate() (whose code is `generate`), seen from the
    caller of this."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code is not generate:
        frame, level = frame.f_back, level + 1
    return level + 1 if frame is not None else 2
