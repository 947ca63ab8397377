"""Minimal reproductions of the Trident bugs the guard fuzzing (test_fuzz_guards.py) found, kept out of its drawn
domain: ints beyond int64 and int64 arithmetic, division by zero, bools as numbers, capture-time errors, setitem
with a symbolic index, in-place effects before a failing op, inference tensors."""
from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

import trident
import trident.testing

from .eager_compare import assert_same_value, outcome


def _eager_and_jitted(fn: Callable[..., object], *calls: tuple[object, ...], fallback: str | None = None) -> None:
    """Calls fn eagerly and jitted (one jitted object) on each argument tuple; same outcome each time.

    A call eager raises on may run eagerly (it gives eager's exception). One eager returns from must run natively,
    unless `fallback` is given: then such calls may run eagerly for that reason, and at least one must."""
    jitted = trident.jit(fn)
    expected_fallbacks = []
    for args in calls:
        with torch.no_grad(), trident.testing.allow_fallback() as events:
            expected, actual = outcome(fn, list(args), {}), outcome(jitted, list(args), {})
        assert actual[0] == expected[0], f"jitted {actual[0]} {actual[1]!r}, eager {expected[0]} {expected[1]!r}"
        if expected[0] == "raised":
            assert type(actual[1]) is type(expected[1]), f"jitted raised {actual[1]!r}, eager {expected[1]!r}"
            continue
        assert_same_value(actual[1], expected[1], [], [], "result")
        unexpected = [e.reason for e in events if fallback is None or fallback not in e.reason]
        assert not unexpected, f"{args!r} ran eagerly although eager returns: {unexpected}"
        expected_fallbacks += events
    if fallback is not None:
        assert expected_fallbacks, f"no call ran eagerly for {fallback!r}"


# An int argument outside int64 (once as the first call, once after n became symbolic) runs eagerly.
@pytest.mark.parametrize("calls", [[2**63], [2, 3, 2**63, -(2**70), 4]], ids=["constant", "symbolic"])
def test_int_argument_outside_int64(calls: list[int]) -> None:
    x = torch.ones(2)
    _eager_and_jitted(lambda x, n: x * n, *[(x, n) for n in calls], fallback="is an int outside int64")


def test_symbolic_int_overflow_runs_eagerly_instead_of_wrapping() -> None:
    """Python ints grow where the compiled int64 arithmetic cannot: x.shape[0] * n with n = 2**62 and 4 rows
    is 2**64. The compiled code must not wrap to 0; the specialization's guards reject the call (the product is
    a guard: it must fit in int64) and it runs eagerly, giving Python's value."""
    f = trident.jit(lambda x, n: x.shape[0] * n)
    x = torch.ones(4)
    assert (f(x, 2), f(x, 3)) == (8, 12)  # n is symbolic from the second call on
    with pytest.warns(UserWarning, match="leaves int64"), trident.testing.expect_fallback("leaves int64"):
        assert f(x, 2**62) == 2**64
    assert f(x, 5) == 20  # still usable
    assert f._trident.eager_calls == 1 and sum(f._trident.entry.hits()) == 3


def test_int64_guards_compute_ints_as_the_program_does() -> None:
    """y.shape[0] * n with y = x[lo:hi]: the program computes (hi - lo) * n, which fits in int64 where the
    ShapeEnv's expansion hi*n - lo*n does not. The range guard must compute it as the program does, so the call
    runs natively (it once compiled a specialization whose guards rejected its own call: "internal error");
    an int that does leave int64 runs eagerly, by design."""
    def sized(x, n: int, lo: int, hi: int):  # type: ignore[no-untyped-def]
        return x[lo:hi].shape[0] * n + lo

    f = trident.jit(sized)
    x = torch.ones(7)
    with torch.no_grad():
        assert (f(x, 5, 1, 4), f(x, 6, 0, 5)) == (16, 30)  # n, lo, hi symbolic from the second call on
        n = 3788591898239055928  # 2 * n fits in int64, 3 * n does not
        assert f(x, n, 1, 3) == sized(x, n, 1, 3)  # natively: strict mode raises on a fallback
        with trident.testing.expect_fallback("leaves int64"):
            assert f(x, n, 0, 3) == sized(x, n, 0, 3)
    assert f._trident.eager_calls == 1, trident.explain(f)


