"""FX graph -> torch dialect, through torch-mlir's FxImporter.

Trident reads the imported function with eager (reference) semantics: it is the list of ATen calls eager
made, in order; in-place ops and views keep their aliasing (lowering calls the same ATen ops). The
`!torch.vtensor` value types are labels for which tensor flows where, not a promise of value semantics.
"""
from __future__ import annotations

import torch.fx
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_dialect
from torch_mlir.extras.fx_importer import FxImporter, GraphNodeImporter

MAIN = "main"


class TridentNodeImporter(GraphNodeImporter):
    """Trident's node importer: the place where Trident-specific nodes (Triton launches) get imported."""


def new_context() -> ir.Context:
    context = ir.Context()
    torch_dialect.register_dialect(context)
    return context


def import_graph(graph: torch.fx.Graph, context: ir.Context) -> ir.Module:
    """Import a make_fx graph (every node carrying meta['val']) as `func.func @main` in the torch dialect."""
    importer = FxImporter(context=context, graph_node_importer_cls=TridentNodeImporter)
    importer.import_stateless_graph(graph, func_name=MAIN)
    return importer.module
