"""End-to-end: bad inputs to jitted functions behave exactly as eager (the same result, or an exception of
eager's type with eager's message), never a crash, and the function keeps working afterwards. Each test says
whether the bad input compiles natively or runs eagerly on purpose (a documented fallback), and asserts it."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import trident
from trident.testing import count_compiles, expect_fallback

from .test_llm_blocks import clone_tree
from .test_programs import assert_same

# ---------------------------------------------------------------------------------------------------------
# Bad inputs: eager's result or eager's exception, never a crash; the function keeps working afterwards

Outcome = tuple[str, Any]  # ('ok', result) or ('raise', exception)


def outcome(fn: Callable[..., object], args: list[object], kwargs: dict[str, object] | None = None) -> Outcome:
    try:
        return "ok", fn(*args, **(kwargs or {}))
    except Exception as e:  # noqa: BLE001 - the exception is the outcome compared with eager's
        return "raise", e


def assert_same_outcome(actual: Outcome, expected: Outcome) -> None:
    """The same result, or an exception of exactly eager's type with eager's message."""
    if expected[0] == "raise":
        assert actual[0] == "raise", f"eager raised {expected[1]!r}, jitted returned {actual[1]!r}"
        assert type(actual[1]) is type(expected[1]), (actual[1], expected[1])
        assert str(actual[1]) == str(expected[1])
    else:
        assert actual[0] == "ok", f"eager returned {expected[1]!r}, jitted raised {actual[1]!r}"
        assert_same(actual[1], expected[1])


def like_eager(fn, jitted, args, kwargs=None) -> Outcome:  # type: ignore[no-untyped-def]
    """Calls fn and jitted (under no_grad) on equal arguments - `args` a tuple (cloned for eager) or a callable
    making fresh ones - and asserts the same outcome and the same argument state afterwards (an in-place op
    that raises must not have half-written its input). Returns eager's outcome."""
    eager_args = list(args()) if callable(args) else clone_tree(list(args))
    jit_args = list(args()) if callable(args) else list(args)
    with torch.no_grad():
        expected = outcome(fn, eager_args, clone_tree(kwargs))
        actual = outcome(jitted, jit_args, kwargs)
    assert_same_outcome(actual, expected)
    for a, e in zip(jit_args, eager_args):
        if isinstance(e, torch.Tensor) and e.layout == torch.strided:
            assert torch.equal(a, e)
    return expected


def hits(jitted: object) -> int:
    return sum(jitted._trident.entry.hits())  # type: ignore[attr-defined]


def eager_calls(jitted: object) -> int:
    return jitted._trident.eager_calls  # type: ignore[attr-defined]


def still_works(jitted, fn, *args) -> None:  # type: ignore[no-untyped-def]
    """A call with good arguments runs natively (a hit, no eager call) and matches eager."""
    before = hits(jitted), eager_calls(jitted)
    assert like_eager(fn, jitted, args)[0] == "ok"
    assert (hits(jitted), eager_calls(jitted)) == (before[0] + 1, before[1])


def two_arg(x, y, *, scale=1.0):  # type: ignore[no-untyped-def]
    return torch.sin(x) * scale + y


# Guards: wrong arity and unknown / duplicate keywords raise eager's TypeError word for word, before and after
# a compile, from the native entry's signature check (no capture, no eager call).
@pytest.mark.parametrize("compiled_first", [False, True])
def test_bad_call_signatures_raise_type_error(compiled_first: bool) -> None:
    jitted = trident.jit(two_arg)
    x, y = torch.randn(3), torch.randn(3)
    if compiled_first:
        still_works(jitted, two_arg, x, y)
    bad_calls = [
        ((x,), {}),
        ((x, y, 2.0), {}),
        ((x, y), {"bogus": 1}),
        ((x, y), {"x": x}),
        ((), {"y": y}),
        ((x,), {"y": y, "scale": 2.0, "zzz": None}),
    ]
    with count_compiles() as compiles:
        for args, kwargs in bad_calls:
            kind, error = like_eager(two_arg, jitted, args, kwargs)
            assert kind == "raise" and type(error) is TypeError
    assert compiles() == 0 and eager_calls(jitted) == 0
    still_works(jitted, two_arg, x, y)


