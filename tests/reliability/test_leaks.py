"""Leaks on the hit path: flat RSS over many calls, no Python objects or references left behind.

TRIDENT_LEAK_CALLS=N sets the number of hit-path calls of the RSS test (default 20,000, about a second of
calls on CI); e.g. TRIDENT_LEAK_CALLS=1000000 for a long run. The other tests make a fixed number of calls
and check exactly: reference counts of every argument object are unchanged, outputs (tensors, views, tuple
elements) die as soon as the caller drops them, and the inputs of a call are not kept alive by the function.
"""
from __future__ import annotations

import gc
import os
import sys
import tracemalloc
import weakref
from collections.abc import Callable

import pytest
import torch

import trident
from trident.testing import triton_launch_sites

LEAK_CALLS = int(os.environ.get("TRIDENT_LEAK_CALLS", "20000") or 20000)
WARMUP_CALLS = 2000
RSS_TOLERANCE = 8 << 20  # bytes; one leaked 16 KiB output per call would be 20,000 x 16 KiB = 320 MiB
PYTHON_HEAP_TOLERANCE = 64 << 10  # bytes over 5,000 calls; one leaked tuple per call would be ~280 KiB


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_after_calls(call: Callable[[], object], n: int, measure: Callable[[], object]) -> object:
    """Call `call` n times keeping only the last output, drop it, let CUDA and the collector settle, measure."""
    for _ in range(n):
        out = call()
    del out
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    gc.collect()
    return measure()


def chain(x, y, n: int):  # type: ignore[no-untyped-def]
    return (x * 2 + y).relu(), (x - y).sum(-1), x[:n], n + 1


def test_hit_path_rss_is_flat() -> None:
    f = trident.jit(chain)
    x, y = torch.randn(64, 64), torch.randn(64, 64)  # each full-size output is 16 KiB
    with torch.no_grad():
        before = measure_after_calls(lambda: f(x, y, 3), WARMUP_CALLS, rss_bytes)
        after = measure_after_calls(lambda: f(x, y, 3), LEAK_CALLS, rss_bytes)
    assert f._trident.misses == 1 and sum(f._trident.entry.hits()) == WARMUP_CALLS + LEAK_CALLS
    print(f"\n{LEAK_CALLS} hit-path calls: RSS {before / 2**20:.1f} MiB -> {after / 2**20:.1f} MiB "
          f"({(after - before) / 2**10:+.0f} KiB)")
    assert after - before < RSS_TOLERANCE, f"RSS grew by {(after - before) / 2**20:.1f} MiB over {LEAK_CALLS} calls"


