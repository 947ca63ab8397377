"""A compiled specialization as a value: what the compiler produces and the runtime instantiates.

The lowering does not make runtime objects. Where compiled code needs one through its context table, it adds a
constant that describes it instead, and `runtime.specialization.instantiate` makes the live object from the
description, for a fresh compile (driver.py) and a disk load (cache/warm_start.py) alike:

  - BufferPoolConstant: the specialization's BufferPool, empty, with `sites` allocation sites (its CUDA matmul
    sites make their cuBLASLt plans on first use);
  - LaunchSiteConstant: a Triton launch site, from capture's record of the launch (runtime/triton_native.py makes
    its TritonLaunch on CUDA; on CPU the record itself runs through Triton's interpreter);
  - ResultBuilderConstant: how a dataclass, named tuple or dict result is built (the runtime's Entry.ResultBuilder).

Every other constant is the object compiled code reads as it is: a tensor constant of the trace, an object a guard
compares by identity, a scalar or string. In a fresh compile these are this process's objects; the disk cache
stores how to find each again in another process (cache/record.py, ConstantRecipe) and resolves them before it
instantiates.

This module imports nothing from Trident: the lowering, the runtime and the cache all read it.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol


class NativeCode(Protocol):
    """Native code with exported symbols: the JIT's module (backend.engine.NativeModule) after a compile, a
    loaded shared library (cache/native_library.LoadedLibrary) after a disk load. Held as long as the
    specialization lives."""

    def address(self, symbol: str) -> int: ...


@dataclasses.dataclass(frozen=True)
class Operand:
    """Placeholder in a recorded Triton launch (capture/triton_launches.RecordedLaunch) for the i-th runtime
    operand of the launch op (a tensor or a symbolic int)."""

    index: int


@dataclasses.dataclass(eq=False)
class BufferPoolConstant:
    """The host program's BufferPool: `sites` pooled allocation sites (pooled_allocations.py). Mutable while the
    program is lowered (the count grows); compared by identity, so the context holds it once."""

    sites: int = 0


@dataclasses.dataclass(frozen=True, eq=False)
class LaunchSiteConstant:
    """One Triton launch op of the host program: capture's RecordedLaunch (its kernel and constant arguments by
    index in this process's kernel_side_table)."""

    launch: Any


@dataclasses.dataclass(frozen=True, eq=False)
class ResultBuilderConstant:
    """How the entry builds a result Python makes from parts (a dataclass such as Hugging Face's ModelOutput, a
    named tuple, a dict): `cls(**dict(zip(names, parts)))`; `nested`: parts below it are built too; `cls` None:
    only parts below it are (capture/trace.py, _flatten_output). `fresh`: an object of a plain class the call
    created (a DynamicCache a forward makes), built as a new instance with these attributes, its __init__ not
    run again (runtime/specialization.FreshObject). The runtime's Entry.ResultBuilder is made from it."""

    cls: Any
    names: tuple[str, ...]
    nested: bool
    fresh: bool = False


@dataclasses.dataclass(frozen=True)
class ReplayPlan:
    """How a CUDA graph replay of the host program can skip running it (lowering/replay_plan.py): the symbol of
    the function that computes the `words` that can change between calls, how many tensors it hands the caller
    from the recording (`outputs`), and per step of the program, in order, whether it is a Triton launch and which
    of its arguments is which word: ((argument, item, word), ...), where item is -1 for the argument itself and k
    for the data address of item k of a Tensor[] or Tensor?[] argument."""

    symbol: str
    words: int
    outputs: int
    steps: tuple[tuple[bool, tuple[tuple[int, int, int], ...]], ...]


@dataclasses.dataclass(frozen=True)
class NoReplayPlan:
    """Why a specialization has no replay plan; `by_knob`: TRIDENT_REPLAY_PLAN or TRIDENT_CUDA_GRAPHS turned it off
    (explain then says nothing of plans)."""

    reason: str
    by_knob: bool = False


@dataclasses.dataclass
class Artifact:
    """One specialization as the compiler made it: its code, the symbols of its guard and run functions, the
    operators its context resolves, and its context's constants in order."""

    code: NativeCode
    guard_symbol: str
    run_symbol: str
    ops: list[tuple[str, str]]  # operators called through the boxed dispatcher (resolved in the context)
    aten_calls: list[str]  # every ATen call of the host program, in order (explain)
    constants: list[object]  # ctx->constants: objects, BufferPoolConstant, LaunchSiteConstant, ResultBuilderConstant
    # stage name -> IR text: "torch" and "lowered", and "llvm" where TRIDENT_DUMP_IR writes it (empty when loaded)
    stages: dict[str, str] = dataclasses.field(default_factory=dict)
    replay_plan: ReplayPlan | NoReplayPlan = NoReplayPlan("not lowered")
    # Attributes of the call's state objects its run assigns (capture/results.StateWrite): a run is then not
    # repeatable on the same arguments, which recording and proving a CUDA graph would do.
    state_writes: tuple[str, ...] = ()
