"""Which allocations of a host program go through the specialization's BufferPool, and the calls for them.

`empty`, `empty_like` and `empty_strided` (what Triton-calling code allocates its kernels' outputs with) are lowered
to trident_pool_empty / trident_pool_empty_like with a site index each: the runtime hands out the buffer that site
made in an earlier call when that is as safe as a fresh allocation (csrc/buffer_pool.cpp says when). `mm` and
`addmm` (F.linear; beta = alpha = 1) are lowered to trident_pool_matmul, which computes into a pooled result with
ATen's out= variant, on CUDA by calling its CUDA kernel directly when the dispatcher would end there (the same
kernels and bits as the functional op). That passes a Python kernel registered for the functional op by, so an op
that has one is not pooled, and a pooled one guards that none is registered later (guards/module_state.py,
bypass_guards). Only the plain forms are pooled, decided from the op's literal arguments: a dtype given (or, for
empty_like, taken from the input), strided layout, no pinned memory, the contiguous (empty) or preserve (empty_like)
memory format, a device given with its index. A result the function returns is not pooled: the caller keeps it, so
the site could never reuse it and would only keep the memory alive (followed through views and in-place results;
what this misses — a custom op keeping its input — the runtime's reference counts still catch).

One kind of returned tensor gets a site of its own: a tensor the function makes and stores into the caller's objects
with the static-address mark (a Hugging Face StaticCache's keys and values, allocated at its first update). Its op
runs as usual, then trident_pool_keep moves the result into the memory the site kept from an earlier call once that
memory is free again, so the next generate's cache lands where the last one was, whatever else the caller holds, and
a CUDA graph recorded for the decode step still reads it in place.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch_mlir import ir

from .. import abi
from ..capture.python_kernels import POOLED_MATMULS, KernelVersions
from ..ir.mlir_text import I32, I64, PTR, Extern, FunctionBuilder
from ..capture.results import STATIC_MARK, StateWrite
from .aliasing import AtenName, alias_root, escapes

POOL_EMPTY = Extern("trident_pool_empty", (PTR, I64, PTR, PTR, I64, I64, I64, PTR), I32)
POOL_EMPTY_LIKE = Extern("trident_pool_empty_like", (PTR, I64, PTR, I64, I64, PTR), I32)
POOL_MATMUL = Extern("trident_pool_matmul", (PTR, I64, PTR, PTR, PTR, PTR), I32)
POOL_KEEP = Extern("trident_pool_keep", (PTR, I64, PTR), I32)
_ALLOCATING = (
    "torch.aten.empty.memory_format", "torch.aten.empty_strided", "torch.aten.empty_like", "torch.aten.mm",
    "torch.aten.addmm",
)  # fmt: skip

_DYNAMIC = object()  # an argument not fixed at compile time
_CONTIGUOUS, _PRESERVE = 0, 1  # c10::MemoryFormat
_STRIDED = 0  # c10::Layout


def describe_pool(pool: Any) -> list[str]:
    """explain's lines for a BufferPool: its reuse counters, then how its CUDA matmuls ran."""
    lines = [
        f"buffer pool: {pool.sites} allocation site(s), {pool.reuses} reuse(s), {pool.allocations} allocation(s), "
        f"{pool.held_bytes} bytes kept (limit {pool.limit_bytes})"
    ]
    if pool.unkept:
        lines.append(
            f"buffer pool: {pool.unkept} tensor(s) stored into the call's objects marked static (a StaticCache's) "
            "left unkept at the limit, so the next call's land elsewhere (raise TRIDENT_BUFFER_POOL_MB to keep them)"
        )
    if pool.direct_matmuls or pool.planned_matmuls:
        plans = pool.matmul_plans  # {site: None if planned, else why not}
        planned = sum(why is None for why in plans.values())
        reasons = sorted({why for why in plans.values() if why is not None})
        lines.append(
            f"CUDA matmuls: {pool.planned_matmuls} through cuBLASLt plans ({planned} of {len(plans)} site(s) planned), "
            f"{pool.direct_matmuls} straight to ATen's CUDA kernel"
            + (f"; not planned: {'; '.join(reasons)}" if reasons else "")
        )
    return lines


def literal(value: ir.Value) -> object:
    """The compile-time value of a torch.constant.* operand (None for torch.constant.none), else _DYNAMIC."""
    owner = value.owner
    name = getattr(owner, "name", None)
    if name == "torch.constant.none":
        return None
    if name in ("torch.constant.int", "torch.constant.bool", "torch.constant.device"):
        attr = owner.attributes["value"]  # type: ignore[union-attr]
        if name == "torch.constant.int":
            return ir.IntegerAttr(attr).value
        return ir.BoolAttr(attr).value if name == "torch.constant.bool" else ir.StringAttr(attr).value
    return _DYNAMIC


