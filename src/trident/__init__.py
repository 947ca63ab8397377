"""Trident: PyTorch programs that call Triton kernels, compiled into one native entry per function."""
from __future__ import annotations

from . import cache, exc, testing
from .api import explain, jit
from .capture import python_kernels as _python_kernels
from .capture.python_kernels import keep_opaque
from .knobs import knobs

_python_kernels.watch()  # from import on, Python kernels registered for operators are known to capture

__all__ = ["jit", "explain", "keep_opaque", "exc", "testing", "knobs", "cache"]
__version__ = "0.1.0"
