"""Where Trident does not run a call natively, the call still runs as eager runs it.

- A call whose capture or compile fails runs eagerly, warns once, and its guard set is remembered: later calls
  with the same inputs run eagerly without capturing again, while other inputs still compile.
- Python's scalar builtins on symbolic ints (**, /, math.sqrt, min/max, comparisons, ...) compile natively.
- A call whose int arithmetic would leave int64 runs eagerly before anything ran (no OverflowError mid-call).
- A wrong call raises the TypeError eager raises, word for word.
- Every eager path runs Triton launches on CPU tensors through Triton's interpreter, as compiled code does.
"""
from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

import trident
from trident import driver
from trident.knobs import override
from trident.testing import count_compiles, expect_fallback


def trident_warnings(records: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in records if str(w.message).startswith("trident:")]


def native_hits(jitted: Callable[..., object]) -> int:
    return sum(jitted._trident.entry.hits())  # type: ignore[attr-defined]


@pytest.fixture
def captures(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts capture attempts (calls of trace_function by the driver)."""
    calls: list[int] = []
    original = driver.trace_function

    def counting(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(driver, "trace_function", counting)
    return calls


def eager_if(condition: bool, match: str) -> contextlib.AbstractContextManager[object]:
    """expect_fallback(match) around the calls a test means to run eagerly; nothing (strict) around the others."""
    return expect_fallback(match) if condition else contextlib.nullcontext()


def line_of(fn: Callable[..., object], text: str) -> str:
    """'file:line: code' of the line of `fn`'s source containing `text`, as capture errors name it."""
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if text in line:
            return f"{inspect.getsourcefile(fn)}:{start + offset}: {line.strip()}"
    raise AssertionError(text)


# ---------------------------------------------------------------------------------------------------------
# Sticky fallback


def add_array(x, a):  # type: ignore[no-untyped-def]
    return x + a  # a numpy array: eager accepts it, capture (fake tensors) does not


def test_numpy_argument_falls_back_once_and_sticks(captures: list[int]) -> None:
    f = trident.jit(add_array)
    state = f._trident  # type: ignore[attr-defined]
    x, a = torch.randn(4), np.arange(4, dtype=np.float32)
    calls = 20
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback(
        "capturing 'add_array' raised RuntimeError at ", function="add_array"
    ) as events:
        warnings.simplefilter("always")
        for _ in range(calls):
            torch.testing.assert_close(f(x, a), add_array(x, a), rtol=0, atol=0)
    assert len(events) == calls  # every call reported, the remembered ones too
    messages = trident_warnings(records)
    assert len(messages) == 1, messages
    assert messages[0].startswith("trident: capturing 'add_array' raised RuntimeError at ")
    assert line_of(add_array, "return x + a") in messages[0]
    assert len(captures) == 1  # one capture attempt, not one per call
    assert (state.misses, state.eager_calls, len(state.specializations)) == (calls, calls, 0)
    text = trident.explain(f)
    assert "1 guard set(s) run eagerly, without capturing again:" in text, text
    assert f"runs eagerly ({calls} call(s)): capturing 'add_array' raised RuntimeError" in text, text

    # Not caught by the remembered decision: a tensor compiles and runs natively; another array object (a
    # different guard set: objects are guarded by identity) gets its own attempt.
    with torch.no_grad(), count_compiles() as compiles, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = torch.ones(4)
        for _ in range(3):
            torch.testing.assert_close(f(x, y), x + y, rtol=0, atol=0)
        b = np.ones(4, dtype=np.float32)
        with expect_fallback("capturing 'add_array' raised RuntimeError at "):
            torch.testing.assert_close(f(x, b), add_array(x, b), rtol=0, atol=0)
    assert compiles() == 1 and native_hits(f) == 3 and state.eager_calls == calls + 1
    assert len(captures) == 3


def test_a_new_array_every_call_captures_twice_then_runs_eagerly(captures: list[int]) -> None:
    """Arrays are guarded by identity; once a second array fails the same way, the remembered decision covers
    any array at that argument (as a size that changes becomes symbolic)."""
    f = trident.jit(add_array)
    x = torch.randn(4)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback(
        "capturing 'add_array' raised RuntimeError at "
    ) as events:
        warnings.simplefilter("always")
        for i in range(10):
            a = np.full(4, i, dtype=np.float32)
            torch.testing.assert_close(f(x, a), add_array(x, a), rtol=0, atol=0)
    assert len(events) == 10
    assert len(captures) == 2 and f._trident.eager_calls == 10  # type: ignore[attr-defined]
    assert len(trident_warnings(records)) == 1
    assert "runs eagerly (9 call(s)) for 'a' any ndarray: capturing 'add_array' raised" in trident.explain(f)


def test_lowering_error_runs_eagerly_and_is_remembered(monkeypatch: pytest.MonkeyPatch, captures: list[int]) -> None:
    """A LoweringError (here injected into the LLVM stage) never reaches the user: the call runs eagerly with a
    warning naming the stage and the IR file, and the same inputs do not compile again."""
    from trident.lowering import pipeline

    def fn(x):  # type: ignore[no-untyped-def]
        return (x * 2).sum(-1)

    def failing(*args: object, **kwargs: object) -> object:
        raise RuntimeError("injected llvm failure")

    f = trident.jit(fn)
    x = torch.randn(3, 4)
    monkeypatch.setattr(pipeline, "lower_to_llvm", failing)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback(
        "at stage 'llvm': RuntimeError: injected llvm failure"
    ):
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(f(x), fn(x), rtol=0, atol=0)
    messages = trident_warnings(records)
    assert len(messages) == 1, messages
    assert "at stage 'llvm': RuntimeError: injected llvm failure" in messages[0]
    assert "the IR given to that stage is in " in messages[0]
    assert len(captures) == 1 and f._trident.eager_calls == 3  # type: ignore[attr-defined]
    assert "at stage 'llvm'" in trident.explain(f)


def test_lowering_error_is_decided_for_the_structure_after_two(monkeypatch: pytest.MonkeyPatch, captures: list[int]) -> None:
    """A compile that fails fails again for other sizes and int values of the same call structure: a decode loop
    whose step cannot compile captures twice (the second failure decides the structure), warns once and runs
    eagerly; another dtype gets its own attempt."""
    from trident.lowering import pipeline

    def fn(x, pos):  # type: ignore[no-untyped-def]
        return x[:, : pos + 1].sum(-1) * 2

    def failing(*args: object, **kwargs: object) -> object:
        raise RuntimeError("injected llvm failure")

    f = trident.jit(fn)
    monkeypatch.setattr(pipeline, "lower_to_llvm", failing)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback("injected llvm failure"):
        warnings.simplefilter("always")
        for n in range(3, 8):
            x = torch.randn(2, n)
            torch.testing.assert_close(f(x, n - 2), fn(x, n - 2), rtol=0, atol=0)
        assert len(captures) == 2 and len(trident_warnings(records)) == 1, trident_warnings(records)
        x = torch.randn(2, 4, dtype=torch.float64)
        torch.testing.assert_close(f(x, 1), fn(x, 1), rtol=0, atol=0)
    assert len(captures) == 3 and f._trident.eager_calls == 6  # type: ignore[attr-defined]


SPARSE = torch.eye(3).to_sparse()


def sparse_product(x):  # type: ignore[no-untyped-def]
    return torch.sparse.mm(SPARSE, x) * 2  # a closed-over sparse tensor cannot be passed to compiled code


def test_an_argument_trident_cannot_pass_runs_eagerly(captures: list[int]) -> None:
    f = trident.jit(sparse_product)
    x = torch.randn(3, 2)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback(
        "closes over a Tensor that is not a plain strided tensor"
    ):
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(f(x), sparse_product(x))
    assert trident_warnings(records) == [
        "trident: compiling 'sparse_product' failed (the function closes over a Tensor that is not a plain strided "
        "tensor); calls with these inputs run eagerly"
    ]
    assert len(captures) == 1 and f._trident.eager_calls == 3  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# Python's scalar builtins on symbolic ints compile natively


SYMBOLIC_BUILTINS: dict[str, tuple[Callable[..., object], int]] = {
    # name: (function of x and an int alpha that becomes symbolic, compiles for ALPHAS)
    "pow": (lambda x, alpha: x * alpha**2, 2),
    "pow symbolic exponent": (lambda x, alpha: x * 2**alpha, 2),
    "true div": (lambda x, alpha: x * (alpha / 3), 2),
    "size / int": (lambda x, alpha: x * (x.shape[0] / alpha), 2),
    "times 1.0": (lambda x, alpha: x * (alpha * 1.0), 2),
    "torch.sym_float": (lambda x, alpha: x * torch.sym_float(alpha), 2),
    "math.sqrt": (lambda x, alpha: x * math.sqrt(alpha), 2),
    "math.floor": (lambda x, alpha: x[: math.floor(alpha / 2)], 2),
    "math.ceil": (lambda x, alpha: x[: math.ceil(alpha / 2)], 2),
    "round": (lambda x, alpha: x * round(alpha / 3), 2),
    "float //": (lambda x, alpha: x * ((alpha / 2) // 1.5), 2),
    "float %": (lambda x, alpha: x * ((alpha / 2) % 1.5), 2),
    "abs": (lambda x, alpha: x * abs(alpha - 6), 2),
    "comparison": (lambda x, alpha: x * (alpha < 6), 2),
    "float comparison": (lambda x, alpha: x * ((alpha / 2) >= 3), 2),
    "and": (lambda x, alpha: x * ((alpha > 3) & (alpha < 7)), 2),
    "torch.sym_max": (lambda x, alpha: x * torch.sym_max(alpha, 6), 2),
    # min/max compare (a guard on which one wins): the second specialization covers alpha <= 6, a third > 6
    "min": (lambda x, alpha: x[: min(alpha, 6)], 3),
    "max": (lambda x, alpha: x * max(alpha, 6), 3),
}
ALPHAS = [4, 5, 6, 7, 8, 5, 7]


@pytest.mark.parametrize("name", list(SYMBOLIC_BUILTINS))
def test_symbolic_builtin_compiles_natively(name: str) -> None:
    fn, expected_compiles = SYMBOLIC_BUILTINS[name]
    f = trident.jit(fn)
    x = torch.randn(8)
    with torch.no_grad(), count_compiles() as compiles, warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        for alpha in ALPHAS:
            actual, expected = f(x, alpha), fn(x, alpha)
            assert actual.shape == expected.shape and torch.equal(actual, expected), (alpha, actual, expected)
    assert compiles() == expected_compiles
    assert native_hits(f) == len(ALPHAS) and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert "alpha: any int" in trident.explain(f)


def test_symbolic_floats_and_bools_are_returned_as_python_scalars() -> None:
    def fn(x, alpha):  # type: ignore[no-untyped-def]
        return x * 2, alpha / 3, alpha > 5, math.sqrt(alpha)

    f = trident.jit(fn)
    x = torch.randn(4)
    with torch.no_grad(), count_compiles() as compiles:
        for alpha in ALPHAS:
            actual, expected = f(x, alpha), fn(x, alpha)
            assert torch.equal(actual[0], expected[0])
            assert actual[1:] == expected[1:] and [type(v) for v in actual[1:]] == [float, bool, float]
    assert compiles() == 2 and native_hits(f) == len(ALPHAS)


def test_float_of_a_symbolic_int_specializes_on_its_value() -> None:
    """float(n) reads n's value (Python requires __float__ to return a real float): compiled per value, natively,
    never eagerly. `n * 1.0` (above) stays symbolic."""

    def fn(x, alpha):  # type: ignore[no-untyped-def]
        return x * float(alpha)

    f = trident.jit(fn)
    x = torch.randn(8)
    with torch.no_grad(), count_compiles() as compiles:
        for alpha in ALPHAS:
            assert torch.equal(f(x, alpha), fn(x, alpha))
    assert compiles() == len(set(ALPHAS)) and native_hits(f) == len(ALPHAS)
    assert f._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_math_domain_error_raises_like_eager() -> None:
    def fn(x, alpha):  # type: ignore[no-untyped-def]
        return x * math.sqrt(alpha - 6)

    f = trident.jit(fn)
    x = torch.randn(8)
    with torch.no_grad():
        for alpha in (6, 7, 8):
            assert torch.equal(f(x, alpha), fn(x, alpha))
        with pytest.raises(ValueError, match="math domain error"):
            f(x, 5)
    state = f._trident  # type: ignore[attr-defined]
    assert (native_hits(f), state.misses, state.eager_calls) == (3, 2, 0)  # raised by the compiled program


# ---------------------------------------------------------------------------------------------------------
# Int arithmetic beyond int64 runs eagerly, decided before anything ran


def scaled_count(x, n):  # type: ignore[no-untyped-def]
    x.add_(1)
    return x.shape[0] * n


def scaled_fill(x, n):  # type: ignore[no-untyped-def]
    x.add_(1)
    return torch.full((2,), x.shape[0] * n)  # beyond int64: eager raises OverflowError after the add_


def test_int64_overflow_runs_eagerly_with_nothing_mutated_twice() -> None:
    f = trident.jit(scaled_count)
    x, reference = torch.zeros(4), torch.zeros(4)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        for n in (2, 3, 2**62, 5):  # n is symbolic from the second call on
            with eager_if(n == 2**62, "'scaled_count' computes "):
                assert f(x, n) == scaled_count(reference, n)
            assert torch.equal(x, reference)  # each call added 1 exactly once
    assert native_hits(f) == 3 and f._trident.eager_calls == 1  # type: ignore[attr-defined]
    messages = trident_warnings(records)
    assert len(messages) == 1 and messages[0].startswith("trident: 'scaled_count' computes "), messages
    assert messages[0].endswith(
        " = 18446744073709551616 for this call, which leaves int64 (compiled code computes ints as int64, "
        "Python's grow), so this call runs eagerly"
    ), messages
    assert "fits in int64" in trident.explain(f)


def test_int_power_beyond_int64_runs_eagerly() -> None:
    def fn(x, n):  # type: ignore[no-untyped-def]
        x.add_(1)
        return 3**n

    f = trident.jit(fn)
    x, reference = torch.zeros(2), torch.zeros(2)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        for n in (2, 3, 70, 4):
            with eager_if(n == 70, f" = {3**70} for this call, which leaves int64"):
                assert f(x, n) == fn(reference, n)
            assert torch.equal(x, reference)
    assert f._trident.eager_calls == 1 and native_hits(f) == 3  # type: ignore[attr-defined]
    assert len(trident_warnings(records)) == 1


def test_int64_overflow_where_eager_raises_mutates_once() -> None:
    f = trident.jit(scaled_fill)
    x, reference = torch.zeros(4), torch.zeros(4)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (2, 3):
            assert torch.equal(f(x, n), scaled_fill(reference, n))
        with pytest.raises(OverflowError) as eager:
            scaled_fill(reference, 2**62)
        with expect_fallback("'scaled_fill' computes "), pytest.raises(OverflowError) as jitted:
            f(x, 2**62)
    assert str(jitted.value) == str(eager.value) == "int too big to convert"  # eager's own error
    assert torch.equal(x, reference)  # the add_ ran once, as in eager
    assert native_hits(f) == 2 and f._trident.eager_calls == 1  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# Eager's wording for wrong calls; capture errors name the user's line


def two_params(x, w, *, scale=1.0):  # type: ignore[no-untyped-def]
    return x * w * scale


@pytest.mark.parametrize("compiled_first", [False, True])
def test_wrong_calls_raise_eagers_type_error_verbatim(compiled_first: bool) -> None:
    f = trident.jit(two_params)
    x = torch.randn(3)
    if compiled_first:
        with torch.no_grad():
            f(x, x)
    bad_calls: list[tuple[tuple[object, ...], dict[str, object]]] = [
        ((x,), {}), ((x, x, x), {}), ((x, x), {"bogus": 1}), ((x, x), {"x": x}), ((), {"w": x}),
    ]  # fmt: skip
    for args, kwargs in bad_calls:
        with pytest.raises(TypeError) as eager:
            two_params(*args, **kwargs)
        with pytest.raises(TypeError) as jitted:
            f(*args, **kwargs)
        assert str(jitted.value) == str(eager.value)
    with pytest.raises(TypeError) as jitted:
        f(x)
    assert str(jitted.value) == "two_params() missing 1 required positional argument: 'w'"


def int_layer_norm(x, w):  # type: ignore[no-untyped-def]
    y = torch.nn.functional.layer_norm(x, (4,), w)
    return y * 2


def test_capture_error_names_the_users_line_without_meta_kernel_log(capfd: pytest.CaptureFixture[str]) -> None:
    f = trident.jit(int_layer_norm)
    x, w = torch.ones(3, 4, dtype=torch.int64), torch.ones(4, dtype=torch.int64)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        with pytest.raises(NotImplementedError) as eager:
            int_layer_norm(x, w)
        capfd.readouterr()
        # eager's own error: the capture failed, so the call ran eagerly
        with expect_fallback("capturing 'int_layer_norm' raised"), pytest.raises(NotImplementedError) as jitted:
            f(x, w)
    assert str(jitted.value) == str(eager.value)
    messages = trident_warnings(records)
    assert len(messages) == 1 and line_of(int_layer_norm, "layer_norm(x, (4,), w)") in messages[0], messages
    err = capfd.readouterr().err
    assert "fake_tensor.py" not in err and "failed while attempting to run meta" not in err, err


# ---------------------------------------------------------------------------------------------------------
# Eager paths run Triton launches on CPU tensors through the interpreter


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def triton_add(x, y):  # type: ignore[no-untyped-def]
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 16),)](x, y, out, n, BLOCK=16)
    return out


