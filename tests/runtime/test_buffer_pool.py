"""Intermediate buffers kept between calls (csrc/buffer_pool.cpp, lowering/pooled_allocations.py): reused
only when nothing else references them, never for results, within the size limit; results equal eager's."""
from __future__ import annotations

import threading

import pytest
import torch

import trident
from trident.knobs import override


@pytest.fixture(autouse=True)
def _direct_path():  # type: ignore[no-untyped-def]
    """These tests count what the direct path does per call (pool reuses, plans, ATen matmuls); a CUDA graph
    replay does none of it, so graph replay is off here (tests/e2e/test_cuda_graphs.py covers it)."""
    with override(cuda_graphs=False):
        yield


def _pool(jitted: object) -> object:
    return jitted._trident.specializations[-1].compiled.buffer_pool  # type: ignore[attr-defined]


def scaled(x, y):  # type: ignore[no-untyped-def]
    tmp = torch.empty_like(x)
    tmp.copy_(x * 2)
    rows = torch.empty((x.shape[0], 4), dtype=torch.float32, device=x.device)
    rows.fill_(0.5)
    return tmp + y + rows.sum()


def test_intermediates_are_reused_across_calls() -> None:
    jitted = trident.jit(scaled)
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    with torch.no_grad():
        for _ in range(5):
            torch.testing.assert_close(jitted(x, y), scaled(x, y))
    pool = _pool(jitted)
    assert pool.sites == 2  # type: ignore[attr-defined]
    assert (pool.allocations, pool.reuses) == (2, 8)  # type: ignore[attr-defined]
    assert pool.held_bytes == 2 * 16 * 4  # type: ignore[attr-defined]


