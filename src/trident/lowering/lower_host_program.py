"""Pass: the torch-dialect `@main` -> `func.func @<name>(%ctx, %slots, %result) -> i32`, the host program.

Each torch op becomes native code, in program order, by the rule registered for its kind (@lowers below;
supporting a new kind of op is adding its rule):
  torch.constant.* / prim.ListConstruct   -> SSA constants and stack arrays (no runtime work)
  aten.{add,sub,mul,floordiv,...}.int     -> arith on i64 (symbolic sizes and ints)
  aten.size.int / stride.int              -> runtime reads of the tensor's metadata
  prim.NumToTensor.Scalar                 -> a wrapped-number scalar tensor, as eager's argument parser makes
  trident.triton_launch.<i>               -> trident_triton_launch (CUDA) / trident_python_call (CPU interpreter)
  trident.scalar.<fn>                     -> Python's scalar builtins on ints/floats/bools (symbolic_ints.py)
  aten.empty / empty_like / empty_strided -> trident_pool_empty* (a kept buffer when safe; pooled_allocations.py)
  every other ATen op                     -> trident_op_call through the dispatcher (boxed); trident_view_call
                                             for one that makes no graph step (graphs/steps.py)
  func.return                             -> Python results built natively (tuples, lists, scalars)

Ownership: tensors produced by ops are owned handles kept in a stack table; each is released right after
its last use, and the failure block releases whatever is still held, so an error leaks nothing.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence

import torch
from torch_mlir import ir

from .. import exc
from ..artifact import BufferPoolConstant, LaunchSiteConstant
from ..capture.inputs import LeafPath
from ..capture.results import OutputTree, StateWrite
from ..graphs.steps import makes_no_step
from ..ir.fx_import import LAUNCH_OP_PREFIX, SCALAR_OP_PREFIX
from ..ir.mlir_text import F64, I32, I64, PTR, Extern, FunctionBuilder, ModuleBuilder
from . import runtime_abi as abi
from .leaf_access import ConstantPool, LeafAccess
from .aliasing import PRIVATE_VIEW, is_private_view, op_schema
from .pooled_allocations import POOL_KEEP, emit_pooled, kept_allocations, pool_kind
from .symbolic_ints import checked_int_op, lower_scalar_op
from ..torch_codes import device_type_code
from ..typed_ops import is_factory, typed_symbol


@dataclasses.dataclass(frozen=True)
class PlaceholderSource:
    """Where block argument i of @main comes from: a leaf of the call (tensor or int), or a constant."""

    kind: str  # "tensor", "int", "constant"
    path: LeafPath | None = None
    constant_index: int = 0


class OpTable:
    """Operators a specialization calls; their index is the slot in ctx->ops."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []

    def index(self, name: str, overload: str) -> int:
        key = (name, overload)
        if key not in self.ops:
            self.ops.append(key)
        return self.ops.index(key)


@dataclasses.dataclass
class _Lowered:
    """A torch-dialect value after lowering."""

    kind: str  # tensor, int, float, bool, none, str, device, list
    ssa: str = ""  # tensor: the handle; int/bool: i64; float: f64; str: pointer; device: i64 code
    owned_slot: int | None = None  # tensor handles owned by this function: index in the owned table
    items: list[_Lowered] = dataclasses.field(default_factory=list)  # list items
    elem: str = ""  # list element type text
    pyobject: str | None = None  # for inputs: the argument's PyObject*, to return it as itself
    constant: bool = False  # int/float/bool: a constant of the program, the same on every call


_INT_BINARY = {"torch.prim.max.int": "maxsi", "torch.prim.min.int": "minsi"}
_INT_CHECKED = {  # can overflow or divide by zero: checked_int_op raises as Python would instead of wrapping
    "torch.aten.add.int": "addi", "torch.aten.sub.int": "subi", "torch.aten.mul.int": "muli",
    "torch.aten.floordiv.int": "floordivsi", "torch.aten.remainder.int": "mod",
    # torch-mlir's importer names Python's `%` on SymInts aten.fmod (PY_BUILTIN_TO_TORCH_OP); ATen has no
    # fmod.int, so this op only ever means operator.mod: Python's sign rule, not C's.
    "torch.aten.fmod.int": "mod",
}  # fmt: skip
# Python's float arithmetic (capture/specialize.py keeps every other float operation out of compiled graphs).
_FLOAT_BINARY = {
    "torch.aten.add.float": "addf", "torch.aten.add.float_int": "addf", "torch.aten.sub.float": "subf",
    "torch.aten.mul.float": "mulf", "torch.aten.div.float": "divf",
}  # fmt: skip
_SCALAR_RESULTS = {"!torch.int": "int", "!torch.float": "float", "!torch.bool": "bool"}  # op results in a slot
_INT_COMPARE = {
    "torch.aten.eq.int": "eq", "torch.aten.ne.int": "ne", "torch.aten.lt.int": "slt",
    "torch.aten.le.int": "sle", "torch.aten.gt.int": "sgt", "torch.aten.ge.int": "sge",
}  # fmt: skip