@pytest.mark.gpu
def test_hit_path_cuda_memory_and_rss_are_flat_with_native_launches() -> None:
    """On CUDA: ATen outputs and a natively launched Triton kernel's output die with the caller's references
    (torch.cuda.memory_allocated returns exactly to its level), and RSS stays flat."""
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 3.0, mask=offs < n)

    @trident.jit
    def step(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out + y, (x - y).sum()

    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    def usage() -> tuple[int, int]:
        return torch.cuda.memory_allocated(), rss_bytes()

    with torch.no_grad():
        torch.testing.assert_close(step(x, y)[0], x * 3 + y)
        memory, rss = measure_after_calls(lambda: step(x, y), WARMUP_CALLS, usage)  # type: ignore[misc]
        memory_after, rss_after = measure_after_calls(lambda: step(x, y), LEAK_CALLS, usage)  # type: ignore[misc]
    launches = triton_launch_sites(step)[0]
    assert launches.native_launches >= LEAK_CALLS
    print(f"\n{LEAK_CALLS} CUDA hit-path calls: CUDA memory {memory} -> {memory_after} bytes, RSS "
          f"{rss / 2**20:.1f} -> {rss_after / 2**20:.1f} MiB")
    assert memory_after == memory
    assert rss_after - rss < RSS_TOLERANCE, f"RSS grew by {(rss_after - rss) / 2**20:.1f} MiB"


def test_hit_path_python_heap_is_flat() -> None:
    # tracemalloc sees every Python object allocation: a leaked tuple, int or tensor wrapper per call shows.
    f = trident.jit(chain)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    with torch.no_grad():
        for _ in range(WARMUP_CALLS):
            out = f(x, y, 3)
        del out
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(5000):
                out = f(x, y, 3)
            del out
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
    assert after - before < PYTHON_HEAP_TOLERANCE, f"Python heap grew by {after - before} bytes over 5,000 calls"


# Programs returning: a new tensor, an input itself, views of an input, nested tuples/lists with Python
# scalars; taking tensors, a list of tensors, an int and a float.
def returns_new(x, xs, n: int, s: float):  # type: ignore[no-untyped-def]
    return x * s + xs[0] * n


def returns_input(x, xs, n: int, s: float):  # type: ignore[no-untyped-def]
    x.add_(xs[1])
    return x


def returns_views(x, xs, n: int, s: float):  # type: ignore[no-untyped-def]
    return x[1:], x.t(), xs[0].view(-1)[:n]


def returns_tuples(x, xs, n: int, s: float):  # type: ignore[no-untyped-def]
    return x + 1, [x * 2, (xs[0], x.shape[0] + n)], None, s


PROGRAMS = [returns_new, returns_input, returns_views, returns_tuples]


def arguments() -> tuple[torch.Tensor, list[torch.Tensor], int, float]:
    # n and s are fresh objects (not small-int / interned constants) so their reference counts mean something
    return torch.randn(4, 4), [torch.randn(4, 4), torch.randn(4, 4)], int("100003"), float("2.5")


def tensors_in(value: object) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in tensors_in(v)]
    return []


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_reference_counts_of_arguments_are_unchanged(fn: Callable[..., object]) -> None:
    f = trident.jit(fn)
    x, xs, n, s = arguments()
    with torch.no_grad():
        f(x, xs, n, s)  # compile; the compiling call's arguments are tested separately below
        f(x, xs, n, s)
        objects = {"x": x, "xs": xs, "xs[0]": xs[0], "xs[1]": xs[1], "n": n, "s": s}
        before = {k: sys.getrefcount(v) for k, v in objects.items()}
        for _ in range(1000):
            out = f(x, xs, n, s)
            del out
        after = {k: sys.getrefcount(v) for k, v in objects.items()}
    assert f._trident.misses == 1
    assert after == before


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_outputs_die_when_dropped(fn: Callable[..., object]) -> None:
    f = trident.jit(fn)
    x, xs, n, s = arguments()
    inputs = {id(x), id(xs[0]), id(xs[1])}
    with torch.no_grad():
        f(x, xs, n, s)
        for _ in range(3):
            out = f(x, xs, n, s)
            produced = [t for t in tensors_in(out) if id(t) not in inputs]  # inputs returned as themselves stay
            refs = [weakref.ref(t) for t in produced]
            assert len(refs) == {"returns_new": 1, "returns_input": 0, "returns_views": 3, "returns_tuples": 2}[fn.__name__]
            del out, produced
            # no gc.collect(): the hit path must not create reference cycles either
            assert [r() is None for r in refs] == [True] * len(refs)


def test_inputs_of_hit_calls_are_not_retained() -> None:
    f = trident.jit(returns_tuples)
    with torch.no_grad():
        f(*arguments())
        x, xs, n, s = arguments()
        refs = [weakref.ref(t) for t in (x, xs[0], xs[1])]
        out = f(x, xs, n, s)
        assert f._trident.misses == 1  # that was a hit
        del x, xs, out
    assert [r() is None for r in refs] == [True] * 3


def test_errors_on_the_hit_path_leak_nothing() -> None:
    # index_select checks its indices at run time: a compiled specialization raises eager's IndexError
    # after allocating an intermediate (8 MiB here), which must be freed, with every reference dropped.
    def gather(x, idx):  # type: ignore[no-untyped-def]
        y = x * 2
        return y.index_select(0, idx) + 1

    f = trident.jit(gather)
    x, bad = torch.randn(2048, 1024), torch.tensor([0, 5000])
    with torch.no_grad():
        f(x, torch.tensor([0, 1]))

        def fail() -> None:
            with pytest.raises(IndexError, match="index out of range"):
                f(x, bad)

        for _ in range(50):
            fail()
        gc.collect()
        counts, before = (sys.getrefcount(x), sys.getrefcount(bad)), rss_bytes()
        for _ in range(500):
            fail()
        gc.collect()
        after = rss_bytes()
    assert f._trident.misses == 1  # every failing call ran the compiled specialization
    assert (sys.getrefcount(x), sys.getrefcount(bad)) == counts
    # Leaking the 8 MiB intermediate would grow RSS by ~4 GiB; the allocator's own caching varies by tens of MiB.
    assert after - before < 256 << 20, f"RSS grew by {(after - before) / 2**20:.1f} MiB over 500 failing calls"


# The specialization keeps facts about the compiling call, not its tensors.
def test_inputs_of_the_compiling_call_are_not_retained() -> None:
    f = trident.jit(returns_new)
    x, xs, n, s = arguments()
    refs = [weakref.ref(t) for t in (x, xs[0], xs[1])]
    with torch.no_grad():
        out = f(x, xs, n, s)
    assert f._trident.misses == 1
    del x, xs, out
    gc.collect()
    assert [r() is None for r in refs] == [True] * 3
