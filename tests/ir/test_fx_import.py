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
        CHECK: func.func @main(%[[X:.*]]: !torch.vtensor<[?,3],f32>, %[[N:.*]]: !torch.int)
        CHECK: %[[SIZE:.*]] = torch.aten.size.int %[[X]]
        CHECK: %[[END:.*]] = torch.aten.sub.int %[[SIZE]]
        CHECK: %[[SLICE:.*]] = torch.aten.slice.Tensor %[[X]], {{.*}}, {{.*}}, %[[END]]
        CHECK: torch.aten.mul.Scalar %[[SLICE]], %[[N]]
        """,
    )
