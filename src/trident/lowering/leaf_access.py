"""Emitting reads of a call's leaves: bound-argument slots, items of tuples/lists, context constants.

Shared by the guard and host-program passes so both address a leaf the same way."""
from __future__ import annotations

from collections.abc import Mapping

from ..capture.inputs import LeafPath
from ..ir.mlir_text import PTR, FunctionBuilder
from . import runtime_abi as abi


class ConstantPool:
    """The Python objects a specialization's context holds (ctx->constants), deduplicated by identity.

    Tensor constants of the trace come first, so constant path (-1, (i,)) is index i."""

    def __init__(self, initial: list[object]) -> None:
        self.objects: list[object] = []
        self._index: dict[int, int] = {}
        for obj in initial:
            self.objects.append(obj)
            self._index.setdefault(id(obj), len(self.objects) - 1)

    def add(self, obj: object) -> int:
        if id(obj) not in self._index:
            self.objects.append(obj)
            self._index[id(obj)] = len(self.objects) - 1
        return self._index[id(obj)]


class LeafAccess:
    """`state`: the attribute names of the call's state objects by path (inputs.state_attribute_names), whose
    items are read by name (a hash lookup) rather than by position in their instance dict."""

    def __init__(
        self, fb: FunctionBuilder, ctx: str, slots: str, pool: ConstantPool | None = None,
        state: Mapping[tuple[int, tuple[int, ...]], tuple[str, ...]] | None = None,
    ) -> None:
        self.fb = fb
        self.ctx = ctx
        self.slots = slots
        self.pool = pool
        self.state = state or {}
        self._objects: dict[tuple[int, tuple[int, ...]], str] = {}
        self._dicts: dict[tuple[int, tuple[int, ...]], str] = {}
        self._constants_base: str | None = None

    def constant(self, index: int) -> str:
        """PyObject* ctx->constants[index] (borrowed)."""
        if self._constants_base is None:
            self._constants_base = self.fb.load(self.fb.gep(self.ctx, abi.CTX_CONSTANTS, PTR), PTR)
        return self.fb.load(self.fb.gep(self._constants_base, index, PTR), PTR)

    def object(self, path: LeafPath) -> str:
        """PyObject* of a leaf or sequence (borrowed). Items are read only after their parent's guard."""
        key = (path.param, path.items)
        if key in self._objects:
            return self._objects[key]
        if path.is_constant:
            value = self.constant(path.items[0])
        elif not path.items:
            value = self.fb.load(self.fb.gep(self.slots, path.param, PTR), PTR)
        else:
            parent = self.object(LeafPath(path.param, path.items[:-1], ""))
            names = self.state.get((path.param, path.items[:-1]))
            if names is not None and self.pool is not None:  # its object matched trident_check_object already
                name = self.constant(self.pool.add(names[path.items[-1]]))
                value = self.fb.call(abi.DICT_ITEM, [self._instance_dict(path.param, path.items[:-1], parent), name])
            else:
                value = self.fb.call(abi.SEQUENCE_ITEM, [parent, self.fb.const(path.items[-1])])
            assert value is not None
        self._objects[key] = value
        return value

    def _instance_dict(self, param: int, items: tuple[int, ...], obj: str) -> str:
        """The state object's instance dict (borrowed), read once per function."""
        key = (param, items)
        if key not in self._dicts:
            value = self.fb.call(abi.INSTANCE_DICT, [obj])
            assert value is not None
            self._dicts[key] = value
        return self._dicts[key]
