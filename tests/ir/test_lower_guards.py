"""Golden IR of the guard function: each check compares exactly the field or value the guard names with the
constant it was captured with (FileCheck variables tie a loaded value to its comparison and its constant)."""
from __future__ import annotations

import struct

import torch

from trident.capture.trace import Dynamism
from trident.ir.mlir_text import ModuleBuilder
from trident.lowering import runtime_abi as abi
from trident.lowering.leaf_access import ConstantPool
from trident.lowering.lower_guards import lower_guards

from .filecheck import filecheck
from .helpers import capture, constant


def lowered_guards(fn, *args, dynamism=Dynamism()):  # type: ignore[no-untyped-def]
    _, trace, guards = capture(fn, *args, dynamism=dynamism)
    module = ModuleBuilder()
    lower_guards(module, "guard", guards, ConstantPool(list(trace.constants)))
    return module.text(), guards


def element_equals(array: str, index: int, const_name: str) -> str:
    """array[index] is loaded as i64 and compared for equality with exactly the constant [[const_name]]."""
    tag = f"{array}_{index}"
    return (
        f"CHECK: %[[P_{tag}:.*]] = llvm.getelementptr %[[{array}]][{index}] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        f"CHECK-NEXT: %[[V_{tag}:.*]] = llvm.load %[[P_{tag}]] : !llvm.ptr -> i64\n"
        f"CHECK-NEXT: arith.cmpi eq, %[[V_{tag}]], %[[{const_name}]] : i64\n"
    )


def array_field(meta: str, field: int, name: str) -> str:
    """[[name]] is the sizes/strides array loaded from meta[field]."""
    return (
        f"CHECK: %[[P_{name}:.*]] = llvm.getelementptr %[[{meta}]][{field}] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        f"CHECK-NEXT: %[[{name}:.*]] = llvm.load %[[P_{name}]] : !llvm.ptr -> !llvm.ptr\n"
    )


def header(state: int, extra_constants: str = "") -> str:
    return prologue(state, extra_constants) + tensor_x()


def prologue(state: int, extra_constants: str = "") -> str:
    """Constants, then the global state and function mode checks every guard starts with."""
    return (
        "CHECK: func.func @guard(%ctx: !llvm.ptr, %slots: !llvm.ptr) -> i32\n"
        + constant("STATE_C", state)
        + constant("C0", 0) + constant("C1", 1) + constant("C3", 3) + constant("C6", 6) + constant("CM1", -1)
        + extra_constants
        + "CHECK: %[[STATE:.*]] = func.call @trident_global_state() : () -> i64\n"
        "CHECK-NEXT: %[[STATE_OK:.*]] = arith.cmpi eq, %[[STATE]], %[[STATE_C]] : i64\n"
        "CHECK-NEXT: cf.cond_br %[[STATE_OK]], ^{{.*}}, ^fail\n"
        "CHECK: %[[MODES:.*]] = func.call @trident_function_mode_count() : () -> i64\n"
        "CHECK-NEXT: arith.cmpi eq, %[[MODES]], %[[C0]] : i64\n"
    )


def tensor_x() -> str:
    """Argument 0 read as a plain float32 CPU tensor into [[META]]."""
    return (
        "CHECK: %[[XP:.*]] = llvm.getelementptr %slots[0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
        "CHECK-NEXT: %[[X:.*]] = llvm.load %[[XP]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK-NEXT: func.call @trident_read_tensor(%[[X]], %[[META:meta[0-9]+]]) : (!llvm.ptr, !llvm.ptr) -> i32\n"
        # a plain float32 CPU tensor: type tag 1, dtype 6 (c10 Float), device type 0 (CPU), index -1, no flags
        + element_equals("META", abi.META_TYPE_TAG, "C1")
        + element_equals("META", abi.META_DTYPE, "C6")
        + element_equals("META", abi.META_DEVICE_TYPE, "C0")
        + element_equals("META", abi.META_DEVICE_INDEX, "CM1")
    )


