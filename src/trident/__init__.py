"""Trident: PyTorch programs that call Triton kernels, compiled into one native entry per function."""
from __future__ import annotations

from . import cache, exc, testing
from .api import explain, jit
from .knobs import knobs

__all__ = ["jit", "explain", "exc", "testing", "knobs", "cache"]
__version__ = "0.1.0"
