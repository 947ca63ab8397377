"""Guards on tensors: a tensor leaf's type, dtype, device, rank and flags (its sizes, strides and offset are
symbols.py's properties), and the views of constants made at capture."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from .. import abi
from ..capture.constant_views import byte_distance
from ..capture.inputs import LeafPath, TensorFact, tensor_fact
from ..ir.mlir_text import I64
from ..lowering import runtime_abi as native_abi
from ..torch_codes import device_type_code, dtype_code
from .base import Explain, Guard, NativeCheck, PythonCheck

# What a TensorGuard checks of a tensor leaf besides its layout, as explain shows it: the Python check and the
# explain text both read this table (the native check compares the same facts in the runtime's encoding: a type
# tag, a dtype code, device type and index, dim and a flags word).
_TENSOR_FIELDS: tuple[tuple[str, Callable[[TensorFact], object]], ...] = (
    ("type", lambda f: "Parameter" if f.type_tag == abi.TYPE_PARAMETER else "Tensor"),
    ("dtype", lambda f: f.dtype),
    ("device", lambda f: f.device),
    ("rank", lambda f: len(f.sizes)),
    ("requires_grad", lambda f: f.requires_grad),
    ("conj bit", lambda f: f.is_conj),
    ("neg bit", lambda f: f.is_neg),
)


@dataclasses.dataclass(frozen=True)
class TensorGuard(Guard):
    """Type, dtype, device, rank and flags of a tensor leaf (an argument's, or a constant's at path (-1, (i,))).

    Not the data pointer's alignment: nothing a specialization bakes in depends on it. What does is checked
    where it is used, on every call: each Triton launch keys its compiled variants on the 16-byte alignment of
    its pointers natively (runtime/triton_native.py, a new alignment goes to Triton's launcher and registers a
    variant), and a matmul plan runs only for operands as aligned as those it was made for (csrc/matmul_plan.cpp).
    Guarding it here too made every alignment of every argument a specialization of its own."""

    path: LeafPath
    fact: TensorFact

    def describe(self) -> str:
        kind, dtype, device, rank, *bits = (get(self.fact) for _, get in _TENSOR_FIELDS)
        flags = "".join(f" {name}" for (name, _), on in zip(_TENSOR_FIELDS[4:], bits) if on)
        return f"{self.path.name}: {kind} {str(dtype).removeprefix('torch.')} {device} rank {rank}{flags}"

    @classmethod
    def describe_all(cls, guards: Sequence[Guard], explain: Explain) -> list[str]:
        """Each tensor's kind line, then each tensor's layout line (its sizes, strides and offset: a constant,
        a symbol it binds, or an expression of symbols)."""
        lines = [g.describe() for g in guards]
        for g in guards:
            assert isinstance(g, TensorGuard)
            values = explain.layout.get(g.path, {})
            rank = max([d for (prop, d) in values if prop == "size"], default=-1) + 1
            sizes = "[" + ", ".join(values.get(("size", d), "?") for d in range(rank)) + "]"
            strides = "[" + ", ".join(values.get(("stride", d), "?") for d in range(rank)) + "]"
            lines.append(f"{g.path.name}: sizes {sizes} strides {strides} offset {values.get(('offset', 0), '?')}")
        return lines

    def mismatch(self, fact: TensorFact) -> str | None:
        """The first field of _TENSOR_FIELDS in which `fact` (a call's tensor) differs, or None."""
        for name, get in _TENSOR_FIELDS:
            if get(fact) != get(self.fact):
                return f"{name} mismatch: expected {get(self.fact)}, got {get(fact)}"
        return None

    def check(self, call: PythonCheck) -> str | None:
        value = call.value(self.path)
        where = f"argument '{self.path.name}'" if not self.path.is_constant else self.path.name
        if not isinstance(value, torch.Tensor):
            return f"{where}: expected a tensor, got {type(value).__name__}"
        fact = tensor_fact(value)
        if fact is None:
            return f"{where}: {type(value).__name__} with layout {value.layout} is not a plain strided tensor"
        why = self.mismatch(fact)
        return None if why is None else f"{where}: {why}"

    def lower(self, native: NativeCheck) -> None:
        """Read the tensor's TridentTensorMeta (kept for the sizes and strides that symbols.py checks) and compare
        its fields; trident_read_tensor answers 0 for anything but a plain strided tensor."""
        fb, f = native.fb, self.fact
        meta = fb.alloca(native_abi.META_FIELDS, I64, "meta")
        native.check_true(native_abi.READ_TENSOR, [native.access.object(self.path), meta])
        flags = (
            (native_abi.FLAG_REQUIRES_GRAD if f.requires_grad else 0)
            | (native_abi.FLAG_CONJ if f.is_conj else 0)
            | (native_abi.FLAG_NEG if f.is_neg else 0)
        )
        expected = [
            (native_abi.META_TYPE_TAG, f.type_tag),
            (native_abi.META_DTYPE, dtype_code(f.dtype)),
            (native_abi.META_DEVICE_TYPE, device_type_code(f.device.type)),
            (native_abi.META_DEVICE_INDEX, -1 if f.device.index is None else f.device.index),
            (native_abi.META_DIM, len(f.sizes)),
            (native_abi.META_FLAGS, flags),
        ]
        conditions = [fb.cmp("eq", fb.load(fb.gep(meta, field)), fb.const(value)) for field, value in expected]
        fb.check(fb.all_of(conditions))
        native.metas[(self.path.param, self.path.items)] = meta


@dataclasses.dataclass(frozen=True)
class DerivedConstantGuard(Guard):
    """Constant `index` is a view of constant `base` made at capture (capture/constant_views.py): it is still
    `distance` bytes from the base's data pointer, i.e. the base was not pointed at other memory since.

    Checked after the tensor guards: the base's meta is read by then (and it is a tensor)."""

    index: int
    base: int
    distance: int
    base_label: str = ""  # the base's name in explain ("layers.0.fc.weight"); empty: "constant #base"

    def describe(self) -> str:
        base = self.base_label or f"constant #{self.base}"
        return f"constant #{self.index}: a view of {base} made at capture, at its data + {self.distance} bytes"

    def check(self, call: PythonCheck) -> str | None:
        view, base = call.constants[self.index], call.constants[self.base]
        if byte_distance(view, base) != self.distance:  # type: ignore[arg-type]
            return (
                f"{call.constant_label(self.base)} was pointed at other memory since constant #{self.index} was made "
                "as its view"
            )
        return None

    def lower(self, native: NativeCheck) -> None:
        fb = native.fb
        meta = fb.alloca(native_abi.META_FIELDS, I64, "derived")
        fb.call(native_abi.READ_TENSOR, [native.access.constant(self.index), meta])  # Trident's own: always readable
        base_meta = native.metas[(-1, (self.base,))]
        data, base_data = (fb.load(fb.gep(m, native_abi.META_DATA_PTR)) for m in (meta, base_meta))
        fb.check(fb.cmp("eq", fb.binary("subi", data, base_data), fb.const(self.distance)))
