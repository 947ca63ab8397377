"""Comparing a jitted call with eager's: the outcome (a result or an exception) and a value, bit for bit, with
its layout, autograd flags and aliasing of the inputs (the fuzz and its reproductions)."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch


def outcome(fn: Callable[..., object], args: list[object], kwargs: dict[str, object]) -> tuple[str, object]:
    try:
        return "ok", fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- compared with eager's
        return "raised", e


def shares_storage(a: torch.Tensor, b: torch.Tensor) -> bool:
    sa, sb = a.untyped_storage(), b.untyped_storage()
    return sa.nbytes() > 0 and sb.nbytes() > 0 and sa.data_ptr() == sb.data_ptr()


def assert_same_value(actual: object, expected: object, jit_inputs: list[torch.Tensor],
                      eager_inputs: list[torch.Tensor], where: str) -> None:
    assert type(actual) is type(expected), f"{where}: type {type(actual)} != eager {type(expected)}"
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected), f"{where}: length {len(actual)} != eager {len(expected)}"  # type: ignore[arg-type]
        for i, (a, e) in enumerate(zip(actual, expected)):  # type: ignore[call-overload]
            assert_same_value(a, e, jit_inputs, eager_inputs, f"{where}[{i}]")
    elif isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor)
        facts = lambda t: (t.dtype, tuple(t.shape), t.stride(), t.storage_offset(), t.requires_grad,  # noqa: E731
                           t.grad_fn is None, t.is_inference())
        assert facts(actual) == facts(expected), (
            f"{where}: (dtype, shape, strides, offset, requires_grad, no grad_fn, inference) "
            f"{facts(actual)} != eager {facts(expected)}"
        )
        torch.testing.assert_close(actual.detach(), expected.detach(), rtol=0, atol=0, equal_nan=True,
                                   msg=lambda m: f"{where}: values differ from eager: {m}")
        identity = lambda t, inputs: [i for i, x in enumerate(inputs) if t is x]  # noqa: E731
        aliases = lambda t, inputs: [i for i, x in enumerate(inputs) if shares_storage(t, x)]  # noqa: E731
        assert identity(actual, jit_inputs) == identity(expected, eager_inputs), f"{where}: identity with inputs differs"
        assert aliases(actual, jit_inputs) == aliases(expected, eager_inputs), f"{where}: aliasing of inputs differs"
    elif isinstance(expected, float) and math.isnan(expected):
        assert math.isnan(actual), f"{where}: {actual!r} != eager {expected!r}"  # type: ignore[arg-type]
    else:
        assert actual == expected, f"{where}: {actual!r} != eager {expected!r}"