def _operator_name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["name"]).value


def op_kind(op: ir.Operation) -> str:
    """What a lowering rule is chosen by: the op's name, or for a torch.operator (an op torch-mlir does not
    model, e.g. aten.stride.int, or one of Trident's own launch and scalar ops) the name of the op it stands for."""
    return _operator_name(op) if op.name == "torch.operator" else op.name


# The lowering rules, one per op kind: HostProgramLowering methods taking the op, registered with @lowers. An
# exact kind is looked up first, then the prefixes of kind families (constants, launch sites, scalar builtins);
# any other ATen or prims operator is called through the runtime (HostProgramLowering._op_call).
Rule = Callable[["HostProgramLowering", ir.Operation], None]
_RULES: dict[str, Rule] = {}
_PREFIX_RULES: dict[str, Rule] = {}


def lowers(*kinds: str, prefix: bool = False) -> Callable[[Rule], Rule]:
    """Register the decorated method as the rule lowering ops of these kinds (kind prefixes with prefix=True)."""
    table = _PREFIX_RULES if prefix else _RULES

    def register(rule: Rule) -> Rule:
        for kind in kinds:
            if kind in table:  # a second rule would silently win: a programming error, caught at import
                raise RuntimeError(f"two lowering rules for {kind}: {table[kind].__name__} and {rule.__name__}")
            table[kind] = rule
        return rule

    return register


def aten_name(op: ir.Operation) -> tuple[str, str]:
    """('aten::add', 'Tensor') for torch.aten.add.Tensor; ('aten::copy_', '') for torch.aten.copy_."""
    name = op.name
    if name == "torch.operator":  # ops torch-mlir does not model: the attribute holds "torch.aten.index_copy"
        name = _operator_name(op)
        if not name.startswith("torch."):
            name = "torch." + name
    parts = name.split(".")
    if len(parts) < 3 or parts[0] != "torch":
        raise exc.LoweringError(f"unexpected operation {op.name}")
    overload = parts[3] if len(parts) > 3 else ""
    if overload == "default":
        overload = ""
    return f"{parts[1]}::{parts[2]}", overload


