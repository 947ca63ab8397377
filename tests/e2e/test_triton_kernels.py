"""Triton kernels inside a jitted function, on CPU: captured as launches and run through Triton's
interpreter from the compiled program (the interim launch path; native launches are the next step).
References are plain torch computations of what each kernel does."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import trident
from trident.testing import count_compiles


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_rows_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
        tl.store(out_ptr + row * n_cols + cols, x * scale, mask=mask)


@triton.jit
def write_cache_kernel(cache_ptr, k_ptr, pos, stride_row, D: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, D)
    tl.store(cache_ptr + row * stride_row + pos * D + cols, tl.load(k_ptr + row * D + cols))


def test_elementwise_tuple_grid_mixed_with_aten() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out * 2

    x, y = torch.randn(37), torch.randn(37)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fn(x, y), (x + y) * 2)


def test_lambda_grid_loop_kernel_and_float_argument() -> None:
    @trident.jit
    def fn(x, scale: float):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        grid = lambda meta: (x.shape[0],)  # noqa: E731
        scale_rows_kernel[grid](x, out, x.shape[1], scale, BLOCK=8)
        return out

    x = torch.randn(3, 21)
    torch.testing.assert_close(fn(x, 0.5), x * 0.5)


def test_kernel_writes_kv_cache_in_place_at_int_position() -> None:
    @trident.jit
    def step(cache, k, pos):  # type: ignore[no-untyped-def]
        write_cache_kernel[(cache.shape[0],)](cache, k, pos, cache.stride(0), D=4)
        return cache[:, : (pos + 1) * 4].sum(dim=1)

    cache, expected = torch.zeros(2, 8 * 4), torch.zeros(2, 8 * 4)
    with count_compiles() as compiles:
        for pos in range(6):
            k = torch.randn(2, 4)
            expected[:, pos * 4 : pos * 4 + 4] = k
            out = step(cache, k, pos)
            torch.testing.assert_close(cache, expected)
            torch.testing.assert_close(out, expected[:, : (pos + 1) * 4].sum(dim=1))
    assert compiles() == 2, trident.explain(step)


def test_three_kernels_and_matmuls() -> None:
    w = torch.randn(16, 16)

    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        a = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, a, x.numel(), BLOCK=32)
        b = a @ w
        c = torch.empty_like(b)
        scale_rows_kernel[(b.shape[0],)](b, c, b.shape[1], 3.0, BLOCK=16)
        d = torch.empty_like(c)
        add_kernel[(triton.cdiv(c.numel(), 64),)](c, x, d, c.numel(), BLOCK=64)
        return d @ w.t()

    x, y = torch.randn(4, 16), torch.randn(4, 16)
    torch.testing.assert_close(fn(x, y), ((((x + y) @ w) * 3.0) + x) @ w.t(), rtol=1e-4, atol=1e-4)


def test_zero_sized_grid_launches_nothing() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.zeros_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out

    x = torch.randn(0)
    assert fn(x, x).shape == (0,)


def test_misaligned_view_gives_the_right_result() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out

    base, y = torch.randn(33), torch.randn(32)
    with count_compiles() as compiles:
        torch.testing.assert_close(fn(base[:32], y), base[:32] + y)
        torch.testing.assert_close(fn(base[1:], y), base[1:] + y)  # offset 1: not 16-byte aligned
    assert compiles() == 2


@pytest.mark.gpu
def test_kernels_on_cuda_and_a_non_default_stream() -> None:
    w = torch.randn(16, 16, device="cuda")

    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        a = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, a, x.numel(), BLOCK=32)
        b = torch.empty_like(a)
        scale_rows_kernel[(a.shape[0],)](a, b, a.shape[1], 3.0, BLOCK=16)
        return b @ w

    x, y = torch.randn(4, 16, device="cuda"), torch.randn(4, 16, device="cuda")
    expected = ((x + y) * 3.0) @ w
    torch.testing.assert_close(fn(x, y), expected, rtol=1e-3, atol=1e-3)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = fn(x, y)
    stream.synchronize()
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
    text = trident.explain(fn)
    assert "specialization 0" in text and "cuda:0" in text
