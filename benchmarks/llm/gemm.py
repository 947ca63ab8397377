"""A small Triton matmul for the `library` op set: out = x @ weight.T (+ bias), what F.linear computes.

Written the way kernel libraries ship their GEMMs: two kernels and a module-level table that picks a kernel
and its tile sizes by problem shape, read on every call (library.py calls it from a custom op):
    gemv_kernel  one row of x (batch 1): each program dots BLOCK_N weight rows with x, BLOCK_K columns at a
                 time, without tensor cores (a decode step's matmul is bound by reading the weight)
    gemm_kernel  more rows: tl.dot over [BLOCK_M, BLOCK_K] x [BLOCK_K, BLOCK_N] tiles (BLOCK_M >= 16, what
                 tl.dot needs; rows past M are masked)
Both accumulate in fp32 and round once to the output dtype, as cuBLAS does for bf16, so results agree with
F.linear to the last bf16 bit or so. Operands: x [M, K] and weight [N, K] with contiguous last dimensions
(any row stride), bias [N] or None; out [M, N] is new and contiguous.
"""
from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl


@triton.jit
def gemv_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, K, stride_w, HAS_BIAS: tl.constexpr,
                BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        col_ok = cols < K
        w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        x = tl.load(x_ptr + cols, mask=col_ok, other=0.0)
        acc += tl.sum(w.to(tl.float32) * x.to(tl.float32)[None, :], axis=1)
    if HAS_BIAS:
        acc += tl.load(b_ptr + rows, mask=row_ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + rows, acc.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def gemm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_x, stride_w, stride_out, HAS_BIAS: tl.constexpr,
                PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok, col_ok = rows < M, cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        x = tl.load(x_ptr + rows[:, None] * stride_x + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptr + cols[None, :] * stride_w + ks[:, None], mask=col_ok[None, :] & k_ok[:, None], other=0.0)
        acc = tl.dot(x, w, acc, input_precision=PRECISION)  # w loaded as [BLOCK_K, BLOCK_N]: weight.T's tile
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    out = out_ptr + rows[:, None] * stride_out + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@dataclasses.dataclass(frozen=True)
class Tile:
    block_m: int  # 1: gemv_kernel
    block_n: int
    block_k: int
    num_warps: int


# Tiles by (rows of x, output width): gemv for one row, tl.dot tiles for more. Narrow outputs get narrow tiles so
# that a [1, 2048] x [2048, 2048] projection still spreads over the H200's 132 SMs (256 programs of 8 rows).
TILES: dict[tuple[str, str], Tile] = {
    ("one row", "narrow"): Tile(1, 8, 512, 4),
    ("one row", "wide"): Tile(1, 16, 512, 4),
    ("few rows", "narrow"): Tile(16, 16, 256, 4),
    ("few rows", "wide"): Tile(16, 64, 128, 4),
    ("many rows", "narrow"): Tile(64, 32, 64, 4),
    ("many rows", "wide"): Tile(64, 64, 64, 4),
}
WIDE_N = 8192  # outputs wider than this use the "wide" tiles (an MLP's up projection, the LM head)


def tile_for(m: int, n: int, k: int) -> Tile:
    """The table's tile for an [m, k] x [k, n] problem, its K block capped at the (power-of-2 rounded) K."""
    rows = "one row" if m == 1 else "few rows" if m <= 16 else "many rows"
    tile = TILES[(rows, "wide" if n > WIDE_N else "narrow")]
    block_k = min(tile.block_k, max(16, triton.next_power_of_2(k)))
    return dataclasses.replace(tile, block_k=block_k)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias for x [M, K] (a 2-D activation, as the models' are), weight [N, K], bias [N]."""
    m, k = x.shape
    n = weight.shape[0]
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    tile = tile_for(m, n, k)
    b = bias if bias is not None else out  # never read without HAS_BIAS; any pointer will do
    if tile.block_m == 1:
        gemv_kernel[(triton.cdiv(n, tile.block_n),)](x, weight, b, out, n, k, weight.stride(0),
                                                     HAS_BIAS=bias is not None, BLOCK_N=tile.block_n,
                                                     BLOCK_K=tile.block_k, num_warps=tile.num_warps)
    else:
        precision = "ieee" if x.dtype == torch.float32 else "tf32"  # fp32 stays fp32 (no TF32 rounding)
        grid = (triton.cdiv(m, tile.block_m), triton.cdiv(n, tile.block_n))
        gemm_kernel[grid](x, weight, b, out, m, n, k, x.stride(0), weight.stride(0), out.stride(0),
                          HAS_BIAS=bias is not None, PRECISION=precision, BLOCK_M=tile.block_m,
                          BLOCK_N=tile.block_n, BLOCK_K=tile.block_k, num_warps=tile.num_warps)
    return out