class HostProgramLowering:
    # The generated function's parameters (replay_plan.py lowers a second function with one more).
    PARAMS = [("%ctx", PTR), ("%slots", PTR), ("%result", PTR)]

    def __init__(
        self,
        module: ModuleBuilder,
        name: str,
        main: ir.Operation,
        placeholders: Sequence[PlaceholderSource],
        outputs: OutputTree,
        input_paths: Sequence[LeafPath],
        pool: ConstantPool,
        ops: OpTable,
        launches: Sequence[object] = (),
        pool_allocations: bool = False,
        private_views: bool = True,
        state_writes: Sequence[StateWrite] = (),
        state: Mapping[tuple[int, tuple[int, ...]], tuple[str, ...]] | None = None,
    ) -> None:
        self.fb = FunctionBuilder(module, name, self.PARAMS, abi.RUN_RESULT, fail_value=abi.ERROR)
        self.access = LeafAccess(self.fb, "%ctx", "%slots", pool, state)  # state: inputs.state_attribute_names
        self.main = main
        self.placeholders = placeholders
        self.outputs = outputs
        self.state_writes = state_writes  # assigned into the call's state objects once the result is built
        self.input_paths = input_paths  # leaf index -> path, for outputs returning an argument itself
        self.pool = pool
        self.ops = ops
        self.launches = launches  # RecordedLaunch records, indexed by the launch ops' names
        self.values: dict[ir.Value, _Lowered] = {}
        self._ops_base: str | None = None
        self.aten_calls: list[str] = []  # every ATen call in program order (typed or boxed), for explain
        self.pool_allocations = pool_allocations  # False: no allocation goes through a BufferPool
        self.private_views = private_views  # False: views of the call's own intermediates go through autograd
        self.buffer_pool: BufferPoolConstant | None = None  # the pooled allocations' BufferPool (a context constant)

    # -- driver ---------------------------------------------------------------------------------------------
    def run(self) -> None:
        block = self.main.regions[0].blocks[0]
        operations = [op.operation for op in block.operations]
        self.dying_at = _dying_values(operations)
        returned = list(operations[-1].operands) if operations and operations[-1].name == "func.return" else []
        self.kept = kept_allocations(returned, self.state_writes, aten_name) if self.pool_allocations else set()
        self.owned = _HandleTable(self.fb, "own", abi.TENSOR_DELETE)
        self.temps = _HandleTable(self.fb, "tmp", abi.DECREF)
        for arg, source in zip(block.arguments, self.placeholders):
            self.fb.reset_scratch()
            self.values[arg] = self._placeholder(source)
        for position, op in enumerate(operations):
            self.fb.reset_scratch()  # an operator's arrays die with its call: the next one reuses them
            if op.name == "func.return":
                self._return(op)
            else:
                self._lower(op)
                for value in self.dying_at.get(position, ()):
                    lowered = self.values.get(value)
                    if lowered is not None:
                        self._release(lowered)
        self.owned.finish()
        self.temps.finish()
        self.fb.finish()

    # -- inputs ---------------------------------------------------------------------------------------------
    def _placeholder(self, source: PlaceholderSource) -> _Lowered:
        fb = self.fb
        if source.kind == "constant":
            obj = self.access.constant(source.constant_index)
            handle = fb.call(abi.TENSOR_HANDLE, [obj])
            assert handle is not None
            return _Lowered("tensor", handle, pyobject=obj)
        assert source.path is not None
        obj = self.access.object(source.path)
        if source.kind == "tensor":
            handle = fb.call(abi.TENSOR_HANDLE, [obj])
            assert handle is not None
            return _Lowered("tensor", handle, pyobject=obj)
        if source.kind == "float":  # the guard already checked it is a float
            tmp = fb.scratch(1)
            fb.call(abi.READ_FLOAT, [obj, tmp])
            return _Lowered("float", fb.load(tmp, F64), pyobject=obj)
        tmp = fb.scratch(1)
        fb.call(abi.READ_INT, [obj, tmp])  # the guard already checked it is an int
        return _Lowered("int", fb.load(tmp), pyobject=obj)

    # -- ops ------------------------------------------------------------------------------------------------
    def _lower(self, op: ir.Operation) -> None:
        kind = op_kind(op)
        rule = _RULES.get(kind) or next((r for p, r in _PREFIX_RULES.items() if kind.startswith(p)), None)
        if rule is not None:
            rule(self, op)
        elif op.name == "torch.operator" or kind.startswith(("torch.aten.", "torch.prims.")):
            self._op_call(op)  # every other operator: a typed runtime entry or the boxed dispatcher
        else:
            raise exc.LoweringError(f"unsupported operation {kind}")

    @lowers("torch.prim.ListConstruct")
    def _list_construct(self, op: ir.Operation) -> None:
        items = [self.values[v] for v in op.operands]
        self.values[op.results[0]] = _Lowered("list", items=items, elem=str(op.results[0].type))

    @lowers("torch.prim.ListUnpack")
    def _list_unpack(self, op: ir.Operation) -> None:
        source = self.values[op.operands[0]]
        if len(source.items) != len(op.results):
            raise exc.LoweringError(f"list of {len(source.items)} unpacked into {len(op.results)} values")
        for result, item in zip(op.results, source.items):
            self.values[result] = item

    @lowers(*_INT_BINARY)
    def _int_binary(self, op: ir.Operation) -> None:
        a, b = (self._int(v) for v in op.operands)
        self.values[op.results[0]] = _Lowered("int", self.fb.binary(_INT_BINARY[op_kind(op)], a, b))

    @lowers(*_INT_CHECKED)
    def _int_checked(self, op: ir.Operation) -> None:
        kind = op_kind(op)
        a, b = (self._int(v) for v in op.operands)
        value = checked_int_op(self.fb, _INT_CHECKED[kind], a, b, self._raise_unless, kind.removeprefix("torch."))
        self.values[op.results[0]] = _Lowered("int", value)

    @lowers("torch.aten.neg.int")
    def _neg_int(self, op: ir.Operation) -> None:
        fb = self.fb
        value = checked_int_op(fb, "subi", fb.const(0), self._int(op.operands[0]), self._raise_unless, "aten.neg.int")
        self.values[op.results[0]] = _Lowered("int", value)

    @lowers(*_INT_COMPARE)
    def _int_compare(self, op: ir.Operation) -> None:
        fb = self.fb
        a, b = (self._int(v) for v in op.operands)
        flag = fb.cmp(_INT_COMPARE[op_kind(op)], a, b)
        widened = fb.fresh()
        fb.emit(f"{widened} = arith.extui {flag} : i1 to i64")
        self.values[op.results[0]] = _Lowered("bool", widened)

    @lowers("torch.aten.Int.bool")
    def _int_of_bool(self, op: ir.Operation) -> None:
        # The importer wraps a bool used as a number (x * flag); it stays a bool-kinded Scalar so the
        # operator sees what eager passes (a bool Scalar: bool tensor * True stays bool).
        self.values[op.results[0]] = _Lowered("bool", self.values[op.operands[0]].ssa)

    @lowers(*_FLOAT_BINARY)
    def _float_binary(self, op: ir.Operation) -> None:
        """Python's float + - * / on doubles: IEEE arithmetic, except that / by a zero raises."""
        kind = op_kind(op)
        a, b = (self._float(v) for v in op.operands)
        if kind == "torch.aten.div.float":
            nonzero = self.fb.fresh("ok")
            self.fb.emit(f"{nonzero} = arith.cmpf une, {b}, {self.fb.const(0.0, F64)} : f64")
            self._raise_unless(nonzero, abi.EXC_ZERO_DIVISION, "float division by zero")
        self.values[op.results[0]] = _Lowered("float", self.fb.binary(_FLOAT_BINARY[kind], a, b, F64))

    @lowers("torch.aten.neg.float")
    def _neg_float(self, op: ir.Operation) -> None:
        negated = self.fb.fresh()
        self.fb.emit(f"{negated} = arith.negf {self._float(op.operands[0])} : f64")
        self.values[op.results[0]] = _Lowered("float", negated)

    @lowers("torch.aten.Float.Scalar")
    def _float_of_scalar(self, op: ir.Operation) -> None:
        self.values[op.results[0]] = _Lowered("float", self._float(op.operands[0]))

    @lowers("torch.aten.size.int", "torch.aten.stride.int")
    def _size_or_stride(self, op: ir.Operation) -> None:
        tensor = self.values[op.operands[0]]
        dim = self._int(op.operands[1])
        extern = abi.TENSOR_SIZE if op_kind(op) == "torch.aten.size.int" else abi.TENSOR_STRIDE
        value = self.fb.call(extern, [tensor.ssa, self._normalized_dim(op, dim)])
        assert value is not None
        self.values[op.results[0]] = _Lowered("int", value)

    @lowers("torch.aten.numel")
    def _numel(self, op: ir.Operation) -> None:
        fb = self.fb
        tensor = self.values[op.operands[0]]
        count = fb.const(1)
        for d in range(_rank(op.operands[0].type)):
            size = fb.call(abi.TENSOR_SIZE, [tensor.ssa, fb.const(d)])
            assert size is not None
            count = fb.binary("muli", count, size)
        self.values[op.results[0]] = _Lowered("int", count)

    @lowers("torch.aten.storage_offset")
    def _storage_offset(self, op: ir.Operation) -> None:
        value = self.fb.call(abi.TENSOR_STORAGE_OFFSET, [self.values[op.operands[0]].ssa])
        assert value is not None
        self.values[op.results[0]] = _Lowered("int", value)

    @lowers(SCALAR_OP_PREFIX, prefix=True)
    def _scalar_builtin(self, op: ir.Operation) -> None:
        fn = op_kind(op).removeprefix(SCALAR_OP_PREFIX)
        operands = [(self.values[v].kind, self.values[v].ssa) for v in op.operands]
        kind, value = lower_scalar_op(self.fb, fn, operands, self._raise_unless)
        self.values[op.results[0]] = _Lowered(kind, value)

    @lowers("torch.constant.", prefix=True)
    def _constant(self, op: ir.Operation) -> None:
        self.values[op.results[0]] = self._constant_value(op)

    def _constant_value(self, op: ir.Operation) -> _Lowered:
        fb = self.fb
        kind = op.name.removeprefix("torch.constant.")
        attr = op.attributes["value"] if "value" in op.attributes else None
        if kind == "int":
            return _Lowered("int", fb.const(ir.IntegerAttr(attr).value), constant=True)
        if kind == "float":
            return _Lowered("float", fb.const(ir.FloatAttr(attr).value, F64), constant=True)
        if kind == "bool":
            return _Lowered("bool", fb.const(int(ir.BoolAttr(attr).value)), constant=True)
        if kind == "none":
            return _Lowered("none")
        if kind == "str":
            return _Lowered("str", fb.string_ptr(ir.StringAttr(attr).value))
        if kind == "device":
            return _Lowered("device", fb.const(_device_code(ir.StringAttr(attr).value)))
        raise exc.LoweringError(f"unsupported constant {op.name}")

    def _raise_unless(self, ok: str, kind: int, message: str) -> None:
        """Continue if `ok` (i1), else report `kind` (a TRIDENT_EXC_*) with `message` and fail the run."""
        fb = self.fb
        error, cont = fb.label("error"), fb.label("ok")
        fb.emit(f"cf.cond_br {ok}, {cont}, {error}")
        fb.emit_label(error)
        fb.call(abi.SET_ERROR, [fb.const(kind, I32), fb.string_ptr(message)])
        fb.emit("cf.br ^fail")
        fb.emit_label(cont)

    def _int(self, value: ir.Value) -> str:
        lowered = self.values[value]
        if lowered.kind not in ("int", "bool"):
            raise exc.LoweringError(f"expected an int, got {lowered.kind}")
        return lowered.ssa

    def _float(self, value: ir.Value) -> str:
        """An f64 of a float, or of an int converted as Python's float(n) does (round to nearest even)."""
        lowered = self.values[value]
        if lowered.kind == "float":
            return lowered.ssa
        converted = self.fb.fresh()
        self.fb.emit(f"{converted} = arith.sitofp {self._int(value)} : i64 to f64")
        return converted

    def _normalized_dim(self, op: ir.Operation, dim: str) -> str:
        """dim + rank for negative dims (the rank is static in the tensor's type)."""
        rank = _rank(op.operands[0].type)
        fb = self.fb
        negative = fb.cmp("slt", dim, fb.const(0))
        name = fb.fresh()
        fb.emit(f"{name} = arith.select {negative}, {fb.binary('addi', dim, fb.const(rank))}, {dim} : i64")
        return name

    @lowers("torch.prim.NumToTensor.Scalar")
    def _scalar_tensor(self, op: ir.Operation) -> None:
        fb = self.fb
        value = self.values[op.operands[0]]
        tag, bits = self._scalar_slot(value)
        out = fb.scratch(1)
        status = fb.call(abi.SCALAR_TENSOR, [fb.const(tag), bits, out])
        assert status is not None
        fb.check_zero(status)
        self.values[op.results[0]] = self._own(fb.load(out, PTR))

    def _scalar_slot(self, value: _Lowered) -> tuple[int, str]:
        fb = self.fb
        if value.kind == "int":
            return abi.TAG_INT, value.ssa
        if value.kind == "bool":
            return abi.TAG_BOOL, value.ssa
        if value.kind == "float":
            bits = fb.fresh()
            fb.emit(f"{bits} = arith.bitcast {value.ssa} : f64 to i64")
            return abi.TAG_DOUBLE, bits
        raise exc.LoweringError(f"expected a scalar, got {value.kind}")

    def _op_call(self, op: ir.Operation) -> None:
        """A typed runtime entry where the runtime has one for this operator, else the boxed dispatcher."""
        fb = self.fb
        name, overload = aten_name(op)
        self.aten_calls.append(f"{name}.{overload}" if overload else name)
        kind = pool_kind(op, aten_name) if self.pool_allocations else None
        if kind is not None:
            self._pooled_allocation(op, kind)
            return
        wrapped = self._wrap_scalars(op, name, overload)
        args = self._encode_operands(op, wrapped)
        n_rets = sum(_result_count(op, r) for r in op.results)
        rets = fb.scratch(n_rets)
        private = self.private_views and is_private_view(op, aten_name)
        typed = typed_symbol(name, overload, len(op.operands), below_autograd=private)
        if typed is not None and private:
            self.aten_calls[-1] += PRIVATE_VIEW
        if typed is not None:
            status = fb.call(Extern(typed, (PTR, PTR), abi.RUN_RESULT), [args, rets])
        else:
            if self._ops_base is None:
                self._ops_base = fb.load(fb.gep("%ctx", abi.CTX_OPS, PTR), PTR)
            handle = fb.load(fb.gep(self._ops_base, self.ops.index(name, overload), PTR), PTR)
            schema = op_schema(name, overload)
            call = abi.OP_CALL
            if schema is not None and makes_no_step(schema):
                call = abi.VIEW_CALL
            elif schema is not None and is_factory(str(a.type) for a in schema.arguments):
                call = abi.FACTORY_CALL  # run as torch's own factories run it (op_call.cpp, call_factory)
            status = fb.call(call, [handle, args, fb.const(len(op.operands)), rets, fb.const(n_rets)])
        assert status is not None
        fb.check_zero(status)
        for scalar_tensor in wrapped.values():
            self._release(scalar_tensor)
        position = 0
        for result in op.results:
            count = _result_count(op, result)
            scalar_kind = _SCALAR_RESULTS.get(str(result.type))
            if scalar_kind is not None:  # the slot holds the value's 64 bits (op_call.cpp scalar_slot)
                bits = fb.load(fb.gep(rets, position, I64), I64)
                if scalar_kind == "float":
                    value = fb.fresh()
                    fb.emit(f"{value} = arith.bitcast {bits} : i64 to f64")
                    bits = value
                self.values[result] = _Lowered(scalar_kind, bits)
                position += 1
                continue
            handles = [self._own(fb.load(fb.gep(rets, position + k, PTR), PTR)) for k in range(count)]
            position += count
            if str(result.type).startswith("!torch.list"):
                self.values[result] = _Lowered("list", items=handles, elem=str(result.type))
            else:
                self.values[result] = handles[0]
                if result in self.kept:
                    self._keep(handles[0].ssa)

    @lowers(LAUNCH_OP_PREFIX, prefix=True)
    def _triton_launch(self, op: ir.Operation) -> None:
        """A launch on CUDA tensors goes through its native TritonLaunch (cuLaunchKernel for specializations
        Triton compiled already, Triton's launcher otherwise); on CPU tensors, through the RecordedLaunch
        (Triton's interpreter), as Python objects."""
        fb = self.fb
        launch = self.launches[int(_operator_name(op).removeprefix(LAUNCH_OP_PREFIX))]
        args = self._encode_operands(op)
        # The constant becomes the TritonLaunch (CUDA) or the record itself (CPU) when the artifact is instantiated.
        extern = abi.TRITON_LAUNCH if launch.device_type == "cuda" else abi.PYTHON_CALL
        callee = self.access.constant(self.pool.add(LaunchSiteConstant(launch)))
        status = fb.call(extern, [callee, args, fb.const(len(op.operands))])
        assert status is not None
        fb.check_zero(status)

    def _pooled_allocation(self, op: ir.Operation, kind: str) -> None:
        pool, site = self._new_pool_site()
        handle = emit_pooled(
            self.fb, kind, op, pool, site, self._int_list_pointer, lambda v: self.values[v].ssa, _device_code,
        )  # fmt: skip
        self.values[op.results[0]] = self._own(handle)

    def _keep(self, handle: str) -> None:
        """A tensor just made that the function stores into the caller's objects marked static: its own pool site
        places it where the last call's was (pooled_allocations.py)."""
        pool, site = self._new_pool_site()
        status = self.fb.call(POOL_KEEP, [pool, self.fb.const(site), handle])
        assert status is not None
        self.fb.check_zero(status)

    def _new_pool_site(self) -> tuple[str, int]:
        """The BufferPool constant (made with the first site), and the index of a new allocation site of it."""
        if self.buffer_pool is None:
            self.buffer_pool = BufferPoolConstant()
        self.buffer_pool.sites += 1
        return self.access.constant(self.pool.add(self.buffer_pool)), self.buffer_pool.sites - 1

    def _int_list_pointer(self, operand: ir.Value) -> str:
        """A stack array of a list-of-ints operand's items."""
        return self._int_array(self.values[operand].items)

    def _int_array(self, items: Sequence[_Lowered]) -> str:
        array = self.fb.scratch(len(items))
        for i, item in enumerate(items):
            self.fb.store(self._int_of(item), I64, self.fb.gep(array, i))
        return array

    def _wrap_scalars(self, op: ir.Operation, name: str, overload: str) -> dict[int, _Lowered]:
        """Scalars at Tensor parameters (a symbolic int or float: make_fx records x.mul_(alpha) as
        aten.mul_.Tensor(x, alpha)) as the wrapped-number tensors eager's argument parser makes of them; a
        typed entry would read the scalar's bits as a tensor handle. Operand index -> owned scalar tensor."""
        wrapped: dict[int, _Lowered] = {}
        positions = _tensor_parameters(name, overload)
        for i, operand in enumerate(op.operands):
            value = self.values[operand]
            if i in positions and value.kind in ("int", "float", "bool"):
                tag, bits = self._scalar_slot(value)
                out = self.fb.scratch(1)
                status = self.fb.call(abi.SCALAR_TENSOR, [self.fb.const(tag), bits, out])
                assert status is not None
                self.fb.check_zero(status)
                wrapped[i] = self._own(self.fb.load(out, PTR))
        return wrapped

    def _encode_operands(self, op: ir.Operation, replaced: dict[int, _Lowered] | None = None) -> str:
        """A stack array of the op's operands as (tag, value) pairs, the runtime's argument encoding."""
        fb = self.fb
        args = fb.scratch(2 * len(op.operands))
        for i, operand in enumerate(op.operands):
            tag, value = self._encode((replaced or {}).get(i) or self.values[operand], operand)
            fb.store(fb.const(tag), I64, fb.gep(args, 2 * i))
            fb.store(value, I64, fb.gep(args, 2 * i + 1))
        return args

    def _encode(self, value: _Lowered, operand: ir.Value) -> tuple[int, str]:
        """(tag, i64 value) of one boxed argument."""
        fb = self.fb
        if value.kind == "tensor":
            return abi.TAG_TENSOR, _ptr_to_int(fb, value.ssa)
        if value.kind in ("int", "bool", "float"):
            tag, bits = self._scalar_slot(value)
            # A constant is never followed by a graph recording's memset nodes, which every launch pays for
            return (tag | abi.ARG_CONSTANT if value.constant else tag), bits
        if value.kind == "none":
            return abi.TAG_NONE, fb.const(0)
        if value.kind == "str":
            return abi.TAG_STRING, _ptr_to_int(fb, value.ssa)
        if value.kind == "device":
            return abi.TAG_DEVICE, value.ssa
        if value.kind == "list":
            n = len(value.items)
            if value.elem in ("!torch.list<int>", "!torch.list<bool>"):
                return abi.TAG_INT_LIST | (n << abi.ARG_LENGTH_SHIFT), _ptr_to_int(fb, self._int_array(value.items))
            array = fb.scratch(n)
            optional = "optional" in value.elem
            for i, item in enumerate(value.items):
                handle = fb.null() if item.kind == "none" else item.ssa
                if item.kind not in ("tensor", "none"):
                    raise exc.LoweringError(f"unsupported list element {item.kind} in {value.elem}")
                fb.store(handle, PTR, fb.gep(array, i, PTR))
            tag = abi.TAG_OPT_TENSOR_LIST if optional else abi.TAG_TENSOR_LIST
            return tag | (n << abi.ARG_LENGTH_SHIFT), _ptr_to_int(fb, array)
        raise exc.LoweringError(f"cannot pass a {value.kind} ({operand.type}) to an operator")

    def _int_of(self, item: _Lowered) -> str:
        if item.kind not in ("int", "bool"):
            raise exc.LoweringError(f"expected an int list element, got {item.kind}")
        return item.ssa

    # -- ownership ------------------------------------------------------------------------------------------
    def _own(self, handle: str) -> _Lowered:
        slot = self.owned.hold(handle)
        return _Lowered("tensor", handle, owned_slot=slot)

    def _release(self, lowered: _Lowered) -> None:
        """Release an owned tensor handle now (its last use is behind); lists own nothing themselves."""
        if lowered.kind != "tensor" or lowered.owned_slot is None:
            return
        self.fb.call(abi.TENSOR_DELETE, [lowered.ssa])
        self.owned.forget(lowered.owned_slot)
        lowered.owned_slot = None

    # -- results ------------------------------------------------------------------------------------------
    def _return(self, op: ir.Operation) -> None:
        fb = self.fb
        returned = [self.values[v] for v in op.operands]
        result, _ = self._build(self.outputs, returned)
        for write in self.state_writes:
            value, slot = self._build(write.value, returned)
            name = self.access.constant(self.pool.add(write.name))
            ok = fb.call(abi.STATE_WRITE, [self.access.object(write.path), name, value])
            assert ok is not None
            fb.check_nonzero(ok)
            fb.call(abi.DECREF, [value])  # the object holds it now
            self.temps.forget(slot)
        fb.store(result, PTR, "%result")
        for lowered in list(self.values.values()):
            self._release(lowered)
        fb.ret(fb.const(abi.OK, I32))

    def _build(self, tree: OutputTree, returned: list[_Lowered]) -> tuple[str, int]:
        """A new reference to the Python value of `tree`, and its slot in the temps table."""
        fb = self.fb
        if tree.kind in ("tuple", "list"):
            kind = abi.SEQ_TUPLE if tree.kind == "tuple" else abi.SEQ_LIST
            seq = fb.call(abi.SEQUENCE_NEW, [fb.const(kind), fb.const(len(tree.children))])
            assert seq is not None
            seq_slot = self._temp(seq)
            for i, child in enumerate(tree.children):
                item, item_slot = self._build(child, returned)
                fb.call(abi.SEQUENCE_SET, [seq, fb.const(i), item])  # steals item
                self.temps.forget(item_slot)
            return seq, seq_slot
        if tree.kind == "const":
            obj = fb.call(abi.NEW_REF, [self.access.constant(self.pool.add(tree.value))])
        elif tree.kind == "state":
            obj = fb.call(abi.NEW_REF, [self.access.object(tree.value)])  # type: ignore[arg-type]
        elif tree.kind == "input":
            obj = fb.call(abi.NEW_REF, [self.access.object(self.input_paths[tree.index])])
        else:
            obj = self._returned_object(returned[tree.index])
        assert obj is not None
        slot = self._temp(obj)
        if tree.kind in ("graph", "input"):
            for name, mark in tree.value or ():  # marks the function set on the tensor (capture/results.py)
                pair = [self.access.constant(self.pool.add(text)) for text in (name, mark)]
                ok = fb.call(abi.STATE_WRITE, [obj, *pair])
                assert ok is not None
                fb.check_nonzero(ok)
        return obj, slot

    def _returned_object(self, value: _Lowered) -> str:
        """A new reference to the Python object of one returned value (NULL on failure)."""
        fb = self.fb
        if value.pyobject is not None:  # an argument or constant returned as itself
            obj = fb.call(abi.NEW_REF, [value.pyobject])
        elif value.kind == "tensor":
            obj = fb.call(abi.WRAP_TENSOR, [value.ssa])
        elif value.kind == "int":
            obj = fb.call(abi.BOX_INT, [value.ssa])
        elif value.kind == "bool":
            obj = fb.call(abi.BOX_BOOL, [value.ssa])
        elif value.kind == "float":
            obj = fb.call(abi.BOX_FLOAT, [value.ssa])
        else:
            raise exc.LoweringError(f"cannot return a {value.kind}")
        assert obj is not None
        return obj

    def _temp(self, obj: str) -> int:
        """Check a new reference is not NULL and hold it so the failure block releases it."""
        self.fb.check_nonnull(obj)
        return self.temps.hold(obj)