def triton_add_array(x, a):  # type: ignore[no-untyped-def]
    return triton_add(x + a, x)  # the numpy array fails the capture; eager runs


class AddsAnArray(torch.nn.Module):
    def forward(self, x: torch.Tensor, a: object) -> torch.Tensor:
        return x + a  # a numpy array: capture refuses it, eager computes it


def test_the_fallback_warning_of_a_module_names_the_line_that_called_it() -> None:
    """Between the user's call and the entry lie nn.Module.__call__ and the wrapper's frames: the warning skips
    them all (frames.user_stacklevel) and names this file."""
    wrapped = trident.jit(AddsAnArray())
    with warnings.catch_warnings(record=True) as caught, expect_fallback("capturing", function="AddsAnArray.forward"):
        warnings.simplefilter("always")
        torch.testing.assert_close(wrapped(torch.ones(2), np.ones(2)), torch.full((2,), 2.0, dtype=torch.float64))
    (warned,) = [w for w in caught if str(w.message).startswith("trident:")]
    assert warned.filename == __file__, warned.filename


def test_triton_program_past_the_cap_runs_its_kernels_eagerly_on_cpu() -> None:
    f = trident.jit(triton_add)
    with torch.no_grad(), override(max_specializations=1), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        for i, shape in enumerate([(40,), (3, 40), (2, 3, 40), (3, 40)]):  # new ranks past the first: past the cap
            x, y = torch.randn(shape), torch.randn(shape)
            with eager_if(i > 0, "reached TRIDENT_MAX_SPECIALIZATIONS=1"):
                assert torch.equal(f(x, y), x + y)  # the pure torch reference
    assert len(f._trident.specializations) == 1 and f._trident.eager_calls == 3  # type: ignore[attr-defined]
    assert native_hits(f) == 1
    assert any("TRIDENT_MAX_SPECIALIZATIONS=1" in m for m in trident_warnings(records))


