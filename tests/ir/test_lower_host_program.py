from __future__ import annotations

import pytest
import torch

from trident.capture.trace import Dynamism
from trident.ir.fx_import import import_graph, new_context
from trident.ir.mlir_text import ModuleBuilder
from trident.lowering import runtime_abi as abi
from trident.lowering.leaf_access import ConstantPool
from trident.lowering import lower_host_program
from trident.lowering.lower_host_program import HostProgramLowering, OpTable
from trident.lowering.pipeline import _find_main, placeholder_sources

from .filecheck import filecheck
from .helpers import capture, constant


def lowered_program(fn, *args, dynamism: Dynamism = Dynamism()):  # type: ignore[no-untyped-def]
    facts, trace, _ = capture(fn, *args, dynamism=dynamism)
    torch_module, _ = import_graph(trace.graph_module.graph, new_context())  # keep alive while lowering
    main = _find_main(torch_module)
    module, ops = ModuleBuilder(), OpTable()
    HostProgramLowering(
        module, "run", main, placeholder_sources(trace, facts), trace.outputs,
        [leaf.path for leaf in facts.leaves], ConstantPool(list(trace.constants)), ops,
    ).run()
    return module.text(), ops.ops


def store(array: str, index: int, value: str) -> str:
    """array[index] = value (an i64 FileCheck variable)."""
    tag = f"{array}_{index}"
    return (
        f"CHECK: %[[P_{tag}:.*]] = llvm.getelementptr %[[{array}]][{index}] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        f"CHECK-NEXT: llvm.store %[[{value}]], %[[P_{tag}]] : i64, !llvm.ptr\n"
    )


def tensor_arg(array: str, index: int, handle: str) -> str:
    """Argument `index` of a call is the tensor [[handle]]: its pointer as i64, tagged TAG_TENSOR."""
    return (
        f"CHECK: %[[I_{handle}_{array}:.*]] = llvm.ptrtoint %[[{handle}]] : !llvm.ptr to i64\n"
        + store(array, 2 * index, "TAG_TENSOR")
        + store(array, 2 * index + 1, f"I_{handle}_{array}")
    )


TAGS = constant("TAG_TENSOR", abi.TAG_TENSOR)  # also the int 1


def test_listed_ops_call_typed_entries_and_release_after_last_use() -> None:
    text, ops = lowered_program(lambda x, y: (x + y).relu(), torch.randn(3), torch.randn(3))
    assert ops == []  # no boxed calls, so no operator handles in the context
    filecheck(
        text,
        "CHECK: func.func @run(%ctx: !llvm.ptr, %slots: !llvm.ptr, %result: !llvm.ptr) -> i32\n"
        + TAGS + constant("CONST_INT", abi.TAG_INT | abi.ARG_CONSTANT) + constant("SEVEN", 7)
        + constant("OK", 0, "i32")
        # One stack region holds every call's arrays, sized for the largest: add's 3 (tag, value) pairs and result.
        + "CHECK-DAG: %scratch = llvm.alloca %[[SEVEN]] x i64\n"
        "CHECK: %[[X:.*]] = func.call @trident_tensor_handle\n"
        "CHECK: %[[Y:.*]] = func.call @trident_tensor_handle\n"
        # add.Tensor(x, y, alpha=1)
        "CHECK: %[[ADD_ARGS:p[0-9]+]] = llvm.getelementptr %scratch[0] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        + tensor_arg("ADD_ARGS", 0, "X") + tensor_arg("ADD_ARGS", 1, "Y")
        + store("ADD_ARGS", 4, "CONST_INT") + store("ADD_ARGS", 5, "TAG_TENSOR")  # the int 1, a constant
        + "CHECK-NEXT: %[[RETS:p[0-9]+]] = llvm.getelementptr %scratch[6] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        "CHECK-NEXT: %[[ADD_RC:.*]] = func.call @trident_aten_add_Tensor(%[[ADD_ARGS]], %[[RETS]]) : "
        "(!llvm.ptr, !llvm.ptr) -> i32\n"
        "CHECK-NEXT: %[[ADD_OK:.*]] = arith.cmpi eq, %[[ADD_RC]], %[[OK]] : i32\n"
        "CHECK-NEXT: cf.cond_br %[[ADD_OK]], ^{{.*}}, ^fail\n"
        "CHECK: %[[SUM:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr\n"
        "CHECK-NEXT: llvm.store %[[SUM]], %own_slot0\n"  # owned: a later failure deletes it
        # relu's arguments take add's place: add's arrays died with its call
        "CHECK: %[[RELU_ARGS:p[0-9]+]] = llvm.getelementptr %scratch[0] : (!llvm.ptr) -> !llvm.ptr, i64\n"
        + tensor_arg("RELU_ARGS", 0, "SUM")
        + "CHECK-NEXT: %[[RELU_RETS:p[0-9]+]] = llvm.getelementptr %scratch[2]\n"
        "CHECK-NEXT: func.call @trident_aten_relu(%[[RELU_ARGS]], %[[RELU_RETS]])\n"
        "CHECK: func.call @trident_tensor_delete(%[[SUM]])\n"  # after its last use, before the result is made
        "CHECK: func.call @trident_wrap_tensor\n"
        "CHECK: llvm.store {{.*}}, %result\n"
        "CHECK: ^fail:\n"
        "CHECK: func.call @trident_tensor_delete\n"
        "CHECK: %fail_value = arith.constant 1 : i32\n",
    )


