"""A failure inside compiled code stays contained: the error eager raises (with where it came from), nothing
leaked, and the function keeps working for inputs that hit existing specializations."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import trident


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def broken_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.no_such_function(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_a_triton_error_raises_tritons_exception_and_the_function_stays_usable() -> None:
    @trident.jit
    def fn(x, broken: bool):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        kernel = broken_kernel if broken else copy_kernel
        kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), BLOCK=16)
        return out + 1

    x = torch.randn(40)
    torch.testing.assert_close(fn(x, False), x + 1)
    with pytest.raises(triton.TritonError) as info:
        fn(x, True)
    assert "no_such_function" in str(info.value)
    assert any("kernel 'broken_kernel'" in note for note in info.value.__notes__)
    for _ in range(3):  # the failing specialization leaves the working one intact
        torch.testing.assert_close(fn(x, False), x + 1)
    with pytest.raises(triton.TritonError):  # and fails the same way again, without a recompile
        fn(x, True)
    assert len(fn._trident.specializations) == 2


def test_an_aten_error_inside_compiled_code_is_eagers_error_and_contained() -> None:
    @trident.jit
    def fn(x, idx):  # type: ignore[no-untyped-def]
        return torch.index_select(x, 0, idx) * 2

    x, good, bad = torch.randn(4, 3), torch.tensor([0, 3]), torch.tensor([1, 10])
    torch.testing.assert_close(fn(x, good), x[good] * 2)
    with pytest.raises(IndexError) as eager:
        torch.index_select(x, 0, bad)
    with pytest.raises(IndexError) as compiled:  # same shapes: raised by ATen inside the compiled program
        fn(x, bad)
    assert str(compiled.value) == str(eager.value)
    assert len(fn._trident.specializations) == 1
    torch.testing.assert_close(fn(x, good), x[good] * 2)