# Guards: a list, None or a string where a tensor was compiled: eager's own TypeError, word for word. Capture
# raises it on the fake tensors, so those calls run eagerly (once per guard set) to raise eager's exception.
# A Python float for `y` is valid (tensor + float): that compiles natively, `y` guarded as a float.
@pytest.mark.parametrize("bad", [[1.0, 2.0, 3.0], 2.5, None, "text"], ids=["list", "float", "none", "str"])
def test_non_tensor_where_tensor_compiled(bad: object) -> None:
    jitted = trident.jit(two_arg)
    x, y = torch.randn(3), torch.randn(3)
    still_works(jitted, two_arg, x, y)
    with expect_fallback("capturing 'two_arg' raised TypeError", function="two_arg"):
        kind, error = like_eager(two_arg, jitted, (bad, y))  # torch.sin(bad)
    assert kind == "raise" and str(error).startswith("sin(): argument 'input' (position 1) must be Tensor")
    if isinstance(bad, float):
        with count_compiles() as compiles:
            for _ in range(2):  # compiled once, then a hit
                assert like_eager(two_arg, jitted, (x, bad))[0] == "ok"
        assert compiles() == 1 and eager_calls(jitted) == 1
    else:
        with expect_fallback("capturing 'two_arg' raised TypeError", function="two_arg"):
            kind, error = like_eager(two_arg, jitted, (x, bad))  # tensor + bad
        assert kind == "raise" and str(error).startswith("unsupported operand type(s) for +: 'Tensor'")
        assert eager_calls(jitted) == 2
    still_works(jitted, two_arg, x, y)


# Guards: a list of floats where eager accepts one (the function builds a tensor from it) compiles natively,
# with the values guarded: other values are not served by the first specialization (no stale result).
def test_list_argument_where_eager_accepts_it() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return torch.as_tensor(x) * 2

    jitted = trident.jit(fn)
    still_works(jitted, fn, torch.randn(3))
    still_works(jitted, fn, [1.0, 2.0, 3.0])
    still_works(jitted, fn, [4.0, 5.0, 6.0])  # other values: a miss, then eager's values
    still_works(jitted, fn, [1.0, 2.0, 3.0])
    still_works(jitted, fn, torch.randn(3))
    assert eager_calls(jitted) == 0


class MyTensor(torch.Tensor):
    pass


# Guards: a tensor subclass runs eagerly (documented: Trident compiles plain tensors) and gives eager's result
# (the subclass type and values), also after the subclass instance is mutated in place.
def test_tensor_subclass_argument() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return x * 2 + y

    jitted = trident.jit(fn)
    x, y = torch.randn(3), torch.randn(3)
    still_works(jitted, fn, x, y)
    sub = torch.randn(3).as_subclass(MyTensor)
    for _ in range(2):
        with expect_fallback("argument 'x' is a MyTensor with layout torch.strided"):
            with torch.no_grad():
                actual, expected = jitted(sub, y), fn(sub, y)
        assert type(actual) is MyTensor and type(expected) is MyTensor
        assert torch.equal(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        sub.add_(1.0)
    assert eager_calls(jitted) == 2
    still_works(jitted, fn, x, y)


# Guards: a sparse COO tensor where a dense one was compiled runs eagerly with eager's result.
def test_sparse_tensor_argument() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return torch.mm(x * 2, y)

    jitted = trident.jit(fn)
    x, y = torch.randn(3, 3), torch.randn(3, 2)
    still_works(jitted, fn, x, y)
    sparse = (torch.randn(3, 3) * (torch.rand(3, 3) > 0.5)).to_sparse()
    with expect_fallback("argument 'x' is a Tensor with layout torch.sparse_coo"):
        assert like_eager(fn, jitted, (sparse, y))[0] == "ok"
    assert eager_calls(jitted) == 1
    still_works(jitted, fn, x, y)


# Guards: a tensor requiring grad with grad mode on runs eagerly with autograd (result has a grad_fn, backward
# works), both for a function never compiled and after specializations exist.
@pytest.mark.parametrize("compiled_first", [False, True])
def test_requires_grad_with_grad_mode_on(compiled_first: bool) -> None:
    def fn(x, w):  # type: ignore[no-untyped-def]
        return (torch.tanh(x @ w) * 2).sum(), x.shape[0]

    jitted = trident.jit(fn)
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    if compiled_first:
        still_works(jitted, fn, x, w)
        with count_compiles() as compiles:  # grad mode on, no tensor requires grad: compiles (own guard)
            out, n = jitted(x, w)
        assert compiles() == 1 and eager_calls(jitted) == 0 and not out.requires_grad
    wr = w.clone().requires_grad_(True)
    we = w.clone().requires_grad_(True)
    with expect_fallback("argument 'w' requires grad while grad mode is on"):
        (out, n), (expected, ne) = jitted(x, wr), fn(x, we)
    assert out.requires_grad and n == ne
    out.backward()
    expected.backward()
    assert torch.equal(out, expected)
    assert torch.equal(wr.grad, we.grad)
    assert eager_calls(jitted) == 1
    still_works(jitted, fn, x, w)


# Guards: module parameters require grad; with grad mode on, the call keeps autograd (eager fallback), and
# under no_grad it compiles and matches.
def test_module_parameters_with_grad_mode_on() -> None:
    model = nn.Linear(4, 3)
    fwd = trident.jit(model.forward)
    x = torch.randn(2, 4)
    with expect_fallback("reads tensors that require grad (module parameters?) while grad mode is on"):
        out = fwd(x)
    assert out.requires_grad
    out.sum().backward()
    assert torch.equal(model.bias.grad, torch.full((3,), 2.0))
    with count_compiles() as compiles:
        still_works(fwd, model, x)
    assert compiles() == 1 and eager_calls(fwd) == 1


# Guards: the grad-mode eager fallback (module parameters require grad) captures the function once, not at every
# call: a call costs eager time, not a trace; one warning.
def test_grad_mode_fallback_does_not_retrace(monkeypatch: pytest.MonkeyPatch) -> None:
    import trident.driver as driver

    traces = []
    original = driver.trace_function
    monkeypatch.setattr(driver, "trace_function", lambda *a, **k: traces.append(1) or original(*a, **k))
    model = nn.Linear(4, 3)
    fwd = trident.jit(model.forward)
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match="require grad") as warned, expect_fallback("require grad") as events:
        for _ in range(4):
            out = fwd(x)
            assert out.requires_grad
            assert torch.equal(out, model(x))
    assert len(traces) == 1 and len(events) == 4 and eager_calls(fwd) == 4
    assert len([w for w in warned if "require grad" in str(w.message)]) == 1


