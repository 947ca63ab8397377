"""Eight threads calling one jitted function: eager's results, one compile per specialization, no deadlock.

The threads start together (a barrier) with different input kinds, so several miss at once and compiles
queue on the function's lock while other threads run hits. Every result is compared with eager computed in
the same thread. Compile counts are exact: input kinds differ in dtype or rank (a different argument
structure, so automatic dynamic never links them), and the sizes a phase varies stay >= 2 (no 0/1
specializations), so the number of specializations does not depend on how the threads interleave.
"""
from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
import torch

import trident
from trident.knobs import override  # `trident.knobs` is the Knobs instance, not the module
from trident.testing import count_compiles, expect_fallback

N_THREADS = 8
JOIN_TIMEOUT_S = 300  # generous: a deadlock never finishes, a slow machine does


def program(x, y):  # type: ignore[no-untyped-def]
    return x * 2 + y, (x - y).sum(-1), x.flip(0)


# Eight input kinds: 4 dtypes x ranks 1 and 2 (each its own argument structure).
KINDS = [(dtype, rank) for dtype in (torch.float32, torch.float64, torch.int64, torch.float16) for rank in (1, 2)]


def make(dtype: torch.dtype, rank: int, n: int, g: torch.Generator) -> torch.Tensor:
    shape = (n,) if rank == 1 else (n, 6)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-9, 10, shape, generator=g, dtype=dtype)


def assert_same(actual: object, expected: object) -> None:
    assert type(actual) is type(expected)
    if isinstance(expected, tuple):
        assert len(actual) == len(expected)  # type: ignore[arg-type]
        for a, e in zip(actual, expected):  # type: ignore[call-overload]
            assert_same(a, e)
    else:
        assert isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor)
        assert (actual.dtype, actual.shape, actual.stride()) == (expected.dtype, expected.shape, expected.stride())
        assert torch.equal(actual, expected)


def run_threads(work: Callable[[int], None]) -> None:
    """Runs work(thread_index) on N_THREADS threads started together; re-raises the first failure."""
    barrier = threading.Barrier(N_THREADS)
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            barrier.wait(timeout=JOIN_TIMEOUT_S)
            work(i)
        except BaseException as e:  # noqa: BLE001 -- reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), name=f"trident-test-{i}", daemon=True) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=JOIN_TIMEOUT_S)
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {JOIN_TIMEOUT_S} s (deadlock?): {stuck}"
    if errors:
        raise errors[0]


def guard_sets(f: object) -> list[frozenset[str]]:
    """The guard lines of each specialization in explain's text."""
    blocks = re.split(r"^specialization \d+: .*$", trident.explain(f), flags=re.MULTILINE)[1:]
    return [frozenset(line.strip() for line in b.splitlines() if line.startswith("    ")) for b in blocks]


def test_eight_threads_missing_on_the_same_new_input_compile_it_once() -> None:
    f = trident.jit(program)
    x, y = torch.randn(5, 6), torch.randn(5, 6)
    results: list[object] = [None] * N_THREADS

    def work(i: int) -> None:
        with torch.no_grad():
            results[i] = f(x, y)

    with count_compiles() as compiles:
        run_threads(work)
    assert compiles() == 1, trident.explain(f)
    assert f._trident.misses == 1  # the others found it compiled once they had the lock
    assert sum(f._trident.entry.hits()) == N_THREADS
    with torch.no_grad():
        expected = program(x, y)
    for r in results:
        assert_same(r, expected)


def test_eight_threads_with_mixed_inputs() -> None:
    f = trident.jit(program)
    calls_per_thread = 48
    calls = 0

    def phase(vary_size: bool) -> Callable[[int], None]:
        def work(i: int) -> None:
            g = torch.Generator().manual_seed(i)
            with torch.no_grad():
                for step in range(calls_per_thread):
                    # a different kind per thread at each step: at the start all eight kinds miss at once
                    dtype, rank = KINDS[(i + step) % len(KINDS)]
                    n = 2 + (i * 7 + step * 3) % 8 if vary_size else 5  # sizes in [2, 9]
                    x, y = make(dtype, rank, n, g), make(dtype, rank, n, g)
                    assert_same(f(x, y), program(x, y))
                    if step % 8 == i % 8:  # explain reads the entry while other threads add to it
                        assert trident.explain(f).startswith("trident.jit 'program'")

        return work

    # Phase 1: fixed sizes. Each kind compiles once, whatever the interleaving.
    with count_compiles() as compiles:
        run_threads(phase(vary_size=False))
    calls += N_THREADS * calls_per_thread
    assert compiles() == len(KINDS), trident.explain(f)
    assert f._trident.misses == len(KINDS), trident.explain(f)

    # Phase 2: dim 0 varies. The first call of each kind with a new size makes dim 0 of x and y symbolic
    # (automatic dynamic); that one symbolic specialization serves every later size >= 2 of the kind.
    with count_compiles() as compiles:
        run_threads(phase(vary_size=True))
    calls += N_THREADS * calls_per_thread
    assert compiles() == len(KINDS), trident.explain(f)

    specs = guard_sets(f)
    assert len(specs) == 2 * len(KINDS) == len(f._trident.specializations)
    assert len(set(specs)) == len(specs), "two specializations with the same guards:\n" + trident.explain(f)
    # Every call ran compiled code (try_call after a compile counts as a hit): nothing ran eagerly.
    assert sum(f._trident.entry.hits()) == calls
    assert f._trident.eager_calls == 0


def test_eight_threads_past_the_specialization_cap(recwarn: pytest.WarningsRecorder) -> None:
    # The cap reached: new kinds run eagerly (on the miss path, under the function's lock) while the
    # compiled kind keeps hitting natively; one warning in all. Which kind compiles depends on the interleaving,
    # so the whole run allows fallbacks, and every one of them must be the cap's.
    f = trident.jit(program)
    calls_per_thread = 24

    def work(i: int) -> None:
        g = torch.Generator().manual_seed(i)
        with torch.no_grad():
            for step in range(calls_per_thread):
                dtype, rank = KINDS[(i + step) % len(KINDS)]
                x, y = make(dtype, rank, 5, g), make(dtype, rank, 5, g)
                assert_same(f(x, y), program(x, y))

    cap = "reached TRIDENT_MAX_SPECIALIZATIONS=1"
    with override(max_specializations=1), count_compiles() as compiles, expect_fallback(cap) as events:
        run_threads(work)
    assert compiles() == 1
    total = N_THREADS * calls_per_thread
    native = sum(f._trident.entry.hits())
    assert native == total // len(KINDS)  # every call of the compiled kind, nothing else
    assert f._trident.eager_calls == total - native == len(events)
    assert all(cap in e.reason for e in events), [e.reason for e in events if cap not in e.reason]
    messages = [str(w.message) for w in recwarn.list if "TRIDENT_MAX_SPECIALIZATIONS=1" in str(w.message)]
    assert len(messages) == 1, messages
