"""The disk cache within one process: a second trident.jit of the same function loads what the first stored.

Cheaper than new processes (tests/cache/test_warm_start_processes.py covers those), so the many shapes of
programs, the eviction, clear() and the cases that must not be persisted are tested here."""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from helpers_native import LazyCache

import trident
from trident.artifact import ReplayPlan
from trident.cache import native_library, store
from trident.knobs import override
from trident.testing import count_compiles

from .helpers import assert_same_bits


@pytest.fixture
def disk_cache(tmp_path: Path) -> Iterator[Path]:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache", log=frozenset({"cache"})):
        yield tmp_path / "cache"


def counts() -> dict[str, int]:
    return trident.cache.stats()


def hits(jitted: object) -> list[int]:
    return list(jitted._trident.entry.hits())  # type: ignore[attr-defined]


def compile_then_load(fn: Callable[..., object], *args: object, **kwargs: object) -> tuple[object, object]:
    """Call a fresh jit of fn (compiles and stores), then another fresh jit (must load, not compile, and run the
    loaded code natively); the loaded result must equal the compiled one bit for bit. Returns both results."""
    with torch.no_grad():
        before = counts()
        with count_compiles() as compiles:
            cold = trident.jit(fn)
            first = cold(*args, **kwargs)
        assert compiles() == 1 and hits(cold) == [1]
        assert counts()["stores"] == before["stores"] + 1, trident.explain(cold)
        assert "disk cache: persisted" in trident.explain(cold)
        with count_compiles() as compiles:
            jitted = trident.jit(fn)
            second = jitted(*args, **kwargs)
        assert compiles() == 0, trident.explain(jitted)
        assert counts()["loads"] == before["loads"] + 1
        assert "loaded from the disk cache" in trident.explain(jitted)
        assert hits(jitted) == [1] and jitted._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert_same_bits(second, first)
    return first, second


def compiled_result(fn: Callable[..., object], *args: object) -> object:
    """What a fresh compile (disk cache off) computes for this call: the reference for a loaded result."""
    with override(disk_cache=False), torch.no_grad(), count_compiles() as compiles:
        result = trident.jit(fn)(*args)
    assert compiles() == 1
    return result


# ---------------------------------------------------------------------------------------------------------
# Programs of several shapes round-trip through the disk


MODULE_WEIGHT = torch.randn(8, 8)


def test_closure_global_and_module_parameters(disk_cache: Path) -> None:
    linear = torch.nn.Linear(8, 8).eval()
    bias = torch.randn(8)

    def fn(x):  # type: ignore[no-untyped-def]
        return linear(x) @ MODULE_WEIGHT + bias

    x = torch.randn(3, 8)
    first, second = compile_then_load(fn, x)
    with torch.no_grad():
        torch.testing.assert_close(second, fn(x))


def test_bound_method_of_a_module(disk_cache: Path) -> None:
    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)
            self.register_buffer("scale", torch.full((8,), 2.0))

        def forward(self, x):  # type: ignore[no-untyped-def]
            return self.norm(x) * self.scale

    block = Block().eval()
    x = torch.randn(2, 8)
    _, second = compile_then_load(block.forward, x)
    with torch.no_grad():
        torch.testing.assert_close(second, block(x))


def test_identity_guarded_argument_is_this_calls_object(disk_cache: Path) -> None:
    """An object argument (here `self` of a method jitted in the class body) is guarded by identity: a loaded
    specialization takes the calling object, whose state must match structurally; its tensors are its own."""

    class Scaler:
        def __init__(self, factor: float) -> None:
            self.factor = torch.tensor(factor)

        def scale(self, x):  # type: ignore[no-untyped-def]
            return x * self.factor

    x = torch.randn(4)
    compile_then_load(Scaler.scale, Scaler(3.0), x)
    other = Scaler(5.0)  # another object of the same structure: loads, and uses its own tensor
    with torch.no_grad(), count_compiles() as compiles:
        result = trident.jit(Scaler.scale)(other, x)
    assert compiles() == 0
    assert_same_bits(result, compiled_result(Scaler.scale, other, x))
    torch.testing.assert_close(result, x * 5.0)


def test_literal_tensor_created_by_the_trace_is_stored_by_value(disk_cache: Path) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x * torch.tensor([1.0, 2.0, 3.0])

    x = torch.randn(2, 3)
    _, second = compile_then_load(fn, x)
    torch.testing.assert_close(second, x * torch.tensor([1.0, 2.0, 3.0]))


