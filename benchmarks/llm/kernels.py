"""Triton kernels of a decode step and the Python wrappers the models call.

Each wrapper allocates its output with torch and launches `kernel[grid](...)`, nothing else: that is the
shape Trident captures (and torch.compile, and a CUDA-graph capture), so every system runs the same kernels.
Wrappers never read tensor values (no `.item()`, no branching on data): the position reaches the kernels
either as a Python int or as a pointer to a 1-element int32 device tensor (`pos` may be either; the wrapper
picks the kernel by the argument's Python type, which is fixed per call site).

Math is done in fp32 inside the kernels and rounded once to the output dtype; reference.py rounds at the
same points so the two agree closely in fp32 and bf16.

Layouts (all row-major, the last dimension contiguous):
    qkv     [batch, (q_heads + 2 * kv_heads) * head_dim]   one fused projection: q heads, k heads, v heads
    caches  [batch, kv_heads, max_seq, head_dim]          one k and one v tensor per layer
    rope    cos / sin tables [max_seq, head_dim // 2], fp32 (HF's rotate-half convention)
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

Position = int | torch.Tensor

# The matmuls are ATen's (cuBLAS on CUDA) in this op set; library.py's op set has a Triton matmul of its own.
linear = F.linear


def _warps(block: int) -> int:
    """num_warps for a one-row kernel of `block` elements: enough threads to cover the row in one pass."""
    return max(1, min(8, block // 256))


# ---------------------------------------------------------------------------------------------------------
# Norms


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, stride_x, stride_out, n_cols, EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + EPS)
    tl.store(out_ptr + row * stride_out + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, stride_x, stride_out, n_cols,
                      EPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + EPS)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (centered * rstd * w + b).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(x: torch.Tensor) -> torch.Tensor:
    """x as [rows, cols] without a copy (callers pass tensors whose last dimension is contiguous). The models'
    activations are already 2-D: no view then, since every ATen call, even a view, is host work per step."""
    return x if x.dim() == 2 else x.view(-1, x.shape[-1])


def _like(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return out if out.dim() == x.dim() else out.view(x.shape)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    rows = _rows(x)
    out = torch.empty_like(rows)
    block = triton.next_power_of_2(rows.shape[1])
    rms_norm_kernel[(rows.shape[0],)](rows, weight, out, rows.stride(0), out.stride(0), rows.shape[1],
                                      EPS=eps, BLOCK=block, num_warps=_warps(block))
    return _like(out, x)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    rows = _rows(x)
    out = torch.empty_like(rows)
    block = triton.next_power_of_2(rows.shape[1])
    layer_norm_kernel[(rows.shape[0],)](rows, weight, bias, out, rows.stride(0), out.stride(0), rows.shape[1],
                                        EPS=eps, BLOCK=block, num_warps=_warps(block))
    return _like(out, x)


# ---------------------------------------------------------------------------------------------------------
# Pointwise: activations and the residual add


@triton.jit
def swiglu_kernel(gate_up_ptr, out_ptr, stride_in, stride_out, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    gate = tl.load(gate_up_ptr + row * stride_in + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * stride_in + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    out = gate * tl.sigmoid(gate) * up
    tl.store(out_ptr + row * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)  # sqrt(2 / pi) * (x + 0.044715 x^3)
    tanh = 2.0 * tl.sigmoid(2.0 * inner) - 1.0  # tanh through sigmoid: tl has no portable tanh
    tl.store(out_ptr + offs, (0.5 * x * (1.0 + tanh)).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + offs, (x + y).to(out_ptr.dtype.element_ty), mask=mask)


POINTWISE_BLOCK = 1024


def swiglu(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for a fused [rows, 2 * n] projection whose first half is the gate."""
    rows = _rows(gate_up)
    n = rows.shape[1] // 2
    out = torch.empty((rows.shape[0], n), dtype=gate_up.dtype, device=gate_up.device)
    block = min(POINTWISE_BLOCK, triton.next_power_of_2(n))
    swiglu_kernel[(rows.shape[0], triton.cdiv(n, block))](rows, out, rows.stride(0), out.stride(0), n, BLOCK=block)
    return out


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU with the tanh approximation, elementwise over a contiguous tensor."""
    out = torch.empty_like(x)
    block = min(POINTWISE_BLOCK, triton.next_power_of_2(x.numel()))
    gelu_tanh_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)
    return out


def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """x + y for two contiguous tensors of one shape (the residual add)."""
    out = torch.empty_like(x)
    block = min(POINTWISE_BLOCK, triton.next_power_of_2(x.numel()))
    add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out


# ---------------------------------------------------------------------------------------------------------
# Position-dependent kernels. Each body is a @triton.jit function taking the position as a value; two thin
# kernels feed it from an int argument or from a device tensor (the CUDA-graph-friendly variant).


@triton.jit
def _rope_body(x_ptr, cos_ptr, sin_ptr, out_ptr, pos, stride_x, stride_out, HALF: tl.constexpr):
    # One program per (sequence, head) over the first (q_heads + kv_heads) heads of the fused qkv row.
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs = tl.arange(0, HALF)
    src = x_ptr + b * stride_x + head * 2 * HALF
    x1 = tl.load(src + offs).to(tl.float32)
    x2 = tl.load(src + HALF + offs).to(tl.float32)
    cos = tl.load(cos_ptr + pos * HALF + offs)
    sin = tl.load(sin_ptr + pos * HALF + offs)
    dst = out_ptr + b * stride_out + head * 2 * HALF
    tl.store(dst + offs, (x1 * cos - x2 * sin).to(out_ptr.dtype.element_ty))
    tl.store(dst + HALF + offs, (x2 * cos + x1 * sin).to(out_ptr.dtype.element_ty))


@triton.jit
def rope_kernel(x_ptr, cos_ptr, sin_ptr, out_ptr, pos, stride_x, stride_out, HALF: tl.constexpr):
    _rope_body(x_ptr, cos_ptr, sin_ptr, out_ptr, pos, stride_x, stride_out, HALF)


@triton.jit
def rope_kernel_pos_ptr(x_ptr, cos_ptr, sin_ptr, out_ptr, pos_ptr, stride_x, stride_out, HALF: tl.constexpr):
    _rope_body(x_ptr, cos_ptr, sin_ptr, out_ptr, tl.load(pos_ptr), stride_x, stride_out, HALF)


@triton.jit
def _kv_write_body(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos, stride_kb, stride_kh, stride_vb, stride_vh,
                   stride_cb, stride_ch, stride_cs, D: tl.constexpr):
    b = tl.program_id(0)
    head = tl.program_id(1)
    offs = tl.arange(0, D)
    k = tl.load(k_ptr + b * stride_kb + head * stride_kh + offs)
    v = tl.load(v_ptr + b * stride_vb + head * stride_vh + offs)
    dst = b * stride_cb + head * stride_ch + pos * stride_cs + offs
    tl.store(k_cache_ptr + dst, k)
    tl.store(v_cache_ptr + dst, v)


@triton.jit
def kv_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos, stride_kb, stride_kh, stride_vb, stride_vh,
                    stride_cb, stride_ch, stride_cs, D: tl.constexpr):
    _kv_write_body(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos, stride_kb, stride_kh, stride_vb, stride_vh,
                   stride_cb, stride_ch, stride_cs, D)


@triton.jit
def kv_write_kernel_pos_ptr(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos_ptr, stride_kb, stride_kh, stride_vb,
                            stride_vh, stride_cb, stride_ch, stride_cs, D: tl.constexpr):
    _kv_write_body(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, tl.load(pos_ptr), stride_kb, stride_kh, stride_vb,
                   stride_vh, stride_cb, stride_ch, stride_cs, D)


@triton.jit
def _decode_attention_body(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, pos, stride_qb, stride_qh,
                           stride_cb, stride_ch, stride_cs, stride_ob, stride_oh,
                           SCALE: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    # One program per (sequence, q head); q head h reads kv head h // GROUP (GQA). Single pass over the
    # cache positions 0..pos in blocks of BLOCK_N with an online softmax (running max m, running sum l).
    b = tl.program_id(0)
    head = tl.program_id(1)
    d = tl.arange(0, D)
    q = tl.load(q_ptr + b * stride_qb + head * stride_qh + d).to(tl.float32) * SCALE
    base = b * stride_cb + (head // GROUP) * stride_ch
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for start in range(0, pos + 1, BLOCK_N):
        n = start + tl.arange(0, BLOCK_N)
        valid = n <= pos
        offsets = base + n[:, None] * stride_cs + d[None, :]
        k = tl.load(k_cache_ptr + offsets, mask=valid[:, None], other=0.0).to(tl.float32)
        scores = tl.where(valid, tl.sum(k * q[None, :], axis=1), float("-inf"))
        m_new = tl.maximum(m, tl.max(scores, axis=0))
        p = tl.exp(scores - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(v_cache_ptr + offsets, mask=valid[:, None], other=0.0).to(tl.float32)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    tl.store(out_ptr + b * stride_ob + head * stride_oh + d, (acc / l).to(out_ptr.dtype.element_ty))


@triton.jit
def decode_attention_kernel(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, pos, stride_qb, stride_qh,
                            stride_cb, stride_ch, stride_cs, stride_ob, stride_oh,
                            SCALE: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_N: tl.constexpr):
    _decode_attention_body(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, pos, stride_qb, stride_qh,
                           stride_cb, stride_ch, stride_cs, stride_ob, stride_oh, SCALE, GROUP, D, BLOCK_N)


@triton.jit
def decode_attention_kernel_pos_ptr(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, pos_ptr, stride_qb, stride_qh,
                                    stride_cb, stride_ch, stride_cs, stride_ob, stride_oh,
                                    SCALE: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                                    BLOCK_N: tl.constexpr):
    _decode_attention_body(q_ptr, k_cache_ptr, v_cache_ptr, out_ptr, tl.load(pos_ptr), stride_qb, stride_qh,
                           stride_cb, stride_ch, stride_cs, stride_ob, stride_oh, SCALE, GROUP, D, BLOCK_N)


ATTENTION_BLOCK_N = 64


def rope(qk: torch.Tensor, n_heads: int, head_dim: int, cos: torch.Tensor, sin: torch.Tensor,
         pos: Position) -> torch.Tensor:
    """Rotate the first `n_heads` heads of each row of `qk` [batch, >= n_heads * head_dim] at position `pos`;
    returns [batch, n_heads, head_dim]."""
    batch = qk.shape[0]
    out = torch.empty((batch, n_heads, head_dim), dtype=qk.dtype, device=qk.device)
    kernel = rope_kernel_pos_ptr if isinstance(pos, torch.Tensor) else rope_kernel
    kernel[(batch, n_heads)](qk, cos, sin, out, pos, qk.stride(0), out.stride(0), HALF=head_dim // 2)
    return out


def kv_write(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> None:
    """k_cache[:, :, pos] = k and v_cache[:, :, pos] = v for k, v [batch, kv_heads, head_dim] (any strides with
    a contiguous last dimension); the caches [batch, kv_heads, max_seq, head_dim] share one layout."""
    batch, heads, head_dim = k.shape
    kernel = kv_write_kernel_pos_ptr if isinstance(pos, torch.Tensor) else kv_write_kernel
    kernel[(batch, heads)](k, v, k_cache, v_cache, pos, k.stride(0), k.stride(1), v.stride(0), v.stride(1),
                           k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), D=head_dim)


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: Position) -> torch.Tensor:
    """softmax(q k^T / sqrt(d)) v over cache positions 0..pos for one query token per sequence.

    q [batch, q_heads, head_dim]; caches [batch, kv_heads, max_seq, head_dim]; returns [batch, q_heads, head_dim]."""
    batch, q_heads, head_dim = q.shape
    group = q_heads // k_cache.shape[1]
    out = torch.empty((batch, q_heads, head_dim), dtype=q.dtype, device=q.device)
    kernel = decode_attention_kernel_pos_ptr if isinstance(pos, torch.Tensor) else decode_attention_kernel
    kernel[(batch, q_heads)](q, k_cache, v_cache, out, pos, q.stride(0), q.stride(1),
                             k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), out.stride(0), out.stride(1),
                             SCALE=head_dim**-0.5, GROUP=group, D=head_dim, BLOCK_N=ATTENTION_BLOCK_N)
    return out
