"""CUDA graph replay of steps whose argument tensors move between calls (graphs/replay.cpp): a small argument an
operator reads is staged into graph memory by a memcpy node that follows its address, once for all its readers; a
tensor marked as living at one address (a static KV cache, a compiled module's parameters) is read in place and a
replay checks that it stayed; argument tensors inside lists (an index, a cat, a custom op's Tensor[]) are staged
item by item. Every replay gives the direct path's bits. GPU only (marked `gpu`)."""
from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
from helpers_native import assert_native, graph_of, jit_with_graphs, same_bits
from list_operand_ops import WEIGHTED_SUM, shifted_sum_step, weighted_sum

import trident
import trident.dynamo
from trident.artifact import ReplayPlan
from trident.graphs.recorder import RECORD_AT_HIT
from trident.knobs import override

gpu = pytest.mark.gpu


@gpu
def test_an_input_several_operators_read_is_staged_once_and_a_write_between_stages_it_again() -> None:
    """A position tensor and a token row that move every call, read by several operators (a KV cache's index_copy_
    per layer): the first read stages each into graph memory with one memcpy node, later reads share that copy;
    an in-place write of the argument between two reads makes the later read stage it again. Every call replays
    with the direct path's bits, the argument's own update included."""

    def f(cache_k: torch.Tensor, cache_v: torch.Tensor, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cache_k.index_copy_(0, pos, x)
        cache_v.index_copy_(0, pos, x * 2)
        before = x * 3
        x.add_(1)
        return before + x * 5 + cache_k.index_select(0, pos).sum() + cache_v.sum()

    caches = [torch.zeros(4096, 16, device="cuda") for _ in range(4)]  # above the staging limit: read in place
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in range(40):
        pos = torch.tensor([p], device="cuda")
        x = torch.randn(1, 16, device="cuda")
        x_direct = x.clone()
        got, want = with_graphs(caches[0], caches[1], pos.clone(), x), direct(caches[2], caches[3], pos, x_direct)
        assert same_bits(got, want) and same_bits(x, x_direct), f"position {p}"
        assert same_bits(caches[0], caches[2]) and same_bits(caches[1], caches[3]), f"position {p}"
    graphs = with_graphs._trident.entry.graphs(0)  # type: ignore[attr-defined]
    text = trident.explain(with_graphs)
    assert len(graphs.recordings) == 1 and graphs.replays >= 36, text
    counts = graphs.recordings[0].counts
    # pos once (three readers), x once for its readers before the add_, once for add_ (in and out), once after
    assert counts["divergences"] == 0 and counts["staged_inputs"] == 4, (counts, text)
    # The instantiated graph's own count: those four copies in and the one back after add_, no memset
    assert counts["memcpy_nodes"] == 5 and counts["memset_nodes"] == 0, counts
    assert counts["graph_nodes"] > counts["memcpy_nodes"] and counts["disabled_nodes"] == 0, counts


@gpu
def test_a_cache_written_in_place_is_not_kept_alive_and_a_new_one_at_its_addresses_replays() -> None:
    """HF's generate() makes a new StaticCache each call and drops it at the end. A recording must not hold the
    cache an in-place operator wrote (it would stay allocated for the recording's life, and the next cache of the
    same shapes would always land elsewhere and record again): once the caller lets go, the cache is freed, a new
    one of the same shapes takes its addresses, and the recording replays it with the direct path's bits."""
    import weakref

    def f(cache_k: torch.Tensor, pos: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        cache_k.index_copy_(0, pos, x)
        return cache_k.sum(0) + x

    def new_cache() -> torch.Tensor:
        cache = torch.zeros(4096, 16, device="cuda")  # above the staging limit: read and written in place
        torch._dynamo.mark_static_address(cache)  # as StaticCache marks its tensors
        return cache

    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    addresses, first = set(), None
    for generate in range(3):
        cache, cache_direct = new_cache(), torch.zeros(4096, 16, device="cuda")
        addresses.add(cache.data_ptr())
        for p in range(8):
            pos, x = torch.tensor([p], device="cuda"), torch.randn(1, 16, device="cuda")
            assert same_bits(with_graphs(cache, pos, x), direct(cache_direct, pos, x)), (generate, p)
            assert same_bits(cache, cache_direct), (generate, p)
        if generate == 0:
            first = weakref.ref(cache)
        del cache, cache_direct
        torch.cuda.synchronize()
        assert first() is None, "the recording keeps the caller's cache alive"
    text = trident.explain(with_graphs)
    assert len(addresses) == 1, f"the allocator gave the new caches other addresses: {addresses}"
    graphs = with_graphs._trident.entry.graphs(0)  # type: ignore[attr-defined]
    assert graphs.recordings_tried == 1 and len(graphs.recordings) == 1, text
    assert graphs.replays == 3 * 8 - RECORD_AT_HIT, text
    assert_native(with_graphs, hits=3 * 8, compiles=1)


@gpu
def test_arguments_marked_static_are_read_in_place_and_one_that_moves_runs_directly() -> None:
    """A small argument an ATen operator reads is staged (a memcpy node per replay) unless it is marked as living
    at one address (torch._dynamo.mark_static_address; Dynamo marks a module's parameters so). The mark is only
    trusted as far as a replay checks it: a marked argument that moved runs the call directly, never stale."""

    def f(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + bias)

    x = torch.randn(8, 64, device="cuda")
    counts = {}
    for marked in (False, True):
        bias = torch.randn(64, device="cuda")
        if marked:
            torch._dynamo.mark_static_address(bias)
        with_graphs = jit_with_graphs(f, True)
        for _ in range(RECORD_AT_HIT + 3):
            assert same_bits(with_graphs(x.clone(), bias), f(x, bias))
        recording = graph_of(with_graphs, 0)
        assert recording is not None, trident.explain(with_graphs)
        counts[marked] = dict(recording.counts)
    assert counts[False]["staged_inputs"] == 2 and counts[True]["staged_inputs"] == 1, counts
    assert counts[True]["replays"] == counts[False]["replays"] >= 3
    # The marked bias moves: a new tensor (also marked) at another address.
    moved = torch.randn(64, device="cuda")
    torch._dynamo.mark_static_address(moved)
    assert same_bits(with_graphs(x.clone(), moved), f(x, moved))
    assert recording.counts["divergences"] == 1 and recording.counts["replays"] == counts[True]["replays"]


@gpu
def test_a_marked_tensor_inside_the_calls_objects_is_read_in_place() -> None:
    """A static KV cache's layer keeps its position in a marked 0-d tensor that it adds to in place (transformers'
    StaticLayer.cumulative_length). Found through the call's objects, it is neither staged nor copied back: the
    token tensor is the one staged argument, and every replay advances the positions as eager does."""

    class Layer:
        def __init__(self) -> None:
            self.position = torch.zeros((), dtype=torch.long, device="cuda")
            torch._dynamo.mark_static_address(self.position)

    def step(x: torch.Tensor, layers: list[Layer]) -> torch.Tensor:
        for layer in layers:
            layer.position.add_(1)
            x = x * 2 + layer.position
        return x

    layers, twins = [Layer(), Layer()], [Layer(), Layer()]
    with_graphs = jit_with_graphs(step, True)
    for _ in range(RECORD_AT_HIT + 4):
        x = torch.randn(64, device="cuda")
        assert same_bits(with_graphs(x, layers), step(x, twins))
    assert [int(layer.position) for layer in layers] == [RECORD_AT_HIT + 4] * 2
    recording = graph_of(with_graphs, 0)
    assert recording is not None, trident.explain(with_graphs)
    counts = recording.counts
    assert counts["staged_inputs"] == 1 and counts["divergences"] == 0 and counts["replays"] >= 4, counts


def assert_replayed_every_call_after_recording(step: object, calls: int, staged: int, plan: bool) -> None:
    """The jitted step's one specialization recorded one graph on its third hit and replayed every later call without
    a divergence, with `staged` memcpy-staged argument tensors, and (with `plan`) a replay plan that is on and
    replayed calls itself."""
    text = trident.explain(step)
    (spec,) = step._trident.specializations  # type: ignore[attr-defined]
    graphs = step._trident.entry.graphs(0)  # type: ignore[attr-defined]
    assert len(graphs.recordings) == 1, text
    recording = graphs.recordings[0]
    counts = recording.counts
    # Every hit after the recording one replayed; the recording counts one replay more, the proof's.
    assert counts["divergences"] == 0 and graphs.replays == calls - RECORD_AT_HIT > 0, (graphs, text)
    assert counts["replays"] == graphs.replays + 1, (counts, graphs)
    assert counts["staged_inputs"] == staged, (counts, text)
    if plan:
        assert isinstance(spec.compiled.artifact.replay_plan, ReplayPlan), spec.compiled.artifact.replay_plan
        assert recording.plan is not None and recording.plan["state"] == "on", text
        assert recording.plan["replays"] > 0 and recording.plan["fallbacks"] == 0, recording.plan
        assert "replay plan: on" in text, text
    else:
        assert recording.plan is None, text
    assert_native(step, hits=calls, compiles=1)


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
@pytest.mark.parametrize("index_kind", ["same_tensor", "fresh_tensor"])
def test_an_index_tensor_inside_a_list_whose_contents_or_address_change_replays(index_kind: str, plan: bool) -> None:
    """x[idx] and cache[:, idx] are aten::index.Tensor, whose Tensor?[] operand holds the argument idx (issue 40). Its
    contents change every call, and with a fresh tensor per call (a decode loop's) its address too: the tensor inside
    the list is staged as a tensor argument is, by a memcpy node that follows it, so every call after the recording
    replays, from the replay plan too, with the direct path's and eager's bits."""

    def f(x: torch.Tensor, cache: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[idx] * 2, cache[:, idx].sum(1)

    x = torch.randn(64, 16, device="cuda")  # 4 KB: staged
    cache = torch.randn(4, 4096, 16, device="cuda")  # 1 MB: read in place
    idx = torch.zeros(2, dtype=torch.long, device="cuda")
    calls = 40
    with override(replay_plan=plan):
        with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
        for p in range(calls):
            values = torch.tensor([p % 64, (7 * p + 3) % 64], device="cuda")
            if index_kind == "fresh_tensor":
                idx = values
            else:
                idx.copy_(values)
            got, want, eager = with_graphs(x, cache, idx), direct(x, cache, idx), f(x, cache, idx)
            assert all(same_bits(a, b) and same_bits(a, c) for a, b, c in zip(got, want, eager)), f"call {p}"
    # x, and idx once: cache[:, idx] reads the copy x[idx] staged
    assert_replayed_every_call_after_recording(with_graphs, calls, staged=2, plan=plan)


def called_on_fresh_arguments(
    f: Callable[..., torch.Tensor], arguments: Callable[[], tuple[torch.Tensor, ...]], calls: int, plan: bool
) -> Callable[..., torch.Tensor]:
    """f jitted with graphs, called `calls` times on new tensors from `arguments()`: every result has the bits of
    the direct path's and eager's. Returns the jitted function, for its counts."""
    with override(replay_plan=plan):
        with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
        for p in range(calls):
            args = arguments()
            got = with_graphs(*args)
            assert same_bits(got, direct(*args)) and same_bits(got, f(*args)), f"call {p}"
    return with_graphs


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_a_cat_of_argument_tensors_that_move_every_call_replays(plan: bool) -> None:
    """torch.cat([a, b, a * 2]) takes a Tensor[] of argument tensors, new ones every call: each item is staged, or
    reads the copy an earlier step staged of the same tensor (a, which a * 2 read first)."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b, a * 2]) + 1

    calls = 24
    with_graphs = called_on_fresh_arguments(
        f, lambda: (torch.randn(2, 32, device="cuda"), torch.randn(3, 32, device="cuda")), calls, plan)
    assert_replayed_every_call_after_recording(with_graphs, calls, staged=2, plan=plan)


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_an_opaque_custom_op_taking_argument_tensors_in_a_list_replays(plan: bool) -> None:
    """A custom op kept opaque with a Tensor[] operand (gemlite's forward_functional(Tensor[], int[]) is one; issue
    41): the argument tensors in the list, new every call, are staged item by item; the op's own kernels are
    recorded into the graph and replay with its Python never called."""
    trident.keep_opaque(WEIGHTED_SUM)

    def f(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return weighted_sum([x, y * 2, y], [1, 2, 3]) + 1

    calls = 24
    with_graphs = called_on_fresh_arguments(
        f, lambda: (torch.randn(256, device="cuda"), torch.randn(256, device="cuda")), calls, plan)
    # x, and y once (y * 2 stages it, the list's item 2 reads that copy)
    assert_replayed_every_call_after_recording(with_graphs, calls, staged=2, plan=plan)


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_a_traced_custom_op_with_list_operands_replays_with_its_int_list_following_the_position(plan: bool) -> None:
    """Tensor[], Tensor?[] and SymInt[] operands of a custom op traced into (issue 41): its launch is a Triton node of
    the graph, and the offsets, which follow the position every call, reach it as patched kernel parameters (from the
    replay plan too), with the direct path's and eager's bits."""

    a, b, bias = (torch.randn(400, device="cuda"), torch.randn(400, device="cuda"), torch.randn(48, device="cuda"))
    positions = [p for p in range(2, 28) if p % 16]  # no new Triton variant after the first (== 1, % 16 == 0)
    calls = len(positions)
    with override(replay_plan=plan):
        with_graphs, direct = jit_with_graphs(shifted_sum_step, True), jit_with_graphs(shifted_sum_step, False)
        for pos in positions:
            got = with_graphs(a, b, bias, pos)
            expected = shifted_sum_step(a, b, bias, pos)
            assert same_bits(got, direct(a, b, bias, pos)) and same_bits(got, expected), f"position {pos}"
    text = trident.explain(with_graphs)
    assert "traced into trident_test_lists::shifted_sum" in text, text
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]  # symbolic in pos
    graphs = with_graphs._trident.entry.graphs(last)  # type: ignore[attr-defined]
    hits = with_graphs._trident.entry.hits()[last]  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    assert recording is not None and recording.counts["kernel_nodes"] == 1, text
    # Every hit after the recording one replayed; the recording counts one replay more, the proof's.
    assert graphs.misses == 0 and graphs.replays == hits - RECORD_AT_HIT > 0, text
    assert recording.counts["divergences"] == 0 and recording.counts["replays"] == graphs.replays + 1, text
    assert recording.counts["patched_nodes"] >= graphs.replays, text  # the offsets change every call
    if plan:
        assert recording.plan is not None and recording.plan["state"] == "on", text
        assert recording.plan["replays"] > 0 and recording.plan["fallbacks"] == 0, recording.plan
    assert_native(with_graphs, hits=calls, compiles=last + 1)


@gpu
def test_a_static_index_inside_a_list_is_read_in_place_and_one_that_moves_runs_directly() -> None:
    """An index marked static is read where it lives (its contents may change; a replay compares its address), as a
    tensor argument is; another index at another address diverges, runs directly with eager's result, and explain
    names the list item that moved."""

    def f(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x[idx] * 2

    x = torch.randn(64, 16, device="cuda")
    idx = torch.zeros(2, dtype=torch.long, device="cuda")
    torch._dynamo.mark_static_address(idx)
    with_graphs = jit_with_graphs(f, True)
    for p in range(RECORD_AT_HIT + 3):
        idx.copy_(torch.tensor([p, 2 * p + 1], device="cuda"))
        assert same_bits(with_graphs(x, idx), f(x, idx)), f"call {p}"
    recording = graph_of(with_graphs, 0)
    assert recording is not None, trident.explain(with_graphs)
    # x only is staged; three replays after the recording call, and the proof's
    assert recording.counts["staged_inputs"] == 1 and recording.counts["replays"] == 3 + 1, recording.counts
    moved = torch.tensor([5, 9], device="cuda")
    torch._dynamo.mark_static_address(moved)
    assert same_bits(with_graphs(x, moved), f(x, moved))
    assert recording.counts["divergences"] == 1 and recording.counts["replays"] == 3 + 1, recording.counts
    assert re.search(r"argument 1 of aten::index\.Tensor, item 0 moved", recording.failure), recording.failure


@gpu
def test_a_compiled_modules_parameters_are_not_staged() -> None:
    """Through torch.compile(backend="trident") a module's parameters are the graph's arguments, marked static by
    Dynamo: a replay reads them where they live; only the input itself is staged."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)).cuda()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=trident.dynamo.backend, options={"cuda_graphs": True})
    before = {id(g) for g in trident.dynamo.compiled_graphs()}
    with torch.no_grad():
        for _ in range(RECORD_AT_HIT + 3):
            x = torch.randn(4, 64, device="cuda")
            torch.testing.assert_close(compiled(x), model(x))
    (graph,) = [g for g in trident.dynamo.compiled_graphs() if id(g) not in before]
    recordings = graph.entry.graphs(0).recordings  # type: ignore[attr-defined]
    assert recordings, trident.explain(graph.entry)  # type: ignore[attr-defined]
    assert recordings[0].counts["replays"] >= 3 and recordings[0].counts["staged_inputs"] == 1, recordings[0].counts
    torch._dynamo.reset()