def test_results_are_never_pooled() -> None:
    def fresh(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        return out.copy_(x + 1)

    jitted = trident.jit(fresh)
    x = torch.randn(8)
    with torch.no_grad():
        first, second = jitted(x), jitted(x)
    assert first.data_ptr() != second.data_ptr()
    assert _pool(jitted) is None


def test_views_and_in_place_results_returned_are_not_pooled() -> None:
    def window(x):  # type: ignore[no-untyped-def]
        tmp = torch.empty_like(x)
        return tmp.copy_(x * 3)[1:]

    jitted = trident.jit(window)
    with torch.no_grad():
        kept = jitted(torch.ones(6))
        torch.testing.assert_close(jitted(torch.full((6,), 2.0)), torch.full((5,), 6.0))
    torch.testing.assert_close(kept, torch.full((5,), 3.0))
    assert _pool(jitted) is None


def test_a_view_from_a_list_of_views_returned_is_not_pooled() -> None:
    def halves(x):  # type: ignore[no-untyped-def]
        tmp = torch.empty_like(x)
        tmp.copy_(x * 2)
        first, _ = tmp.split(2)
        return first

    jitted = trident.jit(halves)
    x = torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(jitted(x), halves(x))
    assert _pool(jitted) is None


_stashed: list[torch.Tensor] = []
_library = torch.library.Library("trident_pool_test", "DEF")
_library.define("stash(Tensor x) -> Tensor")


def _stash(x: torch.Tensor) -> torch.Tensor:
    """Keeps its input (a pooled buffer) where compiled code cannot see it, and lets other threads run."""
    _stashed.append(x)
    threading.Event().wait(0.0005)  # releases the GIL mid-call: another thread's call of the same code overlaps
    return x * 1


_library.impl("stash", _stash, "CPU")
_library.impl("stash", lambda x: torch.empty_like(x), "Meta")
# Its point is a side effect on every call (keeping the live buffer): one dispatcher call, not traced into (a
# traced-into body's Python side effects happen once, at capture, like the function's own).
trident.keep_opaque("trident_pool_test::stash")


def stashing(x):  # type: ignore[no-untyped-def]
    tmp = torch.empty_like(x)
    tmp.copy_(x * 2)
    return torch.ops.trident_pool_test.stash(tmp) + 1


def test_a_buffer_held_elsewhere_is_not_handed_out_again() -> None:
    """What escape analysis cannot see (a custom op keeping its input), reference counts do."""
    _stashed.clear()
    jitted = trident.jit(stashing)
    with torch.no_grad():
        for value in (1.0, 2.0, 3.0):
            torch.testing.assert_close(jitted(torch.full((4,), value)), torch.full((4,), 2 * value + 1))
        assert [float(t[0]) for t in _stashed] == [2.0, 4.0, 6.0]  # none overwritten by a later call
        assert _pool(jitted).reuses == 0  # type: ignore[attr-defined]
        assert _pool(jitted).references(0)[2] is False  # type: ignore[attr-defined]
        _stashed.clear()  # let go: the buffer the site keeps comes back
        assert _pool(jitted).references(0)[2] is True  # type: ignore[attr-defined]
        jitted(torch.full((4,), 1.0))
        jitted(torch.full((4,), 1.0))
    assert _pool(jitted).reuses == 1  # type: ignore[attr-defined]
    _stashed.clear()


_in_flight: dict[int, tuple[int, int]] = {}  # thread id -> (data_ptr, end) of the buffer its call holds
_in_flight_lock = threading.Lock()
_overlaps: list[str] = []
_handed_out: list[int] = []  # data_ptr of every buffer a call held, in order
_rendezvous: list[threading.Barrier] = []  # empty: calls do not wait for each other
_library.define("hold(Tensor x) -> Tensor")


def _hold(x: torch.Tensor) -> torch.Tensor:
    """Runs inside a compiled call with its pooled buffer `x`; with a rendezvous set, every thread's call is
    here at once: each records its buffer's byte range, checks it against those of the calls in flight in the
    other threads, and leaves only after all have checked. Keeps no reference (the pool may reuse it later)."""
    span = (x.data_ptr(), x.data_ptr() + x.untyped_storage().nbytes())
    me = threading.get_ident()
    with _in_flight_lock:
        _handed_out.append(span[0])
        _in_flight[me] = span
    if _rendezvous:
        _rendezvous[0].wait()  # releases the GIL: the other threads' calls run up to here
        with _in_flight_lock:
            for other, (start, end) in _in_flight.items():
                if other != me and start < span[1] and span[0] < end:
                    _overlaps.append(f"{span} overlaps {(start, end)} of a call in flight")
        _rendezvous[0].wait()  # nobody leaves (letting its buffer go back to the pool) before all have checked
    with _in_flight_lock:
        del _in_flight[me]
    return x * 1


_library.impl("hold", _hold, "CPU")
_library.impl("hold", lambda x: torch.empty_like(x), "Meta")


def holding(x):  # type: ignore[no-untyped-def]
    tmp = torch.empty_like(x)
    tmp.copy_(x * 2)
    return torch.ops.trident_pool_test.hold(tmp) + 1


def test_overlapping_calls_in_threads_get_their_own_buffers() -> None:
    """Four threads' calls are in flight together (a barrier inside the program) at each of 25 rounds: the
    pooled buffers they hold never overlap, while between rounds the pool does hand its kept buffer out again."""
    threads_n, rounds = 4, 25
    jitted = trident.jit(holding)
    with torch.no_grad():
        torch.testing.assert_close(jitted(torch.ones(64)), torch.full((64,), 3.0))  # compiled before the threads
    pool = _pool(jitted)
    _overlaps.clear()
    _handed_out.clear()
    _rendezvous[:] = [threading.Barrier(threads_n, timeout=60)]
    failures: list[str] = []

    def worker(seed: int) -> None:
        try:
            with torch.no_grad():
                for i in range(rounds):
                    x = torch.full((64,), float(seed * 1000 + i))
                    if not torch.equal(jitted(x), x * 2 + 1):
                        failures.append(f"thread {seed} call {i}")
        except Exception as e:  # noqa: BLE001 - reported below; a broken barrier names the first failure
            failures.append(f"thread {seed}: {e!r}")
            _rendezvous[0].abort()

    reuses = pool.reuses  # type: ignore[attr-defined]
    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(threads_n)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        _rendezvous.clear()
    assert not failures and not _overlaps, (failures, _overlaps[:3])
    assert len(_handed_out) == threads_n * rounds
    assert pool.reuses > reuses  # type: ignore[attr-defined]  # the kept buffer was handed out in these rounds
    assert len(set(_handed_out)) < len(_handed_out)  # the same memory served calls of different rounds
    assert jitted._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_changed_sizes_allocate_and_stay_correct() -> None:
    """A site whose size changed allocates (its kept buffer does not fit) and keeps the new buffer; the same size
    again reuses it. Rows become symbolic at the second size (specialization 1, its own pool); 3 rows again is
    specialization 0's, whose pool still keeps its 3-row buffers."""
    jitted = trident.jit(scaled)
    seen = []
    with torch.no_grad():
        for n in (3, 5, 5, 9, 9, 3, 5):
            hits = list(jitted._trident.entry.hits())  # type: ignore[attr-defined]
            pools = [s.compiled.buffer_pool for s in jitted._trident.specializations]  # type: ignore[attr-defined]
            before = [(p.allocations, p.reuses) for p in pools]
            x, y = torch.randn(n, 4), torch.randn(n, 4)
            torch.testing.assert_close(jitted(x, y), scaled(x, y))
            after = list(jitted._trident.entry.hits())  # type: ignore[attr-defined]
            spec = next(i for i in range(len(after)) if after[i] != (hits + [0])[i])  # the one that ran it
            pool = jitted._trident.specializations[spec].compiled.buffer_pool  # type: ignore[attr-defined]
            allocations, reuses = (before + [(0, 0)])[spec]
            seen.append((n, spec, pool.allocations - allocations, pool.reuses - reuses, pool.held_bytes))
    assert seen == [
        # rows, specialization, allocations, reuses, bytes kept after the call (two (n, 4) float32 buffers)
        (3, 0, 2, 0, 2 * 3 * 16),
        (5, 1, 2, 0, 2 * 5 * 16),
        (5, 1, 0, 2, 2 * 5 * 16),
        (9, 1, 2, 0, 2 * 9 * 16),  # the 5-row buffers do not fit: new ones, kept in their place
        (9, 1, 0, 2, 2 * 9 * 16),
        (3, 0, 0, 2, 2 * 3 * 16),
        (5, 1, 2, 0, 2 * 5 * 16),
    ]
    assert jitted._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_limit_bounds_what_is_kept() -> None:
    with override(buffer_pool_mb=64 / 2**20):  # 64 bytes: one of the two 64-byte buffers fits
        jitted = trident.jit(scaled)
        x, y = torch.randn(4, 4), torch.randn(4, 4)
        with torch.no_grad():
            for _ in range(3):
                torch.testing.assert_close(jitted(x, y), scaled(x, y))
    pool = _pool(jitted)
    assert pool.held_bytes == 64 and pool.limit_bytes == 64  # type: ignore[attr-defined]
    assert (pool.allocations, pool.reuses) == (4, 2)  # type: ignore[attr-defined]


def test_off_allocates_every_call() -> None:
    with override(buffer_pool_mb=0.0):
        jitted = trident.jit(scaled)
        with torch.no_grad():
            jitted(torch.randn(4, 4), torch.randn(4, 4))
    assert _pool(jitted) is None


def test_a_failing_call_leaves_the_pool_usable() -> None:
    def gather(x, index):  # type: ignore[no-untyped-def]
        tmp = torch.empty_like(x)
        tmp.copy_(x + 1)
        return tmp.index_select(0, index) * 2

    jitted = trident.jit(gather)
    x = torch.randn(5, 3)
    with torch.no_grad():
        jitted(x, torch.tensor([0, 4]))
        with pytest.raises(IndexError):
            jitted(x, torch.tensor([0, 7]))
        torch.testing.assert_close(jitted(x, torch.tensor([4, 1])), gather(x, torch.tensor([4, 1])))
    assert _pool(jitted).reuses == 2  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# CUDA: streams and graph capture


@pytest.mark.gpu
def test_cuda_buffers_follow_the_stream() -> None:
    """A buffer last used on one stream is not handed out on another (its kernels may still run there)."""
    jitted = trident.jit(scaled)
    x, y = torch.randn(256, 4, device="cuda"), torch.randn(256, 4, device="cuda")
    side = torch.cuda.Stream()
    with torch.no_grad():
        expected = scaled(x, y)
        torch.testing.assert_close(jitted(x, y), expected)
        torch.testing.assert_close(jitted(x, y), expected)
        reuses = _pool(jitted).reuses  # type: ignore[attr-defined]
        assert reuses == 2
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            on_side = jitted(x, y)
        torch.cuda.current_stream().wait_stream(side)
        torch.testing.assert_close(on_side, expected)
        assert _pool(jitted).reuses == reuses  # type: ignore[attr-defined]  # fresh buffers on the other stream


@pytest.mark.gpu
def test_cuda_graph_capture_keeps_no_buffers() -> None:
    jitted = trident.jit(scaled)
    x, y = torch.randn(64, 4, device="cuda"), torch.randn(64, 4, device="cuda")
    with torch.no_grad():
        jitted(x, y)
        held = _pool(jitted).held_bytes  # type: ignore[attr-defined]
        graph = torch.cuda.CUDAGraph()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            jitted(x, y)  # warm-up on the capture stream, as torch.cuda.graph requires
        torch.cuda.current_stream().wait_stream(side)
        with torch.cuda.graph(graph):
            out = jitted(x, y)
        x.mul_(2)
        graph.replay()
        torch.testing.assert_close(out, scaled(x, y))
        torch.testing.assert_close(jitted(x, y), scaled(x, y))
    assert _pool(jitted).held_bytes == held  # type: ignore[attr-defined]


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8, 33])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cuda_matmuls_call_atens_kernel_directly_with_eagers_bits(rows: int, dtype: torch.dtype) -> None:
    """Pooled CUDA mm/addmm call ATen's CUDA kernel without the dispatcher: the same bits as eager."""
    from trident.runtime import load_runtime

    assert load_runtime().cuda_matmul_kernels_linked  # a CUDA torch links them; otherwise nothing here is tested
    gen = torch.Generator(device="cuda").manual_seed(rows)
    weight = torch.randn(2048, 1024, device="cuda", dtype=dtype, generator=gen)
    bias = torch.randn(2048, device="cuda", dtype=dtype, generator=gen)
    head = torch.randn(512, 2048, device="cuda", dtype=dtype, generator=gen)

    def mlp(x):  # type: ignore[no-untyped-def]
        h = torch.nn.functional.linear(x, weight, bias)  # addmm, pooled
        g = torch.nn.functional.linear(x, weight)  # mm, pooled
        return torch.nn.functional.linear(h * g, head)  # mm, returned: not pooled

    jitted = trident.jit(mlp)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(rows, 1024, device="cuda", dtype=dtype, generator=gen)
            assert torch.equal(jitted(x), mlp(x))
    pool = _pool(jitted)
    # Past the first call a site may run its cuBLASLt plan instead (tests/runtime/test_matmul_plans.py).
    assert pool.direct_matmuls + pool.planned_matmuls == 2 * 3  # type: ignore[attr-defined]
    assert pool.direct_matmuls >= 2  # type: ignore[attr-defined]  # every site's first call
    assert pool.reuses == 2 * 2  # type: ignore[attr-defined]


