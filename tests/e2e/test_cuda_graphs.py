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

import pytest
import torch
import torch.nn.functional as F
from helpers_native import assert_native, same_bits
from list_operand_ops import WEIGHTED_SUM, shifted_sum_step, weighted_sum

import trident
import trident.dynamo
from trident.artifact import ReplayPlan
from trident.knobs import override
from trident.graphs.recorder import RECORD_AT_HIT

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.llm.models import build_model  # noqa: E402

POSITIONS = list(range(0, 40)) + [63, 64, 65, 80]  # every residue mod 16 (Triton's int specialization), a 2nd block
gpu = pytest.mark.gpu


def graph_of(step: object, index: int) -> object:
    """The specialization's most recently replayed recording, or None."""
    recordings = step._trident.entry.graphs(index).recordings  # type: ignore[attr-defined]
    return recordings[0] if recordings else None


def jitted(fn: object, graphs: bool) -> object:
    step = trident.jit(fn)
    step._trident.use_cuda_graphs(graphs)  # type: ignore[attr-defined]
    return step


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
@pytest.mark.parametrize("batch", [1, 8])
@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_decode_step_replays_the_direct_paths_bits(model_name: str, pos_kind: str, batch: int, plan: bool) -> None:
    """Replays through the host program (TRIDENT_REPLAY_PLAN=0), and by default most of them from the replay plan."""
    model = build_model(model_name, "cuda", torch.bfloat16, tiny=True, max_seq=128)
    fn = model.step_for("kernels", pos_kind)
    with_graphs, direct = jitted(fn, True), jitted(fn, False)
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
    with_graphs = jitted(f, True)
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
    with_graphs = jitted(f, True)
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

    with_graphs = jitted(f, True)
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

    with_graphs = jitted(f, True)
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
    with_graphs, direct = jitted(f, True), jitted(f, False)
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
        step = jitted(model.step_for("kernels", "int"), True)
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
    with_graphs, direct = jitted(f, True), jitted(f, False)
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
    with_graphs, direct = jitted(f, True), jitted(f, False)
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
    with_graphs, direct = jitted(f, True), jitted(f, False)
    for p in [*range(40), 63]:  # pos // 4 stays inside the table's 16 columns
        got, want = with_graphs(table, x, p), direct(table, x, p)
        assert all(same_bits(a, b) for a, b in zip(got, want)), f"position {p}"
        assert torch.equal(got[1], f(table, x, p)[1]) and torch.equal(got[2], f(table, x, p)[2])
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    assert recording is not None, trident.explain(with_graphs)
    counts = recording.counts
    assert counts["divergences"] == 0 and counts["replays"] >= 36, (counts, trident.explain(with_graphs))
    # * 4, + pos % 4 and <= pos; the column and x (an argument the index reads)
    assert counts["host_scalars"] == 3 and counts["staged_inputs"] == 2, counts


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
        with_graphs, direct = jitted(f, True), jitted(f, False)
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
def test_an_arange_whose_length_follows_the_position_diverges_rather_than_replay_a_stale_length() -> None:
    """The end of a followed arange decides its length: a call that gives another length than the recorded one
    diverges (explain says so) and runs directly, with eager's result; one of the recorded length replays."""

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x[: pos % 3 + 1] + torch.arange(pos, pos + pos % 3 + 1, device=x.device)

    x = torch.randn(8, device="cuda")
    with_graphs, direct = jitted(f, True), jitted(f, False)
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
    with_graphs, direct = jitted(f, True), jitted(f, False)
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

    with_graphs, direct = jitted(f, True), jitted(f, False)
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
def test_a_float_operand_that_changes_gets_a_recording_per_value_and_explain_says_which() -> None:
    """Float arithmetic with a changing host scalar is not followed (the operand's rounding differs between a
    kernel parameter and device memory): a call whose operand no recording has runs directly, explain names the
    argument, and each value gets its own recording, up to four."""

    def f(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x * (pos % 3) + 1

    x = torch.randn(64, device="cuda")
    with_graphs, direct = jitted(f, True), jitted(f, False)
    for p in range(1, 41):
        assert same_bits(with_graphs(x, p), direct(x, p)), f"position {p}"
    graphs = with_graphs._trident.entry.graphs(1)  # type: ignore[attr-defined]
    text = trident.explain(with_graphs)
    assert len(graphs.recordings) == 3 and graphs.pauses == 0 and graphs.replays >= 30, text
    failures = [r.failure for r in graphs.recordings if r.failure]
    assert failures, text
    assert all(re.search(r"argument 1 of aten::mul\.Scalar is \d, recorded \d", f) for f in failures), failures


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
        with_graphs = jitted(f, True)
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
    with_graphs = jitted(step, True)
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
        with_graphs, direct = jitted(f, True), jitted(f, False)
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


@gpu
@pytest.mark.parametrize("plan", [False, True], ids=["host_program", "replay_plan"])
def test_a_cat_of_argument_tensors_that_move_every_call_replays(plan: bool) -> None:
    """torch.cat([a, b, a * 2]) takes a Tensor[] of argument tensors, new ones every call: each item is staged, or
    reads the copy an earlier step staged of the same tensor (a, which a * 2 read first)."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cat([a, b, a * 2]) + 1

    calls = 24
    with override(replay_plan=plan):
        with_graphs, direct = jitted(f, True), jitted(f, False)
        for p in range(calls):
            a, b = torch.randn(2, 32, device="cuda"), torch.randn(3, 32, device="cuda")
            got = with_graphs(a, b)
            assert same_bits(got, direct(a, b)) and same_bits(got, f(a, b)), f"call {p}"
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
    with override(replay_plan=plan):
        with_graphs, direct = jitted(f, True), jitted(f, False)
        for p in range(calls):
            x, y = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
            got = with_graphs(x, y)
            assert same_bits(got, direct(x, y)) and same_bits(got, f(x, y)), f"call {p}"
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
        with_graphs, direct = jitted(shifted_sum_step, True), jitted(shifted_sum_step, False)
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
    with_graphs = jitted(f, True)
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


@gpu
def test_the_replay_plan_hands_a_call_it_cannot_vouch_for_to_the_host_program() -> None:
    """Once on, the plan replays without the host program; an argument an operator reads in place that moved (a
    large one, not staged) is a call the plan cannot vouch for: the host program's replay sees it and the call runs
    directly, correct, and later calls at the recorded address replay from the plan again."""

    def f(x: torch.Tensor, w: torch.Tensor, table: torch.Tensor, pos: int) -> torch.Tensor:
        return F.silu(x @ w) + table[pos : pos + 1]  # the row at the position: a view the plan makes

    x, w = torch.randn(64, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    table = torch.randn(32, 256, device="cuda")
    with_graphs = jitted(f, True)
    with override(replay_plan=True):  # read when a specialization compiles
        for p in range(12):
            assert same_bits(with_graphs(x, w, table, p), f(x, w, table, p)), p
    last = len(with_graphs._trident.specializations) - 1  # type: ignore[attr-defined]
    recording = graph_of(with_graphs, last)
    text = trident.explain(with_graphs)
    assert recording is not None and recording.plan["state"] == "on", text
    replays = recording.plan["replays"]
    assert replays >= 2, recording.plan
    moved = torch.randn(256, 256, device="cuda")  # 256 KB: too large to stage
    assert same_bits(with_graphs(x, moved, table, 5), f(x, moved, table, 5))
    assert recording.plan["fallbacks"] == 1 and recording.plan["replays"] == replays, recording.plan
    assert same_bits(with_graphs(x, w, table, 7), f(x, w, table, 7))
    assert recording.plan["replays"] == replays + 1 and recording.plan["state"] == "on", recording.plan


def test_without_cuda_tensors_the_recorder_says_why_and_the_call_runs_directly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    with_graphs = jitted(f, True)
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