def test_other_ops_go_through_the_boxed_dispatcher() -> None:
    text, ops = lowered_program(lambda x: torch.cumsum(x, 0), torch.randn(3))
    assert ops == [("aten::cumsum", "")]  # operator handle 0 of the context's table
    filecheck(
        text,
        TAGS + constant("CONST_INT", abi.TAG_INT | abi.ARG_CONSTANT) + constant("ZERO", 0) + constant("THREE", 3)
        + "CHECK: %[[X:.*]] = func.call @trident_tensor_handle\n"
        # cumsum(x, dim=0, dtype=None)
        "CHECK: %[[ARGS:p[0-9]+]] = llvm.getelementptr %scratch[0]\n"
        + tensor_arg("ARGS", 0, "X")
        + store("ARGS", 2, "CONST_INT") + store("ARGS", 3, "ZERO")
        + store("ARGS", 4, "ZERO") + store("ARGS", 5, "ZERO")  # TAG_NONE
        + "CHECK-NEXT: %[[RETS:p[0-9]+]] = llvm.getelementptr %scratch[6]\n"
        "CHECK-NEXT: %[[OPSP:.*]] = llvm.getelementptr %ctx[0]\n"
        "CHECK-NEXT: %[[OPS:.*]] = llvm.load %[[OPSP]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK-NEXT: %[[P:.*]] = llvm.getelementptr %[[OPS]][0]\n"
        "CHECK-NEXT: %[[OP:.*]] = llvm.load %[[P]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK-NEXT: func.call @trident_op_call(%[[OP]], %[[ARGS]], %[[THREE]], %[[RETS]], %[[TAG_TENSOR]]) : "
        "(!llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i64) -> i32\n",  # 3 arguments, 1 result
    )
    assert abi.TAG_NONE == 0


def test_tuple_output_and_returned_input() -> None:
    text, _ = lowered_program(lambda x: (x, x * 2), torch.randn(3))
    filecheck(
        text,
        TAGS + constant("TWO", 2) + constant("ZERO", 0)
        + "CHECK: %[[XP:.*]] = llvm.getelementptr %slots[0]\n"
        "CHECK-NEXT: %[[XOBJ:.*]] = llvm.load %[[XP]] : !llvm.ptr -> !llvm.ptr\n"
        "CHECK: func.call @trident_aten_mul_Scalar\n"
        "CHECK: %[[PRODUCT:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr\n"
        "CHECK: %[[TUPLE:.*]] = func.call @trident_sequence_new(%[[TAG_TENSOR]], %[[TWO]])\n"  # a tuple of 2
        "CHECK: %[[SAME:.*]] = func.call @trident_new_ref(%[[XOBJ]])\n"  # the caller's x object itself
        "CHECK: func.call @trident_sequence_set(%[[TUPLE]], %[[ZERO]], %[[SAME]])\n"
        "CHECK: %[[WRAPPED:.*]] = func.call @trident_wrap_tensor(%[[PRODUCT]])\n"
        "CHECK: func.call @trident_sequence_set(%[[TUPLE]], %[[TAG_TENSOR]], %[[WRAPPED]])\n"
        "CHECK: llvm.store %[[TUPLE]], %result\n",
    )


def test_a_constant_scalar_is_marked_constant_and_the_calls_int_is_not() -> None:
    """A CUDA graph recording follows a changing fill value with memset nodes, which every launch pays for: the
    program's own constants carry ARG_CONSTANT in their tag word (graphs/scalars.cpp leaves them in the step's
    signature), the call's symbolic int does not."""

    def f(x: torch.Tensor, n: int) -> torch.Tensor:
        return x.new_full((3,), n) + x.new_full((3,), 7)

    text, _ = lowered_program(f, torch.randn(3), 5, dynamism=Dynamism(ints=frozenset({(1, ())})))
    filecheck(
        text,
        TAGS + constant("TAG_INT", abi.TAG_INT) + constant("CONST_INT", abi.TAG_INT | abi.ARG_CONSTANT)
        + constant("SEVEN", 7)
        # new_full(x, size, fill_value, dtype, layout, device, pin_memory): the fill value is argument 2
        + "CHECK: func.call @trident_read_int\n"
        "CHECK: %[[ARGS_N:p[0-9]+]] = llvm.getelementptr %scratch[0]\n"
        + store("ARGS_N", 4, "TAG_INT")
        + "CHECK: func.call @trident_op_call(%{{.*}}, %[[ARGS_N]],\n"
        "CHECK: %[[ARGS_7:p[0-9]+]] = llvm.getelementptr %scratch[0]\n"
        + store("ARGS_7", 4, "CONST_INT") + store("ARGS_7", 5, "SEVEN")
        + "CHECK: func.call @trident_op_call(%{{.*}}, %[[ARGS_7]],\n",
    )


