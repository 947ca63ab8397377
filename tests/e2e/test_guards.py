"""Guard soundness: every change of what a specialization assumed selects or compiles the right code.

Counted with count_compiles (a change that must not recompile is a hit; one that must, compiles once),
and every result is compared with eager, so a stale specialization cannot pass."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.testing import count_compiles, expect_fallback


def program(x, y):  # type: ignore[no-untyped-def]
    # strides and sizes matter: view/reshape semantics and output strides follow the inputs'
    return (x * 2 + y).sum(dim=-1), x.t().contiguous(), x.reshape(-1)[:3]


def run(jitted, x, y):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        actual, expected = jitted(x, y), program(x, y)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape and a.stride() == e.stride()
        torch.testing.assert_close(a, e)


def test_same_inputs_hit() -> None:
    f = trident.jit(program)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with count_compiles() as compiles:
        for _ in range(5):
            run(f, x, y)
    assert compiles() == 1


def test_dtype_change_compiles_new_specialization() -> None:
    f = trident.jit(program)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with count_compiles() as compiles:
        run(f, x, y)
        run(f, x.double(), y.double())
        run(f, x, y)  # back to the first: a hit
        run(f, x.double(), y.double())
    assert compiles() == 2


def test_shape_change_goes_symbolic_once() -> None:
    f = trident.jit(program)
    with count_compiles() as compiles:
        for n in (4, 5, 6, 7, 9, 16):
            run(f, torch.randn(n, 8), torch.randn(n, 8))
    assert compiles() == 2, trident.explain(f)


def test_stride_and_contiguity_change() -> None:
    f = trident.jit(program)
    base = torch.randn(8, 4)
    with count_compiles() as compiles:
        run(f, torch.randn(4, 8), torch.randn(4, 8))
        run(f, base.t(), torch.randn(4, 8))  # same sizes, transposed strides
        run(f, base.t(), torch.randn(4, 8))
    assert compiles() == 2
    assert "stride mismatch at dim 0: expected 8, got 1" in trident.explain(f)


def test_storage_offset_and_alignment_change() -> None:
    f = trident.jit(program)
    storage = torch.randn(64)
    aligned = storage[:32].view(4, 8)
    shifted = storage[1:33].view(4, 8)  # offset 1 element: 4 bytes, not 16-byte aligned
    y = torch.randn(4, 8)
    with count_compiles() as compiles:
        run(f, aligned, y)
        run(f, shifted, y)
        run(f, shifted, y)
        run(f, aligned, y)
    assert compiles() == 2, trident.explain(f)


def test_int_value_change() -> None:
    def scale(x, n):  # type: ignore[no-untyped-def]
        return x * n, n + 1

    f = trident.jit(scale)
    x = torch.randn(3)
    with count_compiles() as compiles, torch.no_grad():
        for n in (2, 2, 3, 4, 5, -7):
            out, m = f(x, n)
            torch.testing.assert_close(out, x * n)
            assert m == n + 1
    assert compiles() == 2


def test_explain_names_the_mismatch() -> None:
    f = trident.jit(program)
    run(f, torch.randn(4, 8), torch.randn(4, 8))
    run(f, torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64))
    text = trident.explain(f)
    assert "argument 'y': dtype mismatch: expected torch.float32, got torch.float64" in text
    assert "specialization 0" in text and "specialization 1" in text


def test_global_grad_mode_is_guarded() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x * 2

    f = trident.jit(fn)
    x = torch.randn(3)
    with count_compiles() as compiles:
        with torch.no_grad():
            f(x)
        f(x)  # grad mode on: a different specialization (no tensor requires grad, so still compiled)
        with torch.no_grad():
            f(x)
    assert compiles() == 2


def test_requires_grad_runs_eagerly_with_autograd() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return (x * 2).sum()

    f = trident.jit(fn)
    x = torch.randn(3, requires_grad=True)
    with expect_fallback("argument 'x' requires grad while grad mode is on"), pytest.warns(UserWarning):
        out = f(x)
    out.backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))
    assert f._trident.eager_calls == 1 and not f._trident.specializations
    assert "requires grad" in trident.explain(f)


def test_guard_that_divides_by_zero_misses() -> None:
    """A symbolic int divisor that is 0 for a call: the native guard misses, and its Python twin (miss reason,
    int64 check) must say so instead of raising ZeroDivisionError out of the miss path (found by
    tests/unit/test_guard_differential.py) -- here the program itself catches the division and eager returns."""

    def divide(x, n: int):  # type: ignore[no-untyped-def]
        try:
            k = x.shape[0] // n
        except ZeroDivisionError:
            k = 1
        return x[:k] * 2

    f = trident.jit(divide)
    with torch.no_grad(), count_compiles() as compiles:
        for n in (2, 3, 0):  # the second makes n symbolic; the third divides by zero in that specialization's guards
            x = torch.arange(6.0 + n)
            torch.testing.assert_close(f(x, n), divide(x, n), rtol=0, atol=0)
        assert compiles() == 3
    assert "divides by zero (s" in f._trident.last_miss_reason, trident.explain(f)  # type: ignore[attr-defined]
    assert f._trident.eager_calls == 0 and sum(f._trident.entry.hits()) == 3  # type: ignore[attr-defined]
