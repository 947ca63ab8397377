from __future__ import annotations

import re

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


def constant(name: str, value: object, type_: str = "i64") -> str:
    """Binds [[name]] to the SSA name of the (hoisted) constant `value`."""
    return f"CHECK-DAG: %[[{name}:c[0-9]+]] = arith.constant {value} : {type_}\n"


INT64_MIN = -(2**63)


def test_relation_with_floordiv_and_python_mod() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.Eq(FloorDiv(s0, 4) + PythonMod(s1, 3), 2))
    filecheck(
        text,
        constant("C4", 4) + constant("C3", 3) + constant("C2", 2)
        + """
        CHECK: %[[Q:.*]] = arith.floordivsi %s0, %[[C4]] : i64
        CHECK: %[[Q2:.*]] = arith.floordivsi %s1, %[[C3]] : i64
        CHECK-NEXT: %[[M:.*]] = arith.muli %[[Q2]], %[[C3]] : i64
        CHECK-NEXT: %[[R:.*]] = arith.subi %s1, %[[M]] : i64
        CHECK-NEXT: %[[PAIR:.*]] = "llvm.intr.sadd.with.overflow"(%[[Q]], %[[R]]) : (i64, i64)
        CHECK-NEXT: %[[SUM:.*]] = llvm.extractvalue %[[PAIR]][0]
        CHECK: %[[EQ:.*]] = arith.cmpi eq, %[[SUM]], %[[C2]] : i64
        CHECK-NEXT: cf.cond_br %[[EQ]], ^{{.*}}, ^fail
        """,
    )


def test_conjunction_of_bounds() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.And(s0 >= 2, s1 < s0 * 8))
    filecheck(
        text,
        constant("C2", 2) + constant("C8", 8)
        + """
        CHECK: %[[GE:.*]] = arith.cmpi sge, %s0, %[[C2]] : i64
        CHECK-NEXT: %[[PAIR:.*]] = "llvm.intr.smul.with.overflow"(%[[C8]], %s0) : (i64, i64) -> !llvm.struct<(i64, i1)>
        CHECK-NEXT: %[[PRODUCT:.*]] = llvm.extractvalue %[[PAIR]][0]
        CHECK: %[[LT:.*]] = arith.cmpi slt, %s1, %[[PRODUCT]] : i64
        CHECK-NEXT: %[[BOTH:.*]] = arith.andi %[[GE]], %[[LT]] : i1
        CHECK-NEXT: cf.cond_br %[[BOTH]], ^{{.*}}, ^fail
        """,
    )


def test_division_checks_its_divisor_and_sums_check_overflow_before_the_value_is_used() -> None:
    s0, s1 = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.Eq(FloorDiv(s0, s1) + s1, 2))
    filecheck(
        text,
        constant("C0", 0) + constant("MIN", INT64_MIN) + constant("M1", -1) + constant("C2", 2)
        + """
        CHECK: %[[NZ:.*]] = arith.cmpi ne, %s1, %[[C0]] : i64
        CHECK-NEXT: cf.cond_br %[[NZ]], {{.*}}, ^fail
        CHECK: %[[IS_MIN:.*]] = arith.cmpi eq, %s0, %[[MIN]] : i64
        CHECK-NEXT: %[[IS_M1:.*]] = arith.cmpi eq, %s1, %[[M1]] : i64
        CHECK-NEXT: %[[BOTH:.*]] = arith.andi %[[IS_MIN]], %[[IS_M1]] : i1
        CHECK-NEXT: %[[NOT_BOTH:.*]] = arith.xori %[[BOTH]], %{{.*}} : i1
        CHECK-NEXT: cf.cond_br %[[NOT_BOTH]], {{.*}}, ^fail
        CHECK: %[[Q:.*]] = arith.floordivsi %s0, %s1 : i64
        CHECK-NEXT: %[[PAIR:.*]] = "llvm.intr.sadd.with.overflow"(%s1, %[[Q]])
        CHECK-NEXT: %[[SUM:.*]] = llvm.extractvalue %[[PAIR]][0]
        CHECK-NEXT: %[[OVERFLOW:.*]] = llvm.extractvalue %[[PAIR]][1]
        CHECK-NEXT: %[[NO_OVERFLOW:.*]] = arith.xori %[[OVERFLOW]]
        CHECK-NEXT: cf.cond_br %[[NO_OVERFLOW]], {{.*}}, ^fail
        CHECK: %[[EQ:.*]] = arith.cmpi eq, %[[SUM]], %[[C2]] : i64
        CHECK-NEXT: cf.cond_br %[[EQ]], ^{{.*}}, ^fail
        """,
    )