@pytest.mark.parametrize("fn", [
    lambda x, n: x.shape[0] // n,
    lambda x, n: x.shape[0] % n,
    lambda x, n: torch.zeros(x.shape[0] // n),
], ids=["floordiv", "remainder", "size-from-floordiv"])
def test_symbolic_int_division_by_zero_raises_like_eager(fn: Callable[..., object]) -> None:
    """A division by zero in compiled int64 arithmetic traps (SIGFPE would kill the process); it must raise
    ZeroDivisionError as eager does, and leave the function usable."""
    x = torch.ones(6)
    _eager_and_jitted(fn, (x, 2), (x, 3), (x, 0), (x, 4), (x, -(2**63)))


# A bool argument used as a number (the importer wraps it in aten.Int.bool).
def test_bool_argument_used_as_a_number() -> None:
    _eager_and_jitted(lambda x, flag: x * flag, (torch.ones(3), True))
    _eager_and_jitted(lambda x, flag: x * flag, (torch.tensor([True, False]), True))  # stays bool, as eager


# An operator error raised while capturing comes from torch's meta functions / decompositions, not from
# eager's kernels: its type can differ, or a call eager accepts can fail. Such a call runs eagerly.
@pytest.mark.parametrize("fn, args", [
    (lambda x: x[0:1], (torch.tensor(1.0),)),  # slice of a 0-dim tensor
    (lambda x: x.amax(0), (torch.ones(0),)),  # reduction without identity over an empty dim
    (lambda x: x.view(-1), (torch.zeros(4, 3).t(),)),  # eager RuntimeError, jitted ValueError (torch/_refs)
], ids=["slice-0-dim", "amax-empty-dim", "view-non-viewable"])
def test_capture_time_errors_are_eagers(fn: Callable[..., object], args: tuple[torch.Tensor, ...]) -> None:
    with trident.testing.expect_fallback("capturing"):
        _eager_and_jitted(fn, args)


def test_meta_function_stricter_than_eager_runs_eagerly() -> None:
    """Eager's CPU bmm returns zeros for an empty inner dim without checking dtypes; torch's meta function
    raises, so capture cannot trace this call and it runs eagerly (torch's gap, not one Trident can close)."""
    a, b = torch.zeros(1, 0, dtype=torch.int64), torch.zeros(2, 0, 1)
    _eager_and_jitted(lambda a, b: a @ b, (a, b), fallback="expected scalar type")


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "BUG: under no_grad, inputs that require grad are traced detached (capture/trace._fake_leaf: "
    "from_tensor(t.detach())), but eager's composite ops still look at requires_grad: at::matmul does not "
    "fold a 2-D @ 3-D product when an input requires grad, so eager returns a different decomposition. "
    "Seen as output strides: (3, 2) @ (1, 2, 0) gives strides (3, 1, 3) in eager, (3, 1, 1) jitted. "
    "Keeping requires_grad on the fake inputs fixes this case but breaks views of inputs (from_tensor of a "
    "non-detached view invents base sizes the guards cannot bind); it needs from_tensor of the view with "
    "requires_grad set on the fake only."))
def test_inputs_requiring_grad_under_no_grad_trace_like_eager() -> None:
    a, b = torch.randn(3, 2, requires_grad=True), torch.randn(1, 2, 0, requires_grad=True)
    _eager_and_jitted(lambda a, b: a @ b, (a, b))


@pytest.mark.parametrize("dtype, k, v", [
    # `x[k] = v` with a symbolic k: the scalar is converted to the destination's dtype first, as eager does
    (torch.float16, 2, 1e30),  # eager: a row of inf (torch 2.13), fill_'s overflow error (torch 2.15)
    # eager: RuntimeError from the conversion before the index is checked; capture fails (IndexError from
    # select) and the call runs eagerly
    (torch.int64, 7, math.inf),
], ids=["float16-overflow", "int64-inf-out-of-range"])
def test_setitem_with_symbolic_index_behaves_like_eager(dtype: torch.dtype, k: int, v: float) -> None:
    def setitem_row(x, k: int, v: float):  # type: ignore[no-untyped-def]
        x[k] = v
        return x

    x = torch.zeros(3, 2, dtype=dtype)
    # k = 0, then 1: k is symbolic from the second call on
    _eager_and_jitted(setitem_row, (x.clone(), 0, 1.0), (x.clone(), 1, 1.0), (x.clone(), k, v))


# Eager's in-place updates before the failing op happen too: the call runs eagerly once capture fails.
def test_in_place_effects_before_a_capture_time_error_are_eagers() -> None:
    def update(x, y):  # type: ignore[no-untyped-def]
        x.mul_(2.0)
        x.add_(y)  # y does not broadcast to x: RuntimeError
        return x

    f = trident.jit(update)
    x_eager, x_jit, y = torch.ones(3), torch.ones(3), torch.ones(4)
    with torch.no_grad():
        with pytest.raises(RuntimeError):
            update(x_eager, y)
        with trident.testing.expect_fallback("x.add_(y)"), pytest.raises(RuntimeError):
            f(x_jit, y)
    assert torch.equal(x_jit, x_eager), (x_jit, x_eager)


def test_in_place_update_of_inference_tensors_under_inference_mode() -> None:
    """Capture runs with inference mode off; inference tensors (a KV cache made under inference_mode) must
    still be updated in place as eager does."""
    def write(cache, row, pos: int):  # type: ignore[no-untyped-def]
        cache[pos].copy_(row)
        return cache.sum(0)

    f = trident.jit(write)
    with torch.inference_mode():
        cache, expected_cache = torch.zeros(4, 3), torch.zeros(4, 3)
        for pos in range(4):
            row = torch.full((3,), float(pos + 1))
            torch.testing.assert_close(f(cache, row, pos), write(expected_cache, row, pos))
        assert torch.equal(cache, expected_cache) and cache.is_inference()
