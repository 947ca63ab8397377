"""Shared test setup: CPU tests, deterministic, and a `gpu` marker that skips with a reason off-GPU."""
from __future__ import annotations

import os

import pytest
import torch

# Tests count compiles; a disk cache shared across tests and runs would turn compiles into loads. Off for the
# suite, whatever the shell says (set before trident reads its knobs); tests/cache turns it on with their own
# folders.
os.environ["TRIDENT_DISK_CACHE"] = "0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; run on the H200 through the device tool")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
