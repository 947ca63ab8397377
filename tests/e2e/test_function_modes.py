"""Torch function modes (a default device, a TorchFunctionMode) are guarded: a specialization captured under one
stack of modes never runs under another, since it bakes in what the modes did (the device of a factory, a
mode's replacement of a call)."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import trident
from trident.knobs import override
from trident.testing import count_compiles


def ones_like_rows(x):  # type: ignore[no-untyped-def]
    return torch.ones(x.shape[0]) * 2  # a factory: allocates on the default device


@pytest.fixture
def no_default_device() -> Iterator[None]:
    yield
    torch.set_default_device(None)


def test_a_default_device_set_after_the_first_call_is_followed(no_default_device: None) -> None:
    jitted = trident.jit(ones_like_rows)
    x = torch.randn(3)
    with torch.no_grad(), count_compiles() as compiles:
        assert jitted(x).device.type == "cpu"
        torch.set_default_device("meta")
        assert jitted(x).device.type == ones_like_rows(x).device.type == "meta"
        torch.set_default_device(None)
        torch.testing.assert_close(jitted(x), ones_like_rows(x))  # the first specialization again
    assert compiles() == 2
    assert "torch function modes changed" in trident.explain(jitted)


def test_device_blocks_with_the_same_device_share_a_specialization() -> None:
    """`with torch.device(d)` makes a new mode object each time; equal devices act alike, so no recompile."""
    jitted = trident.jit(ones_like_rows)
    x = torch.randn(3)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):
            with torch.device("meta"):
                assert jitted(x).device.type == "meta"
        with torch.device("cpu"):  # another device: another specialization
            torch.testing.assert_close(jitted(x), ones_like_rows(x))
    assert compiles() == 2
    assert "torch function modes: DeviceContext(meta)" in trident.explain(jitted)


class ZerosForOnes(TorchFunctionMode):
    """Replaces torch.ones by torch.zeros: what the call returns depends on the mode being active."""

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        if func is torch.ones:
            func = torch.zeros
        return func(*args, **(kwargs or {}))


def test_a_mode_entered_after_the_first_call_is_a_miss() -> None:
    jitted = trident.jit(ones_like_rows)
    x = torch.randn(3)
    with torch.no_grad(), count_compiles() as compiles:
        torch.testing.assert_close(jitted(x), torch.full((3,), 2.0))
        mode = ZerosForOnes()
        with mode:
            torch.testing.assert_close(jitted(x), torch.zeros(3))  # captured under the mode, as eager runs
            torch.testing.assert_close(jitted(x), torch.zeros(3))
        with ZerosForOnes():  # another mode object: compared by identity
            torch.testing.assert_close(jitted(x), torch.zeros(3))
        torch.testing.assert_close(jitted(x), torch.full((3,), 2.0))  # no mode: the first specialization
    assert compiles() == 3


def test_a_specialization_captured_under_a_mode_is_not_persisted(tmp_path: Path) -> None:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache"):
        jitted = trident.jit(ones_like_rows)
        x = torch.randn(3)
        with torch.no_grad(), torch.device("meta"):
            jitted(x)
    assert "not persisted: it was captured under torch function mode(s)" in trident.explain(jitted)


def test_disabling_torch_functions_is_part_of_the_guard() -> None:
    """Under torch._C.DisableTorchFunction a mode on the stack does not run: a specialization captured with the
    mode active must not serve such a call, nor the other way round."""
    jitted = trident.jit(ones_like_rows)
    x = torch.randn(3)
    with torch.no_grad(), count_compiles() as compiles, ZerosForOnes():
        torch.testing.assert_close(jitted(x), torch.zeros(3))
        for _ in range(2):  # a miss, then a native hit of the second specialization
            with torch._C.DisableTorchFunction():
                torch.testing.assert_close(jitted(x), torch.full((3,), 2.0))
                assert torch.equal(jitted(x), ones_like_rows(x))
        torch.testing.assert_close(jitted(x), torch.zeros(3))  # enabled again: the first specialization
    assert compiles() == 2
    assert "torch functions off" in trident.explain(jitted)
    assert sum(jitted._trident.entry.hits()) == 6  # every call ran natively (a compile's first call counts)