@pytest.mark.gpu
def test_cuda_matmuls_keep_the_dispatcher_when_a_layer_is_in_force() -> None:
    """Under autocast or a TorchDispatchMode the dispatcher adds layers: those calls do not go direct."""
    from torch.utils._python_dispatch import TorchDispatchMode

    weight = torch.randn(64, 32, device="cuda")

    def two(x):  # type: ignore[no-untyped-def]
        return torch.nn.functional.linear(x, weight).relu().sum(0)

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.mm = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.mm += func is torch.ops.aten.mm.out
            return func(*args, **(kwargs or {}))

    jitted = trident.jit(two)
    x = torch.randn(8, 32, device="cuda")
    with torch.no_grad():
        jitted(x)
        direct = _pool(jitted).direct_matmuls  # type: ignore[attr-defined]
        assert direct == 1
        mode = Count()
        with mode:
            torch.testing.assert_close(jitted(x), two(x))
        assert _pool(jitted).direct_matmuls == direct  # type: ignore[attr-defined]
        assert _pool(jitted).planned_matmuls == 0  # type: ignore[attr-defined]  # float32: never planned
        assert mode.mm == 1  # the mode saw trident's mm
        with torch.autocast("cuda", dtype=torch.bfloat16):  # a new specialization (autocast is guarded)
            torch.testing.assert_close(jitted(x), two(x))
            torch.testing.assert_close(jitted(x), two(x))
        assert len(jitted._trident.specializations) == 2  # type: ignore[attr-defined]
        assert _pool(jitted).direct_matmuls == 0  # type: ignore[attr-defined]