def test_triton_program_past_a_capture_failure_runs_its_kernels_eagerly_on_cpu() -> None:
    f = trident.jit(triton_add_array)
    x, a = torch.randn(40), np.linspace(0, 1, 40, dtype=np.float32)
    with torch.no_grad(), warnings.catch_warnings(record=True) as records, expect_fallback(
        "capturing 'triton_add_array' raised"
    ):
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.equal(f(x, a), (x + torch.from_numpy(a)) + x)
    assert f._trident.eager_calls == 3 and len(f._trident.specializations) == 0  # type: ignore[attr-defined]
    assert len(trident_warnings(records)) == 1


def test_triton_requires_grad_fallback_runs_its_kernels_eagerly_on_cpu() -> None:
    f = trident.jit(triton_add)
    x, y = torch.randn(40, requires_grad=True), torch.randn(40)
    with warnings.catch_warnings(), expect_fallback("argument 'x' requires grad while grad mode is on"):
        warnings.simplefilter("ignore")
        assert torch.equal(f(x, y), x.detach() + y)
    assert f._trident.eager_calls == 1 and not f._trident.specializations  # type: ignore[attr-defined]


USER_INTERPRET_PROGRAM = """
import json, warnings
import numpy as np, torch, triton, triton.language as tl
import trident
from trident.capture import triton_launches
from trident.knobs import override
from trident.testing import expect_fallback

def not_ours(*args, **kwargs):
    raise AssertionError("Trident patched Triton's launchers although TRITON_INTERPRET=1 interprets already")

triton_launches._make_interpreting_run = not_ours  # eager paths must leave launches to Triton's interpreter

@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

def triton_add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out

def triton_add_array(x, a):
    return triton_add(x + a, x)

warnings.simplefilter("ignore")
results = {"kernel": type(add_kernel).__name__}
f, g = trident.jit(triton_add), trident.jit(triton_add_array)
# The parent test runs this under TRIDENT_STRICT=1 (inherited): the first call must compile, the rest fall back.
with torch.no_grad(), override(max_specializations=1):
    ok = True
    for i, shape in enumerate([(40,), (3, 40), (2, 3, 40)]):
        x, y = torch.randn(shape), torch.randn(shape)
        if i == 0:
            ok = ok and torch.equal(f(x, y), x + y)
        else:
            with expect_fallback("TRIDENT_MAX_SPECIALIZATIONS=1"):
                ok = ok and torch.equal(f(x, y), x + y)
    x, a = torch.randn(40), np.linspace(0, 1, 40, dtype=np.float32)
    with expect_fallback("capturing 'triton_add_array' raised"):
        for _ in range(2):
            ok = ok and torch.equal(g(x, a), (x + torch.from_numpy(a)) + x)
results.update(
    ok=bool(ok), eager_calls=[f._trident.eager_calls, g._trident.eager_calls], hits=sum(f._trident.entry.hits()),
)
print(json.dumps(results))
"""


