"""A step captured by hand as one CUDA graph, the way a user who restructures their loop for graphs writes it: the
reference the benchmarks hold Trident's replays against (`run.py`'s device time, `replay_host.py --hand-graph`,
`libraries.py`'s per-step floor)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

T = TypeVar("T")


def capture_by_hand(run: Callable[[], T]) -> tuple[torch.cuda.CUDAGraph, T]:
    """`run` captured as one CUDA graph, after two runs on a side stream outside the capture (Triton compiles its
    kernels, cuBLAS makes its handle, the caching allocator its blocks). Returns the graph and what the captured
    run returned: tensors every replay writes again."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    return graph, out
