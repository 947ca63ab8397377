"""The native side of CUDA graph replay that a CPU can exercise (csrc/graphs/, csrc/entry.cpp): a specialization's
SpecGraphs, how it takes what the recorder returns, the runner, and the GraphRecording type's refusals. Recording
and replaying themselves need a GPU (tests/e2e/test_cuda_graphs.py)."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.graphs.recorder import DIRECT, MAX_RECORDINGS, RECORD, RECORD_AT_HIT, REPLAY, RecordOutcome
from trident.runtime import load_runtime


def compiled_entry() -> object:
    @trident.jit
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    f(torch.ones(4))  # one specialization
    return f._trident.entry  # type: ignore[attr-defined]


def test_a_specialization_without_recordings_reports_an_empty_list() -> None:
    entry = compiled_entry()
    graphs = entry.graphs(0)
    assert isinstance(graphs, load_runtime().SpecGraphs) and entry.graphs(0) is graphs  # one object per spec
    state = {name: getattr(graphs, name) for name in ("recordings", "replays", "misses", "paused_until_hit",
                                                      "record_after_hit", "never_record", "pauses",
                                                      "recordings_tried", "refusal")}  # fmt: skip
    assert state == {"recordings": [], "replays": 0, "misses": 0, "paused_until_hit": 0, "record_after_hit": 0,
                     "never_record": False, "pauses": 0, "recordings_tried": 0, "refusal": None}
    assert (RECORD_AT_HIT, MAX_RECORDINGS) == (3, 4)  # read from trident_runtime.h, where the entry reads them
    with pytest.raises(IndexError, match="no specialization 1"):
        entry.graphs(1)


def test_what_a_recorder_returns_must_be_a_record_outcome() -> None:
    entry = compiled_entry()
    x = torch.ones(4)
    entry.set_graph_recorder(lambda run, index, slots: run(DIRECT))  # the bare result, not a RecordOutcome
    entry(x)
    with pytest.raises(TypeError, match="the graph recorder must return a RecordOutcome"):
        entry(x)
    entry = compiled_entry()
    entry.set_graph_recorder(lambda run, index, slots: RecordOutcome(run(DIRECT), recording=object()))
    entry(x)
    with pytest.raises(TypeError, match="recording must be a GraphRecording or None"):
        entry(x)
    assert entry.graphs(0).recordings == []


def test_a_recording_refuses_a_capture_it_cannot_start_and_a_program_run_outside_one() -> None:
    runtime = load_runtime()
    recording = runtime.GraphRecording(0, [torch.ones(2)])
    assert recording.failure is None and recording.counts["kernel_nodes"] == 0
    assert recording.times is None  # replay timing is off until asked for
    recording.time_replays(True)
    assert recording.times == {key: 0 for key in ("replays", "program", "opaque_steps", "triton_steps", "launch",
                                                  "result_copies", "words", "tries", "inside", "unreplayed")}
    recording.time_replays(False)
    assert recording.times is None
    with pytest.raises(RuntimeError, match="end_capture: not capturing"):
        recording.end_capture()
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="current stream is unknown"):
            recording.begin_capture(None)
    entry = compiled_entry()
    x = torch.ones(4)
    # Recording mode outside a stream capture: the first operator with device work refuses, nothing runs wrong.
    run = entry.runner(0, (x,))
    with pytest.raises(RuntimeError, match="not recordable as a CUDA graph: .* ran outside the capture"):
        run(RECORD, recording)
    assert "ran outside the capture" in recording.failure
    assert torch.equal(run(DIRECT), x * 2 + 1)
    with pytest.raises(TypeError, match="recording and replaying need a GraphRecording"):
        run(REPLAY)
    with pytest.raises(ValueError, match="one slot per parameter"):
        entry.runner(0, (x, x))(DIRECT)


def test_a_recorder_that_records_nothing_is_called_again_after_a_doubling_backoff() -> None:
    """A recording that fails (a Triton variant compiling at that moment, an operator a capture refuses) is not
    the end of graphs for the specialization: the entry calls the recorder again 16 hits later, then 32, 64, ...
    (graphs/policy.h, GraphPolicy), each call running the call itself."""
    entry = compiled_entry()  # one hit so far
    called_at: list[int] = []

    def recorder(run: object, index: int, slots: tuple[object, ...]) -> RecordOutcome:
        called_at.append(entry.hits()[index])  # type: ignore[attr-defined]
        return RecordOutcome(run(DIRECT), refusal=f"try {len(called_at)}")  # type: ignore[operator]

    entry.set_graph_recorder(recorder)
    x = torch.ones(4)
    for _ in range(130):
        assert torch.equal(entry(x), x * 2 + 1)
    assert called_at == [2, 2 + 16, 18 + 32, 50 + 64], called_at
    graphs = entry.graphs(0)
    assert graphs.recordings_tried == 4 and graphs.record_after_hit == 114 + 128 and entry.hits() == [131]
    assert graphs.refusal == "try 4" and not graphs.never_record


def test_a_refusal_for_good_stops_the_recorder_calls() -> None:
    entry = compiled_entry()
    calls: list[int] = []

    def recorder(run: object, index: int, slots: tuple[object, ...]) -> RecordOutcome:
        calls.append(index)
        return RecordOutcome(run(DIRECT), refusal="no CUDA tensor among the arguments", never=True)  # type: ignore[operator]

    entry.set_graph_recorder(recorder)
    x = torch.ones(4)
    for _ in range(40):
        assert torch.equal(entry(x), x * 2 + 1)
    graphs = entry.graphs(0)
    assert calls == [0] and graphs.never_record and graphs.record_after_hit == 2**64 - 1
    assert graphs.refusal == "no CUDA tensor among the arguments"
    assert entry.hits() == [41] and graphs.recordings == []


def test_a_replay_plans_layout_names_the_list_item_each_word_patches() -> None:
    """set_plan takes (argument, item, word) per changing argument (artifact.ReplayPlan): item -1 is the argument
    itself, k the data address of item k of a Tensor[] or Tensor?[] argument. A plan whose steps are not the
    recording's is kept off, with the reason."""
    recording = load_runtime().GraphRecording(0, [])
    with pytest.raises(ValueError, match="an argument, list item or word out of range"):
        recording.set_plan(1, 1, 0, [(False, [(1, -2, 0)])])
    with pytest.raises(TypeError):
        recording.set_plan(1, 1, 0, [(False, [(1, 0)])])  # (argument, word): no item
    assert recording.plan is None
    recording.set_plan(1, 2, 0, [(False, [(1, 0, 0), (1, -1, 1)])])
    assert recording.plan["state"] == "off" and recording.plan["reason"] == "the recording has 0 steps, the plan 1"


