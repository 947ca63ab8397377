"""Views of a call's own intermediates that nothing outside the call reaches are made below autograd
(lowering/aliasing.py): same values as eager; views of arguments, and views that are returned, stay views."""
from __future__ import annotations

import torch
from helpers_native import assert_native

import trident


def _private_views(jitted: object) -> int:
    line = trident.explain(jitted).splitlines()[1]  # "specialization 0: ... (N through ..., K private view(s) ...)"
    return int(line.split(", ")[-1].split()[0])


def test_views_of_intermediates_compute_eagers_values() -> None:
    def f(x, w):  # type: ignore[no-untyped-def]
        qkv = x @ w
        q, k = qkv[:, :4].view(-1, 2, 2), qkv[:, 4:8].unsqueeze(0)
        v = qkv[:, 8:].t().select(0, 1)
        return q.sum(-1) * 2, k.permute(2, 1, 0).expand(4, 3, 2).sum(), v + 1

    jitted = trident.jit(f)
    with torch.no_grad():
        for _ in range(3):
            x, w = torch.randn(3, 5), torch.randn(5, 12)
            for got, want in zip(jitted(x, w), f(x, w)):
                torch.testing.assert_close(got, want)
    assert _private_views(jitted) == 9  # 3 slices, view, unsqueeze, t, select, permute, expand
    assert_native(jitted, hits=3, compiles=1)


def test_writes_through_a_private_view_reach_its_base() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        h = x * 2
        h[:, :2].zero_()  # an in-place write through a private view
        h.select(0, 1).add_(1)
        return h.sum(0)

    jitted = trident.jit(f)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), f(x))
        torch.testing.assert_close(jitted(x), f(x))
    assert _private_views(jitted) == 2
    assert_native(jitted, hits=2, compiles=1)


def test_views_of_arguments_and_returned_views_stay_views() -> None:
    def f(x):  # type: ignore[no-untyped-def]
        head = x[:2]
        head.mul_(2)  # bumps x's version, as in eager
        h = x + 1
        return h[1:], h[0].sum()  # h escapes through its returned view

    jitted = trident.jit(f)
    with torch.no_grad():
        x_eager, x_jit = torch.randn(4, 3), None
        x_jit = x_eager.clone()
        for _ in range(2):
            before_eager, before_jit = x_eager._version, x_jit._version
            view_eager, _ = f(x_eager)
            view_jit, total = jitted(x_jit)
            torch.testing.assert_close(x_jit, x_eager)
            torch.testing.assert_close(view_jit, view_eager)
            assert x_jit._version - before_jit == x_eager._version - before_eager
            assert view_jit._is_view() and view_eager._is_view()
    assert _private_views(jitted) == 0  # x[:2] views an argument; h[1:] and h[0] view a returned tensor
    assert_native(jitted, hits=2, compiles=1)


def test_a_view_of_an_out_result_views_the_out_argument() -> None:
    """mm(..., out=buf) returns buf itself: a view of that result is a view of an argument, not private."""

    def f(x, buf):  # type: ignore[no-untyped-def]
        h = x * 2
        product = torch.mm(h, h.t(), out=buf)
        product[:1].zero_()  # bumps buf's version in eager
        return buf.sum()

    jitted = trident.jit(f)
    x = torch.randn(3, 3)
    buf_eager, buf_jit = torch.zeros(3, 3), torch.zeros(3, 3)
    with torch.no_grad():
        for _ in range(2):
            before_eager, before_jit = buf_eager._version, buf_jit._version
            torch.testing.assert_close(jitted(x, buf_jit), f(x, buf_eager))
            torch.testing.assert_close(buf_jit, buf_eager)
            assert buf_jit._version - before_jit == buf_eager._version - before_eager
    assert _private_views(jitted) == 1  # only h.t()
    assert_native(jitted, hits=2, compiles=1)
