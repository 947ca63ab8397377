"""Which operations of a host program are steps of a CUDA graph recording, and where a step's arguments are.

A recording is a sequence of steps in program order (csrc/graphs/replay.cpp): Triton launches, operators that do
device work, pooled allocations and matmuls. The replay plan (lowering/replay_plan.py) names step arguments by
their position in that sequence, so the compiler and the runtime must agree on it exactly. They agree by
construction: the compiler decides here, once, and the code it generates tells the runtime — an operator that
makes no step is called through trident_view_call, every other one through trident_op_call or its typed entry
(typed_ops.py reads the same predicate); a pooled call's step arguments sit at the positions the runtime header
declares (TRIDENT_POOL_STEP_*), which buffer_pool.cpp checks at compile time.
"""
from __future__ import annotations

import functools

import torch

from trident import abi


def makes_no_step(schema: torch.FunctionSchema) -> bool:
    """Whether an operator does no device work, so a recording runs it as it is instead of recording it: every
    return is a view of an argument that is not written (x.view, x[pos], split), and the operator is no
    composite that only may return a view — reshape, contiguous and to() copy when they cannot view."""
    returns = schema.returns
    if not returns or any(r.alias_info is None or r.alias_info.is_write for r in returns):
        return False
    return not _may_copy(schema.name, schema.overload_name)


@functools.cache
def _may_copy(name: str, overload: str) -> bool:
    qualified = f"{name}.{overload}" if overload else name
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(qualified, "CompositeImplicitAutograd")
    except RuntimeError:  # not registered with the dispatcher: nothing says it only views
        return True


def pool_step_operands(kind: str, n_operands: int) -> dict[int, int]:
    """For a pooled call of `kind` ("matmul", "empty_like", "empty", "empty_strided"): IR operand -> argument of
    its step. mm(a, b) and addmm(bias, a, b, beta, alpha) both become one matmul step; sizes and strides are int
    lists, which a step cannot follow, so they are no argument to patch."""
    if kind == "matmul":
        if n_operands == 2:
            return {0: abi.POOL_STEP_A, 1: abi.POOL_STEP_B}
        return {0: abi.POOL_STEP_BIAS, 1: abi.POOL_STEP_A, 2: abi.POOL_STEP_B}
    if kind == "empty_like":
        return {0: abi.POOL_STEP_LIKE}
    return {}
