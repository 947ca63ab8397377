"""Custom ops with list operands: one the tests keep opaque (the graph steps and replay plans of tensors inside a
list operand: tests/e2e/test_cuda_graph_arguments.py, tests/ir/test_replay_plan.py), and one launching a Triton
kernel that the tests trace into."""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

WEIGHTED_SUM = "trident_test_lists::weighted_sum"


@torch.library.custom_op(WEIGHTED_SUM, mutates_args=())
def weighted_sum(tensors: list[torch.Tensor], weights: list[int]) -> torch.Tensor:
    out = torch.zeros_like(tensors[0])
    for t, w in zip(tensors, weights):
        out += t * w
    return out


@weighted_sum.register_fake
def _(tensors: list[torch.Tensor], weights: list[int]) -> torch.Tensor:
    return torch.empty_like(tensors[0])


# A custom op a library would write around a Triton kernel, with every list operand a schema may have: Tensor[],
# Tensor?[] and SymInt[] (its offsets follow the caller's ints, so a jitted step passes them symbolic). Its body is
# traced into: the list items become the launch's own arguments (tests/e2e/test_see_through.py).
SHIFTED_SUM = "trident_test_lists::shifted_sum"


@triton.jit
def _shifted_sum_kernel(a_ptr, b_ptr, bias_ptr, out_ptr, offset_a, offset_b, n, HAS_BIAS: tl.constexpr,
                        BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = i < n
    total = tl.load(a_ptr + offset_a + i, mask=mask) + 2 * tl.load(b_ptr + offset_b + i, mask=mask)
    if HAS_BIAS:
        total += tl.load(bias_ptr + i, mask=mask)
    tl.store(out_ptr + i, total, mask=mask)


@torch.library.custom_op(SHIFTED_SUM, mutates_args=())
def shifted_sum(tensors: list[torch.Tensor], biases: list[Optional[torch.Tensor]], offsets: list[int],
                n: int) -> torch.Tensor:
    """out[i] = tensors[0][offsets[0] + i] + 2 * tensors[1][offsets[1] + i] (+ biases[0][i]), i < n."""
    a, b = tensors
    out = torch.empty(n, device=a.device, dtype=a.dtype)
    bias = biases[0]
    _shifted_sum_kernel[(triton.cdiv(n, 32),)](a, b, bias if bias is not None else out, out, offsets[0], offsets[1],
                                               n, HAS_BIAS=bias is not None, BLOCK=32)
    return out


@shifted_sum.register_fake
def _(tensors: list[torch.Tensor], biases: list[Optional[torch.Tensor]], offsets: list[int], n: int) -> torch.Tensor:
    return tensors[0].new_empty(n)


def shifted_sum_step(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor, pos: int) -> torch.Tensor:
    """The step the tests jit: every list operand kind, the offsets following `pos`, `b * 1` an ATen op before."""
    return shifted_sum([a, b * 1], [bias, None], [pos, 2 * pos + 1], 48) - 1