class _HandleTable:
    """A stack table of pointers that the failure block releases (owned tensors, new Python references).

    Slots are numbered as they are used, and a forgotten one (nulled where its pointer was released or handed
    on) is used again: the table is as large as the most pointers held at once, not as the program's count of
    them. In straight-line code a slot holds, at any failure, the last pointer stored into it, live or null. The
    table is sized and null-initialized in the entry block when the function is finished, so its size need not be
    known in advance."""

    def __init__(self, fb: FunctionBuilder, hint: str, release: Extern) -> None:
        self.fb = fb
        self.hint = hint
        self.release = release
        self.size = 0
        self.free: list[int] = []  # forgotten slots, the most recent last

    def slot_ptr(self, slot: int) -> str:
        return f"%{self.hint}_slot{slot}"

    def hold(self, value: str) -> int:
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.size
            self.size += 1
        self.fb.store(value, PTR, self.slot_ptr(slot))
        return slot

    def forget(self, slot: int) -> None:
        assert slot not in self.free, f"{self.hint} slot {slot} forgotten twice"  # a later holder's would be nulled
        self.fb.store(self.fb.null(), PTR, self.slot_ptr(slot))
        self.free.append(slot)

    def finish(self) -> None:
        if self.size == 0:
            return
        fb = self.fb
        table = fb.alloca(self.size, PTR, self.hint)
        null = fb.null()
        fb.module.externs[self.release.name] = self.release
        for slot in range(self.size):
            ptr = self.slot_ptr(slot)
            fb.prologue(f"{ptr} = llvm.getelementptr {table}[{slot}] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr")
            fb.prologue(f"llvm.store {null}, {ptr} : !llvm.ptr, !llvm.ptr")
            held = f"%{self.hint}_held{slot}"
            fb.emit_fail(f"{held} = llvm.load {ptr} : !llvm.ptr -> !llvm.ptr")
            fb.emit_fail(f"func.call @{self.release.name}({held}) : (!llvm.ptr) -> ()")


