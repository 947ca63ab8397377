"""Pass: GuardSet -> `func.func @<name>(%ctx, %slots) -> i32`, 1 when a call matches the specialization.

Each guard kind lowers itself (its `lower`, next to its Python check in trident/guards/), in the order
GuardSet.NATIVE_ORDER gives; every check exits early to a block returning a miss. This pass makes the function
around them: its arguments, the leaf reads they share, and the final "match".
"""
from __future__ import annotations

from collections.abc import Sequence

from ..capture.inputs import state_attribute_names
from ..guards.base import NativeCheck
from ..guards.guard_set import GuardSet
from ..ir.mlir_text import I32, PTR, FunctionBuilder, ModuleBuilder
from . import runtime_abi as abi
from .leaf_access import ConstantPool, LeafAccess


def lower_guards(
    module: ModuleBuilder, name: str, guards: GuardSet, pool: ConstantPool, value_programs: Sequence[str] = ()
) -> None:
    """`value_programs`: the symbols of the value programs the guards run, already in `module`."""
    fb = FunctionBuilder(module, name, [("%ctx", PTR), ("%slots", PTR)], abi.GUARD_RESULT, fail_value=abi.GUARD_MISS)
    access = LeafAccess(fb, "%ctx", "%slots", pool, state_attribute_names(g.fact for g in guards.sequences))
    guards.lower(NativeCheck(fb, access, pool, guards.identity_objects, value_programs))
    fb.ret(fb.const(abi.GUARD_MATCH, I32))
    fb.finish()
