"""FX graph -> torch dialect, through torch-mlir's FxImporter.

Trident reads the imported function with eager (reference) semantics: it is the list of ATen calls eager
made, in order; in-place ops and views keep their aliasing (lowering calls the same ATen ops). The
`!torch.vtensor` value types are labels for which tensor flows where, not a promise of value semantics.

Python's scalar builtins on symbolic values that torch-mlir does not map (pow, true division, float
arithmetic, math.floor, torch.sym_float, ...) import as `torch.operator "trident.scalar.<fn>"` with the result's
Python type (!torch.int / !torch.float / !torch.bool); lowering/symbolic_ints.py gives them Python's semantics.
"""
from __future__ import annotations

import builtins
import contextlib
import math
import operator
from collections.abc import Iterator

import torch
import torch.fx
from torch._ops import HigherOrderOperator
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_dialect
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
from torch_mlir.extras.fx_importer import FxImporter, GraphNodeImporter, _emit_operation

from ..capture.triton_launches import Operand, RecordedLaunch

MAIN = "main"
LAUNCH_OP_PREFIX = "trident.triton_launch."
SCALAR_OP_PREFIX = "trident.scalar."  # Python's scalar builtins on symbolic values: trident.scalar.<fn>


class _ScalarOp(HigherOrderOperator):
    """Marks, for the duration of one import, a node computing a symbolic scalar with a Python builtin or a
    torch.sym_* function that torch-mlir's importer does not map (it asserts on `pow`, rejects plain Python
    functions such as torch.sym_float, and maps float arithmetic to ATen ops no dispatcher registers). Never
    called: the node importer's handler below emits `torch.operator "trident.scalar.<fn>"` instead."""

    def __init__(self) -> None:
        super().__init__("trident_scalar")

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError("trident_scalar marks FX nodes during import; it is not callable")


_SCALAR_OP = _ScalarOp()
# Int ops torch-mlir imports as aten.<op>.int, which the host program lowers with checked i64 arithmetic.
_TORCH_MLIR_INT_OPS = frozenset({"add", "sub", "mul", "floordiv", "mod", "neg", "eq", "ne", "lt", "le", "gt", "ge"})
_SYM_FUNCTIONS = frozenset(
    f for f in (torch.sym_float, torch.sym_max, torch.sym_min, torch.sym_not, getattr(torch, "sym_ite", None),
                *(getattr(torch, f"_sym_{n}", None) for n in ("sqrt", "cos", "sin", "log2", "exp", "log")))
    if f is not None
)  # fmt: skip
_BUILTIN_MODULES = (operator, math, builtins)


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

    def _import_hop_trident_scalar(self, loc: ir.Location, node: torch.fx.Node, hop: object) -> None:
        name, *args = node.args
        values = [self._import_argument(loc, a) for a in args]
        result_type = ir.Type.parse(f"!torch.{_scalar_kind(node.meta['val'])}", loc.context)
        op = _emit_operation(f"{SCALAR_OP_PREFIX}{name}", result_types=[result_type], operands=values, loc=loc)
        self.bind_node_value(node, op.result)


def _scalar_kind(value: object) -> str:
    if isinstance(value, (torch.SymBool, bool)):
        return "bool"
    if isinstance(value, (torch.SymInt, int)):
        return "int"
    return "float"


def scalar_function_name(node: torch.fx.Node) -> str | None:
    """The name of the builtin / torch.sym_* function a node applies to symbolic scalars, if Trident imports
    it itself (not the all-int arithmetic torch-mlir maps to aten.<op>.int)."""
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    if node.op != "call_function" or not isinstance(node.meta.get("val"), symbolic):
        return None
    target = node.target
    name = getattr(target, "__name__", "")
    if target in _SYM_FUNCTIONS:
        return name
    if not any(getattr(module, name, None) is target for module in _BUILTIN_MODULES):
        return None
    kinds = {_scalar_kind(a.meta.get("val") if isinstance(a, torch.fx.Node) else a) for a in node.args}
    if name in _TORCH_MLIR_INT_OPS and kinds == {"int"} and not isinstance(node.meta["val"], torch.SymFloat):
        return None
    return name


@contextlib.contextmanager
def _scalar_ops_marked(graph: torch.fx.Graph) -> Iterator[None]:
    """Point the scalar-builtin nodes at _SCALAR_OP (their function's name as the first argument) while the
    graph is imported, and restore them after: the trace's graph stays as captured."""
    marked = []
    for node in graph.nodes:
        name = scalar_function_name(node)
        if name is not None:
            marked.append((node, node.target, node.args))
            node.target, node.args = _SCALAR_OP, (name, *node.args)
    try:
        yield
    finally:
        for node, target, args in marked:
            node.target, node.args = target, args


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
    with _scalar_ops_marked(graph):
        importer.import_stateless_graph(graph, func_name=MAIN)
    return importer.module, launches