def test_outputs_scalars_lists_keywords_and_views(disk_cache: Path) -> None:
    def fn(xs, *, scale=2.0, flag=True):  # type: ignore[no-untyped-def]
        a, b = xs
        return [a * scale, b[1:].t()], (a.shape[0], "done", flag, None)

    xs = [torch.randn(3, 4), torch.randn(3, 4)]
    first, second = compile_then_load(fn, xs, scale=3.0)  # equal bits, strides of the view included
    assert second[1] == (3, "done", True, None)  # type: ignore[index]
    torch.testing.assert_close(second[0][0], xs[0] * 3.0)  # type: ignore[index]


def test_guards_decide_between_stored_specializations(disk_cache: Path) -> None:
    def fn(x, n: int):  # type: ignore[no-untyped-def]
        return x * n

    x = torch.randn(4)
    with torch.no_grad():
        cold = trident.jit(fn)
        expected = [cold(x, n) for n in (2, 3, 7)]  # 3 makes the int symbolic: two specializations stored
        assert hits(cold) == [1, 2]
        with count_compiles() as compiles:
            warm = trident.jit(fn)
            for n, cold_result in zip((2, 3, 7), expected):
                assert_same_bits(warm(x, n), cold_result)
        assert compiles() == 0, trident.explain(warm)
        assert trident.explain(warm).count("loaded from the disk cache") == 2
        assert hits(warm) == [1, 2]  # 2 ran the static record, 3 and 7 the symbolic one


def test_truth_reads_decide_between_stored_specializations(disk_cache: Path) -> None:
    """A truth read from a tensor (`if mask.all():`) is guarded by a value program stored with the code: the loaded
    specializations tell the two truths apart natively, and explain still says why a call missed."""

    def fn(x, mask):  # type: ignore[no-untyped-def]
        return x * 2 if mask.all() else x + mask

    x, full = torch.randn(4), torch.ones(4, dtype=torch.bool)
    holed = torch.tensor([True, False, True, True])
    with torch.no_grad():
        cold = trident.jit(fn)
        expected = [cold(x, full), cold(x, holed)]
        with count_compiles() as compiles:
            warm = trident.jit(fn)
            for _ in range(2):
                assert_same_bits(warm(x, holed), expected[1])
                assert_same_bits(warm(x, full), expected[0])
        assert compiles() == 0, trident.explain(warm)
    text = trident.explain(warm)
    assert text.count("loaded from the disk cache") == 2 and hits(warm) == [2, 2], text
    assert "if mask.all() else x + mask -> True, compiled for False" in text, text  # the Python form, loaded


def test_changed_closure_state_is_a_miss(disk_cache: Path) -> None:
    def make(eps: float):  # type: ignore[no-untyped-def]
        def fn(x):  # type: ignore[no-untyped-def]
            return x + eps

        return fn

    x = torch.randn(4)
    with torch.no_grad():
        trident.jit(make(1.0))(x)
        loads = counts()["loads"]
        with count_compiles() as compiles:
            result = trident.jit(make(2.0))(x)
    assert compiles() == 1 and counts()["loads"] == loads
    torch.testing.assert_close(result, x + 2.0)


# ---------------------------------------------------------------------------------------------------------
# Not persisted, with the reason logged


def _not_persisted(fn: Callable[..., object], *args: object, caplog: pytest.LogCaptureFixture) -> str:
    before = counts()
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="trident"):
        trident.jit(fn)(*args)
    assert counts()["stores"] == before["stores"]
    assert counts()["not_persisted"] == before["not_persisted"] + 1
    return "\n".join(r.getMessage() for r in caplog.records if "not persisted" in r.getMessage())


