"""The operations of kernels.py in plain torch (no Triton), with the same signatures and rounding points.

A model runs its decode step with either module as its operation set, so the reference differs from the
kernel path in the operations only, never in the model's structure. Each function computes in fp32 and
rounds once to the input dtype, as the kernels do. Everything here also accepts the position as a
1-element device tensor, without reading it on the host (masks and index ops instead of slicing).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

Position = int | torch.Tensor

linear = F.linear  # what the kernels op set uses too: the reference checks the other operations


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return F.layer_norm(x.float(), (x.shape[-1],), weight.float(), bias.float(), eps).to(x.dtype)


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(gate_up.dtype)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x.float(), approximate="tanh").to(x.dtype)


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x.float() + y.float()).to(x.dtype)


def _row_at(table: torch.Tensor, pos: Position) -> torch.Tensor:
    """table[pos] as a 1-row tensor, for an int or a 1-element index tensor."""
    return table[pos : pos + 1] if not isinstance(pos, torch.Tensor) else table.index_select(0, pos.long())


def rope(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
         pos: Position) -> torch.Tensor:
    x = qk[:, : n_heads * head_dim].float().view(qk.shape[0], n_heads, head_dim)
    x1, x2 = x.chunk(2, dim=-1)
    c, s = _row_at(cos, pos), _row_at(sin, pos)  # [1, head_dim // 2], broadcast over batch and heads
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).to(qk.dtype)


def kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> None:
    if isinstance(pos, torch.Tensor):
        index = pos.long()
        k_cache.index_copy_(2, index, k.unsqueeze(2))
        v_cache.index_copy_(2, index, v.unsqueeze(2))
    else:
        k_cache[:, :, pos] = k
        v_cache[:, :, pos] = v


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> torch.Tensor:
    batch, q_heads, head_dim = q.shape
    group = q_heads // k_cache.shape[1]
    keys = k_cache.float().repeat_interleave(group, dim=1)  # [batch, q_heads, max_seq, head_dim]
    values = v_cache.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("bhd,bhsd->bhs", q.float(), keys) * head_dim**-0.5
    visible = torch.arange(k_cache.shape[2], device=q.device) <= pos  # positions 0..pos
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), dim=-1)
    return torch.einsum("bhs,bhsd->bhd", probs, values).to(q.dtype)
