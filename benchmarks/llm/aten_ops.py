"""The `aten` op set: the pointwise operations written as plain torch, with ATen's kernels for them overridden by
kernels.py's Triton kernels (flag-gems' pattern, issue 20).

The residual add is `x + y` (aten::add.Tensor) and GPT-2's activation `F.gelu(x, approximate="tanh")`
(aten::gelu); while `overrides(device)` is active, Python kernels registered with
`torch.library.Library("aten", "IMPL")` for the device's dispatch key run them: kernels.add and
kernels.gelu_tanh for the shapes those kernels take (same-shape contiguous operands; the tanh approximation),
ATen's own kernels through the out= overloads (which are not overridden) for anything else, such as GPT-2's
broadcast add of the position row. Every other operation is kernels.py's (direct launches, ATen matmuls):
this op set differs from `kernels` only in how the overridden ops are reached. Eager PyTorch reaches them
through the dispatcher and back into Python; torch.compile ignores Python kernels and generates its own code
for these ops; Trident traces into them at capture (capture/python_kernels.py), which needs trident imported
before `overrides` is entered (it notes registrations from import on).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from . import kernels
from .kernels import decode_attention, kv_write, layer_norm, linear, rms_norm, rope, swiglu

__all__ = ["add", "decode_attention", "gelu_tanh", "kv_write", "layer_norm", "linear", "overrides", "rms_norm",
           "rope", "swiglu"]
OVERRIDDEN = ("aten::add.Tensor", "aten::gelu")  # what explain lists as traced into


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x + y


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


# ---------------------------------------------------------------------------------------------------------
# The Python kernels registered for ATen's operators


def _same_layout(x: torch.Tensor, y: Any) -> bool:
    """What kernels.add takes: floating operands (it computes in fp32) of one shape, dtype and device, contiguous.
    The override sees every add of the process on the device, integer index arithmetic too."""
    return (isinstance(y, torch.Tensor) and x.shape == y.shape and x.dtype == y.dtype and x.dtype.is_floating_point
            and x.device == y.device and x.is_contiguous() and y.is_contiguous())


def _add(x: torch.Tensor, y: Any, *, alpha: Any = 1) -> torch.Tensor:
    if alpha == 1 and _same_layout(x, y):
        return kernels.add(x, y)
    shape = torch.broadcast_shapes(x.shape, y.shape if isinstance(y, torch.Tensor) else ())
    devices = [t.device for t in (x, y) if isinstance(t, torch.Tensor) and t.device.type != "cpu"]
    out = torch.empty(shape, dtype=torch.result_type(x, y), device=devices[0] if devices else x.device)
    return torch.ops.aten.add.out(x, y, alpha=alpha, out=out)


def _gelu(x: torch.Tensor, *, approximate: str = "none") -> torch.Tensor:
    if approximate == "tanh" and x.is_contiguous() and x.dtype.is_floating_point:
        return kernels.gelu_tanh(x)
    return torch.ops.aten.gelu.out(x, approximate=approximate, out=torch.empty_like(x))


@contextlib.contextmanager
def overrides(device: torch.device) -> Iterator[None]:
    """aten::add.Tensor and aten::gelu run the Triton kernels for tensors on `device`'s type while inside."""
    lib = torch.library.Library("aten", "IMPL")
    key = torch._C._dispatch_key_for_device(device.type)
    try:
        lib.impl("add.Tensor", _add, key)
        lib.impl("gelu", _gelu, key)
        yield
    finally:
        lib._destroy()
