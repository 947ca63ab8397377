"""Private views made without the dispatcher (csrc/private_views.h) against ATen's own operators below autograd:
the same sizes, strides, storage offset, storage, dtype and dispatch keys for every shape and argument, in range
and out of it, and ATen's own error where ATen raises. Also: compiled code really takes the direct path."""
from __future__ import annotations

import itertools
import random

import pytest
import torch

import trident
from trident.runtime import load_runtime

runtime = load_runtime()


def aten(name: str, x: torch.Tensor, *args: object) -> torch.Tensor:
    """ATen's operator for private_view function `name` (its view metadata aside, the view compiled code made)."""
    ops = {"t": torch.ops.aten.t.default, "alias": torch.ops.aten.alias.default,
           "transpose": torch.ops.aten.transpose.int, "permute": torch.ops.aten.permute.default,
           "view": torch.ops.aten.view.default, "unsqueeze": torch.ops.aten.unsqueeze.default,
           "squeeze_dim": torch.ops.aten.squeeze.dim, "expand": torch.ops.aten.expand.default,
           "slice": torch.ops.aten.slice.Tensor, "select": torch.ops.aten.select.int}  # fmt: skip
    return ops[name](x, *args)


def same_view(got: torch.Tensor, want: torch.Tensor) -> bool:
    return (got.shape == want.shape and got.stride() == want.stride()
            and got.storage_offset() == want.storage_offset()
            and got.untyped_storage().data_ptr() == want.untyped_storage().data_ptr()
            and got.dtype == want.dtype and got.device == want.device
            and torch._C._dispatch_keys(got) == torch._C._dispatch_keys(want))  # fmt: skip


def check(name: str, x: torch.Tensor, *args: object) -> None:
    try:
        want = aten(name, x, *args)
    except (RuntimeError, IndexError, ValueError) as error:
        with pytest.raises(type(error)):
            runtime.private_view(name, x, *args)
        return
    got = runtime.private_view(name, x, *args)
    assert same_view(got, want), (name, tuple(x.shape), x.stride(), args, got.shape, got.stride(), want.stride())
    assert torch.equal(got, want)


def bases(device: str) -> list[torch.Tensor]:
    """Contiguous, strided, offset, expanded and empty tensors of 1 to 4 dimensions."""
    full = torch.arange(4 * 5 * 6 * 3, dtype=torch.float32, device=device).reshape(4, 5, 6, 3)
    return [full, full[1:, :, ::2], full.permute(2, 0, 3, 1), full[2], full[:, 3, :, 1], full[0, 0, 0],
            torch.arange(7.0, device=device).expand(3, 7), torch.empty(0, 4, device=device),
            torch.arange(6, dtype=torch.int64, device=device).view(2, 3)[:, 1:], torch.ones(1, 3, 1, device=device)]  # fmt: skip


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_every_function_makes_atens_view_or_raises_atens_error(device: str) -> None:
    rng = random.Random(0)
    before = runtime.private_view_counts()
    for x in bases(device):
        n = x.dim()
        dims = range(-n - 2, n + 2)
        check("t", x)
        check("alias", x)
        for d in dims:
            check("unsqueeze", x, d)
            check("squeeze_dim", x, d)
        for a, b in itertools.product(dims, dims):
            check("transpose", x, a, b)
        for order in itertools.permutations(range(n)):
            check("permute", x, list(order))
        check("permute", x, [0] * n)
        check("permute", x, list(range(n + 1)))
        for d in dims:
            bound = (x.shape[d] if -n <= d < n else 3) + 3
            for _ in range(12):
                start = rng.choice([None, *range(-bound, bound), 2**63 - 1])
                end = rng.choice([None, *range(-bound, bound), 2**63 - 1])
                check("slice", x, d, start, end, rng.choice([1, 1, 2, 3, 0, -1]))
            for i in range(-bound, bound):
                check("select", x, d, i)
        for size in ([-1], [x.numel()], [1, -1], [-1, 1], list(x.shape)[::-1], [x.numel() + 1], [-1, -1], [2, -1],
                     [*x.shape, 1], [1, *x.shape]):  # fmt: skip
            check("view", x, size)
        for size in ([*x.shape], [2, *x.shape], [-1] * n, [3] * n, [2, 1, *x.shape], [*x.shape][1:]):
            check("expand", x, size)
    made, by_aten = (now - then for now, then in zip(runtime.private_view_counts(), before))
    assert made > 1000 and by_aten > 100, (made, by_aten)  # both paths ran


@pytest.mark.parametrize("case", ["conj", "neg", "named", "sparse"])
def test_tensors_that_are_not_plain_strided_go_to_aten(case: str) -> None:
    x = torch.randn(3, 4, dtype=torch.complex64 if case == "conj" else torch.float32)
    if case == "named" and not hasattr(x, "refine_names"):
        pytest.skip(f"torch {torch.__version__} has no named tensors")
    x = {"conj": lambda: x.conj(), "neg": lambda: torch._neg_view(x), "named": lambda: x.refine_names("a", "b"),
         "sparse": lambda: x.to_sparse()}[case]()  # fmt: skip
    made, by_aten = runtime.private_view_counts()
    got, want = runtime.private_view("transpose", x, 0, 1), aten("transpose", x, 0, 1)
    assert runtime.private_view_counts() == (made, by_aten + 1)
    assert got.shape == want.shape and got.layout == want.layout
    assert got.is_conj() == want.is_conj() and got.is_neg() == want.is_neg()
    if case == "named":
        assert got.names == want.names
    else:
        assert torch.equal(got.resolve_conj().resolve_neg().to_dense(), want.resolve_conj().resolve_neg().to_dense())


def test_compiled_code_makes_its_private_views_directly() -> None:
    @trident.jit
    def f(x: torch.Tensor) -> torch.Tensor:
        y = x * 2  # made by the call: its views are private
        return y[:, 1:3].unsqueeze(0).transpose(1, 2).select(0, 0).contiguous() + y.view(-1)[:2].sum()

    x = torch.randn(4, 5)
    f(x)
    made, by_aten = runtime.private_view_counts()
    out = f(x)
    assert torch.equal(out, (x * 2)[:, 1:3].unsqueeze(0).transpose(1, 2).select(0, 0) + (x * 2).view(-1)[:2].sum())
    made_now, by_aten_now = runtime.private_view_counts()
    assert made_now - made >= 5 and by_aten_now == by_aten, trident.explain(f)
    assert f._trident.entry.hits()[0] >= 1  # type: ignore[attr-defined]