def test_a_users_triton_interpret_is_left_to_triton(tmp_path: Path) -> None:
    """With TRITON_INTERPRET=1 set by the user, kernels are Triton's InterpretedFunction: eager paths run them
    as Triton does, without Trident's interpreter path on top."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "1", "TRIDENT_STRICT": "1"}
    program = tmp_path / "user_interpret.py"  # a file: Triton reads a kernel's source (not `python -c`)
    program.write_text(USER_INTERPRET_PROGRAM)
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["kernel"] == "InterpretedFunction" and result["ok"], result
    # past the cap (two calls) and past a failed capture (two calls); the first call ran natively
    assert result["eager_calls"] == [2, 2] and result["hits"] == 1, result


def _doubled_sin(x: torch.Tensor) -> torch.Tensor:
    with torch._C._AutoDispatchBelowAutograd():
        return torch.ops.aten.cos.default(x) * 2  # a kernel that differs from aten::sin's own


def test_a_function_registering_kernels_for_its_own_length_is_traced_into() -> None:
    """flag-gems' `use_gems()` inside a decode step: the function registers ATen kernels while it runs and removes
    them before it returns. Its operators ran those kernels eagerly; the capture traced into them, so the
    compiled program computes the same without registering anything, and later calls hit natively."""

    def program(x: torch.Tensor) -> torch.Tensor:
        lib = torch.library.Library("aten", "IMPL")
        try:
            lib.impl("sin", _doubled_sin, "CPU")
            return torch.sin(x) + 1
        finally:
            lib._destroy()

    f = trident.jit(program)
    x = torch.randn(6)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):
            assert torch.equal(f(x), torch.cos(x) * 2 + 1)
        assert torch.equal(torch.sin(x), x.sin()) and not torch.equal(torch.sin(x), torch.cos(x) * 2)
    assert compiles() == 1 and f._trident.eager_calls == 0 and sum(f._trident.entry.hits()) == 3  # type: ignore[attr-defined]
    calls = [c for spec in f._trident.specializations for c in spec.compiled.aten_calls]  # type: ignore[attr-defined]
    assert "aten::cos" in calls and "aten::sin" not in calls, calls
    assert "traced into aten::sin (Python kernel, CPU kernel): 1 call(s)" in trident.explain(f)
    # The guard holds what a call starts from (no Python kernel for aten::sin), not what the capture saw midway:
    # with another kernel registered outside, the call misses and compiles again, and its own registration
    # still wins inside it, as eagerly.
    outer = torch.library.Library("aten", "IMPL")
    try:
        outer.impl("sin", lambda x: torch.ops.aten.cos.default(x), "CPU")
        with torch.no_grad(), count_compiles() as compiles:
            for _ in range(2):
                assert torch.equal(f(x), torch.cos(x) * 2 + 1)
            assert torch.equal(torch.sin(x), torch.cos(x))  # the outer kernel is back after each call
        assert compiles() == 1 and f._trident.entry.hits() == [3, 2]  # type: ignore[attr-defined]
        assert "Python kernel of aten::sin for CPU" in f._trident.last_miss_reason  # type: ignore[attr-defined]
    finally:
        outer._destroy()


def test_a_function_leaving_operator_kernels_registered_runs_eagerly() -> None:
    """A function that registers ATen kernels and leaves them registered changes what later operators compute,
    inside and outside it, from the first call on; compiled code would not register them. Such calls run
    eagerly, once warned and remembered, and the result is eager's."""
    libraries = []

    def program(x: torch.Tensor) -> torch.Tensor:
        if not libraries:
            libraries.append(torch.library.Library("aten", "IMPL"))
            libraries[0].impl("sin", _doubled_sin, "CPU")
        return torch.sin(x) + 1

    f = trident.jit(program)
    x = torch.randn(6)
    try:
        with torch.no_grad(), count_compiles() as compiles, warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            with expect_fallback("stays registered after it returns") as events:
                for _ in range(3):
                    assert torch.equal(f(x), torch.cos(x) * 2 + 1)
            assert len(events) == 3  # one capture; the later calls run eagerly as remembered
    finally:
        for lib in libraries:
            lib._destroy()
    assert compiles() == 0
    [message] = trident_warnings(records)
    assert "registers operator kernels while it runs (torch.library: aten::sin for CPU)" in message
    assert "DispatcherRegistration" in message
