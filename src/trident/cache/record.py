"""What the disk cache stores per specialization besides its library, and its file format.

A record holds what a new process needs to use the library without capture:
  - the library's file name and hash, and its two exported symbols (guard, run);
  - the operators resolved into the context (`ops`) and the ATen calls (for explain);
  - one ConstantRecipe per context constant, in context order (how to get the object in the new process),
    Triton launch sites included (launch_sites.py);
  - the GuardSet and CallFacts, stripped of live objects (for explain / first_failure and automatic dynamism);
  - the output structure;
  - the roots, their state fingerprint and the code dependencies (checked before loading).

File format: MAGIC, a 32-byte BLAKE2b digest of the payload, then the payload (a pickle). The digest is
checked before unpickling, so a truncated or corrupt file is recognised (and removed) without running the
unpickler on garbage. Pickle, because guards hold sympy expressions; so the cache is trusted like code, and a
record is read only from files and folders only their owner can write (runtime/trust.py, checked by store.py).
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import pickle
from typing import Any

import torch

from ..artifact import NoReplayPlan, ReplayPlan
from ..capture.inputs import CallFacts, LeafKind
from ..capture.results import OutputTree
from ..guards.guard_set import GuardSet
from ..guards.values import SequenceGuard
from .code_deps import CodeDependency
from .provenance import Root

# 12: view operators call trident_view_call, ReplayPlan steps name list items; 11: VariantArguments.param_sources;
# 10: guards in trident.guards
MAGIC = b"TRIDENT-SPEC-12\n"
_DIGEST = 32
SCALAR_TYPES = (type(None), bool, int, float, str)


class CorruptRecord(Exception):
    """A record file that is truncated, altered or from another format version."""


@dataclasses.dataclass(frozen=True)
class ConstantRecipe:
    """How to get one context constant in a new process.

    kind "tensor":   the tensor reached first at `path` by walking the record's roots (a live tensor the function
                     read: weights, buffers, globals; passed by reference as in the compiling process);
    kind "created":  a small tensor the trace itself created (a torch.tensor literal), stored by value in `data`;
    kind "view":     a view of an earlier constant made at capture (capture/constant_views.py), made again from
                     `path` = (base constant index, sizes, strides, storage offset);
    kind "argument": the object of this call at argument path `path` (param, items), guarded by identity;
    kind "argument_class": the class of this call's state object at `path`, which must be named `value`
                     ("module:qualname"; a class defined in a function has no other name to find it by);
    kind "object":   the object reached first at `path` by walking the record's roots (a module or its
                     _parameters dict whose attributes a module-state guard reads);
    kind "value":    a Python scalar (None, bool, int, float, str) returned as a constant output;
    kind "buffer_pool": the specialization's BufferPool, made empty with `value` allocation sites;
    kind "triton_launch": a Triton launch site, rebuilt from `value`, a launch_sites.LaunchRecipe (its kernel found
                     by name and checked unchanged; on CUDA with the binaries of its compiled variants);
    kind "result_builder": how a result is built from its parts (artifact.ResultBuilderConstant), `value` = (module,
                     qualname, names, nested, fresh) with the class found by name (module None: no class). What
                     its constructor runs ran at capture and is checked as code (code_deps.py)."""

    kind: str
    path: tuple[Any, ...] = ()
    value: object = None
    data: bytes = b""

    def created_tensor(self) -> torch.Tensor:
        return torch.load(io.BytesIO(self.data), weights_only=True)


@dataclasses.dataclass(frozen=True)
class ObjectAt:
    """In a record's module-state guards (GuardSet.attributes), in place of a live owner or value: the object
    reached first at `path` by walking the record's roots."""

    path: tuple[Any, ...]


@dataclasses.dataclass(frozen=True)
class Record:
    name: str  # the jitted function's qualified name, for messages
    library: str  # file name of the shared library, in the same folder
    library_digest: str  # BLAKE2b of its bytes
    guard_symbol: str
    run_symbol: str
    ops: list[tuple[str, str]]
    aten_calls: list[str]
    constants: list[ConstantRecipe]
    n_trace_constants: int  # constants[:n] are the trace's tensor constants (guard paths (-1, (i,)))
    guards: GuardSet  # identity_objects replaced by None, module-state owners and objects by ObjectAt
    facts: CallFacts  # without live values
    outputs: OutputTree
    roots: list[Root]
    state_digest: str
    code_dependencies: list[CodeDependency]
    replay_plan: ReplayPlan | NoReplayPlan = NoReplayPlan("not stored")
    state_writes: tuple[str, ...] = ()  # artifact.Artifact.state_writes


def strip_live_objects(guards: GuardSet, facts: CallFacts) -> tuple[GuardSet, CallFacts]:
    """Copies without the compiling call's objects (tensors, identity-guarded objects, state objects' classes,
    which constants.bind_call_objects takes from the loading call): a record holds facts."""
    sequences = tuple(dataclasses.replace(s, cls=None) for s in facts.sequences)
    stripped_guards = dataclasses.replace(
        guards, identity_objects=(None,) * len(guards.identity_objects), sequences=tuple(map(SequenceGuard, sequences))
    )
    leaves = tuple(
        dataclasses.replace(leaf, value=None) if leaf.kind in (LeafKind.TENSOR, LeafKind.OBJECT) else leaf
        for leaf in facts.leaves
    )
    return stripped_guards, CallFacts(leaves, sequences)


def encode(record: Record) -> bytes:
    payload = pickle.dumps(record, protocol=pickle.HIGHEST_PROTOCOL)
    return MAGIC + hashlib.blake2b(payload, digest_size=_DIGEST).digest() + payload


def decode(data: bytes) -> Record:
    if not data.startswith(MAGIC):
        raise CorruptRecord("not a record of this format version")
    digest, payload = data[len(MAGIC) : len(MAGIC) + _DIGEST], data[len(MAGIC) + _DIGEST :]
    if len(digest) != _DIGEST or hashlib.blake2b(payload, digest_size=_DIGEST).digest() != digest:
        raise CorruptRecord("truncated or altered (digest mismatch)")
    try:
        record = pickle.loads(payload)
    except Exception as e:  # a class that moved since the record was written, or an unreadable payload
        raise CorruptRecord(f"unreadable payload: {type(e).__name__}: {e}") from e
    if not isinstance(record, Record):
        raise CorruptRecord(f"payload is a {type(record).__name__}, not a Record")
    return record


def library_digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=_DIGEST).hexdigest()
