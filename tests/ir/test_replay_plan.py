"""The replay plan (lowering/replay_plan.py): which programs' CUDA graph replays may skip the host program, and what
its words function computes. Compiled on CPU, where the words function runs as on CUDA (replay_words calls it
as a replay does); the replays themselves are tested on the GPU (tests/e2e/test_cuda_graphs.py)."""
from __future__ import annotations

import contextlib
import logging
import struct
import sys
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from list_operand_ops import WEIGHTED_SUM, weighted_sum

import trident
from trident.artifact import NoReplayPlan, ReplayPlan
from trident.knobs import override
from trident.runtime import load_runtime
from trident.testing import expect_fallback

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
        assert changing and all(0 <= word < plan.words for _, _, word in changing), plan


def _storages(objects: object) -> set[int]:
    """The storages of the tensors among these objects (lists and tuples looked into)."""
    found: set[int] = set()
    for obj in objects if isinstance(objects, (list, tuple)) else [objects]:
        if isinstance(obj, torch.Tensor):
            found.add(obj.untyped_storage().data_ptr())
        elif isinstance(obj, (list, tuple)):
            found |= _storages(obj)
    return found


def _schema_arguments(func: object, args: tuple[object, ...], kwargs: dict[str, object]) -> list[object]:
    """An operator call's arguments in its schema's order, defaults filled in: the IR's operands of the op."""
    values = []
    for i, a in enumerate(func._schema.arguments):  # type: ignore[attr-defined]
        values.append(args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
    return values


def _comparable(operand: object, outside: set[int]) -> tuple[bool, object]:
    """(whether to compare, what) for an operand that is no word: the same int, float, list of them or other constant
    in every call, or the same address for memory from outside the step (an argument, a constant)."""
    if isinstance(operand, torch.Tensor):
        if operand.untyped_storage().data_ptr() not in outside:
            return False, None  # memory the program made: a graph's own, which does not move between replays
        return True, operand.data_ptr()
    if isinstance(operand, (list, tuple)):
        return True, operand  # of ints or other constants: a list of tensors is compared item by item
    return isinstance(operand, (int, float, bool, str, type(None), torch.dtype)), operand


def _parts(operand: object) -> list[tuple[int, object]]:
    """(item, what) for an operand as the plan's layout names it: each item of a list of tensors (Tensor[], Tensor?[]),
    or the operand itself (-1)."""
    if isinstance(operand, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in operand):
        return list(enumerate(operand))
    return [(-1, operand)]


def assert_steps_follow_the_plan(step, call, positions, operators: bool) -> None:  # type: ignore[no-untyped-def]
    """What the runtime's learning and proving check on the GPU, checked here on the CPU over calls at these positions
    (`call(p)`: the arguments, new tensors every time as in a decode loop): a changing operand of a step is its word
    plus an offset that stays the same (a scalar: its word), and every other operand the same in every call; a list
    of tensors item by item (an argument tensor inside one is a word of its own). An
    operand the plan missed would keep its recorded value in a replay from the plan. Triton launches run through
    Triton's interpreter on CPU, where their operands can be seen. With `operators`, without the buffer pool, every
    step is a launch or a call through the dispatcher, which a dispatch mode sees in order (views, which make no
    step, excepted): the operators' operands are checked too, and the order of the plan's steps."""
    from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

    from trident.capture.triton_launches import RecordedLaunch
    from trident.lowering.replay_plan import _makes_no_step

    events: list[tuple[bool, str, list[object]]] = []  # (a Triton launch, what, operands in the step's order)
    launch = RecordedLaunch.launch

    def seen(record: RecordedLaunch, operands: tuple[object, ...]) -> object:
        events.append((True, "launch", list(operands)))
        with _disable_current_modes():  # the interpreter's own tensor work is not the program's
            return launch(record, operands)

    class Steps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name, overload = func._schema.name, func._overloadname
            if not _makes_no_step(name, "" if overload == "default" else overload):
                events.append((False, f"{name}.{overload}", _schema_arguments(func, args, kwargs or {})))
            return func(*args, **(kwargs or {}))

    knobs = {"buffer_pool_mb": 0} if operators else {}
    with pytest.MonkeyPatch.context() as patch, override(**knobs):
        patch.setattr(RecordedLaunch, "launch", seen)
        jf, _ = compiled(step, call(positions[0]), call(positions[0] + 1))
        specs = jf._trident.specializations  # type: ignore[attr-defined]
        first: dict[tuple[int, int, int, int], object] = {}  # (specialization, step, operand, item): offset or value
        held, checked = [], 0  # held: every call's arguments stay alive, so the next call's are at other addresses
        for p in positions[2:]:
            with torch.no_grad(), override(cuda_graphs=True, replay_plan=True, disk_cache=False):
                jf(*call(p))  # compiles where the position needs a specialization of its own (a block size from it)
                hits = jf._trident.entry.hits()  # type: ignore[attr-defined]
                args = call(p)
                held.append(args)
                events.clear()
                with Steps() if operators else contextlib.nullcontext():
                    jf(*args)
            (index,) = [i for i, n in enumerate(jf._trident.entry.hits()) if n != (hits[i] if i < len(hits) else 0)]
            plan = specs[index].compiled.artifact.replay_plan
            assert isinstance(plan, ReplayPlan), plan
            steps = plan.steps if operators else [(kernel, c) for kernel, c in plan.steps if kernel]
            assert [k for k, _, _ in events] == [k for k, _ in steps], [what for _, what, _ in events]
            outside = _storages(list(specs[index].compiled.artifact.constants)) | _storages(list(args))
            w = words(jf, index, *args)
            for i, ((_, what, operands), (_, changing)) in enumerate(zip(events, steps)):
                words_of = {(argument, item): word for argument, item, word in changing}
                for j, operand in enumerate(operands):
                    for k, part in _parts(operand):
                        word = words_of.get((j, k))
                        if word is not None and not isinstance(part, torch.Tensor):
                            bits = struct.unpack("<q", struct.pack("<d", part))[0] if isinstance(part, float) \
                                else int(part)  # fmt: skip
                            assert bits == w[word], (p, i, what, j, k, "a scalar is not its word")
                            continue
                        compare, value = (True, part.data_ptr() - w[word]) if word is not None \
                            else _comparable(part, outside)  # fmt: skip
                        if compare:
                            checked += 1
                            key = (index, i, j, k)
                            assert first.setdefault(key, value) == value, (p, i, what, j, k, first[key])
    assert checked, "no operand was checked"


POSITIONS = (3, 4, 5, 6, 9, 17, 30)  # 16, 17: another variant of kernels that specialize on % 16


@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
@pytest.mark.parametrize("operators", [False, True], ids=["pooled", "every_step"])
def test_each_step_of_the_decode_step_gets_what_the_plan_computes(model_name: str, pos_kind: str,
                                                                  operators: bool) -> None:
    model = build_model(model_name, "cpu", torch.float32, tiny=True, max_seq=32)
    caches = model.new_caches(1)

    def call(p: int) -> tuple[object, ...]:
        tokens = torch.randint(0, model.vocab, (1,))
        return tokens, (p if pos_kind == "int" else torch.tensor([p], dtype=torch.int32)), caches

    assert_steps_follow_the_plan(model.step_for("kernels", pos_kind), call, POSITIONS, operators)


@pytest.mark.parametrize("case", ["liger", "fla", "conch", "liger-llama"])
@pytest.mark.parametrize("operators", [False, True], ids=["pooled", "every_step"])
def test_each_step_of_a_library_step_gets_what_the_plan_computes(case: str, operators: bool,
                                                                 request: pytest.FixtureRequest) -> None:
    """The library steps of benchmarks/libraries.py that run on CPU: liger's functional ops, fla's decoding
    attention, conch's paged attention with its cache writes through a block table, and a Hugging Face Llama with
    liger's kernels (positions as tensors, Hugging Face's API)."""
    from benchmarks import libraries

    for module in {"liger": ["liger_kernel"], "fla": ["fla"], "conch": ["conch"],
                   "liger-llama": ["liger_kernel", "transformers"]}[case]:  # fmt: skip
        pytest.importorskip(module)
    libraries.patch_interpreter_gaps()
    if case == "liger-llama":  # liger patches transformers' Llama module for the process: undone after the test
        from transformers.models.llama import modeling_llama

        before = dict(vars(modeling_llama))
        request.addfinalizer(lambda: [setattr(modeling_llama, k, v) for k, v in before.items()
                                      if vars(modeling_llama).get(k) is not v])
    (setup,) = [c.setup for c in libraries.CASES if c.name == case]
    build, inputs = setup("cpu", torch.float32, True)
    assert_steps_follow_the_plan(build(), inputs, POSITIONS, operators)


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
    assert isinstance(plans[-1], NoReplayPlan) and "slice" in plans[-1].reason and "the program made" in plans[-1].reason, plans[-1]


def test_a_result_that_is_a_view_of_an_argument_gets_no_plan() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[1:3], x + 1

    _, plans = compiled(f, (torch.randn(8, 4),))
    assert plans == [NoReplayPlan("result 0 is a view of an argument")], plans


def test_an_argument_with_symbolic_sizes_gets_no_plan() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    _, plans = compiled(f, (torch.randn(4, 8),), (torch.randn(5, 8),), (torch.randn(6, 8),))
    assert isinstance(plans[0], ReplayPlan), plans[0]  # the first call's sizes, static
    assert isinstance(plans[-1], NoReplayPlan) and "sizes or strides are symbolic" in plans[-1].reason, plans


def test_a_program_no_cuda_graph_records_gets_no_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a call with a CUDA tensor among its arguments is recorded as a CUDA graph, so a plan for a CPU program
    would be compile time (about 8% more for the decode steps) for nothing."""
    monkeypatch.undo()  # this module's plans_on_cpu

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[pos : pos + 1] * 2

    _, plans = compiled(f, (torch.randn(8, 4), 1))
    assert plans == [NoReplayPlan("no CUDA tensor among the arguments: never replayed as a CUDA graph")], plans


def test_a_plan_whose_lowering_fails_costs_the_program_nothing_but_the_plan(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The plan is an optimization: an error lowering it (a bug) leaves the program compiled, replaying through its
    host program, with the reason in the artifact and one warning. In strict mode (the tests) it fails the compile."""
    from trident.lowering import pipeline

    def broken(*args: object, **kwargs: object) -> None:
        raise KeyError("a value the plan never classified")

    monkeypatch.setattr(pipeline, "lower_replay_plan", broken)

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[pos : pos + 1] * 2

    x = torch.randn(8, 4)
    with override(strict=False), caplog.at_level(logging.WARNING, logger="trident"):
        jf, plans = compiled(f, (x, 1), (x, 1))  # both calls native (the first after compiling)
    assert plans == [plans[0]] and plans[0].reason.startswith("lowering it failed (KeyError: "), plans
    assert [r.getMessage() for r in caplog.records if "no replay plan" in r.getMessage()] != [], caplog.text
    assert jf._trident.entry.hits() == [2] and jf._trident.eager_calls == 0  # type: ignore[attr-defined]
    with expect_fallback("at stage 'lower': KeyError: 'a value the plan never classified'"):
        compiled(f, (x, 2))  # strict (the suite's mode): the bug fails the compile, and the test says so


def test_without_the_knob_no_plan_is_lowered() -> None:
    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[pos : pos + 1] * 2

    with override(disk_cache=False, replay_plan=False):
        jf = trident.jit(f)
        jf(torch.randn(8, 4), 1)
    spec = jf._trident.specializations[0]
    assert spec.compiled.artifact.replay_plan == NoReplayPlan("TRIDENT_REPLAY_PLAN=0 or TRIDENT_CUDA_GRAPHS=0", by_knob=True)
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
    assert isinstance(plans[-1], NoReplayPlan) and "sizes that change, read by an operator" in plans[-1].reason, plans[-1]


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


def _list_items(plan: ReplayPlan) -> list[tuple[str, int, int]]:
    """(step's kind, argument, item) of each word the plan's layout puts into a list of tensors."""
    return [("kernel" if kernel else "operator", argument, item)
            for kernel, changing in plan.steps for argument, item, _ in changing if item >= 0]  # fmt: skip


def test_argument_tensors_inside_lists_are_words_of_their_own_items() -> None:
    """cache[:, idx] is aten::index.Tensor(cache, [None, idx]) (Tensor?[], None a full slice) and torch.cat([a, b])
    takes a Tensor[]: each argument tensor inside a list is one word, its data address, which the plan's layout
    names as an item of the step's list argument (issue 40)."""

    def f(cache: torch.Tensor, idx: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return cache[:, idx] * 2, torch.cat([a, b]) + 1

    cache, idx, a, b = torch.randn(4, 16, 8), torch.tensor([3, 5]), torch.randn(2, 8), torch.randn(3, 8)
    jf, plans = compiled(f, (cache, idx, a, b))
    (plan,) = plans
    assert isinstance(plan, ReplayPlan), plan
    assert sorted(_list_items(plan)) == [("operator", 0, 0), ("operator", 0, 1), ("operator", 1, 1)], plan.steps
    assert sorted(words(jf, 0, cache, idx, a, b)) == sorted(t.data_ptr() for t in (cache, idx, a, b))
    # New tensors at other addresses: the words follow them.
    moved = [torch.tensor([1, 2]), torch.randn(2, 8), torch.randn(3, 8)]
    assert sorted(words(jf, 0, cache, *moved)) == sorted(t.data_ptr() for t in (cache, *moved))


@pytest.mark.parametrize("operators", [True], ids=["every_step"])
def test_each_step_reading_argument_tensors_inside_lists_gets_what_the_plan_computes(operators: bool) -> None:
    """The oracle over calls with a new index and new tensors to concatenate every call: each list item the operators
    get is its word (plus a fixed offset), every other item the same in every call."""

    def step(table: torch.Tensor, idx: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return table[idx] * 2 + torch.cat([a, b]).sum(0) + table[:, idx % 4].sum()

    table = torch.randn(8, 4)

    def call(p: int) -> tuple[object, ...]:
        return table, torch.tensor([p % 8]), torch.randn(2, 4), torch.randn(3, 4)

    assert_steps_follow_the_plan(step, call, POSITIONS, operators)


def test_an_argument_of_symbolic_sizes_inside_a_list_gets_no_plan_and_the_reason_names_the_item() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b]) * 2

    a = torch.randn(2, 8)
    _, plans = compiled(f, (a, torch.randn(4, 8)), (a, torch.randn(5, 8)), (a, torch.randn(6, 8)))
    assert isinstance(plans[0], ReplayPlan), plans[0]
    assert isinstance(plans[-1], NoReplayPlan), plans
    assert "item 1: an argument whose sizes or strides are symbolic" in plans[-1].reason, plans[-1].reason


def test_an_opaque_custom_op_taking_a_list_of_argument_tensors_has_a_word_per_item() -> None:
    """A custom op Trident keeps opaque (gemlite's forward_functional(Tensor[] tensor_args, int[] meta_args) is one):
    the argument tensors in its Tensor[] operand are words of their items (issue 41)."""
    trident.keep_opaque(WEIGHTED_SUM)

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return weighted_sum([x, y * 2, y], [1, 2, 3]) + 1

    x, y = torch.randn(8), torch.randn(8)
    jf, plans = compiled(f, (x, y))
    assert isinstance(plans[0], ReplayPlan), plans[0]
    assert [item for _, _, item in _list_items(plans[0])] == [0, 2], plans[0].steps  # y * 2: a tensor the program made
    assert sorted(words(jf, 0, x, y)) == sorted([x.data_ptr(), y.data_ptr()])
    assert torch.equal(jf(x, y), f(x, y))
