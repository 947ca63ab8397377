"""A capture that is refused or fails leaves nothing behind (issue: the eager fallback returned NaN after one).

For every kind of refused capture the suite knows, a program that reaches state the way real programs do (a
module whose buffer it updates in place, a cache object it fills, a list of tensors it writes into, a
closed-over dict) runs twice side by side: eagerly, and under trident.jit. Asserted:
  - the moment the fallback's eager run starts (right after the refused capture), everything the function can
    reach is structurally and bitwise what it was before the call: the capture changed nothing;
  - at every call, the jitted function's result and all state it reaches equal the eager twin's, bit for bit.
Where a later call compiles (the lazy cache), it must have run natively.
"""
from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from reachable_state import deep_state, first_difference

import trident
from trident import driver
from trident.testing import allow_fallback


class Stateful(torch.nn.Module):
    """A module with a parameter, a buffer it counts calls in, and a cache it allocates on first use."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8) * 0.5)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.table: torch.Tensor | None = None
        self.initialized = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps.add_(1)
        if self.table is None:  # a library cache allocated lazily, inside the first call
            self.table = torch.zeros(4, 8)
            self.initialized = True
        self.table[1:3] += x * self.weight
        return self.table.sum(0) + self.steps


def _sin_with_value_read(x: torch.Tensor) -> torch.Tensor:
    if x.sum().item() > float("-inf"):  # reads a value: the body cannot be traced into, so aten::sin stays opaque
        return torch.ops.aten.cos.default(x) * 2
    return x


@contextlib.contextmanager
def _registered_for_the_call() -> Iterator[None]:
    """As flag-gems' use_gems(): kernels registered for the length of a call."""
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("sin", _sin_with_value_read, "CPU")
    try:
        yield
    finally:
        lib._destroy()


@torch.library.custom_op("trident_test::no_fake", mutates_args=())
def _no_fake(x: torch.Tensor) -> torch.Tensor:
    # Its body reads values (numpy), so capture cannot trace into it and keeps it opaque; it has no fake
    # implementation (no register_fake), so the opaque call cannot be captured either.
    return torch.from_numpy(x.numpy() * 3)


def _body(kind: str, model: Stateful, memo: dict[str, Any], outputs: list[torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    y = model(x)
    outputs[0].add_(y[:2])
    memo.setdefault("scale", torch.full((8,), 2.0))  # a closed-over dict filled on first use
    y = y * memo["scale"]
    if kind == "data-dependent Python":
        if y.sum() > 0:
            y = y + 1
    elif kind == "kernel registered during the call, kept opaque":
        with _registered_for_the_call():
            y = torch.sin(y)
    elif kind == "operator without a fake implementation":
        y = _no_fake(y)
    return y


def _program(kind: str) -> tuple[Callable[[torch.Tensor], torch.Tensor], list[object]]:
    """A fresh program of one kind and the roots of everything it can reach."""
    torch.manual_seed(0)
    model, memo, outputs = Stateful(), {}, [torch.zeros(2)]

    def step(x: torch.Tensor) -> torch.Tensor:
        return _body(kind, model, memo, outputs, x)

    return step, [model, memo, outputs]


@pytest.fixture
def lowering_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    from trident.lowering import pipeline

    def failing(*args: object, **kwargs: object) -> object:
        raise RuntimeError("injected llvm failure")

    monkeypatch.setattr(pipeline, "lower_to_llvm", failing)


LAZY = "assigned traced values into Python objects"
KINDS = {  # kind -> what the fallback's reason says
    "data-dependent Python": "UnsupportedConstruct",
    "kernel registered during the call, kept opaque": "registers operator kernels while it runs",
    "operator without a fake implementation": "no_fake",
    # The first capture meets the lazy cache (that call runs eagerly, allocating it), the second the failure.
    "a lowering failure": "injected llvm failure",
    "a cache allocated lazily": LAZY,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_refused_capture_changes_nothing_and_eager_follows(kind: str, request: pytest.FixtureRequest,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    if kind == "a lowering failure":
        request.getfixturevalue("lowering_fails")
    eager_step, eager_roots = _program(kind)
    step, roots = _program(kind)
    jitted = trident.jit(step)
    # The state at the moment the fallback's eager run starts, i.e. right after the refused capture.
    at_eager_start: list[Any] = []
    call_eagerly = driver.call_eagerly

    def spy(fn: Callable[..., object], args: object, kwargs: object) -> object:
        at_eager_start.append(deep_state(*roots))
        return call_eagerly(fn, args, kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(driver, "call_eagerly", spy)
    with torch.no_grad(), warnings.catch_warnings(), allow_fallback() as fallbacks:
        warnings.simplefilter("ignore")
        for call in range(4):
            x = torch.randn(8, generator=torch.Generator().manual_seed(call))
            before = deep_state(*roots)
            eagerly_before = len(at_eager_start)
            actual, expected = jitted(x), eager_step(x)
            if len(at_eager_start) > eagerly_before:  # this call was refused, or ran eagerly as remembered
                difference = first_difference(before, at_eager_start[-1])
                assert difference is None, f"call {call}: the capture changed what the function reaches: {difference}"
            assert torch.equal(actual, expected), f"call {call}: {actual} != {expected}"
            difference = first_difference(deep_state(*roots), deep_state(*eager_roots))
            assert difference is None, f"call {call}: state differs from eager's: {difference}"
    reasons = [e.reason for e in fallbacks]
    assert any(KINDS[kind] in r for r in reasons), reasons
    assert all(KINDS[kind] in r or (kind == "a lowering failure" and LAZY in r) for r in reasons), reasons
    state = jitted._trident  # type: ignore[attr-defined]
    if kind == "a cache allocated lazily":  # the first call ran eagerly, allocating for real; the rest native
        assert state.eager_calls == 1 and len(state.specializations) == 1, trident.explain(jitted)
        assert sum(state.entry.hits()) == 3, trident.explain(jitted)
        assert type(roots[0].table) is torch.Tensor  # type: ignore[attr-defined]
    else:
        assert state.eager_calls == 4 and not state.specializations, trident.explain(jitted)
