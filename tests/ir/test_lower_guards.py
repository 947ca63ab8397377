from __future__ import annotations

import torch

from trident.capture.trace import Dynamism
from trident.ir.mlir_text import ModuleBuilder
from trident.lowering.leaf_access import ConstantPool
from trident.lowering.lower_guards import lower_guards

from .filecheck import filecheck
from .helpers import capture


def lowered_guards(fn, *args, dynamism=Dynamism()):  # type: ignore[no-untyped-def]
    _, trace, guards = capture(fn, *args, dynamism=dynamism)
    module = ModuleBuilder()
    lower_guards(module, "guard", guards, ConstantPool(list(trace.constants)))
    return module.text()


def test_static_tensor_and_float_guards() -> None:
    text = lowered_guards(lambda x, a: x * a, torch.randn(2, 3), 0.5)
    filecheck(
        text,
        """
        CHECK: func.func @guard(%ctx: !llvm.ptr, %slots: !llvm.ptr) -> i32
        CHECK: %[[STATE:.*]] = func.call @trident_global_state()
        CHECK: cf.cond_br {{.*}}, ^fail
        CHECK: %[[X:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
        CHECK: func.call @trident_read_tensor(%[[X]], %[[META:.*]]) : (!llvm.ptr, !llvm.ptr) -> i32
        CHECK: llvm.getelementptr %[[META]][1]
        CHECK: func.call @trident_read_float
        CHECK: llvm.getelementptr %[[META]][8]
        CHECK: arith.cmpi eq
        CHECK: ^fail:
        CHECK-NEXT: %fail_value = arith.constant 0 : i32
        """,
    )


def test_symbolic_size_binds_symbol_and_checks_range() -> None:
    dyn = Dynamism(sizes=frozenset({(0, (), 0)}))
    text = lowered_guards(lambda x: x + 1, torch.randn(5, 3), dynamism=dyn)
    # dim 0 binds the symbol (loaded, not compared); the range guard (>= 2) compares it
    filecheck(
        text,
        """
        CHECK: %[[SIZESP:.*]] = llvm.getelementptr %[[META:.*]][8]
        CHECK-NEXT: %[[SIZES:.*]] = llvm.load %[[SIZESP]] : !llvm.ptr -> !llvm.ptr
        CHECK-NEXT: %[[P0:.*]] = llvm.getelementptr %[[SIZES]][0]
        CHECK: %[[S0:.*]] = llvm.load %[[P0]] : !llvm.ptr -> i64
        CHECK: arith.cmpi sge, %[[S0]]
        """,
    )


def test_dynamic_int_is_read_not_compared() -> None:
    dyn = Dynamism(ints=frozenset({(1, ())}))
    text = lowered_guards(lambda x, n: x * n, torch.randn(3), 7, dynamism=dyn)
    filecheck(
        text,
        """
        CHECK: func.call @trident_read_int
        CHECK-NOT: arith.constant 7 : i64
        CHECK: ^fail:
        """,
    )