def test_static_tensor_and_float_guards() -> None:
    text, guards = lowered_guards(lambda x, a: x * a, torch.randn(2, 3), 0.5)
    half_bits = struct.unpack("<q", struct.pack("<d", 0.5))[0]  # floats compare bit for bit
    assert half_bits == 4602678819172646912
    filecheck(
        text,
        prologue(guards.global_state.state, constant("C2", 2) + constant("HALF", half_bits))
        # a = 0.5, before any tensor is read: read as a float into a slot, its bits compared with 0.5's
        + "CHECK: %[[AP:.*]] = llvm.getelementptr %slots[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
        "CHECK-NEXT: %[[A:.*]] = llvm.load %[[AP]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK-NEXT: func.call @trident_read_float(%[[A]], %[[SCALAR:scalar[0-9]+]])\n"
        "CHECK: %[[BITS:.*]] = llvm.load %[[SCALAR]] : !llvm.ptr -> i64\n"
        "CHECK-NEXT: arith.cmpi eq, %[[BITS]], %[[HALF]] : i64\n"
        + tensor_x()
        + element_equals("META", abi.META_DIM, "C2")  # rank 2
        + element_equals("META", abi.META_FLAGS, "C0")
        + "CHECK: cf.cond_br {{.*}}, ^{{.*}}, ^fail\n"
        # sizes [2, 3], storage offset 0, strides [3, 1]
        + array_field("META", abi.META_SIZES, "SIZES")
        + element_equals("SIZES", 0, "C2")
        + element_equals("SIZES", 1, "C3")
        + element_equals("META", abi.META_STORAGE_OFFSET, "C0")
        + array_field("META", abi.META_STRIDES, "STRIDES")
        + element_equals("STRIDES", 0, "C3")
        + element_equals("STRIDES", 1, "C1")
        + "CHECK: cf.cond_br {{.*}}, ^{{.*}}, ^fail\n"
        "CHECK: ^fail:\n"
        "CHECK-NEXT: %fail_value = arith.constant 0 : i32\n",
    )


def test_symbolic_size_binds_symbol_and_checks_range() -> None:
    dyn = Dynamism(sizes=frozenset({(0, (), 0)}))
    text, guards = lowered_guards(lambda x: x + 1, torch.randn(5, 3), dynamism=dyn)
    # the argument's constant layout first (dim 1 stays 3, offset 0, strides 3 and 1); then dim 0 binds the
    # symbol (loaded, compared with nothing but the range guard s >= 2); the captured 5 appears nowhere
    assert "arith.constant 5 : i64" not in text
    filecheck(
        text,
        header(guards.global_state.state, constant("C2", 2))
        + element_equals("META", abi.META_DIM, "C2")
        + element_equals("META", abi.META_FLAGS, "C0")
        + array_field("META", abi.META_SIZES, "SIZES")
        + element_equals("SIZES", 1, "C3")
        + element_equals("META", abi.META_STORAGE_OFFSET, "C0")
        + array_field("META", abi.META_STRIDES, "STRIDES")
        + element_equals("STRIDES", 0, "C3")
        + element_equals("STRIDES", 1, "C1")
        + "CHECK: cf.cond_br {{.*}}, ^{{.*}}, ^fail\n"
        "CHECK: %[[P0:.*]] = llvm.getelementptr %[[SIZES2:.*]][0] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        "CHECK-NEXT: %[[S0:.*]] = llvm.load %[[P0]] : !llvm.ptr -> i64\n"
        "CHECK-NOT: arith.cmpi eq, %[[S0]]\n"
        "CHECK: %[[RANGE:.*]] = arith.cmpi sge, %[[S0]], %[[C2]] : i64\n"
        "CHECK-NEXT: cf.cond_br %[[RANGE]], ^{{.*}}, ^fail\n",
    )


def test_dynamic_int_is_read_not_compared() -> None:
    dyn = Dynamism(ints=frozenset({(1, ())}))
    text, guards = lowered_guards(lambda x, n: x * n, torch.randn(3), 7, dynamism=dyn)
    assert "arith.constant 7 : i64" not in text
    filecheck(
        text,
        prologue(guards.global_state.state)
        # n is an int (read before any tensor, its value not compared) ...
        + "CHECK: %[[NP:.*]] = llvm.getelementptr %slots[1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr\n"
        "CHECK-NEXT: %[[N:.*]] = llvm.load %[[NP]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK: func.call @trident_read_int(%[[N]], %[[KIND:scalar[0-9]+]])\n"
        "CHECK-NOT: llvm.load %[[KIND]]\n"
        + tensor_x()
        + element_equals("META", abi.META_DIM, "C1")  # rank 1
        + array_field("META", abi.META_SIZES, "SIZES")  # x's constant layout, before any symbol is bound
        + element_equals("SIZES", 0, "C3")
        # ... and n read again to bind its symbol
        + "CHECK: func.call @trident_read_int(%[[N]], %[[INT:int[0-9]+]])\n"
        "CHECK: %[[VALUE:.*]] = llvm.load %[[INT]] : !llvm.ptr -> i64\n"
        "CHECK-NOT: %[[VALUE]]\n"  # bound, never compared
        "CHECK: ^fail:\n",
    )
