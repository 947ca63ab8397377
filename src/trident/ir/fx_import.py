"""FX graph -> torch dialect, through torch-mlir's FxImporter.

Trident reads the imported function with eager (reference) semantics: it is the list of ATen calls eager
made, in order; in-place ops and views keep their aliasing (lowering calls the same ATen ops). The
`!torch.vtensor` value types are labels for which tensor flows where, not a promise of value semantics.
"""
from __future__ import annotations

import torch
import torch.fx
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_dialect
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
from torch_mlir.extras.fx_importer import FxImporter, GraphNodeImporter, _emit_operation

from ..capture.triton_launches import Operand, RecordedLaunch

MAIN = "main"
LAUNCH_OP_PREFIX = "trident.triton_launch."


class TridentNodeImporter(GraphNodeImporter):
    """Trident's node importer: adds the Triton launch higher-order op.

    A launch becomes `torch.operator "trident.triton_launch.<i>"(operands)`: the operands are the launch's
    tensors and symbolic ints (kernel arguments and grid); everything fixed at capture (the kernel, literal
    arguments, constexprs) stays in launches[i], a RecordedLaunch."""

    launches: list[RecordedLaunch]  # set per import by import_graph

    def _import_hop_triton_kernel_wrapper_mutation(self, loc: ir.Location, node: torch.fx.Node, hop: object) -> None:
        operands: list[torch.fx.Node] = []

        def operand(value: object) -> object:
            if isinstance(value, torch.fx.Node):
                operands.append(value)
                return Operand(len(operands) - 1)
            return value

        kwargs = dict(node.kwargs)
        kernel = kernel_side_table.get_kernel(kwargs["kernel_idx"])
        grid = [tuple(operand(d) for d in dims) for dims in kwargs["grid"]]
        launch_kwargs = {name: operand(v) for name, v in kwargs["kwargs"].items()}
        vals = [n.meta["val"] for n in operands]
        launch = RecordedLaunch(
            kernel_name=getattr(getattr(kernel, "fn", kernel), "__name__", str(kernel)),
            kernel_idx=kwargs["kernel_idx"],
            constant_args_idx=kwargs["constant_args_idx"],
            grid=grid,
            tma_descriptor_metadata=dict(kwargs["tma_descriptor_metadata"]),
            kwargs=launch_kwargs,
            operand_kinds=[_operand_kind(v) for v in vals],
            device_type="cuda" if any(isinstance(v, torch.Tensor) and v.is_cuda for v in vals) else "cpu",
        )
        values = [self._import_argument(loc, n) for n in operands]
        self.launches.append(launch)
        _emit_operation(f"{LAUNCH_OP_PREFIX}{len(self.launches) - 1}", result_types=[], operands=values, loc=loc)


def _operand_kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (torch.SymBool, bool)):
        return "bool"
    if isinstance(value, (torch.SymInt, int)):
        return "int"
    return "float"


def new_context() -> ir.Context:
    context = ir.Context()
    torch_dialect.register_dialect(context)
    return context


def import_graph(graph: torch.fx.Graph, context: ir.Context) -> tuple[ir.Module, list[RecordedLaunch]]:
    """Import a make_fx graph (every node carrying meta['val']) as `func.func @main` in the torch dialect;
    also returns the Triton launches the module's launch ops refer to."""
    launches: list[RecordedLaunch] = []
    node_importer = type("TridentNodeImporterForGraph", (TridentNodeImporter,), {"launches": launches})
    importer = FxImporter(context=context, graph_node_importer_cls=node_importer)
    importer.import_stateless_graph(graph, func_name=MAIN)
    return importer.module, launches
