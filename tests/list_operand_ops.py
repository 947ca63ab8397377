"""A custom op whose operand is a list of tensors, which the tests keep opaque: the graph steps and replay plans
of tensors inside a list operand (tests/e2e/test_cuda_graphs.py, tests/ir/test_replay_plan.py)."""
from __future__ import annotations

import torch

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
