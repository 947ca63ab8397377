"""The replay plan (lowering/replay_plan.py): which programs' CUDA graph replays may skip the host program, and what
its words function computes. Compiled on CPU, where the words function runs as on CUDA (replay_words calls it
as a replay does); the replays themselves are tested on the GPU (tests/e2e/test_cuda_graphs.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import trident
from trident.artifact import ReplayPlan
from trident.knobs import override
from trident.runtime import load_runtime

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.llm.models import build_model  # noqa: E402

# No CUDA graph records a CPU program, so the pipeline lowers no plan for one unless a test asks (conftest.py).
pytestmark = pytest.mark.usefixtures("plans_on_cpu")


def compiled(fn, *calls):  # type: ignore[no-untyped-def]
    """The jitted fn after these calls (argument tuples), and its specializations' plans (or reasons)."""
    with override(cuda_graphs=True, replay_plan=True, disk_cache=False):
        jf = trident.jit(fn)
        with torch.no_grad():
            for args in calls:
                jf(*args)
    return jf, [spec.compiled.artifact.replay_plan for spec in jf._trident.specializations]


def words(jf, index: int, *args) -> list[int]:  # type: ignore[no-untyped-def]
    spec = jf._trident.specializations[index]
    plan = spec.compiled.artifact.replay_plan
    address = spec.compiled.native.address(plan.symbol)
    return load_runtime().replay_words(address, spec.compiled.context, tuple(args), plan.words)


@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_the_decode_steps_have_plans(model_name: str, pos_kind: str) -> None:
    model = build_model(model_name, "cpu", torch.float32, tiny=True, max_seq=32)
    caches = model.new_caches(1)
    tokens = torch.zeros(1, dtype=torch.long)

    def pos(p: int) -> object:
        return p if pos_kind == "int" else torch.tensor([p], dtype=torch.int32)

    _, plans = compiled(model.step_for("kernels", pos_kind), *[(tokens, pos(p), caches) for p in (3, 4)])
    for plan in plans:
        assert isinstance(plan, ReplayPlan), plan
        kernels = sum(kernel for kernel, _ in plan.steps)
        assert kernels >= 7 * model.config.layers and plan.outputs == 1, plan
        changing = [a for _, c in plan.steps for a in c]
        assert changing and all(0 <= word < plan.words for _, word in changing), plan


def test_the_words_are_the_position_the_ints_from_it_and_the_argument_addresses() -> None:
    def f(x: torch.Tensor, pos: int, y: torch.Tensor) -> torch.Tensor:
        return (x[pos : pos + 1] + y) * (pos + 2)  # a row of an argument at the position, an int from it

    x, y = torch.randn(8, 4), torch.randn(1, 4)
    jf, plans = compiled(f, (x, 1, y), (x, 2, y))
    symbolic = len(plans) - 1
    assert isinstance(plans[symbolic], ReplayPlan), plans
    for p in (3, 5):
        assert sorted(words(jf, symbolic, x, p, y)) == sorted([x[p].data_ptr(), y.data_ptr(), p + 2])
    # Another x: the row's address follows it.
    other = torch.randn(8, 4)
    assert other[6].data_ptr() in words(jf, symbolic, other, 6, y)


def test_a_view_at_the_position_of_a_tensor_the_program_made_gets_no_plan() -> None:
    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        h = x * 2
        return h[pos : pos + 1] + 1

    _, plans = compiled(f, (torch.randn(8, 4), 1), (torch.randn(8, 4), 2))
    assert isinstance(plans[-1], str) and "slice" in plans[-1] and "the program made" in plans[-1], plans[-1]


def test_a_result_that_is_a_view_of_an_argument_gets_no_plan() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[1:3], x + 1

    _, plans = compiled(f, (torch.randn(8, 4),))
    assert plans == ["result 0 is a view of an argument"], plans