# Guards: an nn.Parameter passed as an argument (its own type tag) under no_grad, then a plain tensor: both
# compile natively and the returned argument is the caller's object.
def test_parameter_as_argument() -> None:
    def fn(x, w):  # type: ignore[no-untyped-def]
        return x @ w, w

    jitted = trident.jit(fn)
    p = nn.Parameter(torch.randn(3, 2))
    x = torch.randn(4, 3)
    with torch.no_grad(), count_compiles() as compiles:
        out = jitted(x, p)
        assert_same(out[0], x @ p)
        assert out[1] is p
        t = torch.randn(3, 2)
        out = jitted(x, t)
        assert_same(out[0], x @ t)
        assert out[1] is t
    assert compiles() == 2 and hits(jitted) == 2 and eager_calls(jitted) == 0


# Guards: a non-strided tensor argument runs eagerly (a correct result) with one warning naming the argument.
def test_non_strided_argument_runs_eagerly_and_names_the_argument() -> None:
    def fn(weights, y):  # type: ignore[no-untyped-def]
        return torch.mm(weights * 2, y)

    jitted = trident.jit(fn)
    w, y = torch.eye(3).to_sparse(), torch.randn(3, 2)
    reason = "argument 'weights' is a Tensor with layout torch.sparse_coo"
    with pytest.warns(UserWarning, match=reason), expect_fallback(reason):
        with torch.no_grad():
            assert torch.equal(jitted(w, y), fn(w, y))
    assert "argument 'weights'" in trident.explain(jitted)


# Guards: an in-place op on an expanded (overlapping) input compiles, and the native call raises eager's
# RuntimeError word for word, leaving the input as eager leaves it; the function keeps working.
def test_in_place_on_expanded_input_raises() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x.add_(1.0)

    jitted = trident.jit(fn)
    still_works(jitted, fn, torch.randn(4, 3))
    column = torch.randn(4, 1)
    with count_compiles() as compiles:
        kind, error = like_eager(fn, jitted, lambda: (column.clone().expand(4, 3),))
    assert kind == "raise" and type(error) is RuntimeError and "more than one element" in str(error)
    assert compiles() == 1 and eager_calls(jitted) == 0
    still_works(jitted, fn, torch.randn(4, 3))


# Guards: a 0-dim tensor, then a different rank, then a non-contiguous input: each natively, eager's result.
def test_rank_and_layout_changes() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x * 3 - 1, x.sum()

    jitted = trident.jit(fn)
    xs = (torch.tensor(2.0), torch.randn(3), torch.randn(3, 4), torch.randn(4, 3).t(), torch.randn(3, 4)[:, ::2])
    with torch.no_grad():
        for x in xs:
            assert_same(jitted(x), fn(x))  # not cloned: clone() would change the strides
    assert hits(jitted) == len(xs) and eager_calls(jitted) == 0
