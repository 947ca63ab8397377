"""FX graph -> torch dialect, through torch-mlir's FxImporter.

Trident reads the imported function with eager (reference) semantics: it is the list of ATen calls eager
made, in order; in-place ops and views keep their aliasing (lowering calls the same ATen ops). The
`!torch.vtensor` value types are labels for which tensor flows where, not a promise of value semantics.

Python's scalar builtins on symbolic values that torch-mlir does not map (pow, true division, float
arithmetic, math.floor, torch.sym_float, ...) import as `torch.operator "trident.scalar.<fn>"` with the result's
Python type (!torch.int / !torch.float / !torch.bool); lowering/symbolic_ints.py gives them Python's semantics.
torch.sym_sum of ints imports as the torch.aten.add.int chain that `a + b + ...` imports as.

Dtypes and layouts are Trident's to number: compiled code hands such an argument to ATen as the int the IR holds,
which must be its c10::ScalarType or c10::Layout. torch-mlir's importer numbers complex dtypes and sparse layouts
differently (its complex64 is c10's ComplexDouble: `x.to(torch.complex64)` ran as complex128; its sparse_csc is
c10's Mkldnn) and has no uint16, uint64 or complex128 (flash attention returns a uint64 tensor), so these literals
and element types are imported here, numbered as trident_runtime.h's TRIDENT_DTYPE_* and TRIDENT_LAYOUT_*.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.fx
from torch._ops import HigherOrderOperator
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_dialect
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
from torch_mlir.extras.fx_importer import (
    LITERAL_CONVERTER_MAP, FxImporter, FxImporterHooks, GraphNodeImporter, InputInfo, _emit_operation,
)

from .. import abi
from ..capture.scalar_functions import scalar_function_name, scalar_kind
from ..artifact import Operand
from ..capture.triton_launches import RecordedLaunch
from ..torch_codes import dtype_code

MAIN = "main"
LAUNCH_OP_PREFIX = "trident.triton_launch."
SCALAR_OP_PREFIX = "trident.scalar."  # Python's scalar builtins on symbolic values: trident.scalar.<fn>
SYM_SUM = "sym_sum"  # torch.sym_sum's mark while importing (it imports as aten.add.int, never as trident.scalar)


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
        if name == SYM_SUM:
            self.bind_node_value(node, _int_sum(values, loc))
            return
        result_type = ir.Type.parse(f"!torch.{scalar_kind(node.meta['val'])}", loc.context)
        op = _emit_operation(f"{SCALAR_OP_PREFIX}{name}", result_types=[result_type], operands=values, loc=loc)
        self.bind_node_value(node, op.result)


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
        elif _is_int_sym_sum(node):
            marked.append((node, node.target, node.args))
            node.target, node.args = _SCALAR_OP, (SYM_SUM, *_sym_sum_operands(node))
    try:
        yield
    finally:
        for node, target, args in marked:
            node.target, node.args = target, args


# torch.sym_sum([a, b, ...]) on SymInts: Dynamo emits it for sums of sizes (a DynamicCache's length + the new
# tokens), and torch-mlir's importer has no mapping for it. It is a + b + ... on Python ints, so it imports as the
# chain of torch.aten.add.int that `a + b` imports as, and the host program lowers it as it lowers those (checked
# i64 adds). Only all-int sums: sym_sum of anything else is builtins.sum, which records no sym_sum node.
def _sym_sum_operands(node: torch.fx.Node) -> tuple[object, ...]:
    """The ints summed: capture's make_fx records `sym_sum([a, b, c])` also for a call `sym_sum(a, b, c)`."""
    return tuple(node.args[0])


def _is_int_sym_sum(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not torch.sym_sum or node.kwargs:
        return False
    if len(node.args) != 1 or not isinstance(node.args[0], (list, tuple)):
        return False
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in _sym_sum_operands(node)]
    return bool(vals) and all(scalar_kind(v) == "int" for v in [node.meta.get("val"), *vals])


def _int_sum(values: list[ir.Value], loc: ir.Location) -> ir.Value:
    total = values[0]
    int_type = ir.Type.parse("!torch.int", loc.context)
    for value in values[1:]:
        total = _emit_operation("torch.aten.add.int", result_types=[int_type], operands=[total, value], loc=loc).result
    return total


def _operand_kind(value: object) -> str:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, (torch.SymBool, bool)):
        return "bool"
    if isinstance(value, (torch.SymInt, int)):
        return "int"
    return "float"


# Element types torch-mlir's importer lacks (its table is the fallback for the rest).
_ELEMENT_TYPES = {torch.uint16: "ui16", torch.uint64: "ui64", torch.complex128: "complex<f64>"}


_LAYOUT_CODES = {getattr(torch, name.lower()): code for name, code in abi.family("LAYOUT_").items()}


class _CodeHooks(FxImporterHooks):
    """Imports a dtype or layout literal as its c10 enum value (the header's codes)."""

    def resolve_literal(self, gni: GraphNodeImporter, literal: object, info: InputInfo | None) -> ir.Value | None:
        code = None
        if isinstance(literal, torch.dtype):
            try:
                code = dtype_code(literal)
            except NotImplementedError:  # no code in the header (quantized dtypes): torch-mlir's number stands
                return None
        elif isinstance(literal, torch.layout):
            code = _LAYOUT_CODES.get(literal)
        return None if code is None else LITERAL_CONVERTER_MAP.lookup(int)(code, gni, gni._cc)


def new_context() -> ir.Context:
    context = ir.Context()
    torch_dialect.register_dialect(context)
    return context


def import_graph(graph: torch.fx.Graph, context: ir.Context) -> tuple[ir.Module, list[RecordedLaunch]]:
    """Import a make_fx graph (every node carrying meta['val']) as `func.func @main` in the torch dialect;
    also returns the Triton launches the module's launch ops refer to."""
    launches: list[RecordedLaunch] = []
    node_importer = type("TridentNodeImporterForGraph", (TridentNodeImporter,), {"launches": launches})
    importer = FxImporter(context=context, hooks=_CodeHooks(), graph_node_importer_cls=node_importer)
    for dtype, element_type in _ELEMENT_TYPES.items():  # the importer's cache of element types, seeded
        importer._cc._dtype_to_type.setdefault(dtype, ir.Type.parse(element_type, context))
    with _scalar_ops_marked(graph):
        importer.import_stateless_graph(graph, func_name=MAIN)
    return importer.module, launches
