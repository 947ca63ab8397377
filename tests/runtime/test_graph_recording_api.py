"""The native side of CUDA graph replay that a CPU can exercise (csrc/graph_replay.cpp, csrc/entry.cpp): the Entry's
graph bookkeeping and the GraphRecording type's refusals. Recording and replaying themselves need a GPU
(tests/e2e/test_cuda_graphs.py)."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.runtime import cuda_graphs, load_runtime


def compiled_entry() -> object:
    @trident.jit
    def f(x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1

    f(torch.ones(4))  # one specialization
    return f._trident.entry  # type: ignore[attr-defined]


def test_a_specialization_without_recordings_reports_an_empty_list() -> None:
    entry = compiled_entry()
    assert entry.graphs(0) == {"recordings": [], "replays": 0, "misses": 0, "off": False}
    with pytest.raises(IndexError, match="no specialization 1"):
        entry.graphs(1)


def test_add_graph_takes_only_a_graph_recording() -> None:
    entry = compiled_entry()
    with pytest.raises(TypeError):
        entry.add_graph(0, object())
    with pytest.raises(IndexError):
        entry.add_graph(3, load_runtime().GraphRecording(0, []))


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
    with pytest.raises(RuntimeError, match="not recordable as a CUDA graph: .* ran outside the capture"):
        entry.run_spec(0, (x,), cuda_graphs.RECORD, recording)
    assert "ran outside the capture" in recording.failure
    assert torch.equal(entry.run_spec(0, (x,), cuda_graphs.DIRECT, None), x * 2 + 1)
    with pytest.raises(TypeError, match="modes 1 and 2 need a GraphRecording"):
        entry.run_spec(0, (x,), cuda_graphs.REPLAY, None)