def _device_given(value: object) -> bool:
    """A literal device the runtime can compare: "cpu", or CUDA with its index."""
    if not isinstance(value, str):
        return False
    device = torch.device(value)
    return device.type == "cpu" or (device.type == "cuda" and device.index is not None)


def _overridden(op: str) -> bool:
    """Whether a Python kernel is registered for ATen operator `op` ("aten::mm") on any dispatch key now
    (capture/python_kernels.py; a specialization that calls it pooled guards that none is registered later)."""
    return any(name.startswith(op + "/") for name in vars(KernelVersions))


def pool_kind(op: ir.Operation, aten_name: Callable[[ir.Operation], tuple[str, str]]) -> str | None:
    """"empty", "empty_strided", "empty_like" or "matmul" when this op's result can come from the pool, else None."""
    if op.name not in _ALLOCATING or escapes(op.results[0], aten_name):
        return None
    args = [literal(v) for v in op.operands]
    name = aten_name(op)[0]
    if name in POOLED_MATMULS and _overridden(name):
        return None  # a Python kernel registered for it (kept opaque): the dispatcher must reach it, as in eager
    if op.name == "torch.aten.mm":
        return "matmul"
    if op.name == "torch.aten.addmm":  # F.linear with a bias: beta = alpha = 1
        return "matmul" if args[3] == 1 and args[4] == 1 else None
    if op.name == "torch.aten.empty_like":
        _, dtype, layout, device, pin, memory_format = args
        kind = "empty_like"  # dtype and device may be left to the input's
        ok = (dtype is None or isinstance(dtype, int)) and (device is None or _device_given(device))
        ok = ok and memory_format in (None, _PRESERVE)
    else:  # the dtype and device must be given: the defaults are process settings, not compiled in
        if op.name == "torch.aten.empty.memory_format":
            _, dtype, layout, device, pin, memory_format = args
            kind, format_ok = "empty", memory_format in (None, _CONTIGUOUS)
        else:
            _, _, dtype, layout, device, pin = args
            kind, format_ok = "empty_strided", True
        ok = isinstance(dtype, int) and _device_given(device) and format_ok
    return kind if ok and layout in (None, _STRIDED) and pin in (None, False) else None


def kept_allocations(
    returned: Sequence[ir.Value], state_writes: Sequence[StateWrite], aten_name: AtenName,
) -> set[ir.Value]:
    """The fresh tensors (results of ATen ops) that the function stores into the caller's objects with the
    static-address mark, directly or through views and in-place ops (`index_copy_` into a new cache).
    `returned`: the operands of the function's return, which state writes index."""
    marked = (w.value for w in state_writes if w.value.kind == "graph")
    roots = (alias_root(returned[tree.index], aten_name) for tree in marked
             if any(name == STATIC_MARK for name, _ in tree.value or ()))
    return {root for root in roots if root is not None}


def emit_pooled(
    fb: FunctionBuilder, kind: str, op: ir.Operation, pool: str, site: int, int_array: Callable[[ir.Value], str],
    operand_ssa: Callable[[ir.Value], str], device_code: Callable[[str], int],
) -> str:
    """Emit the pool call for `op` (a failure branches to the function's failure block); returns the new owned
    tensor handle.

    int_array(list operand) -> pointer to its ints; operand_ssa(operand) -> its lowered SSA value."""
    out = fb.scratch(1)
    args = [literal(v) for v in op.operands]
    if kind == "matmul":  # mm(a, b) or addmm(bias, a, b)
        operands = [operand_ssa(v) for v in op.operands[:3]]
        bias, a, b = ([fb.null()] + operands) if len(op.operands) == 2 else operands
        status = fb.call(POOL_MATMUL, [pool, fb.const(site), bias, a, b, out])
    elif kind == "empty_like":
        dtype, device = args[1], args[3]
        status = fb.call(POOL_EMPTY_LIKE, [
            pool, fb.const(site), operand_ssa(op.operands[0]), fb.const(abi.POOL_LIKE_INPUT if dtype is None else dtype),  # type: ignore[arg-type]
            fb.const(abi.POOL_LIKE_INPUT if device is None else device_code(device)), out,  # type: ignore[arg-type]
        ])  # fmt: skip
    else:
        sizes = op.operands[0]
        rank = len(list(sizes.owner.operands))  # type: ignore[union-attr]  # a prim.ListConstruct
        strides = int_array(op.operands[1]) if kind == "empty_strided" else fb.null()
        dtype, device = (args[2], args[4]) if kind == "empty_strided" else (args[1], args[3])
        status = fb.call(POOL_EMPTY, [
            pool, fb.const(site), int_array(sizes), strides, fb.const(rank), fb.const(dtype),  # type: ignore[arg-type]
            fb.const(device_code(device)), out,  # type: ignore[arg-type]
        ])  # fmt: skip
    assert status is not None
    fb.check_zero(status)
    return fb.load(out, PTR)
