"""The `library` op set: kernels.py's Triton kernels reached the way kernel libraries expose them (issue 20).

Each operation is a `torch.library.custom_op` in the `llm_bench` namespace (with a `register_fake` giving its
output's shape, for torch.compile and for tracing) whose implementation calls kernels.py's wrapper, so the same
kernels run; the matmuls go through `llm_bench::linear`, gemm.py's Triton matmul with its shape table, instead
of ATen's cuBLAS. To eager PyTorch every call goes through the dispatcher and back into Python; torch.compile
keeps each op opaque; Trident traces into their bodies at capture (capture/python_kernels.py), so the launches
become the compiled program's own. kv_write declares the caches it writes (`mutates_args`).

Custom-op schemas have no `int | Tensor` type, so each position-taking op comes in two: `op` (pos: int, a SymInt
in the schema) and `op_tensor_pos` (pos: a 1-element int32 device tensor). The op-set functions below, which
the models call, pick one by the position's Python type, as kernels.py picks a kernel.

The functions' signatures are kernels.py's (and reference.py's), plus `linear` with F.linear's.
"""
from __future__ import annotations

import torch

from . import gemm, kernels

NS = "llm_bench"
Position = int | torch.Tensor


def _op(name: str, mutates_args: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return torch.library.custom_op(f"{NS}::{name}", mutates_args=mutates_args)


def _fresh(x: torch.Tensor, *shape: int) -> torch.Tensor:
    """A new contiguous tensor like the kernels' outputs (torch.empty_like of a contiguous input)."""
    return x.new_empty(shape)


# ---------------------------------------------------------------------------------------------------------
# The custom ops


@_op("rms_norm")
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return kernels.rms_norm(x, weight, eps)


@_rms_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return _fresh(x, *x.shape)


@_op("layer_norm")
def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return kernels.layer_norm(x, weight, bias, eps)


@_layer_norm.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    return _fresh(x, *x.shape)


@_op("swiglu")
def _swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    return kernels.swiglu(gate_up)


@_swiglu.register_fake
def _(gate_up: torch.Tensor) -> torch.Tensor:
    return _fresh(gate_up, gate_up.numel() // gate_up.shape[-1], gate_up.shape[-1] // 2)  # as kernels.swiglu: 2-D


@_op("gelu_tanh")
def _gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return kernels.gelu_tanh(x)


@_gelu_tanh.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return _fresh(x, *x.shape)


@_op("add")
def _add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return kernels.add(x, y)


@_add.register_fake
def _(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return _fresh(x, *x.shape)


@_op("linear")
def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return gemm.linear(x, weight, bias)


@_linear.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return _fresh(x, x.shape[0], weight.shape[0])


# Position-taking ops: one with an int position and one with a tensor position each (module docstring).


@_op("rope")
def _rope(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
          pos: int) -> torch.Tensor:
    return kernels.rope(qk, n_heads, head_dim, cos, sin, pos)


@_op("rope_tensor_pos")
def _rope_tensor_pos(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
                     pos: torch.Tensor) -> torch.Tensor:
    return kernels.rope(qk, n_heads, head_dim, cos, sin, pos)


@_rope.register_fake
def _(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor, pos: int) -> torch.Tensor:
    return _fresh(qk, qk.shape[0], n_heads, head_dim)


@_rope_tensor_pos.register_fake
def _(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
      pos: torch.Tensor) -> torch.Tensor:
    return _fresh(qk, qk.shape[0], n_heads, head_dim)


@_op("kv_write", mutates_args=("k_cache", "v_cache"))
def _kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int) -> None:
    kernels.kv_write(k, v, k_cache, v_cache, pos)


@_op("kv_write_tensor_pos", mutates_args=("k_cache", "v_cache"))
def _kv_write_tensor_pos(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         pos: torch.Tensor) -> None:
    kernels.kv_write(k, v, k_cache, v_cache, pos)


@_kv_write.register_fake
def _(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int) -> None:
    return None


@_kv_write_tensor_pos.register_fake
def _(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor) -> None:
    return None


@_op("decode_attention")
def _decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int) -> torch.Tensor:
    return kernels.decode_attention(q, k_cache, v_cache, pos)


@_op("decode_attention_tensor_pos")
def _decode_attention_tensor_pos(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                                 pos: torch.Tensor) -> torch.Tensor:
    return kernels.decode_attention(q, k_cache, v_cache, pos)


@_decode_attention.register_fake
def _(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int) -> torch.Tensor:
    return _fresh(q, *q.shape)


@_decode_attention_tensor_pos.register_fake
def _(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    return _fresh(q, *q.shape)


# Every op of the set, by its qualified name: what Trident's explain lists as traced into.
OPS = tuple(f"{NS}::{name}" for name in (
    "rms_norm", "layer_norm", "swiglu", "gelu_tanh", "add", "linear", "rope", "rope_tensor_pos", "kv_write",
    "kv_write_tensor_pos", "decode_attention", "decode_attention_tensor_pos"))


# ---------------------------------------------------------------------------------------------------------
# The op set the models call (kernels.py's signatures)

rms_norm = _rms_norm
layer_norm = _layer_norm
swiglu = _swiglu
gelu_tanh = _gelu_tanh
add = _add


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear's signature; gemm.py's kernels take a 2-D activation, which is what the models pass."""
    if x.dim() != 2:
        raise ValueError(f"the library's linear takes a 2-D input [rows, {weight.shape[1]}], got shape {tuple(x.shape)}")
    return _linear(x, weight, bias)


def rope(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
         pos: Position) -> torch.Tensor:
    op = _rope_tensor_pos if isinstance(pos, torch.Tensor) else _rope
    return op(qk, n_heads, head_dim, cos, sin, pos)


def kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> None:
    op = _kv_write_tensor_pos if isinstance(pos, torch.Tensor) else _kv_write
    op(k, v, k_cache, v_cache, pos)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> torch.Tensor:
    op = _decode_attention_tensor_pos if isinstance(pos, torch.Tensor) else _decode_attention
    return op(q, k_cache, v_cache, pos)
