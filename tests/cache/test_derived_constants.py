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

from .helpers import assert_same_bits
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
    compile_then_load(fn, x)  # the loaded result has the compiled one's bits
    compiled = trident.jit(fn)  # the reference: compiled in this process, never loaded

    def reference(x: torch.Tensor) -> object:
        with override(disk_cache=False):
            return compiled(x)

    loaded = trident.jit(fn)
    with torch.no_grad(), count_compiles() as compiles:
        loaded(x)  # loads the stored specialization again
        assert compiles() == 0
        weight.mul_(3)  # seen through the loaded view: it shares the live weight's memory
        assert_same_bits(loaded(x), reference(x))
        torch.testing.assert_close(loaded(x), fn(x))
        weight.data = torch.randn(8, 6)  # other memory: the loaded specialization must not run ...
        assert_same_bits(loaded(x), reference(x))
        torch.testing.assert_close(loaded(x), fn(x))
    # ... the miss finds the stored record again, whose view is made from the weight's new memory (the reference
    # compiled twice: once, and on its own miss on the new memory).
    assert compiles() == 2 and compiled._trident.misses == 2  # type: ignore[attr-defined]
    assert loaded._trident.misses == 2 and len(loaded._trident.specializations) == 2  # type: ignore[attr-defined]
    assert trident.explain(loaded).count("loaded from the disk cache") == 2
    assert "was pointed at other memory" in (loaded._trident.last_miss_reason or "")  # type: ignore[attr-defined]
