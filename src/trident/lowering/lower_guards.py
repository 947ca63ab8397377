"""Pass: GuardSet -> `func.func @<name>(%ctx, %slots) -> i32`, 1 when a call matches the specialization.

Order matters for safety, not only speed: a sequence's kind and length are checked before its items are
read, a tensor's type and rank before its sizes and strides are loaded. Every check exits early to a
block returning 0. The checks are exactly those of capture.guards.first_failure (the same verdict on every call:
tests/unit/test_guard_differential.py), in another order.
"""
from __future__ import annotations

import sympy

from ..capture.guards import ABSENT, AttributeGuard, GuardSet, default_device_of
from ..capture.inputs import LeafKind, LeafPath, state_attribute_names
from ..ir.mlir_text import F64, I32, I64, PTR, FunctionBuilder, ModuleBuilder
from ..native_numbers import float_bits
from ..torch_codes import device_type_code, dtype_code
from . import runtime_abi as abi
from .leaf_access import ConstantPool, LeafAccess
from .symbolic_ints import SymbolicIntLowering

def lower_guards(module: ModuleBuilder, name: str, guards: GuardSet, pool: ConstantPool) -> None:
    fb = FunctionBuilder(module, name, [("%ctx", PTR), ("%slots", PTR)], abi.GUARD_RESULT, fail_value=abi.GUARD_MISS)
    access = LeafAccess(fb, "%ctx", "%slots", pool, state_attribute_names(g.fact for g in guards.sequences))

    state = fb.call(abi.GLOBAL_STATE, [])
    assert state is not None
    fb.check(fb.cmp("eq", state, fb.const(guards.global_state.state)))

    modes = fb.call(abi.FUNCTION_MODE_COUNT, [])
    assert modes is not None
    fb.check(fb.cmp("eq", modes, fb.const(len(guards.function_modes))))
    for i, mode in enumerate(guards.function_modes):  # held by the context (so never a reused address)
        device = default_device_of(mode)
        device_arg = fb.null() if device is None else access.constant(pool.add(device))
        ok = fb.call(abi.FUNCTION_MODE_MATCHES, [fb.const(i), access.constant(pool.add(mode)), device_arg])
        assert ok is not None
        fb.check_nonzero(ok)

    for ag in guards.attributes:  # module state first: a flipped `training` flag misses at once
        _lower_attribute(fb, access, pool, ag)

    for sg in guards.sequences:  # parents before their items: an item is read only once its parent matched
        if sg.fact.kind == abi.SEQ_OBJECT:  # its class and attribute names, in order
            ok = fb.call(abi.CHECK_OBJECT, [access.object(sg.fact.path), access.constant(pool.add(sg.fact.cls)),
                                            access.constant(pool.add(sg.fact.keys))])
            assert ok is not None
            fb.check_nonzero(ok)
            continue
        ok = fb.call(abi.CHECK_SEQUENCE, [access.object(sg.fact.path), fb.const(sg.fact.kind), fb.const(sg.fact.length)])
        assert ok is not None
        fb.check_nonzero(ok)
        if sg.fact.kind == abi.SEQ_DICT:  # its keys, in order: they decide which value each position holds
            same = fb.call(abi.DICT_KEYS_ARE, [access.object(sg.fact.path), access.constant(pool.add(sg.fact.keys))])
            assert same is not None
            fb.check_nonzero(same)

    # Scalars and identities before tensors: a specialization for another value of an int (a position compiled
    # at 0 before it became symbolic) then misses at once, not after reading every tensor of the call.
    for scalar in guards.scalars:
        if scalar.kind is LeafKind.VALUE:
            _check_equal(fb, access.object(scalar.path), access.constant(pool.add(scalar.value)))
        else:
            _lower_scalar(fb, access, scalar.path, scalar.kind, scalar.value)

    for ig in guards.identities:
        expected_obj = access.constant(pool.add(guards.identity_objects[ig.constant_index]))
        got = fb.fresh()
        fb.emit(f"{got} = llvm.ptrtoint {access.object(ig.path)} : !llvm.ptr to i64")
        want = fb.fresh()
        fb.emit(f"{want} = llvm.ptrtoint {expected_obj} : !llvm.ptr to i64")
        fb.check(fb.cmp("eq", got, want))

    metas: dict[tuple[int, tuple[int, ...]], str] = {}
    for tg in guards.tensors:
        meta = fb.alloca(abi.META_FIELDS, I64, "meta")
        ok = fb.call(abi.READ_TENSOR, [access.object(tg.path), meta])
        assert ok is not None
        fb.check_nonzero(ok)
        f = tg.fact
        flags = (
            (abi.FLAG_REQUIRES_GRAD if f.requires_grad else 0)
            | (abi.FLAG_CONJ if f.is_conj else 0)
            | (abi.FLAG_NEG if f.is_neg else 0)
        )
        expected = [
            (abi.META_TYPE_TAG, f.type_tag),
            (abi.META_DTYPE, dtype_code(f.dtype)),
            (abi.META_DEVICE_TYPE, device_type_code(f.device.type)),
            (abi.META_DEVICE_INDEX, -1 if f.device.index is None else f.device.index),
            (abi.META_DIM, len(f.sizes)),
            (abi.META_FLAGS, flags),
        ]
        conditions = [fb.cmp("eq", fb.load(fb.gep(meta, field)), fb.const(value)) for field, value in expected]
        fb.check(fb.all_of(conditions))
        metas[(tg.path.param, tg.path.items)] = meta

    for dg in guards.derived:  # after the tensor guards: the base's meta is read (and it is a tensor)
        meta = fb.alloca(abi.META_FIELDS, I64, "derived")
        fb.call(abi.READ_TENSOR, [access.constant(dg.index), meta])  # Trident's own tensor: always readable
        base_meta = metas[(-1, (dg.base,))]
        distance = fb.binary("subi", fb.load(fb.gep(meta, abi.META_DATA_PTR)), fb.load(fb.gep(base_meta, abi.META_DATA_PTR)))
        fb.check(fb.cmp("eq", distance, fb.const(dg.distance)))

    arrays: dict[tuple[str, int], str] = {}  # (meta, sizes/strides field) -> loaded array pointer

    def read_property(path: LeafPath, prop: str, dim: int) -> str:
        if prop == "float":
            tmp = fb.alloca(1, F64, "float")
            ok = fb.call(abi.READ_FLOAT, [access.object(path), tmp])
            assert ok is not None
            fb.check_nonzero(ok)
            return fb.load(tmp, F64)
        if prop == "int":
            tmp = fb.alloca(1, I64, "int")
            ok = fb.call(abi.READ_INT, [access.object(path), tmp])
            assert ok is not None
            fb.check_nonzero(ok)
            return fb.load(tmp)
        meta = metas[(path.param, path.items)]
        if prop == "offset":
            return fb.load(fb.gep(meta, abi.META_STORAGE_OFFSET))
        field = abi.META_SIZES if prop == "size" else abi.META_STRIDES
        if (meta, field) not in arrays:
            arrays[(meta, field)] = fb.load(fb.gep(meta, field), PTR)
        return fb.load(fb.gep(arrays[(meta, field)], dim))

    env: dict[sympy.Symbol, str] = {}  # int symbols -> i64
    floats: dict[sympy.Symbol, str] = {}  # float symbols -> f64
    for b in guards.bindings:
        (floats if b.prop == "float" else env)[b.symbol] = read_property(b.path, b.prop, b.dim)
    # An expression that overflows or divides by zero for these inputs cannot prove the guard: a miss.
    symbolic = SymbolicIntLowering(fb, env, lambda ok, kind, message: fb.check(ok), floats)
    conditions = [
        fb.cmp("eq", read_property(pg.path, pg.prop, pg.dim), symbolic.int_expr(pg.expr)) for pg in guards.properties
    ]
    if conditions:
        fb.check(fb.all_of(conditions))
    for rg in guards.relations:  # float symbols compare as Python compared the double (IEEE, NaN unequal)
        fb.check(symbolic.bool_expr(rg.expr))
    fb.ret(fb.const(abi.GUARD_MATCH, I32))
    fb.finish()


