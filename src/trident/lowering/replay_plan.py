"""The replay plan: a CUDA graph replay that does not run the host program (docs/design.md, "The replay plan").

A recorded graph's nodes take their parameters from the host program's steps (csrc/graphs/replay.cpp): the
Triton launches and the opaque operators, in program order. Most of what a step gets cannot change between
calls that pass the guards: constants, and tensors the program made, which a replay hands out from the
recording at fixed addresses, through views with constant parameters. What can change is few values: ints and
floats of the call (a position) and what the host program computes from them and from the sizes and strides of
its arguments, and the addresses of argument tensors (a token tensor, a cache, a weight the user replaced).

This pass finds, from torch-dialect IR, every step operand that can change and lowers a second function,
`int32 @<name>(ctx, slots, words, result)`, that computes only those: the int and float arithmetic of the host
program and the data addresses of the argument tensors the steps read, one 64-bit word each. With a non-null
`result` it also builds the call's result as the host program would, from the results the recording keeps
(trident_graph_output). The plan (artifact.ReplayPlan) says, per step in program order, which of its runtime
arguments is which word; the runtime (csrc/graphs/replay_plan.cpp) learns the rest from replays of the host program
and proves the plan against them before it uses it.

A view of an argument whose parameters change with the call (table[pos : pos + 1]) is made by the words function
itself, as the host program makes it, and its address is the word. An argument tensor inside a list of tensors (the
index of x[idx], the tensors of a cat, a custom op's Tensor[]) is a word of its own, and the plan names the list
item it is. A program gets no plan, with the reason kept for explain, when a step operand that can change is
anything else: a view at a changing position of a tensor the program made, an int computed on the device, a changing
scalar inside a list or passed where the operator takes a tensor, an argument whose sizes or strides are symbolic,
or a result that is a view of an argument.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from torch_mlir import ir

from .. import exc
from ..artifact import NoReplayPlan, ReplayPlan
from ..capture.inputs import LeafPath
from ..capture.results import OutputTree, StateWrite
from ..graphs.steps import makes_no_step, pool_step_operands
from ..ir.fx_import import LAUNCH_OP_PREFIX
from ..ir.mlir_text import I64, PTR, ModuleBuilder
from . import runtime_abi as abi
from .aliasing import AtenName, _aliased_operand, aliases_an_operand, op_schema
from .leaf_access import ConstantPool
from .lower_host_program import (
    _PREFIX_RULES, _RULES, HostProgramLowering, OpTable, PlaceholderSource, _Lowered, _result_count,
    _tensor_parameters, aten_name, op_kind,
)  # fmt: skip
from .pooled_allocations import pool_kind

_CONSTANTS = ("torch.constant.int", "torch.constant.float", "torch.constant.bool", "torch.constant.none",
              "torch.constant.str", "torch.constant.device")  # fmt: skip
# Ops whose result is a tensor but that are no step: a wrapped-number scalar tensor, made by the host program.
_MADE_ON_THE_HOST = "torch.prim.NumToTensor.Scalar"
_METADATA_READS = ("torch.aten.size.int", "torch.aten.stride.int", "torch.aten.numel", "torch.aten.storage_offset")
# Views the words function may make at parameters that change (x[pos], table[pos : pos + 1], cache[:, : pos + 1]):
# on a root of static sizes and strides each gives strides that do not change either, so with a result of static
# sizes only the view's address does; a result of sizes that change is allowed where only Triton launches read it.
_VIEWS_AT_CHANGING_PARAMETERS = frozenset({
    ("aten::slice", "Tensor"), ("aten::select", "int"), ("aten::narrow", ""),
})  # fmt: skip


class Ineligible(Exception):
    """The program gets no replay plan; the message says why."""


def _defining_op(value: ir.Value) -> ir.Operation | None:
    owner = value.owner
    return None if isinstance(owner, ir.Block) else owner.operation


def _is_constant(value: ir.Value) -> bool:
    op = _defining_op(value)
    if op is None:
        return False
    if op.name in _CONSTANTS:
        return True
    return op.name == "torch.prim.ListConstruct" and all(_is_constant(v) for v in op.operands)


def _is_tensor(value: ir.Value) -> bool:
    text = str(value.type)
    return text.startswith("!torch.vtensor") or text.startswith("!torch.tensor")


def tensor_root(
    value: ir.Value, aten_name: AtenName, lowered: Callable[[ir.Value], bool] = lambda v: False
) -> tuple[str, ir.Value | None]:  # fmt: skip
    """Where a tensor operand's memory and geometry come from:
      ("argument", root)      through views with constant parameters, a block argument (an input or a lifted
                              constant) or a view the words function makes (`lowered`): its address is the root's
                              plus a constant, its geometry fixed when the root's is
      ("intermediate", None)  a tensor a step made (a replay hands out the recording's), or such a view
    Raises Ineligible for anything else."""
    while True:
        op = _defining_op(value)
        if op is None or lowered(value):
            return "argument", value
        if op.name == _MADE_ON_THE_HOST:
            if not _is_constant(op.operands[0]):
                raise Ineligible("a scalar tensor made from a value that changes with the call")
            return "intermediate", None
        if op.name == "torch.prim.ListUnpack":  # one tensor of a list: follow the op that made the list
            unpacked = list(op.results).index(value)
            op = _defining_op(op.operands[0])
            if op is not None and op.name == "torch.prim.ListConstruct":
                value = op.operands[unpacked]
                continue
            if op is None or not _is_tensor_list_view(op, aten_name):
                return "intermediate", None
            value = op.operands[0]
            continue
        if not aliases_an_operand(op, aten_name) or _returns_fresh_tensors(op):
            return "intermediate", None
        aliased = _aliased_operand(op, aten_name) if op.name.startswith(("torch.aten.", "torch.operator")) else None
        if aliased is None:
            raise Ineligible(f"a tensor from {op_kind(op)}, whose result may alias what it reads")
        if _in_place(op) and str(op.results[0].type) == str(op.operands[aliased].type):
            value = op.operands[aliased]  # the operand itself, written: its address and geometry
            continue
        others = [v for i, v in enumerate(op.operands) if i != aliased]
        if not all(_is_constant(v) for v in others):
            raise Ineligible(f"a view by {op_kind(op)} whose parameters change with the call")
        value = op.operands[aliased]


def _returns_fresh_tensors(op: ir.Operation) -> bool:
    """Whether an operator torch-mlir does not model (a torch.operator, which aliasing.py assumes may alias) has a
    schema here whose returns alias nothing."""
    if op.name != "torch.operator":
        return False
    try:
        schema = op_schema(*aten_name(op))
    except exc.LoweringError:
        return False
    return schema is not None and all(r.alias_info is None for r in schema.returns)


def _in_place(op: ir.Operation) -> bool:
    """Whether op returns the operand it writes (x.add_(y), index_copy_, an out= variant)."""
    schema = op_schema(*aten_name(op))
    return schema is not None and len(schema.returns) == 1 and schema.returns[0].alias_info is not None and (
        schema.returns[0].alias_info.is_write
    )  # fmt: skip


def _read_by_launches_alone(value: ir.Value) -> bool:
    """Whether every use of `value`, through views, is an operand of a Triton launch, which takes a tensor's
    address alone (its sizes reach the kernel as ints of their own)."""
    pending = [value]
    while pending:
        for use in pending.pop().uses:
            user = use.owner.operation
            if op_kind(user).startswith(LAUNCH_OP_PREFIX):
                continue
            if not user.name.startswith("torch.aten.") or not _makes_no_step(*aten_name(user)):
                return False
            pending.extend(user.results)
    return True


def _is_tensor_list_view(op: ir.Operation, aten_name: AtenName) -> bool:
    """Whether `op` returns views of its first operand as a list (split, unbind, chunk), with constant
    parameters; raises Ineligible for such views at parameters that change."""
    if not op.name.startswith("torch.aten."):
        return False
    schema = op_schema(*aten_name(op))
    if schema is None or len(schema.returns) != 1 or schema.returns[0].alias_info is None:
        return False
    if not all(_is_constant(v) for v in op.operands[1:]):
        raise Ineligible(f"views by {op_kind(op)} whose parameters change with the call")
    return True


def _makes_no_step(name: str, overload: str) -> bool:
    """Whether the host program runs this operator outside the graph's steps (graphs/steps.py decides for both)."""
    schema = op_schema(name, overload)
    if schema is None:
        raise Ineligible(f"the schema of {name}.{overload or 'default'} is not known here")
    return makes_no_step(schema)


class ReplayPlanLowering(HostProgramLowering):
    """Lowers the plan's function from the host program's IR: its scalar arithmetic and reads as the host
    program lowers them, every step replaced by stores of its operands that can change."""

    PARAMS = [("%ctx", PTR), ("%slots", PTR), ("%words", PTR), ("%result", PTR)]

    def __init__(
        self, module: ModuleBuilder, name: str, main: ir.Operation, placeholders: Sequence[PlaceholderSource],
        outputs: OutputTree, input_paths: Sequence[LeafPath], pool: ConstantPool, ops: OpTable,
        launches: Sequence[object], pool_allocations: bool, static_geometry: Sequence[bool],
        private_views: bool = True, state_writes: Sequence[StateWrite] = (),
        state: Mapping[tuple[int, tuple[int, ...]], tuple[str, ...]] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(module, name, main, placeholders, outputs, input_paths, pool, ops, launches,
                         pool_allocations, private_views, state_writes, state)  # fmt: skip
        self.static_geometry = static_geometry  # per block argument: its sizes and strides are constants
        self.word_of: dict[str, int] = {}  # SSA value -> its word
        self.addresses: dict[str, str] = {}  # SSA of a root's handle -> SSA of its data address
        self.steps: list[tuple[bool, tuple[tuple[int, int, int], ...]]] = []
        self.graph_outputs = 0

    def plan(self) -> ReplayPlan:
        """Lowers the function; raises Ineligible with the reason when the program cannot have a plan."""
        try:
            self.run()
        except exc.LoweringError as e:
            raise Ineligible(str(e)) from e
        return ReplayPlan(self.fb.name, len(self.word_of), self.graph_outputs, tuple(self.steps))

    # -- ops ------------------------------------------------------------------------------------------------
    def _lower(self, op: ir.Operation) -> None:
        kind = op_kind(op)
        if kind.startswith(LAUNCH_OP_PREFIX):
            self._step(op, kernel=True, arguments={i: i for i in range(len(op.operands))})
        elif kind == _MADE_ON_THE_HOST:
            self.values[op.results[0]] = _Lowered("graph")  # no step; tensor_root says when it may be read
        elif kind in _METADATA_READS and self.values[op.operands[0]].kind != "tensor":
            raise Ineligible(f"{kind.removeprefix('torch.')} of a tensor the program made")
        elif kind in _RULES or kind.startswith(tuple(_PREFIX_RULES)):
            super()._lower(op)  # scalar arithmetic, constants, lists, reads of arguments' metadata
        else:
            self._operator(op)

    def _operator(self, op: ir.Operation) -> None:
        name, overload = aten_name(op)
        pooled = pool_kind(op, aten_name) if self.pool_allocations else None
        if pooled is not None:
            self._step(op, kernel=False, arguments=pool_step_operands(pooled, len(op.operands)))
        elif not _makes_no_step(name, overload):
            wrapped = _tensor_parameters(name, overload)
            self._step(op, kernel=False, arguments={i: i for i in range(len(op.operands))}, wrapped=wrapped)
        elif not all(_is_constant(v) for v in op.operands[1:]):
            self._view_at_changing_parameters(op)
            return
        for result in op.results:
            text = str(result.type)
            if text.startswith("!torch.list"):
                items = [_Lowered("graph") for _ in range(_result_count(op, result))]
                self.values[result] = _Lowered("list", items=items, elem=text)
            elif _is_tensor(result) or text.startswith("!torch.optional"):
                self.values[result] = _Lowered("graph")
            else:
                self.values[result] = _Lowered("device-value", elem=f"{name} computed on the device")

    def _view_at_changing_parameters(self, op: ir.Operation) -> None:
        """A view whose parameters change with the call, made by the words function as the host program makes it,
        so that its address is a word."""
        where = f"a view by {op_kind(op)} whose parameters change with the call"
        if aten_name(op) not in _VIEWS_AT_CHANGING_PARAMETERS:
            raise Ineligible(where)
        if "?" in str(op.results[0].type) and not _read_by_launches_alone(op.results[0]):
            raise Ineligible(f"{where}, of sizes that change, read by an operator")
        kind, root = self._tensor_root(op.operands[0], where)
        if kind != "argument":
            raise Ineligible(f"{where}, of a tensor the program made")
        assert root is not None
        self._check_static(root, where)
        self._materialize(op.operands[0])
        self._op_call(op)

    def _materialize(self, value: ir.Value) -> None:
        """Makes `value` (a root, or a view with constant parameters of one) a tensor of the words function. An
        op that writes in place is never run here: its result is the operand, which its step writes."""
        if self._is_lowered_tensor(value):
            return
        op = _defining_op(value)
        aliased = None if op is None or op.name == "torch.prim.ListUnpack" else _aliased_operand(op, aten_name)
        if op is None or aliased is None:
            raise Ineligible("a view at a changing position of a tensor unpacked from a list")
        source = op.operands[aliased]
        self._materialize(source)
        if not _in_place(op):
            self._op_call(op)
            return
        lowered = self.values[source]
        if lowered.owned_slot is not None:  # a view this function made: its handle dies with the view
            raise Ineligible("a view at a changing position of a view written in place")
        self.values[value] = _Lowered("tensor", lowered.ssa, pyobject=lowered.pyobject)

    def _is_lowered_tensor(self, value: ir.Value) -> bool:
        lowered = self.values.get(value)
        return lowered is not None and lowered.kind == "tensor"

    def _check_static(self, root: ir.Value, where: str) -> None:
        if isinstance(root.owner, ir.Block) and not self.static_geometry[ir.BlockArgument(root).arg_number]:
            raise Ineligible(f"{where}: an argument whose sizes or strides are symbolic")

    def _step(
        self, op: ir.Operation, kernel: bool, arguments: dict[int, int], wrapped: frozenset[int] = frozenset()
    ) -> None:  # fmt: skip
        """One step of the recording: stores the operands that can change, and notes which argument of the
        step each is, and which item of it for a tensor inside a list (-1: the argument itself)."""
        what = f"{'Triton launch' if kernel else 'operator'} {op_kind(op)}"
        changing: list[tuple[int, int, int]] = []
        for i, operand in enumerate(op.operands):
            words = self._changing_words(operand, f"operand {i} of {what}", wrapped_scalar=i in wrapped)
            if not words:
                continue
            if i not in arguments:
                raise Ineligible(f"operand {i} of {what} changes with the call but does not reach the step as it is")
            if kernel and any(item >= 0 for item, _ in words):
                raise Ineligible(f"operand {i} of {what}: a list of tensors that changes with the call")
            changing.extend((arguments[i], item, word) for item, word in words)
        self.steps.append((kernel, tuple(changing)))

    def _changing_words(self, operand: ir.Value, where: str, wrapped_scalar: bool = False) -> list[tuple[int, int]]:
        """(item, word) of each part of an operand that can change between calls: the operand itself (item -1), or
        the argument tensors inside a list of tensors, one word per item."""
        value = self.values[operand]
        if value.kind == "list":
            return self._list_item_words(operand, value, where)
        word = self._changing_word(operand, value, where, wrapped_scalar)
        return [] if word is None else [(-1, word)]

    def _list_item_words(self, operand: ir.Value, value: _Lowered, where: str) -> list[tuple[int, int]]:
        """The words of a list's items: the data address of each argument tensor in it (a replay stages or compares
        it as the item it is); its other items must not change."""
        producer = _defining_op(operand)
        built = producer is not None and producer.name == "torch.prim.ListConstruct"
        items = list(producer.operands) if built else []  # type: ignore[union-attr]
        if len(items) != len(value.items):
            raise Ineligible(f"{where}: a list the program did not build itself")
        words = []
        for k, item in enumerate(items):
            if _is_tensor(item):
                word = self._tensor_word(item, f"{where}, item {k}")
                if word is not None:
                    words.append((k, word))
            elif not _is_constant(item) and str(item.type) != "!torch.none":
                raise Ineligible(f"{where}: a list with an item that changes with the call (item {k})")
        return words

    def _changing_word(self, operand: ir.Value, value: _Lowered, where: str, wrapped_scalar: bool) -> int | None:
        """The word of an operand that is no list and can change between calls, None for one that cannot."""
        if value.kind == "device-value":
            raise Ineligible(f"{where}: {value.elem}")
        if value.kind in ("int", "bool", "float"):
            if _is_constant(operand):
                return None
            if wrapped_scalar:
                raise Ineligible(f"{where}: a scalar that changes with the call, where the operator takes a tensor")
            _, bits = self._scalar_slot(value)
            return self._word(value.ssa, bits)
        if value.kind in ("tensor", "graph"):
            return self._tensor_word(operand, where)
        return None  # None, a string, a device: constants of the program

    def _tensor_word(self, operand: ir.Value, where: str) -> int | None:
        """The word of a tensor operand (or list item) whose address can change: its root's data address; None for
        a tensor a step made."""
        kind, root = self._tensor_root(operand, where)
        if kind == "intermediate":
            return None
        assert root is not None
        self._check_static(root, where)
        handle = self.values[root].ssa
        if handle not in self.addresses:
            address = self.fb.call(abi.TENSOR_DATA_ADDRESS, [handle])
            assert address is not None
            self.addresses[handle] = address
        return self._word(self.addresses[handle], self.addresses[handle])

    def _tensor_root(self, operand: ir.Value, where: str) -> tuple[str, ir.Value | None]:
        try:
            return tensor_root(operand, aten_name, self._is_lowered_tensor)
        except Ineligible as e:
            raise Ineligible(f"{where}: {e}") from None

    def _word(self, key: str, bits: str) -> int:
        if key not in self.word_of:
            self.word_of[key] = len(self.word_of)
            self.fb.store(bits, I64, self.fb.gep("%words", self.word_of[key]))
        return self.word_of[key]

    # -- results --------------------------------------------------------------------------------------------
    def _return(self, op: ir.Operation) -> None:
        """With a null `result` (the runtime asks for the words alone) the function ends here; else it builds the
        result as the host program does."""
        for i, operand in enumerate(op.operands):
            if self._is_lowered_tensor(operand) and self.values[operand].pyobject is None:
                raise Ineligible(f"result {i} is a view of an argument")
            if self.values[operand].kind == "graph" and _is_tensor(operand):
                kind, _ = self._tensor_root(operand, f"result {i}")
                if kind != "intermediate":
                    raise Ineligible(f"result {i} is a view of an argument")
        fb = self.fb
        words_only, build = fb.label("words_only"), fb.label("build")
        as_int = fb.fresh()
        fb.emit(f"{as_int} = llvm.ptrtoint %result : !llvm.ptr to i64")
        fb.emit(f"cf.cond_br {fb.cmp('eq', as_int, fb.const(0))}, {words_only}, {build}")
        fb.emit_label(words_only)
        fb.ret(fb.const(abi.OK, abi.RUN_RESULT))
        fb.emit_label(build)
        super()._return(op)

    def _returned_object(self, value: _Lowered) -> str:
        if value.pyobject is None and value.kind == "graph":
            # The k-th tensor the host program wraps is the k-th output the runtime kept from its replays.
            handle = self.fb.call(abi.GRAPH_OUTPUT, [self.fb.const(self.graph_outputs)])
            assert handle is not None
            self.graph_outputs += 1
            value = _Lowered("tensor", handle)
        return super()._returned_object(value)


def lower_replay_plan(
    module: ModuleBuilder, name: str, main: ir.Operation, placeholders: Sequence[PlaceholderSource],
    outputs: OutputTree, input_paths: Sequence[LeafPath], pool: ConstantPool, ops: OpTable,
    launches: Sequence[object], pool_allocations: bool, static_geometry: Sequence[bool],
    private_views: bool = True, state_writes: Sequence[StateWrite] = (),
    state: Mapping[tuple[int, tuple[int, ...]], tuple[str, ...]] | None = None,
) -> ReplayPlan | NoReplayPlan:
    """The plan of the program in @main with its function added to `module`, or why it has none (nothing added
    then but unused declarations)."""
    lowering = ReplayPlanLowering(module, name, main, placeholders, outputs, input_paths, pool, ops, launches,
                                  pool_allocations, static_geometry, private_views, state_writes, state)  # fmt: skip
    try:
        return lowering.plan()
    except Ineligible as e:
        return NoReplayPlan(str(e))
