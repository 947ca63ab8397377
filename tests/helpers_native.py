"""What a jitted function ran, asserted (shared by tests/e2e; `from helpers_native import ...`: pytest puts tests/
on sys.path for the packages below it).

A jitted result equal to eager proves nothing by itself: an eager fallback always equals eager. These check the
function's own counters instead: specializations compiled, native hits, misses, eager calls, and on CUDA what
each Triton launch site of the compiled code launched."""
from __future__ import annotations

from typing import Any

import torch

import trident


def jit_state(f: Any) -> Any:
    """The JitFunction behind a trident.jit function, bound method or module."""
    state = getattr(f, "_trident", None)
    assert state is not None, f"not a trident.jit function: {f!r}"
    return state


def native_hits(f: Any) -> int:
    """Calls that ran compiled code, over all specializations (a call that compiles one runs it: it counts)."""
    return sum(jit_state(f).entry.hits())


class CompileCountMismatch(AssertionError):
    """A jitted function compiled another number of specializations than its test states. Its own type, so that
    an xfail for a known count difference (`raises=CompileCountMismatch`) is not satisfied by a wrong result."""


def assert_compile_count(f: Any, actual: int, expected: int, what: str = "specializations") -> None:
    if actual != expected:
        raise CompileCountMismatch(f"{actual} {what}, expected {expected}\n{trident.explain(f)}")


def assert_native(f: Any, *, hits: int, compiles: int) -> None:
    """`f` ran no call eagerly, made `hits` native hits in all, and has exactly `compiles` specializations,
    missing only to compile them (the suite's disk cache is off: each was compiled, not loaded). The compile
    count is checked last: a test expecting only it to differ (CompileCountMismatch) has passed the rest."""
    state = jit_state(f)
    text = trident.explain(f)
    assert state.eager_calls == 0, text
    assert native_hits(f) == hits, text
    assert_compile_count(f, len(state.specializations), compiles)
    assert state.misses == compiles, text


def assert_launches_native(f: Any) -> None:
    """On CUDA: every Triton launch site of `f`'s specializations launches natively, and went through Triton's
    launcher only for the launch that registered each variant Triton compiled for it. A site launches once per
    call of its specialization (grids of size 0 launch nothing and count nowhere: not for those). At least one
    launch in all was native."""
    state = jit_state(f)
    hits = state.entry.hits()
    text = trident.explain(f)
    sites = 0
    for spec in state.specializations:
        for site in spec.compiled.launch_sites:
            sites += 1
            assert site.disabled_reason is None, text
            assert site.fallback_launches == site.variant_count, text
            assert site.native_launches + site.fallback_launches == hits[spec.index], text
    assert sites > 0, text
    assert sum(s.native_launches for spec in state.specializations for s in spec.compiled.launch_sites) > 0, text


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors hold the same bits (dtype, shape and every byte): how a fast path (a graph replay, a
    traced custom op) proves itself against the path it replaces, -0.0 and NaN payloads included."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.reshape(-1).view(torch.uint8),
                                                                     b.reshape(-1).view(torch.uint8))


class LazyCache:
    """A state object that allocates its buffer at its first update and marks it as living at one address, as a
    Hugging Face StaticCache does (torch.compile, and Trident's graph recorder, then read it in place)."""

    def update(self, x: torch.Tensor) -> torch.Tensor:
        if not hasattr(self, "buffer"):
            self.buffer = torch.zeros_like(x)
            torch._dynamo.mark_static_address(self.buffer)
        self.buffer.add_(x)
        return self.buffer * 2


def jit_with_graphs(fn: Any, graphs: bool) -> Any:
    """trident.jit(fn) with CUDA graph replay on or off for it alone (a graph copy and its direct twin)."""
    step = trident.jit(fn)
    step._trident.use_cuda_graphs(graphs)
    return step


def graph_of(step: Any, index: int) -> Any:
    """Specialization `index`'s most recently replayed CUDA graph recording, or None."""
    recordings = step._trident.entry.graphs(index).recordings
    return recordings[0] if recordings else None