def test_explain_reports_the_pool() -> None:
    jitted = trident.jit(scaled)
    with torch.no_grad():
        for _ in range(3):
            jitted(torch.randn(4, 4), torch.randn(4, 4))
    assert "buffer pool: 2 allocation site(s), 4 reuse(s), 2 allocation(s), 128 bytes kept" in trident.explain(jitted)


def test_matmul_results_are_computed_into_pooled_buffers() -> None:
    """mm and addmm (F.linear with and without bias) through out= variants: eager's exact bits, reused buffers."""
    weight, bias, head = torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)

    def mlp(x):  # type: ignore[no-untyped-def]
        h = torch.nn.functional.linear(x, weight, bias).relu()
        return torch.nn.functional.linear(torch.nn.functional.linear(x, weight).relu() + h, head)

    jitted = trident.jit(mlp)
    with torch.no_grad():
        for rows in (4, 4, 4):
            x = torch.randn(rows, 16)
            assert torch.equal(jitted(x), mlp(x))
    pool = _pool(jitted)
    calls = jitted._trident.specializations[-1].compiled.aten_calls  # type: ignore[attr-defined]
    assert calls.count("aten::addmm") == 1 and calls.count("aten::mm") == 2
    assert pool.sites == 2  # type: ignore[attr-defined]  # the returned (last) mm is not pooled
    assert (pool.allocations, pool.reuses) == (2, 4)  # type: ignore[attr-defined]


