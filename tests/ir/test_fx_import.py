from __future__ import annotations

import torch

from trident.capture.trace import Dynamism
from trident.ir.fx_import import import_graph, new_context

from .filecheck import filecheck
from .helpers import capture


def test_import_symbolic_sizes_and_int_arithmetic() -> None:
    def fn(x, n):  # type: ignore[no-untyped-def]
        return x[: x.shape[0] - 1] * n

    dyn = Dynamism(sizes=frozenset({(0, (), 0)}), ints=frozenset({(1, ())}))
    _, trace, _ = capture(fn, torch.randn(5, 3), 4, dynamism=dyn)
    module, _ = import_graph(trace.graph_module.graph, new_context())
    filecheck(
        str(module),
        """
        CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[?,3],f32>, %[[N:.*]]: !torch.int) -> !torch.vtensor<[?,3],f32>
        CHECK-NEXT: %[[DIM:.*]] = torch.constant.int 0
        CHECK-NEXT: %[[SIZE:.*]] = torch.aten.size.int %[[X]], %[[DIM]] : !torch.vtensor<[?,3],f32>, !torch.int -> !torch.int
        CHECK-NEXT: %[[ONE:.*]] = torch.constant.int 1
        CHECK-NEXT: %[[END:.*]] = torch.aten.sub.int %[[SIZE]], %[[ONE]] : !torch.int, !torch.int -> !torch.int
        CHECK-NEXT: %[[SLICE_DIM:.*]] = torch.constant.int 0
        CHECK-NEXT: %[[START:.*]] = torch.constant.int 0
        CHECK-NEXT: %[[STEP:.*]] = torch.constant.int 1
        CHECK-NEXT: %[[SLICE:.*]] = torch.aten.slice.Tensor %[[X]], %[[SLICE_DIM]], %[[START]], %[[END]], %[[STEP]] : {{.*}} -> !torch.vtensor<[?,3],f32>
        CHECK-NEXT: %[[OUT:.*]] = torch.aten.mul.Scalar %[[SLICE]], %[[N]] : !torch.vtensor<[?,3],f32>, !torch.int -> !torch.vtensor<[?,3],f32>
        CHECK-NEXT: return %[[OUT]]
        """,
    )


def test_import_scalar_builtins_on_symbolic_ints() -> None:
    """Builtins torch-mlir does not map (pow, true division) import as trident.scalar.<fn> with the result's
    Python type; all-int arithmetic keeps torch-mlir's aten.<op>.int, and torch.sym_float is aten.Float.Scalar
    (capture rewrites it). The trace is left as it was."""

    def fn(x, n):  # type: ignore[no-untyped-def]
        return x * (n**2 + 1) * (n / 3) * torch.sym_float(n)

    _, trace, _ = capture(fn, torch.randn(5), 4, dynamism=Dynamism(ints=frozenset({(1, ())})))
    targets = [node.target for node in trace.graph_module.graph.nodes]
    module, _ = import_graph(trace.graph_module.graph, new_context())
    assert [node.target for node in trace.graph_module.graph.nodes] == targets
    filecheck(
        str(module),
        """
        CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[5],f32>, %[[N:.*]]: !torch.int)
        CHECK-NEXT: %[[TWO:.*]] = torch.constant.int 2
        CHECK-NEXT: %[[SQUARE:.*]] = torch.operator "trident.scalar.pow"(%[[N]], %[[TWO]]) : (!torch.int, !torch.int) -> !torch.int
        CHECK-NEXT: %[[ONE:.*]] = torch.constant.int 1
        CHECK-NEXT: %[[PLUS1:.*]] = torch.aten.add.int %[[SQUARE]], %[[ONE]] : !torch.int, !torch.int -> !torch.int
        CHECK-NEXT: %[[A:.*]] = torch.aten.mul.Scalar %[[X]], %[[PLUS1]]
        CHECK-NEXT: %[[THREE:.*]] = torch.constant.int 3
        CHECK-NEXT: %[[THIRD:.*]] = torch.operator "trident.scalar.truediv"(%[[N]], %[[THREE]]) : (!torch.int, !torch.int) -> !torch.float
        CHECK-NEXT: %[[B:.*]] = torch.aten.mul.Scalar %[[A]], %[[THIRD]]
        CHECK-NEXT: %[[NF:.*]] = torch.aten.Float.Scalar %[[N]] : !torch.int -> !torch.float
        CHECK-NEXT: torch.aten.mul.Scalar %[[B]], %[[NF]]
        """,
    )