def test_int_list_argument_is_a_stack_array() -> None:
    text, _ = lowered_program(lambda x: x.view(2, 3), torch.randn(6))
    int_list_of_2 = abi.TAG_INT_LIST | (2 << 8)
    filecheck(
        text,
        TAGS + constant("TWO", 2) + constant("THREE", 3) + constant("LIST_TAG", int_list_of_2)
        + "CHECK: %[[X:.*]] = func.call @trident_tensor_handle\n"
        "CHECK: %[[ARGS:p[0-9]+]] = llvm.getelementptr %scratch[0]\n"
        + tensor_arg("ARGS", 0, "X")
        # the list's items, in the region after view's 2 (tag, value) pairs
        + "CHECK: %[[INTS:p[0-9]+]] = llvm.getelementptr %scratch[4]\n"
        + store("INTS", 0, "TWO") + store("INTS", 1, "THREE")  # [2, 3]
        + "CHECK-NEXT: %[[LIST:.*]] = llvm.ptrtoint %[[INTS]] : !llvm.ptr to i64\n"
        + store("ARGS", 2, "LIST_TAG") + store("ARGS", 3, "LIST")
        + "CHECK-NEXT: %[[RETS:p[0-9]+]] = llvm.getelementptr %scratch[6]\n"
        "CHECK-NEXT: func.call @trident_aten_view(%[[ARGS]], %[[RETS]])\n",
    )


def test_the_stack_frame_does_not_grow_with_the_number_of_calls() -> None:
    """Every call's argument and result arrays share one region, and a released handle's slot is used again: a
    program of 120 operator calls allocates the stack of one of 6 (a 28-layer model's host program once took
    138 KiB, which a thread with a small stack would overflow)."""
    import re

    def chain(n: int):  # type: ignore[no-untyped-def]
        def f(x: torch.Tensor) -> torch.Tensor:
            for _ in range(n):
                x = (x * 2 + 1).relu()
            return x

        return f

    def stack(text: str) -> list[tuple[str, int]]:
        sizes = {m[0]: int(m[1]) for m in re.findall(r"(%c\d+) = arith.constant (-?\d+) : i64", text)}
        allocas = re.findall(r"%([a-z]+)\d* = llvm.alloca (%c\d+) x", text)
        return sorted((name, sizes[size]) for name, size in allocas)

    short, _ = lowered_program(chain(2), torch.randn(3))
    long, _ = lowered_program(chain(40), torch.randn(3))
    assert long.count("func.call @trident_aten_relu") == 40
    assert stack(long) == stack(short) and ("scratch", 7) in stack(long), stack(long)


def test_an_operator_torch_mlir_does_not_model_lowers_by_its_rule() -> None:
    """Python's % on symbolic ints imports as torch.operator "torch.aten.fmod.int" (ATen has no such op): the
    rule registered for that kind computes it natively, with Python's sign rule (floordiv, then subtract)."""
    dynamic_n = Dynamism(ints=frozenset({(1, ())}))
    text, ops = lowered_program(lambda x, n: x * (n % 3), torch.randn(4), 7, dynamism=dynamic_n)
    assert ops == []  # nothing through the boxed dispatcher
    filecheck(
        text,
        constant("THREE", 3)
        + "CHECK: %[[N:.*]] = llvm.load %[[INT:p[0-9]+]] : !llvm.ptr -> i64\n"
        "CHECK: %[[Q:.*]] = arith.floordivsi %[[N]], %[[THREE]] : i64\n"
        "CHECK-NEXT: %[[QD:.*]] = arith.muli %[[Q]], %[[THREE]] : i64\n"
        "CHECK-NEXT: %[[MOD:.*]] = arith.subi %[[N]], %[[QD]] : i64\n"
        "CHECK: func.call @trident_aten_mul_Scalar\n",
    )


def test_each_op_kind_has_one_rule() -> None:
    rules = lower_host_program._RULES
    for table in (lower_host_program._INT_CHECKED, lower_host_program._INT_COMPARE, lower_host_program._FLOAT_BINARY):
        assert all(kind in rules for kind in table)
    assert rules["torch.aten.fmod.int"] is HostProgramLowering._int_checked
    assert lower_host_program._PREFIX_RULES["torch.constant."] is HostProgramLowering._constant
    with pytest.raises(RuntimeError, match="two lowering rules for torch.aten.numel: _numel and"):
        lower_host_program.lowers("torch.aten.numel")(lambda self, op: None)
    assert rules["torch.aten.numel"] is HostProgramLowering._numel  # the refused rule left no trace