def test_float_valued_relations_compare_as_floats_and_round_with_range_checks() -> None:
    from torch.utils._sympy.functions import FloorToInt, IntTrueDiv, ToFloat

    s0, _ = sympy.symbols("s0 s1", integer=True)
    text = lowered(sympy.And(FloorToInt(IntTrueDiv(s0, 2)) >= 2, ToFloat(s0) >= 0.5))
    filecheck(
        text,
        constant("HALF", "0x3FE0000000000000", "f64") + constant("TWO_F", "0x4000000000000000", "f64")
        + constant("C2", 2) + constant("EXACT", 2**53) + constant("M_EXACT", -(2**53))
        + constant("LOW", "0xC3E0000000000000", "f64") + constant("HIGH", "0x43E0000000000000", "f64")  # -+2**63
        + """
        CHECK: %[[F:.*]] = arith.sitofp %s0 : i64 to f64
        CHECK-NEXT: %[[HALF_OK:.*]] = arith.cmpf oge, %[[F]], %[[HALF]] : f64
        # s0 / 2 in f64 is Python's int / int only while s0 converts exactly: |s0| <= 2**53
        CHECK-NEXT: %[[LE:.*]] = arith.cmpi sle, %s0, %[[EXACT]] : i64
        CHECK-NEXT: %[[GE:.*]] = arith.cmpi sge, %s0, %[[M_EXACT]] : i64
        CHECK: %[[F2:.*]] = arith.sitofp %s0 : i64 to f64
        CHECK: %[[Q:.*]] = arith.divf %[[F2]], %[[TWO_F]] : f64
        CHECK-NEXT: %[[FLOOR:.*]] = llvm.intr.floor(%[[Q]]) : (f64) -> f64
        CHECK-NEXT: arith.cmpf oge, %[[FLOOR]], %[[LOW]] : f64
        CHECK-NEXT: arith.cmpf olt, %[[FLOOR]], %[[HIGH]] : f64
        CHECK: cf.cond_br {{.*}}, ^fail
        CHECK: %[[I:.*]] = arith.fptosi %[[FLOOR]] : f64 to i64
        CHECK-NEXT: %[[FLOOR_OK:.*]] = arith.cmpi sge, %[[I]], %[[C2]] : i64
        CHECK-NEXT: %[[BOTH:.*]] = arith.andi %[[HALF_OK]], %[[FLOOR_OK]] : i1
        CHECK-NEXT: cf.cond_br %[[BOTH]], ^{{.*}}, ^fail
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
        constant("C1", 1) + constant("C0", 0)
        + """
        CHECK-DAG: %[[RESULT:pow[0-9]+]] = llvm.alloca %[[C1]] x i64
        CHECK-DAG: %[[SQUARE:sq[0-9]+]] = llvm.alloca %[[C1]] x i64
        CHECK-DAG: %[[E:e[0-9]+]] = llvm.alloca %[[C1]] x i64
        CHECK: llvm.store %[[C1]], %[[RESULT]]
        CHECK-NEXT: llvm.store %s0, %[[SQUARE]]
        CHECK-NEXT: llvm.store %s1, %[[E]]
        CHECK-NEXT: cf.br ^[[HEAD:pow_head[0-9]+]]
        CHECK: ^[[HEAD]]:
        CHECK-NEXT: %[[E0:.*]] = llvm.load %[[E]]
        CHECK-NEXT: %[[MORE:.*]] = arith.cmpi sgt, %[[E0]], %[[C0]] : i64
        CHECK-NEXT: cf.cond_br %[[MORE]], ^[[BODY:pow_body[0-9]+]], ^[[DONE:pow_done[0-9]+]]
        CHECK: ^[[BODY]]:
        CHECK-NEXT: %[[EB:.*]] = llvm.load %[[E]]
        CHECK-NEXT: %[[SQ:.*]] = llvm.load %[[SQUARE]]
        CHECK-NEXT: %[[ACC:.*]] = llvm.load %[[RESULT]]
        CHECK-NEXT: %[[BIT:.*]] = arith.andi %[[EB]], %[[C1]] : i64
        CHECK-NEXT: %[[ODD:.*]] = arith.cmpi ne, %[[BIT]], %[[C0]] : i64
        CHECK-NEXT: %[[PRODUCT:.*]] = "llvm.intr.smul.with.overflow"(%[[ACC]], %[[SQ]])
        CHECK: arith.select %[[ODD]], {{.*}}, %[[ACC]] : i64
        CHECK: %[[HALVED:.*]] = arith.shrsi %[[EB]], %[[C1]] : i64
        CHECK-NEXT: llvm.store %[[HALVED]], %[[E]]
        CHECK-NEXT: "llvm.intr.smul.with.overflow"(%[[SQ]], %[[SQ]])
        CHECK: cf.br ^[[HEAD]]
        CHECK: ^[[DONE]]:
        CHECK-NEXT: %[[POW:.*]] = llvm.load %[[RESULT]]
        """,
    )
    assert re.search(rf"{value} = llvm.load %pow[0-9]+ ", module.text())  # the value returned: the result slot