def test_scaled_addmm_is_not_pooled() -> None:
    def scaled(b, x, w):  # type: ignore[no-untyped-def]
        return torch.addmm(b, x, w, beta=0.5, alpha=2.0).sum(0)

    jitted = trident.jit(scaled)
    b, x, w = torch.randn(3), torch.randn(2, 4), torch.randn(4, 3)
    with torch.no_grad():
        torch.testing.assert_close(jitted(b, x, w), scaled(b, x, w))
    assert _pool(jitted) is None


class _Layer:
    """A state object whose buffer the first update allocates (a StaticCache layer's keys, reduced)."""


def _first_update(layer: _Layer, x: torch.Tensor, marked: bool = True) -> torch.Tensor:
    layer.buffer = torch.zeros_like(x)
    if marked:
        torch._dynamo.mark_static_address(layer.buffer)
    layer.buffer.add_(x)
    return x * 2


def test_a_marked_state_tensor_takes_the_memory_of_the_last_one_once_that_is_gone() -> None:
    """The buffer a call stores into its state object marked static lands where the last call's was once nothing
    holds that one, whatever the caller allocated in between; never while the caller still holds it."""
    jitted = trident.jit(_first_update)
    held, addresses = [], []
    with torch.no_grad():
        for n in range(3):
            layer, x = _Layer(), torch.randn(64) + n
            torch.testing.assert_close(jitted(layer, x), x * 2)
            assert torch.equal(layer.buffer, x) and layer.buffer._dynamo_static_input_type == "unguarded"
            addresses.append(layer.buffer.data_ptr())
            held.append(torch.empty(100 * (n + 1)))  # the caller allocates in between
            del layer
        assert addresses == [addresses[0]] * 3
        kept, x = _Layer(), torch.randn(64)
        jitted(kept, x)
        other = _Layer()
        jitted(other, x + 1)
        assert other.buffer.data_ptr() != kept.buffer.data_ptr()
        assert torch.equal(kept.buffer, x) and torch.equal(other.buffer, x + 1)
    pool = _pool(jitted)
    assert (pool.sites, pool.reuses, pool.unkept) == (1, 3, 0)  # type: ignore[attr-defined]
    assert jitted._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_an_unmarked_state_tensor_and_one_over_the_limit_are_not_kept() -> None:
    unmarked = trident.jit(lambda layer, x: _first_update(layer, x, marked=False))
    with torch.no_grad():
        unmarked(_Layer(), torch.randn(64))
    assert _pool(unmarked) is None
    with override(buffer_pool_mb=128 / 2**20):  # 128 bytes: the 256-byte buffer does not fit
        jitted = trident.jit(_first_update)
        with torch.no_grad():
            for _ in range(2):
                layer, x = _Layer(), torch.randn(64)
                jitted(layer, x)
                assert torch.equal(layer.buffer, x)
    pool = _pool(jitted)
    assert (pool.held_bytes, pool.reuses, pool.unkept) == (0, 0, 2)  # type: ignore[attr-defined]
    assert "left unkept at the limit" in trident.explain(jitted)
