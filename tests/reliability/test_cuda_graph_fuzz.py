"""Fuzzing CUDA graph replay (issue 17) on the GPU: random calls of a few programs, each answered bit for bit as
the direct native path answers it, while the graph path replays most of them.

Every program is jitted twice, graphs on and off (the direct path, itself tested against eager elsewhere).
Calls draw, per step: fresh input tensors (moved addresses) or the same ones, sizes from a small set (a
symbolic specialization replaying one recording per size), an int that feeds grids, slices, in-place writes and
kernel arguments, the current stream or a side stream, and results that are kept for the rest of the run (held
results must never change afterwards).
Each program runs with replays through the host program and with the replay plan (replays from a plan where
the program has one: the cache update does, the slice at k of a result does not).
TRIDENT_GRAPH_FUZZ_CALLS=N sets the calls per program (default 600)."""
from __future__ import annotations

import os
import random

import pytest
import torch
from helpers_native import same_bits
import triton
import triton.language as tl

import trident
from trident.knobs import override

CALLS = int(os.environ.get("TRIDENT_GRAPH_FUZZ_CALLS", "600") or 600)
pytestmark = pytest.mark.gpu


@triton.jit
def axpb_kernel(x_ptr, out_ptr, n, a, b, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a + b, mask=mask)


def kernel_and_aten(x: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    axpb_kernel[(triton.cdiv(n, 256),)](x, out, n, 0.5, k, BLOCK=256)
    return torch.relu(out @ w)[:, : k % 7 + 1] * 2


def cache_update(cache: torch.Tensor, row: torch.Tensor, pos: int) -> torch.Tensor:
    cache[pos] = row * 2  # an ATen write into an argument at an int position: a staged, patched copy
    out = torch.empty_like(row)
    axpb_kernel[(triton.cdiv(row.numel(), 256),)](cache[pos], out, row.numel(), 1.0, float(0), BLOCK=256)
    return out + cache[0]


def pair(fn):  # type: ignore[no-untyped-def]
    graphs, direct = trident.jit(fn), trident.jit(fn)
    graphs._trident.use_cuda_graphs(True)
    direct._trident.use_cuda_graphs(False)
    return graphs, direct


def spec_graphs(step) -> list:  # type: ignore[no-untyped-def]
    """Each specialization's SpecGraphs (None for one the graph recorder was never asked about)."""
    state = step._trident
    return [state.entry.graphs(s.index) for s in state.specializations]


def replays(step) -> int:  # type: ignore[no-untyped-def]
    return sum(g.replays for g in spec_graphs(step) if g is not None)


def plan_replays(step) -> int:  # type: ignore[no-untyped-def]
    return sum((r.plan or {}).get("replays", 0) for g in spec_graphs(step) if g is not None for r in g.recordings)


@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_fuzz_kernel_and_aten_program(plan: bool) -> None:
    rng = random.Random(17)
    graphs, direct = pair(kernel_and_aten)
    side = torch.cuda.Stream()
    w = torch.randn(64, 64, device="cuda")
    inputs = {rows: torch.randn(rows, 64, device="cuda") for rows in (8, 16, 40)}
    held: list[tuple[torch.Tensor, torch.Tensor]] = []
    with torch.no_grad(), override(replay_plan=plan):
        for i in range(CALLS):
            rows = rng.choice((8, 16, 40))
            x = inputs[rows] if rng.random() < 0.7 else torch.randn(rows, 64, device="cuda")
            k = rng.choice((1, 3, 16, 17, rng.randrange(0, 100)))
            stream = side if rng.random() < 0.05 else torch.cuda.current_stream()
            with torch.cuda.stream(stream):
                got = graphs(x, w, k)
                want = direct(x, w, k)
            stream.synchronize()
            assert same_bits(got, want), f"call {i}: rows {rows}, k {k}"
            if rng.random() < 0.1:
                held.append((got, want.clone()))
    torch.cuda.synchronize()
    assert all(same_bits(g, w_) for g, w_ in held), "a held result changed"
    assert replays(graphs) > CALLS // 3, trident.explain(graphs)


@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_fuzz_in_place_cache_update_at_an_int_position(plan: bool) -> None:
    rng = random.Random(7)
    graphs, direct = pair(cache_update)
    cache, direct_cache = torch.zeros(64, 512, device="cuda"), torch.zeros(64, 512, device="cuda")
    with torch.no_grad(), override(replay_plan=plan):
        for i in range(CALLS):
            pos = rng.randrange(0, 64)
            row = torch.randn(512, device="cuda")
            got = graphs(cache, row, pos)
            want = direct(direct_cache, row.clone(), pos)
            assert same_bits(got, want), f"call {i}: position {pos}"
            assert same_bits(cache, direct_cache), f"call {i}: the caches differ after position {pos}"
    assert replays(graphs) > CALLS // 3, trident.explain(graphs)
    # The row at the position is a view the plan makes; the write into it a staged, patched copy.
    assert (plan_replays(graphs) > CALLS // 3) == plan, trident.explain(graphs)
