"""Guards on global state and on tensor bits, end to end (docs/semantics.md, "Guards").

Each test compiles under one state, changes it, and calls again: the result must be eager's under the new state
(dtype included), a new specialization must have been compiled for it, and switching back must hit the first
specialization natively, without a compile. Every call runs natively (strict mode: an eager fallback fails the
test), so a stale specialization would show as a wrong value or dtype, and a missing guard as no compile."""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

import trident
from trident.testing import count_compiles


def hits(jitted: Callable[..., object]) -> list[int]:
    """Native hits per specialization, in compile order."""
    return list(jitted._trident.entry.hits())  # type: ignore[attr-defined]


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (actual, expected)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.fixture
def default_dtype() -> Iterator[None]:
    saved = torch.get_default_dtype()
    yield
    torch.set_default_dtype(saved)


def test_default_dtype_change_recompiles_and_switching_back_hits(default_dtype: None) -> None:
    def program(x):  # type: ignore[no-untyped-def]
        # factories and Python floats follow the default dtype: the compiled ones are baked in
        return x + torch.ones(4) * 0.1, torch.arange(4.0), torch.tensor(1.5)

    jitted = trident.jit(program)
    x = torch.arange(4, dtype=torch.int32)
    with torch.no_grad(), count_compiles() as compiles:
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (1, [1])
        torch.set_default_dtype(torch.float64)
        results = jitted(x)
        for a, e in zip(results, program(x)):
            same(a, e)
        assert results[0].dtype == torch.float64  # not the float32 of the first specialization
        assert (compiles(), hits(jitted)) == (2, [1, 1])
        assert "default dtype" in trident.explain(jitted), trident.explain(jitted)
        torch.set_default_dtype(torch.float32)
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (2, [2, 1])  # the first specialization, natively


def test_cpu_autocast_change_recompiles_and_switching_back_hits() -> None:
    w = torch.randn(8, 16)

    def program(x):  # type: ignore[no-untyped-def]
        return torch.nn.functional.linear(x, w).relu() + 1  # linear runs in bf16 under CPU autocast

    jitted = trident.jit(program)
    x = torch.randn(4, 16)
    with torch.no_grad(), count_compiles() as compiles:
        same(jitted(x), program(x))
        assert (compiles(), hits(jitted)) == (1, [1])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            actual, expected = jitted(x), program(x)
        assert expected.dtype == torch.bfloat16
        same(actual, expected)
        assert (compiles(), hits(jitted)) == (2, [1, 1])
        with torch.autocast("cpu", dtype=torch.bfloat16):  # the autocast specialization hits too
            same(jitted(x), program(x))
        assert (compiles(), hits(jitted)) == (2, [1, 2])
        same(jitted(x), program(x))
        assert (compiles(), hits(jitted)) == (2, [2, 2])


def test_autocast_dtype_change_recompiles() -> None:
    """The casts a capture records follow autocast's dtype: one captured under bfloat16 must not run under
    float16 (it would return bfloat16 where eager returns float16)."""
    w = torch.randn(8, 16)

    def program(x):  # type: ignore[no-untyped-def]
        h = torch.nn.functional.linear(x, w)
        return h + torch.zeros(8, dtype=h.dtype)  # h.dtype is read at capture: the bfloat16 is baked in

    jitted = trident.jit(program)
    x = torch.randn(4, 16)
    with torch.no_grad(), count_compiles() as compiles:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            same(jitted(x), program(x))
        with torch.autocast("cpu", dtype=torch.float16):
            actual, expected = jitted(x), program(x)
        assert expected.dtype == torch.float16
        same(actual, expected)
        assert (compiles(), hits(jitted)) == (2, [1, 1])
        assert "autocast on (cpu float16)" in trident.explain(jitted), trident.explain(jitted)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            same(jitted(x), program(x))
        assert (compiles(), hits(jitted)) == (2, [2, 1])


@pytest.mark.gpu
def test_cuda_autocast_does_not_stand_for_cpu_autocast() -> None:
    """Captured under CUDA autocast, CPU tensors record no casts; under CPU autocast eager casts them."""
    w = torch.randn(8, 16)

    def program(x):  # type: ignore[no-untyped-def]
        return torch.nn.functional.linear(x, w) * 2

    jitted = trident.jit(program)
    x = torch.randn(4, 16)
    with torch.no_grad(), count_compiles() as compiles:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            same(jitted(x), program(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            actual, expected = jitted(x), program(x)
        assert expected.dtype == torch.bfloat16
        same(actual, expected)
    assert (compiles(), hits(jitted)) == (2, [1, 1])


def test_conj_bit_input_gets_its_own_specialization() -> None:
    def program(x):  # type: ignore[no-untyped-def]
        return x * 2, x.resolve_conj()  # both read the conj bit: a specialization compiled without it would drop it

    jitted = trident.jit(program)
    x = torch.randn(3, 4, dtype=torch.complex64)
    conj = x.conj()
    assert conj.is_conj()
    with torch.no_grad(), count_compiles() as compiles:
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (1, [1])
        for a, e in zip(jitted(conj), program(conj)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (2, [1, 1])
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        for a, e in zip(jitted(conj), program(conj)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (2, [2, 2])


def test_neg_bit_input_gets_its_own_specialization() -> None:
    def program(x):  # type: ignore[no-untyped-def]
        return x * 3 - 1, x.resolve_neg()

    jitted = trident.jit(program)
    x = torch.randn(3, 4)
    neg = torch._neg_view(x)  # same storage, negative bit set: reads as -x
    assert neg.is_neg()
    with torch.no_grad(), count_compiles() as compiles:
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (1, [1])
        for a, e in zip(jitted(neg), program(neg)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (2, [1, 1])
        for a, e in zip(jitted(x), program(x)):
            same(a, e)
        assert (compiles(), hits(jitted)) == (2, [2, 1])
