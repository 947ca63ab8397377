"""The lookup key: which folder of the disk cache a miss reads, computed before any capture.

    key = hash(environment (versions.py), runtime library, the jitted function's identity and code,
               its signature, the call's argument structure, the dynamism state, torch's default device)

torch's default device (torch.set_default_device) decides where factory calls in the function allocate, and the
trace fixes it; the guards do not check it (grad mode, autocast and the default dtype they do check).

What it leaves to other checks, and why:
  - the guard facts (sizes, strides, int values, alignment, global state): a folder holds every specialization
    compiled for one key, and their native guards decide, as in the live entry. So a warm process follows the
    cold process's recompilation sequence: automatic dynamism makes a size symbolic on the second shape, and
    since the dynamism state is in the key, the warm process finds the symbolic specialization exactly when
    the cold one compiled it;
  - the state the function closes over and the code it called: known only after capture, so each record
    carries its roots, their fingerprint and its code dependencies, checked at load (record.py).
"""
from __future__ import annotations

import hashlib
import types
from collections.abc import Callable, Sequence

import torch

from ..capture.inputs import CallFacts
from ..capture.trace import Dynamism
from ..knobs import CompileOptions
from .fingerprint import code_digest
from .provenance import function_parts
from .versions import device_facts, environment


def function_identity(fn: Callable[..., object]) -> tuple[str, ...]:
    """Module, qualified name and code digest of the jitted function (the class of a callable object)."""
    func, bound_self = function_parts(fn)
    if func is not None:
        bound = type(bound_self)
        owner = "" if isinstance(fn, types.FunctionType) else f"bound to {bound.__module__}.{bound.__qualname__}"
        return (func.__module__ or "?", func.__qualname__, code_digest(func.__code__), owner)
    t = type(fn)
    return (t.__module__, t.__qualname__, "callable object", "")


def argument_structure(facts: CallFacts) -> tuple[object, ...]:
    """Leaves (path, kind, tensor type/dtype/device/rank) and sequences: what the entry's structural key hashes."""
    leaves = tuple(
        (leaf.path.param, leaf.path.items, leaf.kind.value)
        + (() if (t := leaf.tensor) is None else (t.type_tag, str(t.dtype), str(t.device), len(t.sizes)))
        for leaf in facts.leaves
    )
    sequences = tuple((s.path.param, s.path.items, s.kind, s.length, s.keys, s.class_name) for s in facts.sequences)
    return leaves, sequences


def lookup_key(
    fn: Callable[..., object],
    param_names: Sequence[str],
    n_positional: int,
    runtime_library: str,
    facts: CallFacts,
    dynamism: Dynamism,
) -> str:
    parts = (
        environment(),
        device_facts(facts),
        runtime_library,
        function_identity(fn),
        tuple(param_names),
        n_positional,
        argument_structure(facts),
        tuple(sorted(dynamism.sizes)),
        tuple(sorted(dynamism.ints)),
        tuple(sorted(dynamism.floats)),
        tuple(sorted(dynamism.strides)),
        tuple(sorted(dynamism.offsets)),
        str(torch.get_default_device()),
        compiled_knobs(),
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=20).hexdigest()


def compiled_knobs(options: CompileOptions | None = None) -> tuple[tuple[str, object], ...]:
    """The knobs that change what a compile produces, with what of each the compile depends on (what capture
    traces into, which entries the lowering calls, whether allocations are pooled, whether a replay plan is
    lowered): a record made under other values is not what this process would compile. The list is the knobs
    declared `compiles=True` (knobs.py); the values are the options a compile reads (default: the knobs now)."""
    return (CompileOptions.current() if options is None else options).key()
