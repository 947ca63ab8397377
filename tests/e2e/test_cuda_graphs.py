"""CUDA graph replay (on unless TRIDENT_CUDA_GRAPHS=0, graphs/recorder.py): the decode benchmark's tiny models replayed
as graphs must give the direct native path's bits, step after step, with positions that change every call.

Each test builds two jitted copies of one step on separate but equal caches: one with graphs on, one without,
fed the same tokens and positions. Every call's logits and the caches after it must be equal bit for bit, and
the graph copy must really have replayed (its recording's replay count, and no eager call). The GPU tests are
marked `gpu`; on CPU the recorder only says why there is no graph, and the call runs directly."""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from helpers_native import assert_native, graph_of, jit_with_graphs, same_bits

import trident
from trident.knobs import override
from trident.graphs.recorder import RECORD_AT_HIT

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.llm.models import build_model  # noqa: E402

POSITIONS = list(range(0, 40)) + [63, 64, 65, 80]  # every residue mod 16 (Triton's int specialization), a 2nd block
gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_decode_step_replays_the_direct_paths_bits(model_name: str, pos_kind: str, batch: int, plan: bool) -> None:
    """Replays through the host program (TRIDENT_REPLAY_PLAN=0), and by default most of them from the replay plan."""
    model = build_model(model_name, "cuda", torch.bfloat16, tiny=True, max_seq=128)
    fn = model.step_for("kernels", pos_kind)
    with_graphs, direct = jit_with_graphs(fn, True), jit_with_graphs(fn, False)
    caches, direct_caches = model.new_caches(batch), model.new_caches(batch)
    held = []
    with torch.no_grad(), override(replay_plan=plan):
        for p in POSITIONS:
            tokens = torch.randint(0, model.vocab, (batch,), device="cuda")  # a new tensor every step
            pos = torch.tensor([p], dtype=torch.int32, device="cuda") if pos_kind == "tensor" else p
            logits = with_graphs(tokens, pos, caches)
            expected = direct(tokens.clone(), pos, direct_caches)
            held.append((logits, expected.clone()))
            assert same_bits(logits, expected), f"position {p}"
    for (k, v), (dk, dv) in zip(caches, direct_caches):
        assert same_bits(k, dk) and same_bits(v, dv)
    # Results the caller still holds were never overwritten by a later replay.
    for i, (logits, expected) in enumerate(held):
        assert same_bits(logits, expected), f"held result of step {i}"
    specs = with_graphs._trident.specializations  # type: ignore[attr-defined]
    last = len(specs) - 1  # int positions: the position becomes symbolic in the second specialization
    recording = graph_of(with_graphs, last)
    text = trident.explain(with_graphs)
    assert recording is not None, text
    graphs = with_graphs._trident.entry.graphs(last)  # type: ignore[attr-defined]
    hits = with_graphs._trident.entry.hits()[last]  # type: ignore[attr-defined]
    # Hits 1-2 run directly, the 3rd records and proves; every later hit replays (positions only patch nodes),
    # except the first call of a position Triton specializes anew (== 1, % 16 == 0), which needs Triton's
    # launcher to compile that variant: it runs directly, and later replays patch the new variant in.
    assert graphs.replays + graphs.misses == hits - RECORD_AT_HIT, text
    assert graphs.misses <= 4 and len(graphs.recordings) == 1 and graphs.pauses == 0, text
    assert recording.counts["patched_nodes"] > 0, text  # positions and the moving tokens reached it by patches
    assert "CUDA graph:" in text and "replay(s)" in text, text
    if plan:
        # After one replay it learns from and three it proves itself against, the replay plan computes the nodes
        # without the host program: every later replay but those of a new kernel variant.
        state = recording.plan
        assert state is not None and state["state"] == "on", text
        assert state["fallbacks"] <= 4 and state["replays"] >= graphs.replays - 4 - state["fallbacks"], text
        assert "replay plan: on" in text, text
        # A node whose changing values are those it was computed from (a weight's address, a cache that did not
        # move) is not computed again: only what the position and the new tokens reach is.
        computed = state["replays"] + state["fallbacks"] + state["proofs"]
        assert 0 < state["nodes_computed"] < computed * recording.counts["kernel_nodes"], (state, text)
    else:
        assert recording.plan is None and "replay plan" not in text, text
    assert_native(with_graphs, hits=len(POSITIONS), compiles=len(specs))


