from __future__ import annotations

import sympy
from torch.utils._sympy.functions import FloorDiv, PythonMod

from trident.ir.mlir_text import I32, FunctionBuilder, ModuleBuilder
from trident.lowering.symbolic_ints import SymbolicIntLowering

from .filecheck import filecheck


def lowered(expr: sympy.Basic) -> str:
    module = ModuleBuilder()
    fb = FunctionBuilder(module, "f", [("%s0", "i64"), ("%s1", "i64")], I32, fail_value=0)
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    # As in guards: an expression that overflows or divides by zero fails the check.
    symbolic = SymbolicIntLowering(fb, {s0: "%s0", s1: "%s1"}, lambda ok, kind, message: fb.check(ok))
    fb.check(symbolic.bool_expr(expr))
    fb.ret(fb.const(1, I32))
    fb.finish()
    return module.text()


def test_relation_with_floordiv_and_python_mod() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.Eq(FloorDiv(s0, 4) + PythonMod(s1, 3), 2))
    filecheck(
        text,
        """
        CHECK: %[[Q:.*]] = arith.floordivsi %s0, %[[C4:.*]] : i64
        CHECK: %[[Q2:.*]] = arith.floordivsi %s1, %[[C3:.*]] : i64
        CHECK: %[[M:.*]] = arith.muli %[[Q2]], %[[C3]] : i64
        CHECK: %[[R:.*]] = arith.subi %s1, %[[M]] : i64
        CHECK: arith.cmpi eq
        CHECK: cf.cond_br
        """,
    )


def test_conjunction_of_bounds() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.And(s0 >= 2, s1 < s0 * 8))
    filecheck(
        text,
        """
        CHECK-DAG: arith.cmpi sge, %s0
        CHECK-DAG: "llvm.intr.smul.with.overflow"
        CHECK-DAG: arith.cmpi slt, %s1
        CHECK: arith.andi {{.*}} : i1
        """,
    )


def test_division_checks_its_divisor_and_sums_check_overflow_before_the_value_is_used() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.Eq(FloorDiv(s0, s1) + s1, 2))
    filecheck(
        text,
        """
        CHECK: %[[NZ:.*]] = arith.cmpi ne, %s1, %[[C0:.*]] : i64
        CHECK: cf.cond_br %[[NZ]], {{.*}}, ^fail
        CHECK: arith.cmpi eq, %s0, %[[MIN:.*]] : i64
        CHECK: cf.cond_br
        CHECK: %[[Q:.*]] = arith.floordivsi %s0, %s1 : i64
        CHECK: %[[PAIR:.*]] = "llvm.intr.sadd.with.overflow"({{.*}}%[[Q]]{{.*}})
        CHECK: %[[OVERFLOW:.*]] = llvm.extractvalue %[[PAIR]][1]
        CHECK: arith.xori %[[OVERFLOW]]
        CHECK: cf.cond_br {{.*}}, ^fail
        CHECK: arith.cmpi eq
        """,
    )
