"""Running a jitted function's call eagerly, the way compiled code would run its Triton launches.

Every path on which Trident runs a call eagerly (the specialization cap, a failed capture or compile, grad
mode with inputs that require grad, a remembered fallback) goes through `call_eagerly`. Eager Triton on CPU
tensors needs Triton's interpreter, which compiled code uses for its CPU launches: without it a GPU-less
machine raises "0 active drivers" where the compiled path worked. So launches on CPU tensors are interpreted
(capture/triton_launches.py, `interpret_cpu_launches`); launches on CUDA tensors use Triton's own launcher,
exactly as eager does. TRIDENT_DISABLE=1 does not come here: it returns the function unchanged (plain eager,
for bisecting).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence


def call_eagerly(fn: Callable[..., object], args: Sequence[object], kwargs: Mapping[str, object]) -> object:
    if "triton" not in sys.modules:  # no Triton kernel can exist: nothing to interpret, nothing to import
        return fn(*args, **kwargs)
    from .capture.triton_launches import interpret_cpu_launches

    with interpret_cpu_launches():
        return fn(*args, **kwargs)