@gpu
def test_a_large_input_that_moves_is_recorded_again_after_a_backoff_and_replay_pauses_but_never_stops() -> None:
    """An input too large to stage that moves between calls matches no recording: the call runs directly. After a
    recording that never replayed, the recorder waits a backoff (16 hits, then longer); after one that did, the
    next call no recording fits is recorded at once. Replay pauses for a while once misses outnumber replays by
    16. Neither stops for good, and the recordings made (at most four, the least recently replayed replaced) still
    replay the calls they fit."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.silu(x @ w) * 2

    w = torch.randn(256, 256, device="cuda")
    with_graphs = jit_with_graphs(f, True)
    entry = with_graphs._trident.entry  # type: ignore[attr-defined]
    xs = [torch.randn(512, 256, device="cuda") for _ in range(8)]  # 512 KB each, each at its own address
    for x in xs:
        torch.testing.assert_close(with_graphs(x, w), f(x, w), rtol=0, atol=0)
    graphs = entry.graphs(0)
    assert len(graphs.recordings) == 1 and graphs.replays == 0, trident.explain(with_graphs)
    assert graphs.record_after_hit == RECORD_AT_HIT - 1 + 16, graphs  # a recording that never replayed
    assert "moved (a tensor at another address)" in graphs.recordings[-1].failure
    recorded = xs[RECORD_AT_HIT - 1]  # the input of the first recording call
    for _ in range(3):
        torch.testing.assert_close(with_graphs(recorded, w), f(recorded, w), rtol=0, atol=0)
    assert entry.graphs(0).replays == 3
    moving = [torch.randn(512, 256, device="cuda") for _ in range(30)]
    for x in moving:
        torch.testing.assert_close(with_graphs(x, w), f(x, w), rtol=0, atol=0)
    graphs = entry.graphs(0)
    # The first of these calls is recorded at once (the recording before it had replayed); the next would wait
    # for the backoff, and replay paused once misses passed replays + 16.
    assert graphs.recordings_tried == 2 and len(graphs.recordings) == 2 and graphs.pauses == 1, graphs
    for x in (recorded, moving[0]):  # both recordings still replay what they fit
        torch.testing.assert_close(with_graphs(x, w), f(x, w), rtol=0, atol=0)
    assert entry.graphs(0).replays == 5, trident.explain(with_graphs)
    assert_native(with_graphs, hits=8 + 3 + 30 + 2, compiles=1)


@gpu
def test_calls_on_another_stream_or_inside_a_users_capture_run_directly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 3).relu() + 1

    x = torch.randn(1024, device="cuda")
    with_graphs = jit_with_graphs(f, True)
    for _ in range(5):
        with_graphs(x)
    recording = graph_of(with_graphs, 0)
    assert recording is not None
    replays = recording.counts["replays"]
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        out = with_graphs(x)
    side.synchronize()
    assert torch.equal(out, f(x)) and recording.counts["replays"] == replays
    user_graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(user_graph, stream=stream):
        captured = with_graphs(x)
    x.copy_(torch.randn(1024, device="cuda"))
    user_graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured, f(x)) and recording.counts["replays"] == replays


@gpu
def test_a_program_drawing_random_numbers_gets_no_graph_and_leaves_torchs_generator_working() -> None:
    """Random ops cannot be replayed from a graph without advancing the generator's offset: the capture refuses
    them, and a refused capture must not leave torch's CUDA generator in capture mode (torch.cuda.CUDAGraph's
    own capture does, after a failure)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x + torch.rand_like(x)

    with_graphs = jit_with_graphs(f, True)
    x = torch.zeros(4096, device="cuda")
    outs = [with_graphs(x) for _ in range(RECORD_AT_HIT + 2)]
    assert all(not torch.equal(a, b) for a, b in zip(outs, outs[1:]))  # fresh numbers every call
    assert graph_of(with_graphs, 0) is None
    assert "CUDA graph: none (capture failed" in trident.explain(with_graphs)
    assert torch.randn(8, device="cuda").isfinite().all()  # the generator still works