@functools.lru_cache(maxsize=None)
def _tensor_parameters(name: str, overload: str) -> frozenset[int]:
    """Positions of an operator's (non-optional) Tensor parameters, from the installed torch's schema."""
    import torch

    schema = op_schema(name, overload)
    if schema is None:
        return frozenset()
    return frozenset(i for i, a in enumerate(schema.arguments) if isinstance(a.type, torch.TensorType))


def _rank(type_: ir.Type) -> int:
    """Rank of !torch.vtensor<[d0,d1,...],dtype>."""
    text = str(type_)
    if "<[" not in text:
        raise exc.LoweringError(f"tensor of unknown rank: {text}")
    dims = text.split("<[", 1)[1].split("]", 1)[0]
    return 0 if not dims else dims.count(",") + 1


def _ptr_to_int(fb: FunctionBuilder, ptr: str) -> str:
    name = fb.fresh()
    fb.emit(f"{name} = llvm.ptrtoint {ptr} : !llvm.ptr to i64")
    return name


def _device_code(text: str) -> int:
    """The runtime's code of a device (trident_runtime.h, TRIDENT_TAG_DEVICE)."""
    device = torch.device(text)
    index = abi.DEVICE_CODE_NO_INDEX if device.index is None else device.index
    return (device_type_code(device.type) << abi.DEVICE_CODE_TYPE_SHIFT) | index


