"""A specialization with pooled allocations persists; the loading process starts with an empty pool."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import trident
from trident.knobs import override
from trident.testing import count_compiles

from .helpers import assert_same_bits
from .test_warm_start import compile_then_load


@pytest.fixture
def disk_cache(tmp_path: Path) -> Iterator[Path]:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache", log=frozenset({"cache"})):
        yield tmp_path / "cache"


def test_pooled_specialization_round_trips(disk_cache: Path) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        tmp = torch.empty_like(x)
        tmp.copy_(x * 2)
        return tmp.sum(0)

    x = torch.randn(5, 3)
    first, _ = compile_then_load(fn, x)  # the loaded result has the compiled one's bits
    loaded = trident.jit(fn)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):  # reused buffers too
            assert_same_bits(loaded(x), first)
    assert compiles() == 0 and loaded._trident.entry.hits() == [3]  # type: ignore[attr-defined]
    pool = loaded._trident.specializations[-1].compiled.buffer_pool  # type: ignore[attr-defined]
    assert (pool.sites, pool.allocations, pool.reuses) == (1, 1, 2)
