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
    fb.check(SymbolicIntLowering(fb, {s0: "%s0", s1: "%s1"}).bool_expr(expr))
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
        CHECK-DAG: arith.muli
        CHECK-DAG: arith.cmpi slt, %s1
        CHECK: arith.andi {{.*}} : i1
        """,
    )
