"""End-to-end: bad inputs to jitted functions give a correct result or a clear exception (eager's, where
eager raises), never a crash, and the function keeps working afterwards."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import trident

from .test_llm_blocks import clone_tree
from .test_programs import assert_same

# ---------------------------------------------------------------------------------------------------------
# Bad inputs: a correct result or a clear exception, never a crash; the function keeps working afterwards


def outcome(fn, args, kwargs=None):  # type: ignore[no-untyped-def]
    """('ok', result) or ('raise', exception)."""
    try:
        return "ok", fn(*args, **(kwargs or {}))
    except Exception as e:  # noqa: BLE001
        return "raise", e


def expect_like_eager(fn, jitted, args, kwargs=None, same_error: bool = True):  # type: ignore[no-untyped-def]
    """jitted behaves as eager: the same result, or an exception of eager's type (or, when same_error is
    False, a clear TridentError) where eager raises or the input cannot be compiled. `args` is a tuple
    (cloned for eager) or a callable making fresh arguments."""
    eager_args = args() if callable(args) else clone_tree(list(args))
    jit_args = args() if callable(args) else args
    with torch.no_grad():
        e_kind, e_val = outcome(fn, eager_args, clone_tree(kwargs))
        j_kind, j_val = outcome(jitted, jit_args, kwargs)
    if e_kind == "raise":
        assert j_kind == "raise", f"eager raised {e_val!r}, jitted returned {j_val!r}"
        if same_error:
            assert type(j_val) is type(e_val), (j_val, e_val)
        else:
            assert isinstance(j_val, (type(e_val), trident.exc.TridentError)), (j_val, e_val)
    elif j_kind == "raise":
        assert isinstance(j_val, trident.exc.TridentError) and not same_error, repr(j_val)
    else:
        return j_val, e_val
    return None


def still_works(jitted, fn, *args):  # type: ignore[no-untyped-def]
    with torch.no_grad():
        assert_same(jitted(*clone_tree(list(args))), fn(*clone_tree(list(args))))


def two_arg(x, y, *, scale=1.0):  # type: ignore[no-untyped-def]
    return torch.sin(x) * scale + y


# Guards: wrong arity and unknown / duplicate keywords raise eager's TypeError, before and after a compile.
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
    for args, kwargs in bad_calls:
        expect_like_eager(two_arg, jitted, args, kwargs)
        with pytest.raises(TypeError) as eager:
            two_arg(*args, **kwargs)
        with pytest.raises(TypeError) as jit_error:
            jitted(*args, **kwargs)
        assert str(jit_error.value) == str(eager.value)  # eager's wording, word for word
    still_works(jitted, two_arg, x, y)


# Guards: a list (or a Python float) where a tensor was compiled; None instead of a tensor.
@pytest.mark.parametrize("bad", [[1.0, 2.0, 3.0], 2.5, None, "text"], ids=["list", "float", "none", "str"])
def test_non_tensor_where_tensor_compiled(bad: object) -> None:
    jitted = trident.jit(two_arg)
    x, y = torch.randn(3), torch.randn(3)
    still_works(jitted, two_arg, x, y)
    expect_like_eager(two_arg, jitted, (bad, y), same_error=False)
    expect_like_eager(two_arg, jitted, (x, bad), same_error=False)
    still_works(jitted, two_arg, x, y)


# Guards: a list of floats where eager accepts one (the function builds a tensor from it).
def test_list_argument_where_eager_accepts_it() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return torch.as_tensor(x) * 2

    jitted = trident.jit(fn)
    still_works(jitted, fn, torch.randn(3))
    result = expect_like_eager(fn, jitted, ([1.0, 2.0, 3.0],), same_error=False)
    if result is not None:
        assert_same(*result)
    result = expect_like_eager(fn, jitted, ([4.0, 5.0, 6.0],), same_error=False)  # other values, not stale
    if result is not None:
        assert_same(*result)
    still_works(jitted, fn, torch.randn(3))


class MyTensor(torch.Tensor):
    pass


# Guards: a tensor subclass: eager's result (subclass type and values), also after the subclass instance is
# mutated in place (no stale data baked into a specialization).
def test_tensor_subclass_argument() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return x * 2 + y

    jitted = trident.jit(fn)
    x, y = torch.randn(3), torch.randn(3)
    still_works(jitted, fn, x, y)
    sub = torch.randn(3).as_subclass(MyTensor)
    for _ in range(2):
        result = expect_like_eager(fn, jitted, (sub, y), same_error=False)
        if result is not None:
            actual, expected = result
            assert type(actual) is type(expected)
            torch.testing.assert_close(actual.as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        sub.add_(1.0)
    still_works(jitted, fn, x, y)


# Guards: a sparse COO tensor where a dense one was compiled.
def test_sparse_tensor_argument() -> None:
    def fn(x, y):  # type: ignore[no-untyped-def]
        return torch.mm(x * 2, y)

    jitted = trident.jit(fn)
    x, y = torch.randn(3, 3), torch.randn(3, 2)
    still_works(jitted, fn, x, y)
    sparse = (torch.randn(3, 3) * (torch.rand(3, 3) > 0.5)).to_sparse()
    result = expect_like_eager(fn, jitted, (sparse, y), same_error=False)
    if result is not None:
        assert_same(*result)
    still_works(jitted, fn, x, y)


# Guards: a tensor requiring grad with grad mode on runs with autograd (result has a grad_fn, backward
# works), both for a function never compiled and after a no_grad specialization exists.
@pytest.mark.parametrize("compiled_first", [False, True])
def test_requires_grad_with_grad_mode_on(compiled_first: bool) -> None:
    def fn(x, w):  # type: ignore[no-untyped-def]
        return (torch.tanh(x @ w) * 2).sum(), x.shape[0]

    jitted = trident.jit(fn)
    x, w = torch.randn(2, 3), torch.randn(3, 4)
    if compiled_first:
        still_works(jitted, fn, x, w)
        jitted(x, w)  # grad mode on, no tensor requires grad: may compile
    wr = w.clone().requires_grad_(True)
    we = w.clone().requires_grad_(True)
    (out, n), (expected, ne) = jitted(x, wr), fn(x, we)
    assert out.requires_grad and n == ne
    out.backward()
    expected.backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(wr.grad, we.grad)
    still_works(jitted, fn, x, w)


# Guards: module parameters require grad; with grad mode on, the call must keep autograd (eager fallback),
# and under no_grad it compiles and matches.
def test_module_parameters_with_grad_mode_on() -> None:
    model = nn.Linear(4, 3)
    fwd = trident.jit(model.forward)
    x = torch.randn(2, 4)
    out = fwd(x)
    assert out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(model.bias.grad, torch.full((3,), 2.0))
    with torch.no_grad():
        assert_same(fwd(x), model(x))


# Guards: the grad-mode eager fallback (module parameters require grad) does not capture the function again
# at every call: a call costs eager time, not a trace.
def test_grad_mode_fallback_does_not_retrace(monkeypatch: pytest.MonkeyPatch) -> None:
    import trident.driver as driver

    traces = []
    original = driver.trace_function
    monkeypatch.setattr(driver, "trace_function", lambda *a, **k: traces.append(1) or original(*a, **k))
    model = nn.Linear(4, 3)
    fwd = trident.jit(model.forward)
    x = torch.randn(2, 4)
    with pytest.warns(UserWarning, match="require grad"):
        for _ in range(4):
            out = fwd(x)
            assert out.requires_grad
            torch.testing.assert_close(out, model(x))
    assert len(traces) <= 1


# Guards: an nn.Parameter passed as an argument (its own type tag) under no_grad, then a plain tensor.
def test_parameter_as_argument() -> None:
    def fn(x, w):  # type: ignore[no-untyped-def]
        return x @ w, w

    jitted = trident.jit(fn)
    p = nn.Parameter(torch.randn(3, 2))
    x = torch.randn(4, 3)
    with torch.no_grad():
        out = jitted(x, p)
        assert_same(out[0], x @ p)
        assert out[1] is p
        t = torch.randn(3, 2)
        out = jitted(x, t)
        assert_same(out[0], x @ t)
        assert out[1] is t


# Guards: a non-strided tensor argument runs eagerly (a correct result) with one warning naming the argument.
def test_non_strided_argument_runs_eagerly_and_names_the_argument() -> None:
    def fn(weights, y):  # type: ignore[no-untyped-def]
        return torch.mm(weights * 2, y)

    jitted = trident.jit(fn)
    w, y = torch.eye(3).to_sparse(), torch.randn(3, 2)
    with pytest.warns(UserWarning, match="argument 'weights' is a Tensor with layout torch.sparse_coo"):
        with torch.no_grad():
            torch.testing.assert_close(jitted(w, y), fn(w, y))
    assert "argument 'weights'" in trident.explain(jitted)


# Guards: an in-place op on an expanded (overlapping) input raises eager's RuntimeError, not a crash.
def test_in_place_on_expanded_input_raises() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x.add_(1.0)

    jitted = trident.jit(fn)
    still_works(jitted, fn, torch.randn(4, 3))
    expect_like_eager(fn, jitted, lambda: (torch.randn(4, 1).expand(4, 3),), same_error=False)
    still_works(jitted, fn, torch.randn(4, 3))


# Guards: a 0-dim tensor, then a different rank, then a non-contiguous input.
def test_rank_and_layout_changes() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x * 3 - 1, x.sum()

    jitted = trident.jit(fn)
    with torch.no_grad():
        for x in (torch.tensor(2.0), torch.randn(3), torch.randn(3, 4), torch.randn(4, 3).t(), torch.randn(3, 4)[:, ::2]):
            assert_same(jitted(x), fn(x))  # not cloned: clone() would change the strides