def _address(fb: FunctionBuilder, ptr: str) -> str:
    value = fb.fresh()
    fb.emit(f"{value} = llvm.ptrtoint {ptr} : !llvm.ptr to i64")
    return value


def _lower_attribute(fb: FunctionBuilder, access: LeafAccess, pool: ConstantPool, ag: AttributeGuard) -> None:
    """Read the entry without running Python (trident_instance_attribute / trident_dict_item: NULL when absent),
    then compare it as an argument of its kind, or by address."""
    if ag.keys is not None:
        same = fb.call(abi.DICT_KEYS_ARE, [access.constant(pool.add(ag.owner)), access.constant(pool.add(ag.keys))])
        assert same is not None
        fb.check_nonzero(same)
        return
    reader = abi.DICT_ITEM if ag.in_dict else abi.INSTANCE_ATTRIBUTE
    value = fb.call(reader, [access.constant(pool.add(ag.owner)), access.constant(pool.add(ag.name))])
    assert value is not None
    address = _address(fb, value)
    if ag.value is ABSENT:
        fb.check(fb.cmp("eq", address, fb.const(0)))
    elif ag.kind is LeafKind.OBJECT:  # the context holds the object, so its address is never reused
        fb.check(fb.cmp("eq", address, _address(fb, access.constant(pool.add(ag.value)))))
    elif ag.kind is LeafKind.VALUE:
        fb.check(fb.cmp("ne", address, fb.const(0)))
        _check_equal(fb, value, access.constant(pool.add(ag.value)))
    else:
        fb.check(fb.cmp("ne", address, fb.const(0)))
        _lower_scalar_object(fb, value, ag.kind, ag.value)