@gpu
def test_an_operator_that_synchronizes_invalidates_only_its_own_capture() -> None:
    """An opaque custom op that reads a device value on the host (a sync, illegal while capturing) makes the
    capture fail; the call runs directly, and CUDA work after it is unaffected."""

    @torch.library.custom_op("trident_test_graphs::host_read", mutates_args=())
    def host_read(x: torch.Tensor) -> torch.Tensor:
        return x * float(x.sum().item() > 0)

    @host_read.register_fake
    def _(x: torch.Tensor) -> torch.Tensor:
        return torch.empty_like(x)

    trident.keep_opaque("trident_test_graphs::host_read")

    def f(x: torch.Tensor) -> torch.Tensor:
        return host_read(x + 1) * 2

    with_graphs = jit_with_graphs(f, True)
    x = torch.ones(256, device="cuda")
    for _ in range(RECORD_AT_HIT + 2):
        assert torch.equal(with_graphs(x), f(x))
    assert graph_of(with_graphs, 0) is None
    assert "CUDA graph: none (capture failed" in trident.explain(with_graphs)
    assert torch.randn(8, device="cuda").isfinite().all() and (x @ x) == 256


@gpu
def test_results_sharing_graph_memory_still_share_it_and_are_never_overwritten() -> None:
    """Results that are views of one buffer the program made (q and k of a fused projection, and the buffer
    itself) come back as views of one fresh copy of the bytes they cover: they share memory as they do directly,
    and a later replay never touches what the caller holds."""

    def f(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qk = x @ w
        return qk[:, :64], qk[:, 64:], qk

    w = torch.randn(128, 128, device="cuda")
    x = torch.empty(8, 128, device="cuda")  # refilled in place: the same address every call
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    held = []
    for _ in range(RECORD_AT_HIT + 5):
        x.copy_(torch.randn(8, 128, device="cuda"))
        got, want = with_graphs(x, w), direct(x, w)
        assert all(same_bits(a, b) for a, b in zip(got, want))
        held.append((got, [t.clone() for t in want]))
    for got, want in held:
        assert all(same_bits(a, b) for a, b in zip(got, want))
    q, k, base = held[-1][0]
    assert q.untyped_storage().data_ptr() == k.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    base.zero_()
    assert not q.any() and not k.any()
    recording = graph_of(with_graphs, 0)
    assert recording is not None, trident.explain(with_graphs)
    assert recording.counts["replays"] >= 5


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_replays_time_their_host_phases_only_when_asked(plan: bool) -> None:
    """time_replays(True) sums each replay's host time by phase (what benchmarks/llm/host_profile.py reports);
    it counts exactly the replays since, and nothing once turned off. From a replay plan, the program's time is the
    words function's and the nodes computed from it: no operator or Triton step of the host program runs."""
    model = build_model("llama", "cuda", torch.bfloat16, tiny=True, max_seq=128)
    caches = model.new_caches(1)
    tokens = torch.zeros(1, dtype=torch.long, device="cuda")
    with torch.no_grad(), override(replay_plan=plan):
        step = jit_with_graphs(model.step_for("kernels", "int"), True)
        # Recorded at the third hit; then one replay the plan learns from and three it proves itself against.
        for p in range(10):
            step(tokens, p, caches)
        recording = graph_of(step, len(step._trident.specializations) - 1)  # type: ignore[attr-defined]
        assert recording is not None and recording.times is None, trident.explain(step)
        assert (recording.plan is not None and recording.plan["state"] == "on") == plan, trident.explain(step)
        recording.time_replays(True)
        replays = recording.counts["replays"]
        for p in range(10, 16):  # no new Triton variant (1, 16, 32 ...) among these positions
            step(tokens, p, caches)
        times = recording.times
        assert recording.counts["replays"] - replays == times["replays"] == 6, (times, trident.explain(step))
        assert times["launch"] > 0 and times["program"] > 0, times
        if plan:
            assert times["opaque_steps"] == times["triton_steps"] == 0 and 0 < times["words"] <= times["program"], times
        else:
            assert times["opaque_steps"] > 0 and times["triton_steps"] > 0 and times["words"] == 0, times
            assert times["program"] > times["opaque_steps"] + times["triton_steps"], times
        # Every try of this recording replayed, and the time inside replay() covers the phases it is made of.
        assert times["tries"] == 6 and times["unreplayed"] == 0, times
        assert times["inside"] > times["program"] + times["launch"] + times["result_copies"], times
        recording.time_replays(False)
        step(tokens, 16, caches)
        assert recording.times is None


@gpu
@pytest.mark.parametrize("form", ["mask", "causal"])
def test_an_operator_returning_ints_beside_its_tensors_replays(form: str) -> None:
    """SDPA reaches cuDNN's, the memory-efficient or flash attention's ATen operator (with a mask as Hugging Face
    models call it, causal as prefill does), and each returns ints (the longest sequences) beside its tensors
    (flash attention also a uint64 tensor): a replay hands out the ints it recorded, for inputs equal to the
    recorded ones."""

    def f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if form == "causal":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2

    q, k, v = (torch.randn(1, 8, 16, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.zeros(1, 1, 16, 16, device="cuda", dtype=torch.bfloat16)
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for _ in range(RECORD_AT_HIT + 4):
        assert same_bits(with_graphs(q, k, v, mask), direct(q, k, v, mask))
    calls = with_graphs._trident.specializations[0].compiled.aten_calls  # type: ignore[attr-defined]
    assert any(op in c for c in calls for op in ("cudnn_attention", "efficient_attention", "flash_attention")), calls
    recording = graph_of(with_graphs, 0)
    assert recording is not None, trident.explain(with_graphs)
    assert recording.counts["replays"] >= 4


@gpu
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.bool, torch.bfloat16, torch.float64])
def test_fills_by_the_position_replay_with_their_value_patched(dtype: torch.dtype) -> None:
    """Tensors filled from the position (sequence lengths as torch.full, cumulative lengths as torch.tensor([0,
    pos + 1]), an in-place fill_) are memset nodes whose value a replay patches: every position replays, with the
    direct path's bits (8-byte elements: two strided memsets per tensor)."""

    def f(x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
        lengths = torch.full((4,), pos + 1, dtype=dtype, device=x.device)
        cumulative = torch.tensor([0, pos + 1], device=x.device)
        scaled = torch.zeros(3, dtype=torch.float32, device=x.device).fill_(pos * 0.25)
        return x + lengths.to(x.dtype).sum() + cumulative[1] + scaled.sum(), lengths, cumulative

    x = torch.randn(8, device="cuda")
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in POSITIONS:
        got, want = with_graphs(x, p), direct(x, p)
        assert all(same_bits(a, b) for a, b in zip(got, want)), f"position {p}"
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    assert recording is not None, trident.explain(with_graphs)
    counts = recording.counts
    assert counts["divergences"] == 0 and counts["replays"] >= len(POSITIONS) - 6, trident.explain(with_graphs)
    assert counts["patched_nodes"] >= counts["replays"], counts
    if dtype == torch.int8:  # a value the dtype cannot hold: the direct call's own error, as eagerly
        with pytest.raises(RuntimeError, match="overflow"):
            f(x, 300)
        with pytest.raises(RuntimeError, match="overflow"):
            with_graphs(x, 300)
        assert same_bits(with_graphs(x, 5)[0], direct(x, 5)[0])


@gpu
def test_constant_fills_and_operands_get_no_memset_node() -> None:
    """Every memset node costs every launch (0.7-1.5 us each on an H100, benchmarks/probes/graph_launch_cost.c), so
    only scalars that change between calls are followed. The program's constants (HF attention's mask made with
    scalar_tensor(0.0) and scalar_tensor(-inf) in every layer, a constant fill, a constant operand) stay in their
    steps' signatures; the fill by the position gets its memset node. Every position replays with the direct
    path's bits."""

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        lengths = torch.full((4,), pos + 1, dtype=torch.int32, device=x.device)
        zero = torch.scalar_tensor(0.0, device=x.device)
        bias = torch.where(x > 0, zero, torch.scalar_tensor(float("-inf"), device=x.device))
        threes = torch.full((4,), 3, dtype=torch.int32, device=x.device) * 2
        return x + bias.exp() + lengths.sum() + threes.sum()

    x = torch.randn(8, device="cuda")
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in POSITIONS:
        assert same_bits(with_graphs(x, p), direct(x, p)), f"position {p}"
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    assert recording is not None, trident.explain(with_graphs)
    counts = recording.counts
    assert counts["divergences"] == 0 and counts["replays"] >= len(POSITIONS) - 6, trident.explain(with_graphs)
    # lengths alone: one memset node (4-byte elements), its fill kernel disabled
    assert counts["host_scalars"] == 1 and counts["memset_nodes"] == 1 and counts["disabled_nodes"] == 1, counts
    assert f"{counts['graph_nodes']} graph node(s), 1 of them memsets" in trident.explain(with_graphs)


@gpu
def test_integer_arithmetic_on_the_position_and_a_strided_view_at_it_replay() -> None:
    """A paged cache's slots (a column of the block table at pos // block, times block, plus pos % block) and a
    causal mask (arange <= pos): the column is staged as the bytes it spans, the int operands are 0-dim stand-ins
    written by memset nodes, so every position replays with the direct path's bits."""

    def f(table: torch.Tensor, x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
        slots = table[:, pos // 4].long() * 4 + pos % 4
        mask = torch.arange(64, device=x.device) <= pos
        return x[slots].sum(0) * mask.sum(), slots, mask

    table = torch.randint(0, 16, (8, 16), dtype=torch.int32, device="cuda")
    x = torch.randn(64, 4, device="cuda")
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in [*range(40), 63]:  # pos // 4 stays inside the table's 16 columns
        got, want = with_graphs(table, x, p), direct(table, x, p)
        assert all(same_bits(a, b) for a, b in zip(got, want)), f"position {p}"
        assert torch.equal(got[1], f(table, x, p)[1]) and torch.equal(got[2], f(table, x, p)[2])
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    assert recording is not None, trident.explain(with_graphs)
    counts = recording.counts
    assert counts["divergences"] == 0 and counts["replays"] >= 36, (counts, trident.explain(with_graphs))
    # + pos % 4 and <= pos (* 4 is a constant: no memset node); the column and x (an argument the index reads)
    assert counts["host_scalars"] == 2 and counts["staged_inputs"] == 2, counts


def one_recording_replays_every_position(f: Any, arguments: Any) -> dict[str, int]:
    """Calls f, jitted with graphs and without, with arguments(p) at every position p of POSITIONS: each result
    (a tuple) equals the direct path's and eager's bit for bit (a failure names the results that do not), every
    call is native, and the last specialization holds one recording that replayed nearly every call and never
    diverged. Returns that recording's counts."""
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in POSITIONS:
        got, want, eager = with_graphs(*arguments(p)), direct(*arguments(p)), f(*arguments(p))
        assert [k for k, (a, b) in enumerate(zip(got, want)) if not same_bits(a, b)] == [], f"position {p}"
        assert [k for k, (a, b) in enumerate(zip(got, eager)) if not same_bits(a, b)] == [], f"position {p}"
    specs = with_graphs._trident.specializations  # type: ignore[attr-defined]
    assert_native(with_graphs, hits=len(POSITIONS), compiles=len(specs))
    graphs = with_graphs._trident.entry.graphs(len(specs) - 1)  # type: ignore[attr-defined]
    text = trident.explain(with_graphs)
    assert len(graphs.recordings) == 1, text
    counts = graphs.recordings[0].counts
    assert counts["divergences"] == 0 and counts["replays"] >= len(POSITIONS) - 6, text
    return counts


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_aranges_that_follow_the_position_replay_with_their_start_and_step_patched(dtype: torch.dtype,
                                                                                   plan: bool) -> None:
    """An arange whose start, end and step follow the position at a constant length (a cache position at pos, a
    batch's cumulative lengths in steps of pos + 1, a descending range) is made in the graph from stand-ins of its
    start and step that memset nodes write: every position replays, from the replay plan too, with the direct
    path's bits, and nothing else gets a recording."""

    def f(x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
        cache_position = torch.arange(pos, pos + 1, device=x.device)
        n = pos + 1
        cumulative = torch.arange(0, 4 * n + 1, n, dtype=dtype, device=x.device)
        descending = torch.arange(pos + 8, pos, -2, dtype=dtype, device=x.device)
        return x[cache_position % 8] + cumulative.sum() + descending.sum(), cache_position, cumulative, descending

    x = torch.randn(8, device="cuda")
    with override(replay_plan=plan):
        with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
        for p in POSITIONS:
            got, want = with_graphs(x, p), direct(x, p)
            assert all(same_bits(a, b) for a, b in zip(got, want)), f"position {p}"
            assert all(torch.equal(a, b) for a, b in zip(got[1:], f(x, p)[1:])), f"position {p}"
    specs = with_graphs._trident.specializations  # type: ignore[attr-defined]
    assert_native(with_graphs, hits=len(POSITIONS), compiles=len(specs))
    last = len(specs) - 1
    graphs = with_graphs._trident.entry.graphs(last)  # type: ignore[attr-defined]
    text = trident.explain(with_graphs)
    assert len(graphs.recordings) == 1, text
    counts = graphs.recordings[0].counts
    assert counts["divergences"] == 0 and counts["replays"] >= len(POSITIONS) - 6, text
    assert counts["host_scalars"] == 5, counts  # the start of each, the step of the two with one
    assert (graphs.recordings[0].plan is not None and graphs.recordings[0].plan["state"] == "on") == plan, text


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_float_aranges_and_linspaces_that_follow_the_position_replay_with_eager_bits(dtype: torch.dtype) -> None:
    """A floating arange (int or float bounds, ascending or descending) or linspace whose bounds follow the position
    is made in the graph by Trident's own kernel from stand-ins that memset nodes write: every position replays with
    the direct path's and eager's bits. ATen rounds an arange's start + step * i once (a fused multiply-add, in
    float32 for half and bfloat16, then converted), and a float32 or float64 linspace's too; a half or bfloat16
    linspace rounds every operation to its type. The positions here include values where rounding the other way
    gives other bits, so a kernel that did would fail."""

    def f(x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
        from_ints = torch.arange(pos, pos + 8, dtype=dtype, device=x.device)
        tenths = torch.arange(pos * 0.5, pos * 0.5 + 0.75, 0.1, dtype=dtype, device=x.device)  # 8 long
        descending = torch.arange(pos + 0.5, pos - 3.5, -0.3, dtype=dtype, device=x.device)  # 14 long
        spread = torch.linspace(pos * 0.1, pos * 1.7 + 1, 33, dtype=dtype, device=x.device)
        return x + from_ints.sum() + spread.sum(), from_ints, tenths, descending, spread

    x = torch.randn(8, device="cuda", dtype=dtype)
    counts = one_recording_replays_every_position(f, lambda p: (x, p))
    assert counts["host_scalars"] == 7, counts  # start; start, step; start, step; start, end
    if dtype in (torch.float32, torch.float64):
        # The data can tell one rounding from two: with the product rounded first, some element differs from eager's.
        i = torch.arange(8, device="cuda", dtype=dtype)
        step = torch.tensor(0.1, device="cuda", dtype=dtype)
        other = [torch.tensor(p * 0.5, device="cuda", dtype=dtype) + step * i for p in POSITIONS]
        assert any(not same_bits(r, f(x, p)[2]) for p, r in zip(POSITIONS, other))
    else:
        # ... and a linspace computed in float32 and rounded once differs from eager's, rounded at every operation.
        other = [torch.linspace(p * 0.1, p * 1.7 + 1, 33, device="cuda").to(dtype) for p in POSITIONS]
        assert any(not same_bits(r, f(x, p)[4]) for p, r in zip(POSITIONS, other))


@gpu
def test_an_arange_whose_length_follows_the_position_diverges_rather_than_replay_a_stale_length() -> None:
    """The end of a followed arange decides its length: a call that gives another length than the recorded one
    diverges (explain says so) and runs directly, with eager's result; one of the recorded length replays."""

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[: pos % 3 + 1] + torch.arange(pos, pos + pos % 3 + 1, device=x.device)

    x = torch.randn(8, device="cuda")
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in range(1, 41):
        got = with_graphs(x, p)
        assert same_bits(got, direct(x, p)) and torch.equal(got, f(x, p)), f"position {p}"
    # One specialization for length 1, one for lengths 2 and 3 (x[: n] with n >= 2), whose recordings diverge on
    # the length the other one has.
    entry, specs = with_graphs._trident.entry, with_graphs._trident.specializations  # type: ignore[attr-defined]
    graphs = [entry.graphs(index) for index in range(len(specs))]
    text = trident.explain(with_graphs)
    assert sum(g.replays for g in graphs) >= 20, text
    failures = [r.failure for g in graphs for r in g.recordings if r.failure]
    assert any("give another length than the recorded" in failure for failure in failures), text


@gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_arithmetic_and_comparisons_on_the_position_replay_with_their_operand_patched(dtype: torch.dtype) -> None:
    """An int or float operand that follows the position, on a tensor whose arithmetic is float32 or float64 (a
    rotary angle inv_freq * pos, x + pos * 0.125, an rsub, a comparison, an int tensor times a float): ATen's
    kernel converts the scalar straight to that dtype, as the stand-in's memset writes it, so every position
    replays with the direct path's bits and eager's values, and nothing else gets a recording."""

    def f(x: torch.Tensor, inv_freq: torch.Tensor, steps: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
        angle = inv_freq * pos
        shifted = x + pos * 0.125
        centred = 1.5 * pos - x
        below = x < pos * 0.25
        scaled = steps * (pos + 0.5)
        return angle.cos(), shifted, centred, below, scaled

    x = torch.randn(64, device="cuda", dtype=dtype) * 16
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2, device="cuda", dtype=dtype) / 64))
    steps = torch.arange(8, device="cuda", dtype=torch.int32)
    counts = one_recording_replays_every_position(f, lambda p: (x, inv_freq, steps, p))
    assert counts["host_scalars"] == 5, counts  # one operand per operator
    assert counts["patched_nodes"] >= counts["replays"], counts


@gpu
@pytest.mark.parametrize("case", ["bfloat16", "alpha", "int_range"])
def test_an_operand_not_followed_gets_a_recording_per_value_and_explain_says_which(case: str) -> None:
    """A changing operand whose rounding could differ between a kernel parameter and device memory is not
    followed: a bfloat16 tensor's (ATen keeps the scalar in float32, its op math type, where a stand-in would
    hold a bfloat16), a float sum's with alpha 2 (a product that FMA contraction may round either way), and an
    int64 arange's float bounds (computed in int64 from bounds ATen converts). A call whose operand no recording
    has runs directly, explain names the argument and why it is not followed, and each value gets its own
    recording, up to four."""
    dtype, difference, why = {
        "bfloat16": (torch.bfloat16, r"argument 1 of aten::mul\.Scalar is \d, recorded \d",
                     "its bfloat16 result keeps the operand in float32"),
        "alpha": (torch.float32, r"argument 1 of aten::add\.Scalar is \d, recorded \d", "an alpha other than 1"),
        "int_range": (torch.float32, r"argument 0 of aten::arange\.start is [\d.]+, recorded [\d.]+",
                      "an arange of long with float bounds"),
    }[case]

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        if case == "bfloat16":
            return x * (pos % 3) + 1
        if case == "alpha":
            return torch.add(x, pos % 3, alpha=2) + 1
        return x + torch.arange(pos % 3 + 0.5, pos % 3 + 64.5, dtype=torch.int64, device=x.device)

    x = torch.randn(64, device="cuda", dtype=dtype)
    with_graphs, direct = jit_with_graphs(f, True), jit_with_graphs(f, False)
    for p in range(1, 41):
        assert same_bits(with_graphs(x, p), direct(x, p)), f"position {p}"
    graphs = with_graphs._trident.entry.graphs(1)  # type: ignore[attr-defined]
    text = trident.explain(with_graphs)
    assert len(graphs.recordings) == 3 and graphs.pauses == 0 and graphs.replays >= 30, text
    failures = [r.failure for r in graphs.recordings if r.failure]
    assert failures, text
    assert all(re.search(difference, f) for f in failures), failures
    assert all(f"a host scalar not followed: {why}" in f for f in failures), failures


@gpu
def test_the_replay_plan_hands_a_call_it_cannot_vouch_for_to_the_host_program() -> None:
    """Once on, the plan replays without the host program; an argument an operator reads in place that moved (a
    large one, not staged) is a call the plan cannot vouch for: the host program's replay sees it and the call runs
    directly, correct, and later calls at the recorded address replay from the plan again."""

    def f(x: torch.Tensor, w: torch.Tensor, table: torch.Tensor, pos: int) -> torch.Tensor:
        return F.silu(x @ w) + table[pos : pos + 1]  # the row at the position: a view the plan makes

    x, w = torch.randn(64, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    table = torch.randn(32, 256, device="cuda")
    with_graphs = jit_with_graphs(f, True)
    with override(replay_plan=True):  # read when a specialization compiles
        for p in range(12):
            assert same_bits(with_graphs(x, w, table, p), f(x, w, table, p)), p
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    text = trident.explain(with_graphs)
    assert recording is not None and recording.plan["state"] == "on", text
    replays = recording.plan["replays"]
    assert replays >= 2, recording.plan
    # w, read in place by the matmul, is a fixed word: one array of them is checked before the steps.
    assert recording.plan["fixed_words"] >= 1, recording.plan
    moved = torch.randn(256, 256, device="cuda")  # 256 KB: too large to stage
    assert same_bits(with_graphs(x, moved, table, 5), f(x, moved, table, 5))
    assert recording.plan["fallbacks"] == 1 and recording.plan["replays"] == replays, recording.plan
    assert same_bits(with_graphs(x, w, table, 7), f(x, w, table, 7))
    assert recording.plan["replays"] == replays + 1 and recording.plan["state"] == "on", recording.plan


def test_without_cuda_tensors_the_recorder_says_why_and_the_call_runs_directly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    with_graphs = jit_with_graphs(f, True)
    x = torch.randn(8)
    for _ in range(RECORD_AT_HIT + 40):
        assert torch.equal(with_graphs(x), f(x))
    assert graph_of(with_graphs, 0) is None
    text = trident.explain(with_graphs)
    assert "CUDA graph: none (no CUDA tensor among the arguments)" in text and "next try" not in text, text
    # A refusal no later call can change is for good: the recorder is not called again after a backoff.
    graphs = with_graphs._trident.entry.graphs(0)  # type: ignore[attr-defined]
    assert graphs.recordings_tried == 1 and graphs.never_record, graphs
    assert_native(with_graphs, hits=RECORD_AT_HIT + 40, compiles=1)


def test_the_knob_turns_graph_replay_off() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    with override(cuda_graphs=False):  # TRIDENT_CUDA_GRAPHS=0; read when the entry is made (at jit or first call)
        step = trident.jit(f)
        step(torch.ones(4))
    for _ in range(RECORD_AT_HIT + 1):
        step(torch.ones(4))
    assert "CUDA graph" not in trident.explain(step)
    def g(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    on = trident.jit(g)
    for _ in range(RECORD_AT_HIT + 1):
        on(torch.ones(4))
    assert "CUDA graph: none (no CUDA tensor among the arguments)" in trident.explain(on)  # on by default
