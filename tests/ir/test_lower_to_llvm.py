from __future__ import annotations

from trident.ir.fx_import import new_context
from trident.lowering.lower_to_llvm import lower_to_llvm

from .filecheck import filecheck


def test_func_arith_cf_become_llvm() -> None:
    text = """
    module {
      func.func private @trident_global_state() -> i64
      func.func @guard(%ctx: !llvm.ptr, %slots: !llvm.ptr) -> i32 {
        %c1 = arith.constant 1 : i64
        %s = func.call @trident_global_state() : () -> i64
        %ok = arith.cmpi eq, %s, %c1 : i64
        cf.cond_br %ok, ^yes, ^fail
      ^yes:
        %one = arith.constant 1 : i32
        func.return %one : i32
      ^fail:
        %zero = arith.constant 0 : i32
        func.return %zero : i32
      }
    }
    """
    filecheck(
        str(lower_to_llvm(text, new_context())),
        """
        CHECK: llvm.func @trident_global_state() -> i64
        CHECK: llvm.func @guard(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr) -> i32
        CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i64) : i64
        CHECK: %[[STATE:.*]] = llvm.call @trident_global_state() : () -> i64
        CHECK-NEXT: %[[OK:.*]] = llvm.icmp "eq" %[[STATE]], %[[ONE]] : i64
        CHECK-NEXT: llvm.cond_br %[[OK]], ^[[YES:.*]], ^[[FAIL:.*]]
        CHECK: ^[[YES]]:
        CHECK-NEXT: %[[R1:.*]] = llvm.mlir.constant(1 : i32) : i32
        CHECK-NEXT: llvm.return %[[R1]] : i32
        CHECK: ^[[FAIL]]:
        CHECK-NEXT: %[[R0:.*]] = llvm.mlir.constant(0 : i32) : i32
        CHECK-NEXT: llvm.return %[[R0]] : i32
        CHECK-NOT: func.
        """,
    )
