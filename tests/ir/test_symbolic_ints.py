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


def test_float_valued_relations_compare_as_floats_and_round_with_range_checks() -> None:
    from torch.utils._sympy.functions import FloorToInt, IntTrueDiv, ToFloat

    s0, _ = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.And(FloorToInt(IntTrueDiv(s0, 2)) >= 2, ToFloat(s0) >= 0.5))
    filecheck(
        text,
        """
        CHECK: %[[F:.*]] = arith.sitofp %s0 : i64 to f64
        CHECK: arith.cmpf oge, %[[F]]
        CHECK: %[[Q:.*]] = arith.divf %{{.*}}, %[[TWO:.*]] : f64
        CHECK: %[[FLOOR:.*]] = llvm.intr.floor(%[[Q]]) : (f64) -> f64
        CHECK: arith.cmpf oge, %[[FLOOR]]
        CHECK: arith.cmpf olt, %[[FLOOR]]
        CHECK: cf.cond_br {{.*}}, ^fail
        CHECK: %[[I:.*]] = arith.fptosi %[[FLOOR]] : f64 to i64
        CHECK: arith.cmpi sge, %[[I]]
        """,
    )


def test_int_power_with_a_symbolic_exponent_loops_over_its_bits_with_checked_products() -> None:
    from trident.lowering.symbolic_ints import lower_scalar_op

    module = ModuleBuilder()
    fb = FunctionBuilder(module, "f", [("%s0", "i64"), ("%s1", "i64")], I32, fail_value=0)
    kind, value = lower_scalar_op(fb, "pow", [("int", "%s0"), ("int", "%s1")], lambda ok, kind, message: fb.check(ok))
    assert kind == "int"
    fb.ret(fb.const(1, I32))
    fb.finish()
    filecheck(
        module.text(),
        """
        CHECK: cf.br ^[[HEAD:pow_head[0-9]+]]
        CHECK: ^[[HEAD]]:
        CHECK: arith.cmpi sgt
        CHECK: cf.cond_br {{.*}}, ^[[BODY:pow_body[0-9]+]], ^[[DONE:pow_done[0-9]+]]
        CHECK: ^[[BODY]]:
        CHECK: "llvm.intr.smul.with.overflow"
        CHECK: arith.shrsi
        CHECK: "llvm.intr.smul.with.overflow"
        CHECK: cf.br ^[[HEAD]]
        CHECK: ^[[DONE]]:
        """,
    )