def test_an_argument_with_symbolic_sizes_gets_no_plan() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    _, plans = compiled(f, (torch.randn(4, 8),), (torch.randn(5, 8),), (torch.randn(6, 8),))
    assert isinstance(plans[0], ReplayPlan), plans[0]  # the first call's sizes, static
    assert isinstance(plans[-1], str) and "sizes or strides are symbolic" in plans[-1], plans


def test_a_program_no_cuda_graph_records_gets_no_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a call with a CUDA tensor among its arguments is recorded as a CUDA graph, so a plan for a CPU program
    would be compile time (about 8% more for the decode steps) for nothing."""
    monkeypatch.undo()  # this module's plans_on_cpu

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[pos : pos + 1] * 2

    _, plans = compiled(f, (torch.randn(8, 4), 1))
    assert plans == ["no CUDA tensor among the arguments: never replayed as a CUDA graph"], plans


def test_without_the_knob_no_plan_is_lowered() -> None:
    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[pos : pos + 1] * 2

    with override(disk_cache=False):  # TRIDENT_REPLAY_PLAN is off by default
        jf = trident.jit(f)
        jf(torch.randn(8, 4), 1)
    spec = jf._trident.specializations[0]
    assert spec.compiled.artifact.replay_plan == "off (TRIDENT_REPLAY_PLAN=1 turns it on)"
    assert "replay_words" not in spec.compiled.stages["lowered"]


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n, other=0.0))


def test_a_view_whose_sizes_change_is_a_word_where_only_launches_read_it() -> None:
    """cache[: pos + 1] has sizes that change; a Triton launch takes its address alone (its length is an int of its
    own), so the plan makes the view and uses its address. Read by an operator, its sizes would matter: no plan."""

    def launched(cache: torch.Tensor, pos: int) -> torch.Tensor:
        out = torch.empty(16)
        _copy_kernel[(1,)](cache[: pos + 1], out, pos + 1, BLOCK=16)
        return out

    def summed(cache: torch.Tensor, pos: int) -> torch.Tensor:
        return cache[: pos + 1].sum(0)

    cache = torch.randn(16, 1)
    jf, plans = compiled(launched, (cache, 1), (cache, 2))
    assert isinstance(plans[-1], ReplayPlan), plans[-1]
    assert sorted(words(jf, len(plans) - 1, cache, 6)) == sorted([cache.data_ptr(), 7])
    _, plans = compiled(summed, (cache, 1), (cache, 2))
    assert isinstance(plans[-1], str) and "sizes that change, read by an operator" in plans[-1], plans[-1]


def test_an_argument_written_in_place_is_the_argument() -> None:
    def f(cache: torch.Tensor, index: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        cache.index_copy_(0, index, rows)
        return cache.sum(0) * 2

    cache, index, rows = torch.zeros(8, 4), torch.tensor([3]), torch.randn(1, 4)
    jf, plans = compiled(f, (cache, index, rows))
    assert isinstance(plans[0], ReplayPlan), plans[0]
    assert sorted(words(jf, 0, cache, index, rows)) == sorted([cache.data_ptr(), index.data_ptr(), rows.data_ptr()])


def test_a_view_at_the_position_of_an_argument_written_in_place_runs_no_write() -> None:
    """The words function makes the view of the written argument without running the write again (its step does)."""

    def f(cache: torch.Tensor, rows: torch.Tensor, pos: int) -> torch.Tensor:
        written = cache.add_(1)
        return written[pos : pos + 1] * rows

    cache, rows = torch.zeros(8, 4), torch.randn(1, 4)
    jf, plans = compiled(f, (cache, rows, 1), (cache, rows, 2))
    assert isinstance(plans[-1], ReplayPlan), plans[-1]
    before = cache.clone()
    expected = [cache.data_ptr(), cache[5].data_ptr(), rows.data_ptr()]  # add_'s operand, the row, rows
    assert sorted(words(jf, len(plans) - 1, cache, rows, 5)) == sorted(expected)
    assert torch.equal(cache, before)  # the words function wrote nothing
