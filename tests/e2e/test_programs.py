"""End-to-end: jitted programs against eager PyTorch (results, dtypes, shapes, strides, aliasing).

Every test also asserts what ran (helpers_native.assert_native): the exact number of specializations, every
call a native hit, no eager call. A result equal to eager alone proves nothing: an eager fallback equals eager."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers_native import assert_native

import trident
from trident.testing import count_compiles


def assert_same(actual: object, expected: object) -> None:
    """Same structure, types, dtypes, shapes and strides, and close values."""
    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)  # type: ignore[arg-type]
        for a, e in zip(actual, expected):  # type: ignore[call-overload]
            assert_same(a, e)
    elif isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        assert actual.dtype == expected.dtype
        assert actual.shape == expected.shape
        assert actual.stride() == expected.stride()
        torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    else:
        assert actual == expected


def check(fn, *make_args, calls: int = 3, compiles: int = 1):  # type: ignore[no-untyped-def]
    """Run fn eagerly and jitted on fresh copies of the same inputs; compare results and mutated inputs. The
    inputs keep their sizes, dtypes and Python values from call to call, so by default one specialization
    serves every call and each call is a native hit."""
    jitted = trident.jit(fn)
    for _ in range(calls):
        args = [a() if callable(a) else a for a in make_args]
        eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        jit_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.no_grad():
            expected = fn(*eager_args)
            actual = jitted(*jit_args)
        assert_same(actual, expected)
        for a, e in zip(jit_args, eager_args):  # in-place mutation of inputs is visible
            if isinstance(e, torch.Tensor):
                torch.testing.assert_close(a, e)
    assert_native(jitted, hits=calls, compiles=compiles)
    return jitted


def test_mlp() -> None:
    w1, b1, w2 = torch.randn(16, 32), torch.randn(32), torch.randn(32, 8)

    def mlp(x):  # type: ignore[no-untyped-def]
        return F.relu(x @ w1 + b1) @ w2

    check(mlp, lambda: torch.randn(4, 16))


def test_attention_softmax() -> None:
    def attention(q, k, v):  # type: ignore[no-untyped-def]
        scores = q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1) @ v

    check(attention, lambda: torch.randn(2, 4, 8, 16), lambda: torch.randn(2, 4, 8, 16), lambda: torch.randn(2, 4, 8, 16))


def test_layer_norm() -> None:
    weight, bias = torch.randn(32), torch.randn(32)

    def norm(x):  # type: ignore[no-untyped-def]
        return F.layer_norm(x, (32,), weight, bias, eps=1e-5)

    check(norm, lambda: torch.randn(3, 5, 32))


def test_rms_norm() -> None:
    weight = torch.randn(64)

    def rms_norm(x, eps=1e-6):  # type: ignore[no-untyped-def]
        variance = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(variance + eps) * weight

    check(rms_norm, lambda: torch.randn(2, 7, 64))


def test_kv_cache_update_with_changing_position() -> None:
    def step(cache, k, pos):  # type: ignore[no-untyped-def]
        cache[:, pos] = k
        return cache[:, : pos + 1].sum(dim=1)

    jitted = trident.jit(step)
    cache_eager, cache_jit = torch.zeros(4, 16), torch.zeros(4, 16)
    with count_compiles() as compiles, torch.no_grad():
        for pos in range(10):
            k = torch.randn(4)
            expected = step(cache_eager, k, pos)
            actual = jitted(cache_jit, k, pos)
            assert_same(actual, expected)
            torch.testing.assert_close(cache_jit, cache_eager)
    # the first position, then one symbolic specialization for all later positions
    assert compiles() == 2, trident.explain(jitted)
    assert_native(jitted, hits=10, compiles=2)


def test_views_and_slicing_alias_inputs() -> None:
    def views(x):  # type: ignore[no-untyped-def]
        return x[1:, ::2], x.t(), x.view(-1)[3:7], x.unsqueeze(0).expand(3, -1, -1)

    x = torch.randn(6, 8)
    jitted = check(views, lambda: torch.randn(6, 8))
    a, b, c, d = jitted(x)
    x.add_(1.0)  # views of the input see the change, as in eager
    torch.testing.assert_close(a, x[1:, ::2])
    torch.testing.assert_close(b, x.t())
    torch.testing.assert_close(c, x.view(-1)[3:7])
    assert a.data_ptr() == x[1:, ::2].data_ptr()
    # check's 3 calls under no_grad, and this one with grad mode on: grad mode is guarded, so it compiles again
    assert_native(jitted, hits=4, compiles=2)


def test_reductions() -> None:
    def reduce(x):  # type: ignore[no-untyped-def]
        values, indices = x.max(dim=1)
        return x.sum(), x.mean(dim=0), values, indices, x.amin(dim=-1, keepdim=True), x.argmax()

    check(reduce, lambda: torch.randn(5, 9))


def test_scalar_arguments() -> None:
    def scaled(x, alpha: float, n: int, flag: bool):  # type: ignore[no-untyped-def]
        y = x * alpha + n
        return y.relu() if flag else y

    jitted = trident.jit(scaled)
    x = torch.randn(3, 3)
    with torch.no_grad(), count_compiles() as compiles:
        for alpha, n, flag in [(0.5, 2, True), (0.5, 2, False), (1.5, 3, True), (1.5, 4, True)]:
            assert_same(jitted(x, alpha, n, flag), scaled(x, alpha, n, flag))
    # 3: all constants; flag False (a bool stays a constant: its own specialization); alpha and n both changed,
    # so both become symbolic, and that specialization also takes the fourth call (only n changed).
    assert compiles() == 3
    assert_native(jitted, hits=4, compiles=3)


def test_multiple_outputs_and_python_scalars() -> None:
    def multi(x, n):  # type: ignore[no-untyped-def]
        return x + 1, [x * 2, (x.shape[0], n * 3)], None, 1.5

    check(multi, lambda: torch.randn(4, 2), 7)


def test_bound_method_of_module() -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(16, 16)
            self.norm = torch.nn.LayerNorm(16)

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.norm(torch.nn.functional.silu(self.linear(x)) + x)

    block = Block().eval()
    check(block.forward, lambda: torch.randn(2, 16))


def test_method_defined_with_jit_in_class_body() -> None:
    class Scaler:
        def __init__(self, factor: float) -> None:
            self.factor = torch.tensor(factor)

        @trident.jit
        def scale(self, x):  # type: ignore[no-untyped-def]
            return x * self.factor

    s = Scaler(3.0)
    x = torch.randn(4)
    torch.testing.assert_close(s.scale(x), x * 3.0)
    torch.testing.assert_close(s.scale(x), x * 3.0)
    assert_native(Scaler.scale, hits=2, compiles=1)  # `self` is an argument: the same object both times


def test_closure_over_tensors_sees_in_place_updates() -> None:
    bias = torch.zeros(4)

    @trident.jit
    def add_bias(x):  # type: ignore[no-untyped-def]
        return x + bias

    x = torch.randn(4)
    torch.testing.assert_close(add_bias(x), x)
    bias.add_(1.0)  # same tensor object, new values: visible (captured by reference)
    torch.testing.assert_close(add_bias(x), x + 1.0)
    assert_native(add_bias, hits=2, compiles=1)  # an in-place update of a constant is no reason to recompile


def test_in_place_mutation_of_inputs() -> None:
    def update(x, y):  # type: ignore[no-untyped-def]
        x.add_(y)
        y.mul_(2)
        return x

    jitted = check(update, lambda: torch.randn(3, 4), lambda: torch.randn(3, 4))
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    assert jitted(x, y) is x  # returns the input object itself, as eager
    assert_native(jitted, hits=4, compiles=2)  # new sizes (2, 2) with grad mode on: their own specialization


def test_dtype_promotion_and_casts() -> None:
    def cast(x, y):  # type: ignore[no-untyped-def]
        return (x + y).to(torch.float64), x.half() * 2, (x > 0).sum(), x.int() // 3

    check(cast, lambda: torch.randn(5), lambda: torch.randint(0, 5, (5,)))


EVERY_DTYPE = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32,
               torch.uint64, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex32,
               torch.complex64, torch.complex128, torch.float8_e4m3fn, torch.float8_e5m2]  # fmt: skip


@pytest.mark.parametrize("dtype", EVERY_DTYPE, ids=str)
def test_every_dtype_reaches_aten_as_itself(dtype: torch.dtype) -> None:
    """Compiled code hands a dtype argument to ATen as the int the IR holds, which must be its c10::ScalarType
    (torch-mlir's importer numbers complex dtypes otherwise: `.to(torch.complex64)` once ran as complex128), and
    tensors of every dtype import (uint16, uint64 and complex128 once did not: flash attention returns uint64)."""

    def make(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x.to(dtype), torch.zeros(3, dtype=dtype), y.clone()

    x = torch.arange(6, dtype=torch.float32)
    y = x.to(dtype)
    jitted = trident.jit(make)
    for _ in range(2):
        for got, want in zip(jitted(x, y), make(x, y)):
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
    assert_native(jitted, hits=2, compiles=1)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc], ids=str)
def test_a_layout_reaches_aten_as_itself(layout: torch.layout) -> None:
    """Layout arguments are c10::Layout values too (torch-mlir's importer numbers sparse_csc as c10's Mkldnn:
    `to_sparse(layout=torch.sparse_csc)` once raised where eager returns a CSC tensor)."""

    def sparse(x: torch.Tensor) -> torch.Tensor:
        return x.to_sparse(layout=layout)

    x = torch.eye(3) * 2
    jitted = trident.jit(sparse)
    for _ in range(2):
        got, want = jitted(x), sparse(x)
        assert got.layout == want.layout == layout and torch.equal(got.to_dense(), want.to_dense())
    assert_native(jitted, hits=2, compiles=1)


def test_cat_split_and_indexing() -> None:
    def pieces(x, idx):  # type: ignore[no-untyped-def]
        a, b = torch.split(x, 2, dim=0)
        return torch.cat([b, a], dim=1), x[idx], torch.stack([a, b]).sum(0)

    check(pieces, lambda: torch.randn(4, 3), torch.tensor([0, 2]))


def test_allocations_and_factories() -> None:
    def make(x):  # type: ignore[no-untyped-def]
        zeros = torch.zeros(x.shape[0], 3)
        ones = torch.ones_like(x)
        arange = torch.arange(x.shape[1], dtype=torch.float32)
        return zeros, ones + arange, torch.full((2,), 7.0), torch.empty_like(x).fill_(2.0)

    check(make, lambda: torch.randn(2, 5))


def test_factories_count_no_write_as_eager_s() -> None:
    """torch.zeros, ones, full and eye fill inside ATen's factory, which torch's own factories run below the layer
    that counts writes: a new tensor has _version 0 (typed entries and the boxed dispatcher alike), and one written
    in place has eager's count too."""

    def make(x):  # type: ignore[no-untyped-def]
        zeros = torch.zeros(2, 3)
        zeros.add_(1)
        made = torch.ones(2), torch.full((2,), 7.0), torch.arange(3), torch.eye(3), torch.linspace(0, 1, 5)
        return zeros, *made, torch.empty(2), x + 1

    jitted = trident.jit(make)
    for _ in range(2):
        x = torch.randn(2)
        actual, expected = jitted(x), make(x)
        assert [t._version for t in actual] == [t._version for t in expected] == [1, 0, 0, 0, 0, 0, 0, 0]
        assert all(torch.equal(a, e) for a, e in zip(actual[:6], expected[:6]))
    assert_native(jitted, hits=2, compiles=1)


def test_keyword_and_default_arguments() -> None:
    def fn(x, *, scale=2.0, shift=None):  # type: ignore[no-untyped-def]
        y = x * scale
        return y if shift is None else y + shift

    jitted = trident.jit(fn)
    x, s = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(jitted(x), fn(x))
    torch.testing.assert_close(jitted(x, scale=3.0), fn(x, scale=3.0))
    torch.testing.assert_close(jitted(x, shift=s), fn(x, shift=s))
    torch.testing.assert_close(jitted(x=x, shift=s, scale=0.5), fn(x, shift=s, scale=0.5))
    # 3: scale 2.0 constant; scale changed, so symbolic; shift a tensor (a new argument structure, traced with
    # scale symbolic already), which also takes the last call.
    assert_native(jitted, hits=4, compiles=3)


def test_list_of_tensors_argument() -> None:
    def total(xs, w):  # type: ignore[no-untyped-def]
        return sum(x @ w for x in xs)

    check(total, [torch.randn(2, 3), torch.randn(2, 3)], lambda: torch.randn(3, 3))


def test_gelu_with_string_argument_and_where() -> None:
    def act(x):  # type: ignore[no-untyped-def]
        return torch.where(x > 0, F.gelu(x, approximate="tanh"), x.exp() - 1)

    check(act, lambda: torch.randn(8, 8))


@pytest.mark.parametrize("shape", [(0, 4), (1, 4), (5, 1)])
def test_zero_and_one_sized(shape: tuple[int, int]) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x.sum(dim=0), x * 2

    check(fn, lambda: torch.randn(*shape))


# An operator with int, float and bool results besides a tensor (as SDPA's cuDNN kernel returns its max
# sequence lengths): called through the boxed dispatcher, its scalars reach the compiled code in slots.
_SCALARS_LIB = torch.library.Library("trident_test_scalars", "DEF")
_SCALARS_LIB.define("stats(Tensor x) -> (Tensor, int, float, bool)")


def _stats(x: torch.Tensor) -> tuple[torch.Tensor, int, float, bool]:
    return x * 2, x.dim() + 40, 0.5 * x.dim(), x.dim() > 1


_SCALARS_LIB.impl("stats", _stats, "CPU")
_SCALARS_LIB.impl("stats", _stats, "Meta")
trident.keep_opaque("trident_test_scalars::stats")  # this test is about the boxed call, not seeing through it


def test_operator_with_scalar_results() -> None:
    @trident.jit
    def fn(x):  # type: ignore[no-untyped-def]
        doubled, n, half, flag = torch.ops.trident_test_scalars.stats(x)
        return doubled + 1, n, half, flag

    for x in (torch.ones(3), torch.ones(2, 3)):
        with torch.no_grad():
            assert fn(x)[1:] == torch.ops.trident_test_scalars.stats(x)[1:]
            torch.testing.assert_close(fn(x)[0], x * 2 + 1)
    assert_native(fn, hits=4, compiles=2)  # one per rank (a new rank is a new argument structure)
