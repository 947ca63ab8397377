"""Views of closed-over tensors made once at capture (capture/constant_views.py): fewer ATen calls per call,
the base's in-place updates seen through them, and a base pointed at other memory recompiles."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from helpers_native import assert_native

import trident
from trident.testing import count_compiles


def _spec(jitted: object, index: int = -1):  # type: ignore[no-untyped-def]
    return jitted._trident.specializations[index]  # type: ignore[attr-defined]


def test_weight_transpose_is_made_at_capture() -> None:
    weight, bias = torch.randn(8, 4), torch.randn(8)

    def fn(x):  # type: ignore[no-untyped-def]
        return F.linear(x, weight) + F.linear(x, weight[:, :4], bias)

    jitted = trident.jit(fn)
    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), fn(x))
    calls = _spec(jitted).compiled.aten_calls
    assert "aten::t" not in calls and "aten::slice.Tensor" not in calls, calls
    assert "a view of constant #0 made at capture" in trident.explain(jitted)
    assert_native(jitted, hits=1, compiles=1)


def test_in_place_updates_of_the_base_are_seen() -> None:
    weight = torch.randn(8, 4)

    def fn(x):  # type: ignore[no-untyped-def]
        return x @ weight.t()

    jitted = trident.jit(fn)
    x = torch.randn(3, 4)
    with torch.no_grad(), count_compiles() as compiles:
        jitted(x)
        weight.copy_(torch.randn(8, 4))
        torch.testing.assert_close(jitted(x), fn(x))
        weight.mul_(-2)
        torch.testing.assert_close(jitted(x), fn(x))
    assert compiles() == 1  # in-place updates keep the base's memory: the view made at capture stays valid
    assert_native(jitted, hits=3, compiles=1)


def test_base_pointed_at_other_memory_recompiles() -> None:
    weight = torch.nn.Parameter(torch.randn(8, 4), requires_grad=False)

    def fn(x):  # type: ignore[no-untyped-def]
        return F.linear(x, weight)

    jitted = trident.jit(fn)
    x = torch.randn(3, 4)
    with torch.no_grad(), count_compiles() as compiles:
        jitted(x)
        weight.data = torch.randn(8, 4)  # same sizes and strides: only the memory changed
        torch.testing.assert_close(jitted(x), fn(x))
        weight.set_(torch.randn(8, 4))
        torch.testing.assert_close(jitted(x), fn(x))
    assert compiles() == 3  # the first call, then each of .data = and set_() (the view made at capture is stale)
    assert "was pointed at other memory" in (jitted._trident.last_miss_reason or "")  # type: ignore[attr-defined]
    assert_native(jitted, hits=3, compiles=3)


def test_views_with_sizes_known_only_at_run_time_stay_in_the_program() -> None:
    table = torch.randn(16, 4)

    def fn(x, n):  # type: ignore[no-untyped-def]
        return x + table[:n].sum(0)

    jitted = trident.jit(fn)
    x = torch.randn(4)
    with torch.no_grad():
        for n in (3, 5, 7, 16):
            torch.testing.assert_close(jitted(x, n), fn(x, n))
    assert "aten::slice.Tensor" in _spec(jitted).compiled.aten_calls
    assert_native(jitted, hits=4, compiles=2)  # n=3 a constant; n=5 makes it symbolic and takes 7 and 16
