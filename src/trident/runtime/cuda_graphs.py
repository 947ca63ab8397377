"""CUDA graph replay of a specialization's host program (TRIDENT_CUDA_GRAPHS=1): when, and the proof.

A specialization whose calls are stable (its RECORD_AT_HIT-th native hit: buffer pools and matmul plans
settled) is recorded once as a CUDA graph; from then on a hit runs its host program natively in replay mode —
guards, sizes, grids and pointers computed as before, Triton kernel nodes patched where their parameters
changed, opaque operators checked against the recording — and launches the graph once (csrc/graph_replay.cpp
has the mechanism). A replay that diverges runs the call directly; nothing is ever launched from a graph the
call does not match.

The recording call proves the graph before it is kept, bit for bit: the tensors from outside the graph that its
steps may write are snapshotted, the call runs directly, the written state is snapshotted again and restored,
the call is replayed from the new graph, and its results and written state must equal the direct run's. A
difference keeps the direct run's state and results and no graph for that specialization. Kept for `explain`:
per specialization, its recording (steps, replays, divergences, patched nodes) or why it has none.
"""
from __future__ import annotations

import weakref
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from trident.driver import JitFunction

RECORD_AT_HIT = 3  # hits 1-2 settle pooled buffers and matmul plans; the third call records
DIRECT, RECORD, REPLAY = 0, 1, 2  # Entry.run_spec modes
MAX_VERIFIED_BYTES = 1 << 30  # written state snapshotted twice by the proof; beyond it, no graph

# Why a specialization has no graph, per JitFunction: spec index -> reason.
_refusals: weakref.WeakKeyDictionary[Any, dict[int, str]] = weakref.WeakKeyDictionary()


def graphs_unavailable() -> str | None:
    """None when this process can record and replay graphs, else why not."""
    from trident.runtime import load_runtime
    from trident.runtime.triton_native import cuda_ready

    if not torch.cuda.is_available():
        return "CUDA is not available"
    reason = cuda_ready()
    if reason is not None:
        return reason
    if not load_runtime().cuda_graphs_available():
        return "the CUDA driver lacks an entry point graph replay uses"
    if not hasattr(torch.cuda.CUDAGraph, "raw_cuda_graph_exec"):
        return f"torch {torch.__version__} cannot hand out a CUDA graph's exec (torch.cuda.CUDAGraph.raw_cuda_graph_exec)"
    return None


def _tensors(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _cuda_device(slots: Sequence[object]) -> torch.device | None:
    for t in _tensors(list(slots)):
        if t.is_cuda:
            return t.device
    return None


def _bitwise_equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
            return False
        return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_bitwise_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def _refuse(fn: JitFunction, index: int, reason: str) -> None:
    _refusals.setdefault(fn, {})[index] = reason


def record(fn: JitFunction, entry: Any, index: int, slots: tuple[object, ...]) -> object:
    """The entry's graph recorder: runs this call of specialization `index` and, when the program can be a
    graph that proves itself equal to the direct run, keeps that graph for the specialization's next hits."""
    from trident.runtime import load_runtime

    device = _cuda_device(slots)
    unavailable = graphs_unavailable() if device is not None else "no CUDA tensor among the arguments"
    if unavailable is None and torch.cuda.is_current_stream_capturing():
        unavailable = "the call ran inside the caller's own CUDA graph capture"
    if unavailable is not None:
        _refuse(fn, index, unavailable)
        return entry.run_spec(index, slots, DIRECT, None)
    assert device is not None
    constants = [c for c in fn.specializations[index].compiled.constants if isinstance(c, torch.Tensor)]
    recording = load_runtime().GraphRecording(device.index or 0, constants)
    graph = torch.cuda.CUDAGraph(keep_graph=True)
    caller = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(caller)
    try:
        with torch.cuda.stream(stream):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                entry.run_spec(index, slots, RECORD, recording)
            finally:
                graph.capture_end()
        graph.instantiate()
    except Exception as e:  # noqa: BLE001 -- any failure to capture means: no graph, run directly
        caller.wait_stream(stream)
        _refuse(fn, index, recording.failure or f"capture failed: {type(e).__name__}: {e}")
        return entry.run_spec(index, slots, DIRECT, None)
    caller.wait_stream(stream)
    recording.set_graph(graph.raw_cuda_graph_exec(), graph)
    written = recording.written()
    recording.forget_written()
    if sum(t.nbytes for t in written) > MAX_VERIFIED_BYTES:
        _refuse(fn, index, f"the graph may write more than {MAX_VERIFIED_BYTES >> 20} MB of outside state, too much "
                           "to prove it against the direct run")  # fmt: skip
        return entry.run_spec(index, slots, DIRECT, None)
    return _prove(fn, entry, index, slots, recording, written)


def _prove(fn: JitFunction, entry: Any, index: int, slots: tuple[object, ...], recording: Any,
           written: list[torch.Tensor]) -> object:  # fmt: skip
    """Direct run, then the first replay from the same state; keep the graph only if both agree bit for bit."""
    before = [t.clone() for t in written]
    direct = entry.run_spec(index, slots, DIRECT, None)
    after = [t.clone() for t in written]
    for t, saved in zip(written, before):
        t.copy_(saved)
    try:
        replayed = entry.run_spec(index, slots, REPLAY, recording)
    except RuntimeError as e:
        replayed, failure = None, f"its first replay diverged: {recording.failure or e}"
    else:
        same = _bitwise_equal(direct, replayed) and all(_bitwise_equal(t, a) for t, a in zip(written, after))
        failure = None if same else "its first replay differed from the direct run"
    if failure is not None:
        for t, saved in zip(written, after):
            t.copy_(saved)
        _refuse(fn, index, failure)
        return direct
    entry.set_graph(index, recording)
    _refusals.get(fn, {}).pop(index, None)
    return replayed


def describe(fn: JitFunction, index: int) -> str | None:
    """One line for explain: the specialization's graph, or why it has none (None: graphs are off or it was
    not tried yet)."""
    entry = fn._entry
    recording = entry.graph(index) if entry is not None else None
    if recording is not None:
        c = recording.counts
        text = (f"CUDA graph: {c['replays']} replay(s) of {c['kernel_nodes']} Triton node(s) and "
                f"{c['opaque_steps']} other operator(s) ({c['staged_inputs']} staged input(s)); "
                f"{c['patched_nodes']} node patch(es), {c['divergences']} divergence(s)")  # fmt: skip
        if c["divergences"] and recording.failure:
            text += f"; last divergence: {recording.failure}"
        return text
    reason = _refusals.get(fn, {}).get(index)
    return None if reason is None else f"CUDA graph: none ({reason})"
