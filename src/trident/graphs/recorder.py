"""The graph recorder: records one call of a specialization as a CUDA graph and proves it (TRIDENT_CUDA_GRAPHS=1).

A specialization whose calls are stable (its RECORD_AT_HIT-th native hit: buffer pools and matmul plans
settled) is recorded as a CUDA graph; from then on a hit runs its host program natively in replay mode —
guards, sizes, grids and pointers computed as before, Triton kernel nodes patched where their parameters
changed, opaque operators checked against the recording — and launches the graph once (csrc/graphs/replay.cpp
has the mechanism). A replay that diverges runs the call directly; nothing is ever launched from a graph the
call does not match. The entry decides when to record (csrc/graphs/policy.h); the recorder is called with a
runner for the call and returns a RecordOutcome, which the specialization's SpecGraphs takes
(csrc/graphs/spec_graphs.h): the graph to keep, or why there is none.

The recording call proves the graph before it is kept, bit for bit: the tensors from outside the graph that its
steps may write are snapshotted, the call runs directly, the written state is snapshotted again and restored,
the call is replayed from the new graph, and its results and written state must equal the direct run's. A
difference keeps the direct run's state and results and no graph for that specialization. A hit that matches
no recording (sizes of a symbolic specialization that differ, an input too large to stage that moved) runs
directly and may record another graph, up to four per specialization, the least recently replayed replaced; a
recording that failed, and replay paused after a run of misses, are retried after a backoff (csrc/graphs/policy.h,
GraphPolicy). Kept for `explain` (SpecGraphs, Entry.graphs(index)): each recording (steps, replays,
divergences, patched nodes), or why there is none and when the next try is.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
import torch.utils._pytree as pytree

from trident import abi
from trident.artifact import NoReplayPlan, ReplayPlan
from trident.capture.inputs import leaf_value
from trident.capture.results import STATIC_MARK
from trident.guards.guard_set import GuardSet

if TYPE_CHECKING:
    from trident.specialization import Specialization

RECORD_AT_HIT = abi.GRAPH_RECORD_AT_HIT  # the hit of a specialization that is recorded first
MAX_RECORDINGS = abi.GRAPH_MAX_RECORDINGS  # recordings kept per specialization
DIRECT, RECORD, REPLAY = abi.RUN_DIRECT, abi.RUN_RECORD, abi.RUN_REPLAY  # how a runner runs the call
VERIFIED_SHARE = 4  # the proof snapshots written state twice: at most 1/4 of the device's free memory each time

Runner = Callable[..., object]  # Entry.runner(index, slots): run(mode, recording=None) -> the call's result


class RecordOutcome(NamedTuple):
    """What a recorder call gives the specialization's SpecGraphs (csrc/graphs/spec_graphs.cpp reads it as a
    4-tuple, in this order)."""

    result: object  # the call's result: the proven replay's, or the direct run's
    recording: Any = None  # a GraphRecording to keep (most recently replayed first), or None
    refusal: str | None = None  # why no graph was kept this time
    never: bool = False  # the refusal holds for every later call of the specialization


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
    if not hasattr(torch.cuda, "MemPool") or not hasattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool"):
        return f"torch {torch.__version__} cannot route a thread's allocations to a private memory pool"
    return None


def _cuda_device(slots: Sequence[object]) -> torch.device | None:
    for t in pytree.tree_leaves(list(slots)):
        if isinstance(t, torch.Tensor) and t.is_cuda:
            return t.device
    return None


def _bitwise_equal(a: object, b: object) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
            return False
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(_bitwise_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_bitwise_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _static_arguments(guards: GuardSet, slots: Sequence[object]) -> list[torch.Tensor]:
    """Argument tensors marked as living at one address for good, wherever the call holds them: tensors the user
    passed to torch._dynamo.mark_static_address (a static KV cache marks its keys, values and position tensor so,
    inside the cache's layer objects), and the parameters and buffers torch.compile hands a backend as graph
    inputs. (A module's own parameters and buffers are the specialization's constants already.) The recorder treats
    them as constants: an opaque operator reads them in place instead of from a staged copy, which would cost a
    memcpy node per replay, two for one it writes. The mark is a promise, not a proof: a replay still compares their
    addresses, and one that moved runs directly."""
    leaves = (leaf_value(guard.path, slots, ()) for guard in guards.argument_tensors)
    return [t for t in leaves if getattr(t, STATIC_MARK, None) is not None]


class GraphRecorder:
    """The graph recorder of one jitted function: the entry calls it when a specialization's SpecGraphs wants a
    recording. `specialization(index)` is specialization `index`: its code, and its guards' leaf paths."""

    def __init__(self, specialization: Callable[[int], Specialization]) -> None:
        self._specialization = specialization

    def __call__(self, run: Runner, index: int, slots: tuple[object, ...]) -> RecordOutcome:
        """Runs this call of specialization `index` (through `run`) and, when the program can be a graph that
        proves itself equal to the direct run, returns that graph to keep for the specialization's next hits."""
        from trident.runtime import load_runtime

        device = _cuda_device(slots)
        specialization = self._specialization(index)
        compiled = specialization.compiled
        # For good: what no later call of this specialization changes.
        never = graphs_unavailable() if device is not None else "no CUDA tensor among the arguments"
        if never is None and compiled.artifact.state_writes:
            # Recording, proving and replaying run the call more than once on the same arguments; each run would
            # assign again (a DynamicCache would grow by one step per run).
            writes = ", ".join(compiled.artifact.state_writes[:3])
            never = f"each run assigns attributes of the call's objects ({writes}), which a recording cannot repeat"
        if never is not None:
            return RecordOutcome(run(DIRECT), refusal=never, never=True)
        if torch.cuda.is_current_stream_capturing():  # this call only: tried again after the backoff
            return RecordOutcome(run(DIRECT), refusal="the call ran inside the caller's own CUDA graph capture")
        assert device is not None
        constants = [c for c in compiled.constants if isinstance(c, torch.Tensor)]
        constants += _static_arguments(specialization.guards, slots)
        recording = load_runtime().GraphRecording(device.index or 0, constants)
        failure = _capture(run, recording, device)
        if failure is not None:
            return RecordOutcome(run(DIRECT), refusal=failure)
        written = recording.written()
        recording.forget_written()
        # Without an analysis of what each Triton kernel stores to, every outside tensor a kernel gets counts as
        # written (weights a Triton matmul reads included).
        free, _ = torch.cuda.mem_get_info(device)
        written_bytes = sum(t.nbytes for t in written)
        if written_bytes > free // VERIFIED_SHARE:
            return RecordOutcome(run(DIRECT), refusal=(
                f"proving the graph would snapshot {written_bytes >> 20} MB of outside state it may write, more "
                f"than a quarter of the {free >> 20} MB free on the device"))  # fmt: skip
        result, failure = _prove(run, recording, written)
        if failure is not None:
            return RecordOutcome(result, refusal=failure)
        plan = compiled.artifact.replay_plan
        if isinstance(plan, ReplayPlan):
            recording.set_plan(compiled.native.address(plan.symbol), plan.words, plan.outputs, plan.steps)
        return RecordOutcome(result, recording=recording)

    def describe(self, entry: Any, index: int) -> list[str]:
        """explain's lines on the specialization's graphs (its SpecGraphs): each recording, or why there is none
        (nothing when graphs are off or were not tried yet)."""
        graphs = entry.graphs(index) if entry is not None else None
        if graphs is None:
            return []
        hits = entry.hits()[index]
        lines = []
        for recording in graphs.recordings:
            c = recording.counts
            text = (f"CUDA graph: {c['replays']} replay(s) of {c['kernel_nodes']} Triton node(s) and "
                    f"{c['opaque_steps']} other operator(s) ({c['staged_inputs']} staged argument(s), "
                    f"{c['host_scalars']} host scalar(s) written by memset nodes"
                    + (f"; {c['graph_nodes']} graph node(s), {c['memset_nodes']} of them memsets"
                       if c["graph_nodes"] >= 0 else "")
                    + f"); {c['patched_nodes']} node patch(es), {c['divergences']} divergence(s)")  # fmt: skip
            if c["divergences"] and recording.failure:
                text += f"; last divergence: {recording.failure}"
            lines.append(text)
            plan = _describe_plan(recording.plan, self._specialization(index).compiled.artifact.replay_plan)
            if plan:
                lines.append(plan)
        if hits < graphs.paused_until_hit:
            lines.append(f"CUDA graphs paused: {graphs.misses} call(s) matched no recording against "
                         f"{graphs.replays} replay(s); calls run directly until hit {graphs.paused_until_hit} "
                         f"(now {hits}), then replay resumes")  # fmt: skip
        reason = graphs.refusal
        if reason is not None:
            after = graphs.record_after_hit
            retry = ("" if graphs.never_record else f"; next try at hit {after} (now {hits})" if after > hits
                     else "; tried again at the next call no recording fits")
            lines.append(f"CUDA graph: {'none' if not graphs.recordings else 'not recorded'} ({reason}{retry})")
        return lines


def _capture(run: Runner, recording: Any, device: torch.device) -> str | None:
    """Runs the call once in recording mode under stream capture; None when the graph is ready to prove, else why
    not. The capture is the runtime's own (cuStreamBeginCapture on a side stream, thread-local mode), not
    torch.cuda.CUDAGraph's: a capture that fails there leaves torch's CUDA RNG state marked as capturing, and
    every later random op of the process raises. Allocations on this thread go to a private memory pool of
    torch's caching allocator, which lives as long as the recording (its keepalive)."""
    pool = torch.cuda.MemPool()
    caller = torch.cuda.current_stream(device)
    stream = torch.cuda.Stream(device)
    stream.wait_stream(caller)
    torch._C._cuda_beginAllocateCurrentThreadToPool(device.index or 0, pool.id)
    try:
        with torch.cuda.stream(stream):
            recording.begin_capture(pool)
            try:
                run(RECORD, recording)
            except Exception as e:  # noqa: BLE001 -- not capturable: say why, run directly
                failure = recording.failure or f"{type(e).__name__}: {e}"
            else:
                failure = None
            finally:
                try:
                    recording.end_capture()
                except RuntimeError as e:
                    failure = failure or str(e)
    finally:
        torch._C._cuda_endAllocateToPool(device.index or 0, pool.id)
        caller.wait_stream(stream)
    return None if failure is None else f"capture failed: {failure}"


def _prove(run: Runner, recording: Any, written: list[torch.Tensor]) -> tuple[object, str | None]:
    """Direct run, then the first replay from the same state: (the call's result, None) when both agree bit for
    bit and the graph may be kept, else (the direct run's result, why not)."""
    before = [t.clone() for t in written]
    direct = run(DIRECT)  # the call itself: its exceptions are the caller's
    after = [t.clone() for t in written]
    for t, saved in zip(written, before):
        t.copy_(saved)
    # Any failure of the proof: no graph, the direct run stands.
    try:
        replayed = run(REPLAY, recording)
    except Exception as e:  # noqa: BLE001
        failure = f"its first replay diverged: {recording.failure or e}"
    else:
        try:
            same = _bitwise_equal(direct, replayed) and all(_bitwise_equal(t, a) for t, a in zip(written, after))
        except Exception as e:  # noqa: BLE001
            failure = f"comparing it with the direct run failed: {type(e).__name__}: {e}"
        else:
            failure = None if same else "its first replay differed from the direct run"
    if failure is not None:
        for t, saved in zip(written, after):
            t.copy_(saved)
        return direct, failure
    return replayed, None


def _describe_plan(state: dict[str, Any] | None, plan: ReplayPlan | NoReplayPlan) -> str:
    """explain's line on a recording's replay plan (csrc/graphs/replay_plan.cpp); empty where TRIDENT_REPLAY_PLAN is
    off."""
    if state is None:
        if isinstance(plan, ReplayPlan) or plan.by_knob:
            return ""
        return f"  replay plan: none ({plan.reason}); replays run the host program"
    text = {
        "learning": "learning from the next replay through the host program",
        "proving": "proving itself against replays through the host program",
        "on": f"on: replays compute the changing node parameters without running the host program ({state['proofs']} "
        "proof(s) against it)",
        "off": f"off ({state['reason']}); replays run the host program",
    }[state["state"]]
    return f"  replay plan: {text}; {state['replays']} replay(s) from it, {state['fallbacks']} through the host program"