def _check_equal(fb: FunctionBuilder, obj: str, expected: str) -> None:
    same = fb.call(abi.EQUALS, [obj, expected])
    assert same is not None
    fb.check_nonzero(same)


def _lower_scalar(fb: FunctionBuilder, access: LeafAccess, path: LeafPath, kind: LeafKind, value: object) -> None:
    _lower_scalar_object(fb, access.object(path), kind, value)


def _lower_scalar_object(fb: FunctionBuilder, obj: str, kind: LeafKind, value: object) -> None:
    if kind is LeafKind.NONE:
        ok = fb.call(abi.IS_NONE, [obj])
        assert ok is not None
        fb.check_nonzero(ok)
        return
    reader = {LeafKind.INT: abi.READ_INT, LeafKind.FLOAT: abi.READ_FLOAT, LeafKind.BOOL: abi.READ_BOOL}[kind]
    tmp = fb.alloca(1, I64, "scalar")
    ok = fb.call(reader, [obj, tmp])
    assert ok is not None
    fb.check_nonzero(ok)
    if value is None and kind is LeafKind.FLOAT:  # any finite float: exponent bits not all ones (inf, NaN)
        exponent = fb.binary("andi", fb.load(tmp), fb.const(0x7FF0_0000_0000_0000))
        fb.check(fb.cmp("ne", exponent, fb.const(0x7FF0_0000_0000_0000)))
        return
    if value is None:  # any int: its value is bound to a symbol
        return
    if kind is LeafKind.FLOAT:
        # Compare bit patterns: -0.0 != 0.0 and NaN == the same NaN, as Python's capture saw the value.
        expected = float_bits(float(value))  # type: ignore[arg-type]
    else:
        expected = int(value)  # type: ignore[call-overload]
    fb.check(fb.cmp("eq", fb.load(tmp), fb.const(expected)))

