"""Trident: PyTorch programs that call Triton kernels, compiled into one native entry per function."""
from __future__ import annotations

from . import cache, exc, testing
from ._version import __version__
from .api import explain, jit
from .capture import python_kernels as _python_kernels
from .capture import trace as _trace  # noqa: F401 -- loaded before the watch below begins
from .capture.python_kernels import keep_opaque
from .knobs import knobs

# From import on, Python kernels registered for operators are known to capture. The torch modules a capture uses
# (capture/trace.py: torch._dynamo, make_fx) are loaded first: the kernels torch registers for its own operators
# as they load (functional collectives, streams, fsdp) are torch's implementation, not kernels to trace into.
_python_kernels.watch()


def export(fn: object, path: str) -> list[object]:
    """Write the specializations of the jitted function `fn` under `path` (cache/export.py); returns the records
    written. A fresh process that calls trident.load(path) serves its first matching call natively."""
    from .cache.export import export as write

    return write(fn, path)  # type: ignore[return-value]


def load(path: str) -> int:
    """Look up compiled specializations in the export at `path` too (cache/export.py); returns how many it holds.
    Each is checked as a disk-cache record is: one that does not match compiles."""
    from .cache.export import load as add

    return add(path)


def __getattr__(name: str) -> object:
    # trident.dynamo (torch.compile's backend: trident.dynamo.backend) is imported on first use, so that `import
    # trident` stays cheap. (`trident.backend` is the native-code stage, backend/, not torch.compile's backend.)
    if name == "dynamo":
        import importlib

        return importlib.import_module(".dynamo", __name__)
    raise AttributeError(f"module 'trident' has no attribute {name!r}")


__all__ = [
    "__version__", "jit", "explain", "keep_opaque", "exc", "testing", "knobs", "cache", "export", "load", "dynamo",
]
