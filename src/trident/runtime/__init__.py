"""Python side of Trident's native runtime: building and loading it, and the types it defines.

`load_runtime()` returns the extension module (building it on first use); `runtime_library_path()` is the
shared object generated code links against. The native names below (Entry, Context, ...) are looked up on
first access, so importing this package never starts a build.
"""
from __future__ import annotations

from typing import Any

from trident.runtime.build import RuntimeBuildError, load_runtime, runtime_library_path

# Defined by csrc/module.cpp, csrc/entry.cpp, csrc/triton_launch.cpp and csrc/buffer_pool.cpp; resolved lazily through load_runtime().
_NATIVE_NAMES = frozenset(
    {"Entry", "Context", "TritonLaunch", "BufferPool", "GraphRecording", "init_cuda", "noop_run_address", "always_guard_address", "time_guard"}
)

__all__ = ["RuntimeBuildError", "load_runtime", "runtime_library_path", *sorted(_NATIVE_NAMES)]


def __getattr__(name: str) -> Any:
    if name in _NATIVE_NAMES:
        return getattr(load_runtime(), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