def test_a_recorder_set_after_hits_without_one_records_at_its_first_hit() -> None:
    """A specialization that ran its first hits with graphs off has no SpecGraphs yet; the first hit after a recorder
    is set makes one and, past RECORD_AT_HIT, calls the recorder at once (use_cuda_graphs(True) late)."""
    from trident.knobs import override

    with override(cuda_graphs=False):
        @trident.jit
        def f(x: torch.Tensor) -> torch.Tensor:
            return x * 2 + 1

        x = torch.ones(4)
        for _ in range(RECORD_AT_HIT + 1):
            f(x)
    entry = f._trident.entry  # type: ignore[attr-defined]
    assert entry.graphs(0) is None  # never asked about: nothing made
    calls: list[int] = []

    def recorder(run: object, index: int, slots: tuple[object, ...]) -> RecordOutcome:
        calls.append(entry.hits()[index])
        return RecordOutcome(run(DIRECT), refusal="not this time")  # type: ignore[operator]

    entry.set_graph_recorder(recorder)
    assert torch.equal(entry(x), x * 2 + 1)
    assert calls == [RECORD_AT_HIT + 1] and entry.graphs(0).refusal == "not this time"


def test_tensors_marked_static_are_found_inside_the_calls_objects_as_its_guards_reach_them() -> None:
    """A static KV cache marks its layers' tensors (torch._dynamo.mark_static_address) inside objects no pytree
    walks; the recorder finds them by the specialization's leaf paths, and only the marked ones."""
    from trident.graphs.recorder import _static_arguments

    class Layer:
        def __init__(self) -> None:
            self.position = torch.zeros((), dtype=torch.long)
            self.scale = torch.ones(4)

    def step(x: torch.Tensor, layers: list[Layer]) -> torch.Tensor:
        for layer in layers:
            layer.position.add_(1)
            x = x * layer.scale + layer.position
        return x

    layers = [Layer(), Layer()]
    for layer in layers:
        torch._dynamo.mark_static_address(layer.position)
    jitted = trident.jit(step)
    x = torch.ones(4)
    jitted(x, layers)
    (spec,) = jitted._trident.specializations  # type: ignore[attr-defined]
    found = _static_arguments(spec.guards, (x, layers))
    assert [id(t) for t in found] == [id(layer.position) for layer in layers]
