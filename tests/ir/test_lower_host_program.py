from __future__ import annotations

import torch

from trident.ir.fx_import import import_graph, new_context
from trident.ir.mlir_text import ModuleBuilder
from trident.lowering.leaf_access import ConstantPool
from trident.lowering.lower_host_program import HostProgramLowering, OpTable
from trident.lowering.pipeline import _find_main, placeholder_sources

from .filecheck import filecheck
from .helpers import capture


def lowered_program(fn, *args):  # type: ignore[no-untyped-def]
    facts, trace, _ = capture(fn, *args)
    torch_module, _ = import_graph(trace.graph_module.graph, new_context())  # keep alive while lowering
    main = _find_main(torch_module)
    module, ops = ModuleBuilder(), OpTable()
    HostProgramLowering(
        module, "run", main, placeholder_sources(trace, facts), trace.outputs,
        [leaf.path for leaf in facts.leaves], ConstantPool(list(trace.constants)), ops,
    ).run()
    return module.text(), ops.ops


def test_listed_ops_call_typed_entries_and_release_after_last_use() -> None:
    text, ops = lowered_program(lambda x, y: (x + y).relu(), torch.randn(3), torch.randn(3))
    assert ops == []  # no boxed calls, so no operator handles in the context
    filecheck(
        text,
        """
        CHECK: func.func @run(%ctx: !llvm.ptr, %slots: !llvm.ptr, %result: !llvm.ptr) -> i32
        CHECK: %[[X:.*]] = func.call @trident_tensor_handle
        CHECK: func.call @trident_aten_add_Tensor(%[[ARGS:.*]], %[[RETS:.*]]) : (!llvm.ptr, !llvm.ptr) -> i32
        CHECK: %[[SUM:.*]] = llvm.load {{.*}} : !llvm.ptr -> !llvm.ptr
        CHECK: func.call @trident_aten_relu
        CHECK: func.call @trident_tensor_delete(%[[SUM]])
        CHECK: func.call @trident_wrap_tensor
        CHECK: llvm.store {{.*}}, %result
        CHECK: ^fail:
        CHECK: func.call @trident_tensor_delete
        CHECK: %fail_value = arith.constant 1 : i32
        """,
    )


def test_other_ops_go_through_the_boxed_dispatcher() -> None:
    text, ops = lowered_program(lambda x: torch.cumsum(x, 0), torch.randn(3))
    assert ops == [("aten::cumsum", "")]
    filecheck(
        text,
        """
        CHECK: %[[OPSP:.*]] = llvm.getelementptr %ctx[0]
        CHECK-NEXT: %[[OPS:.*]] = llvm.load %[[OPSP]] : !llvm.ptr -> !llvm.ptr
        CHECK-NEXT: %[[P:.*]] = llvm.getelementptr %[[OPS]][0]
        CHECK: %[[OP:.*]] = llvm.load %[[P]] : !llvm.ptr -> !llvm.ptr
        CHECK: func.call @trident_op_call(%[[OP]], {{.*}}) : (!llvm.ptr, !llvm.ptr, i64, !llvm.ptr, i64) -> i32
        """,
    )


def test_tuple_output_and_returned_input() -> None:
    text, _ = lowered_program(lambda x: (x, x * 2), torch.randn(3))
    filecheck(
        text,
        """
        CHECK: func.call @trident_sequence_new
        CHECK: func.call @trident_new_ref
        CHECK: func.call @trident_sequence_set
        CHECK: func.call @trident_wrap_tensor
        CHECK: func.call @trident_sequence_set
        """,
    )


def test_int_list_argument_is_a_stack_array() -> None:
    text, ops = lowered_program(lambda x: x.view(2, 3), torch.randn(6))
    filecheck(
        text,
        """
        CHECK: %[[INTS:ints[0-9]+]] = llvm.alloca {{.*}} x i64
        CHECK: llvm.store {{.*}} : i64, !llvm.ptr
        CHECK: llvm.ptrtoint %[[INTS]]
        CHECK: func.call @trident_aten_view
        """,
    )
