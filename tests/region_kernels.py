"""Triton kernels with an op torch's analysis of a kernel's stores does not model (`tl.map_elementwise`'s region),
shared by the analysis's unit tests and the see-through test that runs one on CUDA."""
from __future__ import annotations

import triton
import triton.language as tl

HAS_MAP_ELEMENTWISE = hasattr(tl, "map_elementwise")


@triton.jit
def _clamp_to_one(x):  # type: ignore[no-untyped-def]
    if x > 1.0:
        x = 1.0
    return x


@triton.jit
def clamp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    i = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < n)
    tl.store(out_ptr + i, tl.map_elementwise(_clamp_to_one, x), mask=i < n)