def test_constant_without_provenance_is_not_persisted(disk_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    holder = threading.local()  # a process handle: named by its type, its attributes are not walked
    holder.tensor = torch.randn(4)

    def fn(x):  # type: ignore[no-untyped-def]
        return x + holder.tensor

    message = _not_persisted(fn, torch.randn(4), caplog=caplog)
    assert "constant #0" in message and "was not found from the function's roots" in message


def test_capture_that_changes_closed_over_state_is_not_persisted(
    disk_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    calls = {"n": 0}

    def fn(x):  # type: ignore[no-untyped-def]
        calls["n"] += 1  # runs at capture only; a later process would start from the changed state
        return x * 2

    message = _not_persisted(fn, torch.randn(4), caplog=caplog)
    assert "changed Python state it closes over" in message


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_kernel_defined_inside_a_function_is_not_persisted(
    disk_cache: Path, caplog: pytest.LogCaptureFixture, device: str
) -> None:
    """Another process finds a kernel by module and name; a kernel made inside a function has neither. The
    specialization is not persisted, explain says why, and a new trident.jit compiles (and runs correctly)."""
    import triton
    import triton.language as tl

    @triton.jit
    def local_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        local_add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out * 2

    x, y = torch.randn(32, device=device), torch.randn(32, device=device)
    message = _not_persisted(fn, x, y, caplog=caplog)
    expected = "its launch of Triton kernel 'local_add_kernel' cannot be persisted: it is defined inside a function"
    assert expected in message
    assert not list(disk_cache.rglob("*.spec"))
    with torch.no_grad(), count_compiles() as compiles:
        jitted = trident.jit(fn)
        result = jitted(x, y)
    assert compiles() == 1
    torch.testing.assert_close(result, (x + y) * 2)
    assert f"disk cache: not persisted: {expected}" in trident.explain(jitted)


def test_a_specialization_whose_first_call_raises_is_not_persisted(disk_cache: Path) -> None:
    """Specializations with Triton launches are published after their first call (with the variants it
    compiled); one whose first call raises is not published."""
    import triton

    from .kernels import add_kernel

    def fn(x, y, index):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out.index_select(0, index)  # the index is checked when the call runs, not at capture

    x, y = torch.randn(32), torch.randn(32)
    before = counts()
    jitted = trident.jit(fn)
    with torch.no_grad(), pytest.raises(IndexError):
        jitted(x, y, torch.tensor([40]))
    assert counts()["stores"] == before["stores"] and counts()["not_persisted"] == before["not_persisted"] + 1
    assert "disk cache: not persisted: its first call raised" in trident.explain(jitted)
    assert not list(disk_cache.rglob("*.spec"))
    with torch.no_grad():  # a call that succeeds uses the compiled specialization; nothing is published later
        torch.testing.assert_close(jitted(x, y, torch.tensor([3])), (x + y)[[3]])
    assert counts()["stores"] == before["stores"]


@pytest.mark.gpu
def test_cuda_aten_specialization_round_trips(disk_cache: Path) -> None:
    """ATen ops on CUDA tensors (no Triton): persisted, loaded, and run on this process's CUDA weights."""
    weight = torch.randn(16, 16, device="cuda")

    def fn(x):  # type: ignore[no-untyped-def]
        return torch.softmax(x @ weight, dim=-1) + x.sum(0)

    x = torch.randn(4, 16, device="cuda")
    _, second = compile_then_load(fn, x)
    torch.testing.assert_close(second, fn(x))


def test_disabled_cache_writes_nothing(tmp_path: Path) -> None:
    with override(disk_cache=False, disk_cache_dir=tmp_path / "cache"), torch.no_grad():
        trident.jit(lambda x: x + 1)(torch.randn(4))
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------------------------------------
# The store: clear, eviction, no process addresses


def _store_functions(n: int) -> list[Callable[..., object]]:
    fns = []
    for i in range(n):
        def fn(x, i=i):  # type: ignore[no-untyped-def]  # distinct defaults: distinct lookup keys
            return x * i
        fns.append(fn)
    return fns


def test_clear_removes_everything(disk_cache: Path) -> None:
    fn = _store_functions(1)[0]
    x = torch.randn(4)
    with torch.no_grad():
        trident.jit(fn)(x)
        assert trident.cache.size_bytes() > 0
        trident.cache.clear()
        assert trident.cache.size_bytes() == 0
        with count_compiles() as compiles:
            trident.jit(fn)(x)
    assert compiles() == 1
    assert trident.cache.directory() == disk_cache


def test_least_recently_used_specializations_are_evicted(disk_cache: Path) -> None:
    a, b, c = _store_functions(3)
    x = torch.randn(4)
    with torch.no_grad():
        trident.jit(a)(x)
        one = trident.cache.size_bytes()
        trident.jit(b)(x)
        past = time.time() - 60
        for path in store.cache_root().rglob("*.spec"):
            os.utime(path, (past, past))
        with count_compiles() as compiles:
            trident.jit(a)(x)  # a load marks a's record as used now: b is the least recently used
        assert compiles() == 0
        with override(disk_cache_max_mb=2.5 * one / 2**20):  # room for two specializations, not three
            trident.jit(c)(x)
        with count_compiles() as compiles:
            trident.jit(a)(x)  # kept
            trident.jit(c)(x)  # kept
        assert compiles() == 0
        with count_compiles() as compiles:
            trident.jit(b)(x)  # evicted
        assert compiles() == 1


def test_stored_code_contains_no_process_addresses(disk_cache: Path) -> None:
    weight = torch.randn(8)

    def fn(x):  # type: ignore[no-untyped-def]
        return (x * weight).relu(), "tag"

    with torch.no_grad():
        jitted = trident.jit(fn)
        jitted(torch.randn(8))
    spec = jitted._trident.specializations[0]  # type: ignore[attr-defined]
    known = [id(c) for c in spec.compiled.constants] + [weight.data_ptr(), spec.compiled.guard_address]
    (library,) = store.cache_root().rglob("*.so")
    data = library.read_bytes()
    assert native_library.baked_addresses(data, known) == []
    # The check finds an address when there is one (planted at an odd offset, as an immediate would be).
    planted = data[:101] + id(weight).to_bytes(8, "little") + data[101:]
    assert id(weight) in native_library.baked_addresses(planted, known)


@pytest.mark.usefixtures("plans_on_cpu")
def test_a_replay_plan_is_stored_with_its_specialization(disk_cache: Path) -> None:
    """A loaded specialization keeps its CUDA graph replay plan (lowering/replay_plan.py), and the stored library
    has the words function, which computes this process's words."""
    from trident.runtime import load_runtime

    table = torch.randn(16, 4)

    def fn(x, pos):  # type: ignore[no-untyped-def]
        return x + table[pos : pos + 1]

    x = torch.randn(1, 4)
    plans = []
    with override(replay_plan=True), count_compiles() as compiles:
        for _ in range(2):  # compiled and stored, then loaded
            jitted = trident.jit(fn)
            jitted(x, 3)
            spec = jitted._trident.specializations[0]  # type: ignore[attr-defined]
            plans.append(spec.compiled.artifact.replay_plan)
        assert compiles() == 1 and "loaded from the disk cache" in trident.explain(jitted)
    compiled_plan, loaded_plan = plans
    assert loaded_plan == compiled_plan and isinstance(loaded_plan, ReplayPlan), loaded_plan
    address = spec.compiled.native.address(loaded_plan.symbol)
    words = load_runtime().replay_words(address, spec.compiled.context, (x, 3), loaded_plan.words)
    assert sorted(words) == sorted([x.data_ptr(), table[3].data_ptr()]), words


@pytest.mark.usefixtures("plans_on_cpu")
def test_a_record_compiled_without_a_replay_plan_is_not_loaded_with_the_knob_on(disk_cache: Path) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return x * 3

    x = torch.randn(4)
    with count_compiles() as compiles:
        with override(replay_plan=False):
            trident.jit(fn)(x)  # stored without a plan
        with override(replay_plan=True):
            jitted = trident.jit(fn)
            jitted(x)
        assert compiles() == 2, trident.explain(jitted)
    assert isinstance(jitted._trident.specializations[0].compiled.artifact.replay_plan, ReplayPlan)


def _step(cache: LazyCache, x: torch.Tensor) -> torch.Tensor:
    return cache.update(x)


def test_a_call_that_compiles_or_loads_keeps_none_of_its_arguments(disk_cache: Path) -> None:
    """After the call returns, nothing of its compile or of its load holds what it was given, not even in a
    reference cycle until the garbage collector runs: a Hugging Face generate()'s cache is megabytes of device
    memory, and the next generate()'s cache can take its addresses only once it is freed (a recorded CUDA graph
    holds those addresses, so a cache that lands elsewhere records again)."""
    import gc
    import weakref

    for how in ("compiled", "loaded from the disk cache"):
        jitted = trident.jit(_step)
        for call in ("the first call", "a hit"):
            cache, x = LazyCache(), torch.randn(4)
            gc.collect()
            gc.disable()  # a cycle would survive until the collector ran: it must not be needed
            try:
                with torch.no_grad():
                    jitted(cache, x)
                refs = [weakref.ref(obj) for obj in (cache, cache.buffer, x)]
                del cache, x
                assert [r() for r in refs] == [None, None, None], (how, call)
            finally:
                gc.enable()
        assert how in trident.explain(jitted) and jitted._trident.eager_calls == 0  # type: ignore[attr-defined]
