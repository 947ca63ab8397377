"""Instantiating an artifact (trident/artifact.py) into a live specialization: the one place where a
specialization's runtime objects are made, for a fresh compile and a disk load alike.

`instantiate` resolves the guard and run symbols, makes each constant's live object (an empty BufferPool, a launch
site's TritonLaunch) and the context holding them. The caller adds the result to the function's entry.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..artifact import Artifact, BufferPoolConstant, LaunchSiteConstant, NativeCode, ResultBuilderConstant


@dataclasses.dataclass
class CompiledSpecialization:
    """A live specialization: its code's addresses, its context and the objects in it."""

    guard_address: int
    run_address: int
    native: NativeCode  # keeps the code mapped while the entry may call it
    ops: list[tuple[str, str]]
    aten_calls: list[str]
    constants: list[object]  # the context's objects, in the artifact's order
    stages: dict[str, str]
    launch_sites: list[object] = dataclasses.field(default_factory=list)  # Triton launches, in program order
    buffer_pool: object | None = None  # the BufferPool of its pooled allocations (None: none pooled)
    guard_symbol: str = ""  # exported names of the two functions (the disk cache loads by name)
    run_symbol: str = ""
    context: Any = None  # the runtime's Context (ctx->constants, ctx->ops)
    artifact: Artifact | None = None  # what it was instantiated from (the disk cache persists its constants)


class FreshObject:
    """Makes a new instance of a plain class with given attributes, as the traced call left the one it created
    (a ResultBuilderConstant with `fresh`): what its __init__ and later methods computed is in the attributes."""

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __call__(self, **attributes: object) -> object:
        obj = object.__new__(self.cls)
        obj.__dict__.update(attributes)
        return obj


def instantiate(artifact: Artifact) -> CompiledSpecialization:
    """The live specialization of `artifact`. Raises ValueError when an operator of its context does not
    resolve in this libtorch, and what the code raises for a symbol it lacks."""
    from . import load_runtime

    guard_address = artifact.code.address(artifact.guard_symbol)
    run_address = artifact.code.address(artifact.run_symbol)
    constants: list[object] = []
    launch_sites: list[object] = []
    buffer_pool: object | None = None
    for constant in artifact.constants:
        if isinstance(constant, BufferPoolConstant):
            buffer_pool = obj = new_buffer_pool(constant.sites)
        elif isinstance(constant, LaunchSiteConstant):
            obj = launch_site(constant.launch)
            launch_sites.append(obj)
        elif isinstance(constant, ResultBuilderConstant):
            maker = FreshObject(constant.cls) if constant.fresh else constant.cls
            obj = load_runtime().Entry.ResultBuilder(maker, constant.names, constant.nested)
        else:
            obj = constant
        constants.append(obj)
    context = load_runtime().Context(list(artifact.ops), constants)
    return CompiledSpecialization(
        guard_address, run_address, artifact.code, list(artifact.ops), list(artifact.aten_calls), constants,
        artifact.stages, launch_sites, buffer_pool, artifact.guard_symbol, artifact.run_symbol, context, artifact,
    )  # fmt: skip


def launch_site(launch: Any) -> object:
    """What compiled code calls for one Triton launch: the TritonLaunch of a CUDA launch (native launches,
    Triton's launcher as fallback), the recorded launch itself on CPU tensors (Triton's interpreter)."""
    if launch.device_type != "cuda":
        return launch
    from .triton_native import LaunchSite

    return LaunchSite(launch).native


def new_buffer_pool(sites: int) -> object:
    """An empty BufferPool keeping up to TRIDENT_BUFFER_POOL_MB, whose CUDA matmul sites make cuBLASLt plans
    unless TRIDENT_MATMUL_PLANS=0.

    In a process that uses CUDA, the runtime's CUDA entry points are resolved first: the pool reads torch's
    current stream through them, and without them it would allocate every call."""
    import torch.cuda

    from ..knobs import knobs
    from . import load_runtime
    from .triton_native import cuda_ready

    if torch.cuda.is_initialized():
        cuda_ready()
    return load_runtime().BufferPool(sites, int(knobs.buffer_pool_mb * 2**20), knobs.matmul_plans)


def is_buffer_pool(obj: object) -> bool:
    from . import load_runtime

    return isinstance(obj, load_runtime().BufferPool)
