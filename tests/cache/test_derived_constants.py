"""Views of constants made at capture (capture/constant_views.py) through the disk cache: made again from the
loading process's live base, so they follow its data, and a base pointed at other memory still misses."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import trident
from trident.knobs import override
from trident.testing import count_compiles

from .test_warm_start import compile_then_load


@pytest.fixture
def disk_cache(tmp_path: Path) -> Iterator[Path]:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache", log=frozenset({"cache"})):
        yield tmp_path / "cache"


def test_loaded_views_follow_the_live_base(disk_cache: Path) -> None:
    weight = torch.randn(8, 6)

    def fn(x):  # type: ignore[no-untyped-def]
        return F.linear(x, weight[:, 2:]) * 2

    x = torch.randn(3, 4)
    first, second = compile_then_load(fn, x)
    torch.testing.assert_close(second, first)
    loaded = trident.jit(fn)
    with torch.no_grad(), count_compiles() as compiles:
        loaded(x)  # loads the stored specialization again
        weight.mul_(3)  # seen through the loaded view: it shares the live weight's memory
        torch.testing.assert_close(loaded(x), fn(x))
        weight.data = torch.randn(8, 6)  # other memory: the loaded specialization must not run ...
        torch.testing.assert_close(loaded(x), fn(x))
    # ... the miss finds the stored record again, whose view is made from the weight's new memory.
    assert compiles() == 0 and loaded._trident.misses == 2  # type: ignore[attr-defined]
    assert "was pointed at other memory" in (loaded._trident.last_miss_reason or "")  # type: ignore[attr-defined]