def _result_count(op: ir.Operation, result: ir.Value) -> int:
    if not str(result.type).startswith("!torch.list"):
        return 1
    users = [use.owner for use in result.uses]
    unpacks = [u for u in users if u.name == "torch.prim.ListUnpack"]
    if not unpacks:
        raise exc.LoweringError(f"{op.name} returns a list whose length is not known at compile time")
    return len(unpacks[0].results)


def _dying_values(operations: list[ir.Operation]) -> dict[int, list[ir.Value]]:
    """Op position -> values whose last use is that op (or that op itself, for unused results).

    A use of a list counts as a use of its items: ListConstruct operands, and the ListUnpack results of an
    op's list result."""
    members: dict[ir.Value, list[ir.Value]] = {}
    for op in operations:
        if op.name == "torch.prim.ListConstruct":
            members[op.results[0]] = list(op.operands)
        elif op.name == "torch.prim.ListUnpack":
            members[op.operands[0]] = list(op.results)
    last: dict[ir.Value, int] = {}
    for position, op in enumerate(operations):
        for result in op.results:
            last.setdefault(result, position)
        for operand in op.operands:
            stack = [operand]
            while stack:
                v = stack.pop()
                last[v] = position
                stack.extend(members.get(v, []))
    dying: dict[int, list[ir.Value]] = {}
    for value, position in last.items():
        dying.setdefault(position, []).append(value)
    return dying
