"""TRIDENT_MAX_SPECIALIZATIONS: past the cap, new inputs run eagerly, correctly, with one warning.

The cap is set with `override(max_specializations=3)` (what TRIDENT_MAX_SPECIALIZATIONS=3 sets) and the
function is fed six dtypes, three times each: the first three dtypes compile, the other three run eagerly,
the compiled ones keep hitting, one warning is given and explain names the reason.
"""
from __future__ import annotations

import contextlib
import warnings

import pytest
import torch

import trident
from trident.knobs import override  # `trident.knobs` is the Knobs instance, not the module
from trident.testing import count_compiles, expect_fallback

CAP = 3
DTYPES = [torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.bfloat16]
ROUNDS = 3


def program(x, n: int):  # type: ignore[no-untyped-def]
    return x * 2 + n, x.sum(0), x[1:]


def make(dtype: torch.dtype, rows: int = 4) -> torch.Tensor:
    return (torch.randn(rows, 5) * 10).to(dtype)


def assert_same(actual: object, expected: object) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, tuple):
        for a, e in zip(actual, expected, strict=True):  # type: ignore[call-overload]
            assert_same(a, e)
    else:
        assert isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
        assert (actual.dtype, actual.shape, actual.stride()) == (expected.dtype, expected.shape, expected.stride())
        assert torch.equal(actual, expected)


def past_the_cap(eager: bool, cap: int) -> contextlib.AbstractContextManager[object]:
    """expect_fallback around the calls past the cap; strict (no fallback allowed) around the compiled ones."""
    return expect_fallback(f"reached TRIDENT_MAX_SPECIALIZATIONS={cap}") if eager else contextlib.nullcontext()


def trident_warnings(records: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in records if str(w.message).startswith("trident:")]


def test_past_the_cap_new_inputs_run_eagerly_with_one_warning(recwarn: pytest.WarningsRecorder) -> None:
    f = trident.jit(program)
    state = f._trident
    with override(max_specializations=CAP), torch.no_grad(), count_compiles() as compiles:
        for _ in range(ROUNDS):
            for i, dtype in enumerate(DTYPES):
                x = make(dtype)
                with past_the_cap(i >= CAP, CAP):
                    assert_same(f(x, 1), program(x, 1))
        # a new size of a compiled dtype would need a new (symbolic) specialization: eager as well
        x = make(torch.float32, rows=9)
        with past_the_cap(True, CAP):
            assert_same(f(x, 1), program(x, 1))

    assert compiles() == CAP == len(state.specializations)
    eager = len(DTYPES) - CAP
    assert state.eager_calls == ROUNDS * eager + 1
    assert sum(state.entry.hits()) == ROUNDS * CAP  # the compiled dtypes kept running natively
    messages = trident_warnings(recwarn.list)
    assert len(messages) == 1, messages
    assert f"TRIDENT_MAX_SPECIALIZATIONS={CAP}" in messages[0]
    text = trident.explain(f)
    assert (
        f"eager fallback: 'program' reached TRIDENT_MAX_SPECIALIZATIONS={CAP} specializations; "
        "further new inputs run eagerly"
    ) in text, text
    assert f"{CAP} specialization(s)" in text and f"{state.eager_calls} eager call(s)" in text


def test_each_function_warns_once_for_its_own_cap() -> None:
    f, g = trident.jit(program), trident.jit(program)
    with override(max_specializations=1), torch.no_grad(), pytest.warns(UserWarning) as records:
        for fn in (f, g, f, g):
            for i, dtype in enumerate(DTYPES[:3]):
                x = make(dtype)
                with past_the_cap(i > 0, 1):
                    assert_same(fn(x, 2), program(x, 2))
    messages = trident_warnings(records.list)
    assert len(messages) == 2, messages  # one per function
    assert len(f._trident.specializations) == len(g._trident.specializations) == 1
    assert f._trident.eager_calls == g._trident.eager_calls == 4 and sum(f._trident.entry.hits()) == 2
    assert "TRIDENT_MAX_SPECIALIZATIONS=1" in trident.explain(f)
    assert "TRIDENT_MAX_SPECIALIZATIONS=1" in trident.explain(g)
