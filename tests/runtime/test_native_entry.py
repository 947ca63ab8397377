"""The native runtime on its own: the Entry object's mechanics and the C ABI, driven from Python.

Guards and runs here are ctypes callbacks standing in for generated code (the entry calls them with the
GIL held, so they may run Python). The C functions are reached through ctypes.PyDLL on the runtime's shared
object: PyDLL keeps the GIL during each call, which the ABI requires for anything touching Python objects.
"""
from __future__ import annotations

import ctypes
import functools
import gc
import struct
import types
import weakref
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from trident.abi import (
    EXC_INDEX, EXC_NOT_IMPLEMENTED, EXC_OVERFLOW, EXC_RUNTIME, EXC_TYPE, EXC_VALUE, EXC_ZERO_DIVISION, TAG_BOOL,
    TAG_DEVICE, TAG_DOUBLE, TAG_INT, TAG_INT_LIST, TAG_NONE, TAG_OPT_TENSOR_LIST, TAG_STRING, TAG_TENSOR,
    TAG_TENSOR_LIST,
)  # fmt: skip
from trident.knobs import knobs, override
from trident.runtime import RuntimeBuildError, build, load_runtime, runtime_library_path

# --- The ABI's structs as ctypes sees them (its codes: trident.abi, read from trident_runtime.h) ---------


class TensorMeta(ctypes.Structure):
    _fields_ = [
        ("type_tag", ctypes.c_int64),
        ("dtype", ctypes.c_int64),
        ("device_type", ctypes.c_int64),
        ("device_index", ctypes.c_int64),
        ("dim", ctypes.c_int64),
        ("storage_offset", ctypes.c_int64),
        ("data_ptr", ctypes.c_int64),
        ("flags", ctypes.c_int64),
        ("sizes", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("handle", ctypes.c_void_p),
    ]


class SpecContext(ctypes.Structure):
    _fields_ = [
        ("ops", ctypes.POINTER(ctypes.c_void_p)),
        ("constants", ctypes.POINTER(ctypes.c_void_p)),
        ("kernels", ctypes.c_void_p),
    ]


GUARD = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
RUN = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@pytest.fixture(scope="module")
def rt() -> types.ModuleType:
    return load_runtime()


@pytest.fixture(scope="module")
def lib(rt: types.ModuleType) -> ctypes.PyDLL:
    lib = ctypes.PyDLL(runtime_library_path())
    i32, i64, ptr, obj = ctypes.c_int32, ctypes.c_int64, ctypes.c_void_p, ctypes.py_object
    signatures: dict[str, tuple[list[Any], Any]] = {
        "trident_read_tensor": ([obj, ctypes.POINTER(TensorMeta)], i32),
        "trident_read_int": ([obj, ctypes.POINTER(i64)], i32),
        "trident_read_float": ([obj, ctypes.POINTER(ctypes.c_double)], i32),
        "trident_read_bool": ([obj, ctypes.POINTER(i64)], i32),
        "trident_is_none": ([obj], i32),
        "trident_check_sequence": ([obj, i64, i64], i32),
        "trident_global_state": ([], i64),
        "trident_tensor_handle": ([obj], ptr),
        "trident_tensor_size": ([ptr, i64], i64),
        "trident_tensor_stride": ([ptr, i64], i64),
        "trident_op_call": ([ptr, ctypes.POINTER(i64), i64, ctypes.POINTER(ptr), i64], i32),
        "trident_scalar_tensor": ([i64, i64, ctypes.POINTER(ptr)], i32),
        "trident_tensor_delete": ([ptr], None),
        "trident_wrap_tensor": ([ptr], obj),  # new reference: ctypes takes ownership of a py_object result
        "trident_last_error": ([], ctypes.c_char_p),
        "trident_last_error_kind": ([], i32),
        "trident_set_error": ([i32, ctypes.c_char_p], None),
    }
    for name, (argtypes, restype) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = restype
    return lib


def slot_values(slots: int, n: int) -> list[Any]:
    array = ctypes.cast(slots, ctypes.POINTER(ctypes.py_object))
    return [array[i] for i in range(n)]


def store_result(result: int, value: object) -> None:
    """What generated code does with *result: store a new reference."""
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(value))
    ctypes.cast(result, ctypes.POINTER(ctypes.c_void_p))[0] = id(value)


def add_python_spec(
    rt: types.ModuleType,
    entry: Any,
    example: tuple[tuple[Any, ...], dict[str, Any]],
    guard: Callable[..., bool],
    run: Callable[..., object],
    context: Any = None,
) -> int:
    """Registers a specialization whose guard/run are Python callables over the bound slots."""
    n = len(entry.param_names)
    guard_fn = GUARD(lambda ctx, slots: int(bool(guard(*slot_values(slots, n)))))

    def run_c(ctx: int, slots: int, result: int) -> int:
        outcome = run(ctx, *slot_values(slots, n))
        if isinstance(outcome, int) and not isinstance(outcome, bool) and outcome != 0:
            return outcome  # a failure status, error already reported
        store_result(result, outcome)
        return 0

    run_fn = RUN(run_c)
    key = entry.structural_key(*example[0], **example[1])
    assert key is not None
    context = context if context is not None else rt.Context([], [])
    return entry.add_spec(key, address_of(guard_fn), address_of(run_fn), context, (guard_fn, run_fn))


def address_of(fn: Any) -> int:
    return ctypes.cast(fn, ctypes.c_void_p).value


class MissRecorder:
    def __init__(self, result: object = "miss") -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        self.result = result

    def __call__(self, *args: Any, **kwargs: Any) -> object:
        self.calls.append((args, kwargs))
        return self.result


# --- Entry: routing and counting -------------------------------------------------------------------------


def test_hit_and_miss_routing_and_counts(rt: types.ModuleType) -> None:
    miss = MissRecorder()
    f = rt.Entry("f", miss, ("x", "y"), 2, {})
    x = torch.ones(2, 3)
    add_python_spec(rt, f, ((x, 3), {}), guard=lambda x, y: y == 3, run=lambda ctx, x, y: ("hit", y))

    assert f(x, 3) == ("hit", 3)
    assert f(torch.zeros(5, 7), y=3) == ("hit", 3)  # sizes are not in the key; this guard ignores them
    assert f(x, 4) == "miss"  # same key, guard says no
    assert f(x.double(), 3) == "miss"  # another key
    assert f.hits() == [2]
    assert f.misses == 2
    # The miss handler sees the call exactly as it was made.
    assert miss.calls[0][0][1] == 4 and miss.calls[0][1] == {}
    assert miss.calls[1][0][0].dtype == torch.float64


def test_specs_tried_in_insertion_order(rt: types.ModuleType) -> None:
    f = rt.Entry("f", MissRecorder(), ("x",), 1, {})
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: x > 10, run=lambda ctx, x: "big")
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: True, run=lambda ctx, x: "any")
    assert [f(1), f(11), f(2)] == ["any", "big", "any"]
    assert f.hits() == [1, 2]


def test_try_call_skips_the_miss_handler(rt: types.ModuleType) -> None:
    miss = MissRecorder()
    f = rt.Entry("f", miss, ("x",), 1, {})
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: x == 1, run=lambda ctx, x: "one")
    assert f.try_call(1) == (True, "one")
    assert f.try_call(2) == (False, None)
    assert f.try_call(1, 2) == (False, None)  # binding fails
    assert miss.calls == [] and f.misses == 0
    assert f.hits() == [1]


def test_noop_run_and_always_guard(rt: types.ModuleType) -> None:
    f = rt.Entry("f", MissRecorder(), ("x", "y"), 2, {})
    context = rt.Context([], [])
    key = f.structural_key(torch.ones(1), 2)
    f.add_spec(key, rt.always_guard_address(), rt.noop_run_address(), context, None)
    assert f(torch.ones(3), 5) is None
    assert f.hits() == [1]
    ns = rt.time_guard(rt.always_guard_address(), context, (torch.ones(1), 2), 1000)
    assert isinstance(ns, float) and ns >= 0.0


def test_clear_drops_specs_and_releases_keepalives(rt: types.ModuleType) -> None:
    class Engine:  # stands in for the JIT engine that owns the machine code
        pass

    miss = MissRecorder()
    f = rt.Entry("f", miss, ("x",), 1, {})
    engine = Engine()
    engine_ref = weakref.ref(engine)
    context = rt.Context([], [])
    f.add_spec(f.structural_key(1), rt.always_guard_address(), rt.noop_run_address(), context, engine)
    del engine
    assert f(1) is None and f.hits() == [1]
    f.clear()
    assert engine_ref() is None
    assert f.hits() == []
    assert f(1) == "miss" and f.misses == 1


def test_guard_that_clears_the_entry_misses_safely(rt: types.ModuleType) -> None:
    miss = MissRecorder()
    f = rt.Entry("f", miss, ("x",), 1, {})

    def guard(x: int) -> bool:
        f.clear()  # Python run by a guard changes the entry under the fast path
        return False

    add_python_spec(rt, f, ((1,), {}), guard=guard, run=lambda ctx, x: "unreachable")
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: True, run=lambda ctx, x: "second")
    assert f(1) == "miss"
    assert f.hits() == []


# --- Entry: binding ---------------------------------------------------------------------------------------


def eager_f(a: int, b: int = 2, *, c: int) -> tuple[str, int, int, int]:
    return ("eager", a, b, c)


@pytest.fixture
def bound_entry(rt: types.ModuleType) -> Any:
    f = rt.Entry("eager_f", eager_f, ("a", "b", "c"), 2, {1: 2})
    add_python_spec(rt, f, ((1,), {"c": 3}), guard=lambda a, b, c: True, run=lambda ctx, a, b, c: ("hit", a, b, c))
    return f


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((1,), {"c": 3}, ("hit", 1, 2, 3)),  # default filled
        ((1, 5), {"c": 3}, ("hit", 1, 5, 3)),
        ((), {"a": 1, "b": 5, "c": 3}, ("hit", 1, 5, 3)),  # everything by keyword
        ((), {"c": 3, "a": 1}, ("hit", 1, 2, 3)),  # keyword order does not matter
        ((), {"".join(["c"]): 3, "".join(["a"]): 1}, ("hit", 1, 2, 3)),  # names that are not interned
    ],
)
def test_binding_hits(
    bound_entry: Any, args: tuple[Any, ...], kwargs: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    assert bound_entry.structural_key(*args, **kwargs) == bound_entry.structural_key(1, c=3)
    assert bound_entry(*args, **kwargs) == expected


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, 5, 3), {}, "positional argument"),  # c is keyword-only
        ((1,), {}, "missing 1 required keyword-only argument: 'c'"),
        ((1,), {"a": 2, "c": 3}, "multiple values for argument 'a'"),
        ((1,), {"c": 3, "d": 4}, "unexpected keyword argument 'd'"),
    ],
)
def test_binding_failures_go_to_the_miss_handler(
    bound_entry: Any, args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    assert bound_entry.structural_key(*args, **kwargs) is None
    assert bound_entry.try_call(*args, **kwargs) == (False, None)
    with pytest.raises(TypeError, match=message):  # raised by the Python miss handler binding the call
        bound_entry(*args, **kwargs)
    assert bound_entry.misses == 1
    assert bound_entry.hits() == [0]


def test_no_parameters(rt: types.ModuleType) -> None:
    f = rt.Entry("f", MissRecorder(), (), 0, {})
    add_python_spec(rt, f, ((), {}), guard=lambda: True, run=lambda ctx: "done")
    assert f() == "done"
    assert f(1) == "miss"


def test_many_parameters_use_the_heap_buffer(rt: types.ModuleType) -> None:
    names = tuple(f"p{i}" for i in range(40))
    f = rt.Entry("f", MissRecorder(), names, 40, {39: "last"})
    args = tuple(range(39))
    add_python_spec(rt, f, (args, {}), guard=lambda *slots: True, run=lambda ctx, *slots: slots)
    assert f(*args) == (*args, "last")


def test_constructor_validation(rt: types.ModuleType) -> None:
    with pytest.raises(ValueError, match="n_positional"):
        rt.Entry("f", eager_f, ("a",), 2, {})
    with pytest.raises(ValueError, match="parameter indices"):
        rt.Entry("f", eager_f, ("a",), 1, {3: 0})
    with pytest.raises(TypeError, match="callable"):
        rt.Entry("f", 42, ("a",), 1, {})


# --- Entry: structural key --------------------------------------------------------------------------------


def test_structural_key(rt: types.ModuleType) -> None:
    key = rt.Entry("k", MissRecorder(), ("x",), 1, {}).structural_key
    base = key(torch.ones(2, 3))
    assert key(torch.ones(4, 5)) == base  # sizes only
    assert key(torch.ones(4, 6)[:, ::2]) == base  # strides and offset are the guards' business
    for other in [
        torch.ones(2, 3, dtype=torch.float64),
        torch.ones(2),
        torch.ones(2, 3, 1),
        torch.ones(2, 3, device="meta"),
        torch.ones(2, 3, requires_grad=True),
        torch.nn.Parameter(torch.ones(2, 3)),
        torch.ones(2, 3, dtype=torch.complex64).conj(),
        1,
    ]:
        assert key(other) != base, other
    assert key(1) == key(2)
    assert len({key(1), key(1.0), key(True), key(False), key(None), key("s")}) == 6


# --- Entry: errors from run ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "exception"),
    [
        (EXC_RUNTIME, RuntimeError),
        (EXC_INDEX, IndexError),
        (EXC_VALUE, ValueError),
        (EXC_TYPE, TypeError),
        (EXC_NOT_IMPLEMENTED, NotImplementedError),
        (EXC_ZERO_DIVISION, ZeroDivisionError),
        (EXC_OVERFLOW, OverflowError),
    ],
)
def test_run_failure_raises_the_reported_kind(
    rt: types.ModuleType, lib: ctypes.PyDLL, kind: int, exception: type[Exception]
) -> None:
    def failing_run(ctx: int, x: int) -> int:
        lib.trident_set_error(kind, f"kind {kind} failed at x={x}".encode())
        return 1

    f = rt.Entry("f", MissRecorder(), ("x",), 1, {})
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: True, run=failing_run)
    with pytest.raises(exception, match=f"^kind {kind} failed at x=7$"):
        f(7)
    assert f.hits() == [0] and f.misses == 0


def test_run_failure_without_message(rt: types.ModuleType, lib: ctypes.PyDLL) -> None:
    def failing_run(ctx: int, x: int) -> int:
        lib.trident_set_error(EXC_RUNTIME, b"")
        return 1

    f = rt.Entry("f", MissRecorder(), ("x",), 1, {})
    add_python_spec(rt, f, ((1,), {}), guard=lambda x: True, run=failing_run)
    with pytest.raises(RuntimeError, match="without an error message"):
        f(1)


# --- Entry: Python object protocol -----------------------------------------------------------------------


def test_get_binds_like_a_method(rt: types.ModuleType) -> None:
    miss = MissRecorder()

    class Model:
        forward = rt.Entry("forward", miss, ("self", "x"), 2, {})

    model = Model()
    add_python_spec(rt, Model.forward, ((model, 1), {}), guard=lambda self, x: self is model and x == 1,
                    run=lambda ctx, self, x: ("hit", self))
    assert isinstance(model.forward, types.MethodType)
    assert model.forward.__self__ is model and model.forward.__func__ is Model.forward
    assert Model.forward.__get__(None, Model) is Model.forward
    assert model.forward(1) == ("hit", model)
    bound = model.forward
    assert bound(1) == ("hit", model)
    assert model.forward(2) == "miss"
    assert miss.calls == [((model, 2), {})]


def test_update_wrapper_and_repr(rt: types.ModuleType) -> None:
    entry = rt.Entry("eager_f", eager_f, ("a", "b", "c"), 2, {1: 2})
    assert entry.__name__ == "eager_f"
    entry.__doc__ = None
    functools.update_wrapper(entry, eager_f)
    assert entry.__wrapped__ is eager_f
    assert entry.__qualname__ == eager_f.__qualname__
    assert entry.__module__ == eager_f.__module__
    assert "eager_f" in repr(entry)
    assert entry.name == "eager_f" and entry.param_names == ("a", "b", "c")
    assert entry.n_positional == 2 and entry.defaults == {1: 2} and entry.miss_handler is eager_f


def test_reference_cycle_is_collected(rt: types.ModuleType) -> None:
    holder: dict[str, Any] = {}

    def miss(*args: Any) -> Any:
        return holder["entry"]  # the miss handler refers back to the entry: a cycle

    entry = rt.Entry("f", miss, ("x",), 1, {})
    holder["entry"] = entry
    context = rt.Context([], [holder])  # and a constant that refers to it too
    entry.add_spec(0, rt.always_guard_address(), rt.noop_run_address(), context, holder)
    entry_ref = weakref.ref(entry)
    del entry, context, holder
    gc.collect()
    assert entry_ref() is None


# --- Context ----------------------------------------------------------------------------------------------


def test_context_layout(rt: types.ModuleType) -> None:
    constant = torch.ones(3)
    before = __import__("sys").getrefcount(constant)
    context = rt.Context([("aten::add", "Tensor"), ("aten::relu", "")], [constant, "s"])
    assert __import__("sys").getrefcount(constant) == before + 1
    assert context.n_ops == 2
    layout = SpecContext.from_address(context.address)
    assert layout.ops[0] and layout.ops[1] and layout.ops[0] != layout.ops[1]
    assert layout.constants[0] == id(constant)
    assert layout.kernels is None


def test_context_rejects_unknown_operator(rt: types.ModuleType) -> None:
    with pytest.raises(ValueError, match=r"aten::no_such_op\.Tensor"):
        rt.Context([("aten::add", "Tensor"), ("aten::no_such_op", "Tensor")], [])
    with pytest.raises(ValueError, match=r"'aten::add\.NoSuchOverload'"):
        rt.Context([("aten::add", "NoSuchOverload")], [])


def test_run_receives_the_context(rt: types.ModuleType, lib: ctypes.PyDLL) -> None:
    """A run written like generated code: op handles come from ctx->ops, results are wrapped tensors."""
    context = rt.Context([("aten::mul", "Tensor")], [])

    def run(ctx: int, x: torch.Tensor) -> torch.Tensor:
        assert ctx == context.address
        op = SpecContext.from_address(ctx).ops[0]
        handle = lib.trident_tensor_handle(x)
        (result,) = call_op(lib, op, [(TAG_TENSOR, handle), (TAG_TENSOR, handle)], 1)
        return result

    f = rt.Entry("square", MissRecorder(), ("x",), 1, {})
    add_python_spec(rt, f, ((torch.ones(1),), {}), guard=lambda x: True, run=run, context=context)
    x = torch.arange(4.0)
    torch.testing.assert_close(f(x), x * x)


# --- trident_op_call ---------------------------------------------------------------------------------------


def double_bits(value: float) -> int:
    return struct.unpack("<q", struct.pack("<d", value))[0]


def call_op(lib: ctypes.PyDLL, op: int, args: list[tuple[int, int]], nrets: int) -> list[Any]:
    flat = (ctypes.c_int64 * (2 * len(args) or 1))(*[word for pair in args for word in pair])
    rets = (ctypes.c_void_p * (nrets or 1))()
    status = lib.trident_op_call(op, flat, len(args), rets, nrets)
    if status != 0:
        raise OpCallFailed(lib.trident_last_error_kind(), lib.trident_last_error().decode())
    out = []
    for i in range(nrets):
        out.append(lib.trident_wrap_tensor(rets[i]))
        lib.trident_tensor_delete(rets[i])
    return out


class OpCallFailed(Exception):
    def __init__(self, kind: int, message: str) -> None:
        super().__init__(kind, message)
        self.kind, self.message = kind, message


@pytest.fixture(scope="module")
def ops(rt: types.ModuleType) -> dict[str, int]:
    names = [
        ("aten::add", "Tensor"),
        ("aten::split", "Tensor"),
        ("aten::sum", "dim_IntList"),
        ("aten::cat", ""),
        ("aten::index", "Tensor"),
        ("aten::div", "Tensor_mode"),
        ("aten::to", "device"),
        ("aten::select", "int"),
        ("aten::add_", "Tensor"),
    ]
    context = rt.Context(names, [])
    layout = SpecContext.from_address(context.address)
    table = {f"{n}.{o}" if o else n: layout.ops[i] for i, (n, o) in enumerate(names)}
    table["_context"] = context  # keeps the handles alive for the module
    return table


def test_op_call_add_with_int_and_double_alpha(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    ha, hb = lib.trident_tensor_handle(a), lib.trident_tensor_handle(b)
    (out,) = call_op(lib, ops["aten::add.Tensor"], [(TAG_TENSOR, ha), (TAG_TENSOR, hb), (TAG_INT, 2)], 1)
    torch.testing.assert_close(out, torch.add(a, b, alpha=2))
    args = [(TAG_TENSOR, ha), (TAG_TENSOR, hb), (TAG_DOUBLE, double_bits(0.5))]
    (out,) = call_op(lib, ops["aten::add.Tensor"], args, 1)
    torch.testing.assert_close(out, torch.add(a, b, alpha=0.5))


def test_op_call_in_place_returns_the_same_python_object(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    a, b = torch.zeros(3), torch.ones(3)  # handles are borrowed: the tensors must outlive the call
    args = [(TAG_TENSOR, lib.trident_tensor_handle(a)), (TAG_TENSOR, lib.trident_tensor_handle(b)), (TAG_INT, 1)]
    (out,) = call_op(lib, ops["aten::add_.Tensor"], args, 1)
    assert out is a
    assert a.tolist() == [1.0, 1.0, 1.0]


def test_op_call_split_returns_a_flattened_list(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    x = torch.arange(8.0).reshape(4, 2)
    args = [(TAG_TENSOR, lib.trident_tensor_handle(x)), (TAG_INT, 2), (TAG_INT, 0)]
    pieces = call_op(lib, ops["aten::split.Tensor"], args, 2)
    for got, want in zip(pieces, torch.split(x, 2), strict=True):
        assert got.data_ptr() == want.data_ptr()  # views of x, as eager returns
        torch.testing.assert_close(got, want)
    with pytest.raises(OpCallFailed, match="returned 2 tensors, compiled code expects 3"):
        call_op(lib, ops["aten::split.Tensor"], args, 3)


def test_op_call_list_string_device_and_none_arguments(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    x = torch.arange(12.0).reshape(3, 4)
    hx = lib.trident_tensor_handle(x)

    dims = (ctypes.c_int64 * 1)(1)
    args = [(TAG_TENSOR, hx), (TAG_INT_LIST | 1 << 8, ctypes.addressof(dims)), (TAG_BOOL, 1), (TAG_NONE, 0)]
    (out,) = call_op(lib, ops["aten::sum.dim_IntList"], args, 1)
    torch.testing.assert_close(out, x.sum(dim=1, keepdim=True))

    y = torch.ones(1, 4)
    tensors = (ctypes.c_void_p * 2)(hx, lib.trident_tensor_handle(y))
    (out,) = call_op(lib, ops["aten::cat"], [(TAG_TENSOR_LIST | 2 << 8, ctypes.addressof(tensors)), (TAG_INT, 0)], 1)
    torch.testing.assert_close(out, torch.cat([x, y]))

    index = torch.tensor([3, 0])
    indices = (ctypes.c_void_p * 2)(None, lib.trident_tensor_handle(index))  # x[:, index]
    args = [(TAG_TENSOR, hx), (TAG_OPT_TENSOR_LIST | 2 << 8, ctypes.addressof(indices))]
    (out,) = call_op(lib, ops["aten::index.Tensor"], args, 1)
    torch.testing.assert_close(out, x[:, index])

    mode = ctypes.create_string_buffer(b"floor")
    d = torch.full((3, 4), -5.0)
    args = [(TAG_TENSOR, hx), (TAG_TENSOR, lib.trident_tensor_handle(d)), (TAG_STRING, ctypes.addressof(mode))]
    (out,) = call_op(lib, ops["aten::div.Tensor_mode"], args, 1)
    torch.testing.assert_close(out, torch.div(x, d, rounding_mode="floor"))

    cpu = (0 << 16) | 0xFFFF  # DeviceType::CPU, no index
    args = [(TAG_TENSOR, hx), (TAG_DEVICE, cpu), (TAG_INT, 7), (TAG_BOOL, 0), (TAG_BOOL, 0), (TAG_NONE, 0)]
    (out,) = call_op(lib, ops["aten::to.device"], args, 1)
    assert out.dtype == torch.float64  # ScalarType 7
    torch.testing.assert_close(out, x.double())


def test_op_call_errors_carry_the_python_kind(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    x = torch.ones(3)
    hx = lib.trident_tensor_handle(x)
    with pytest.raises(OpCallFailed) as failure:
        call_op(lib, ops["aten::select.int"], [(TAG_TENSOR, hx), (TAG_INT, 0), (TAG_INT, 10)], 1)
    assert failure.value.kind == EXC_INDEX
    with pytest.raises(IndexError) as eager:
        torch.select(x, 0, 10)
    assert failure.value.message == str(eager.value)

    wrong_size = torch.ones(4)
    hw = lib.trident_tensor_handle(wrong_size)
    with pytest.raises(OpCallFailed) as failure:
        call_op(lib, ops["aten::add.Tensor"], [(TAG_TENSOR, hx), (TAG_TENSOR, hw), (TAG_INT, 1)], 1)
    assert failure.value.kind == EXC_RUNTIME
    assert "must match the size" in failure.value.message and "Exception raised from" not in failure.value.message

    with pytest.raises(OpCallFailed, match="takes 3 arguments"):
        call_op(lib, ops["aten::add.Tensor"], [(TAG_TENSOR, hx), (TAG_TENSOR, hx)], 1)
    with pytest.raises(OpCallFailed, match="unknown argument tag 99"):
        call_op(lib, ops["aten::add.Tensor"], [(TAG_TENSOR, hx), (TAG_TENSOR, hx), (99, 0)], 1)


@torch.library.custom_op("trident_test::raise_key_error", mutates_args=())
def raise_key_error(x: torch.Tensor) -> torch.Tensor:
    raise KeyError("raised by a Python kernel")


def test_op_call_keeps_a_python_kernels_exception(rt: types.ModuleType, lib: ctypes.PyDLL) -> None:
    context = rt.Context([("trident_test::raise_key_error", "")], [])
    op = SpecContext.from_address(context.address).ops[0]
    x = torch.ones(2)
    # The op call returns a failure status with the KeyError itself set; PyDLL raises what is set.
    with pytest.raises(KeyError, match="raised by a Python kernel"):
        call_op(lib, op, [(TAG_TENSOR, lib.trident_tensor_handle(x))], 1)


def test_scalar_tensor_promotes_like_a_python_scalar(lib: ctypes.PyDLL, ops: dict[str, Any]) -> None:
    handle = ctypes.c_void_p()
    assert lib.trident_scalar_tensor(TAG_DOUBLE, double_bits(1.5), ctypes.byref(handle)) == 0
    scalar = lib.trident_wrap_tensor(handle)
    assert scalar.dim() == 0 and scalar.dtype == torch.float64 and scalar.item() == 1.5
    ints = torch.ones(3, dtype=torch.int32)
    args = [(TAG_TENSOR, lib.trident_tensor_handle(ints)), (TAG_TENSOR, handle.value), (TAG_INT, 1)]
    (out,) = call_op(lib, ops["aten::add.Tensor"], args, 1)
    lib.trident_tensor_delete(handle)
    # A wrapped number does not pull the result up to float64, unlike a 0-dim float64 tensor.
    assert out.dtype == (ints + 1.5).dtype == torch.float32
    assert (ints + torch.tensor(1.5, dtype=torch.float64)).dtype == torch.float64
    torch.testing.assert_close(out, ints + 1.5)

    for tag, value, dtype in [(TAG_INT, 7, torch.int64), (TAG_BOOL, 1, torch.bool)]:
        assert lib.trident_scalar_tensor(tag, value, ctypes.byref(handle)) == 0
        t = lib.trident_wrap_tensor(handle)
        lib.trident_tensor_delete(handle)
        assert t.dtype == dtype and t.item() == value


# --- Reading inputs ----------------------------------------------------------------------------------------


def read(lib: ctypes.PyDLL, obj: object) -> TensorMeta | None:
    meta = TensorMeta()
    return meta if lib.trident_read_tensor(obj, ctypes.byref(meta)) else None


def test_read_tensor_of_a_strided_view(lib: ctypes.PyDLL) -> None:
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    view = base[1:, ::2]
    meta = read(lib, view)
    assert meta is not None
    assert meta.type_tag == 1 and meta.dtype == 6  # ScalarType::Float
    assert (meta.device_type, meta.device_index) == (0, -1)
    assert meta.dim == 2
    assert [meta.sizes[i] for i in range(2)] == [3, 3]
    assert [meta.strides[i] for i in range(2)] == [6, 2]
    assert meta.storage_offset == 6
    assert meta.data_ptr == view.data_ptr() == base.data_ptr() + 6 * 4
    assert meta.flags == 0
    assert meta.handle == lib.trident_tensor_handle(view)
    assert lib.trident_tensor_size(meta.handle, 1) == 3 and lib.trident_tensor_stride(meta.handle, 0) == 6
    assert lib.trident_wrap_tensor(meta.handle) is view  # the handle is the tensor inside that object


def test_read_tensor_flags_and_parameter(lib: ctypes.PyDLL) -> None:
    param = torch.nn.Parameter(torch.ones(2))
    meta = read(lib, param)
    assert meta is not None and meta.type_tag == 2 and meta.flags == 1  # requires_grad
    meta = read(lib, torch.ones(2, dtype=torch.complex64).conj())
    assert meta is not None and meta.flags == 2
    meta = read(lib, torch.ones(2, dtype=torch.complex64).conj().imag)
    assert meta is not None and meta.flags & 4  # the negative bit
    meta = read(lib, torch.ones(0, 5))
    assert meta is not None and meta.sizes[0] == 0


@pytest.mark.filterwarnings("ignore:.*(Sparse CSR|nested tensors).*:UserWarning")
def test_read_tensor_rejects_what_compiled_code_must_not_see(lib: ctypes.PyDLL) -> None:
    class Subclass(torch.Tensor):
        pass

    for obj in [
        torch.ones(2).as_subclass(Subclass),
        torch.eye(3).to_sparse(),
        torch.eye(3).to_sparse_csr(),
        torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
        1,
        None,
        [torch.ones(2)],
    ]:
        meta = TensorMeta(type_tag=-7)
        assert lib.trident_read_tensor(obj, ctypes.byref(meta)) == 0, type(obj)
        assert meta.type_tag == -7  # untouched


def test_read_scalars_and_sequences(lib: ctypes.PyDLL) -> None:
    value = ctypes.c_int64()
    assert lib.trident_read_int(5, ctypes.byref(value)) == 1 and value.value == 5
    assert lib.trident_read_int(-(2**63), ctypes.byref(value)) == 1 and value.value == -(2**63)
    assert lib.trident_read_int(2**63, ctypes.byref(value)) == 0
    assert lib.trident_read_int(True, ctypes.byref(value)) == 0  # bool is not an int here
    assert lib.trident_read_int(5.0, ctypes.byref(value)) == 0
    number = ctypes.c_double()
    assert lib.trident_read_float(2.5, ctypes.byref(number)) == 1 and number.value == 2.5
    assert lib.trident_read_float(2, ctypes.byref(number)) == 0
    assert lib.trident_read_bool(False, ctypes.byref(value)) == 1 and value.value == 0
    assert lib.trident_read_bool(1, ctypes.byref(value)) == 0
    assert lib.trident_is_none(None) == 1 and lib.trident_is_none(0) == 0
    assert lib.trident_check_sequence((1, 2), 1, 2) == 1
    assert lib.trident_check_sequence([1, 2], 1, 2) == 0
    assert lib.trident_check_sequence([1, 2], 2, 2) == 1
    assert lib.trident_check_sequence([1, 2], 2, 3) == 0


def test_global_state(lib: ctypes.PyDLL) -> None:
    state = lib.trident_global_state()
    assert state & 1 and not state & 2 and not state & 4
    assert (state >> 8) & 0xFF == 6  # float32
    with torch.no_grad():
        assert not lib.trident_global_state() & 1
    with torch.inference_mode():
        assert lib.trident_global_state() & 4
    with torch.autocast("cpu"):
        assert lib.trident_global_state() & 2
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert (lib.trident_global_state() >> 8) & 0xFF == 7
    finally:
        torch.set_default_dtype(saved)
    assert lib.trident_global_state() == state


# --- Building --------------------------------------------------------------------------------------------


@pytest.fixture
def scratch_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Points the builder at a tiny source folder and an empty cache, so its mechanics test in seconds."""
    sources = tmp_path / "csrc"
    sources.mkdir()
    monkeypatch.setattr(build, "CSRC_DIR", sources)
    monkeypatch.setattr(build, "_generated_sources", lambda: {})
    build._build_dir.cache_clear()
    with override(cache_dir=tmp_path / "cache"):
        yield sources
    build._build_dir.cache_clear()  # the real sources' folder again for later tests


def test_build_publishes_one_library_and_reports_once(
    scratch_sources: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = 'extern "C" __attribute__((visibility("default"))) int answer() { return 42; }\n'
    (scratch_sources / "answer.cpp").write_text(source)
    path = Path(runtime_library_path())
    assert path.parent.parent == knobs.cache_dir / "runtime"
    assert path.parent.name.startswith(f"torch-{torch.__version__}-{sys.implementation.cache_tag}-")
    assert ctypes.CDLL(str(path)).answer() == 42
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == (f"trident: building the native runtime for torch {torch.__version__} (once per torch "
                        "version, usually 20-40 s)...")
    assert len(lines) == 2 and lines[1].startswith("trident: built the native runtime in "), lines
    assert runtime_library_path() == str(path)  # cached: no second build, no second line
    assert capsys.readouterr().err == ""
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock", path.name]  # no temporaries left


def test_build_failure_shows_the_command_and_compiler_output(scratch_sources: Path) -> None:
    (scratch_sources / "broken.cpp").write_text("int broken( { return 0; }\n")
    with pytest.raises(RuntimeBuildError) as failure:
        runtime_library_path()
    message = str(failure.value)
    assert "command: g++ " in message and "broken.cpp" in message and "error:" in message
    folder = knobs.cache_dir / "runtime"
    assert not list(folder.rglob("*.so")) and not list(folder.rglob(".build-*"))


# --- The compiler's copy of the ABI ----------------------------------------------------------------------


def test_compiler_abi_matches_the_header_and_the_library(lib: ctypes.PyDLL) -> None:
    from trident import abi as header
    from trident.lowering import runtime_abi as abi

    # The header's struct fields, as abi.struct_fields reads them, are the ones this test's ctypes mirrors declare:
    # field i at byte 8*i, as generated code loads it; ops/constants at 0/8 of the context.
    assert header.struct_fields("TridentTensorMeta") == tuple(name for name, _ in TensorMeta._fields_)
    assert header.struct_fields("TridentSpecContext") == tuple(name for name, _ in SpecContext._fields_)
    for index, (field, _) in enumerate(TensorMeta._fields_):
        assert getattr(TensorMeta, field).offset == 8 * index
        assert getattr(abi, f"META_{field.upper()}") == index
    assert abi.META_FIELDS == len(TensorMeta._fields_) and ctypes.sizeof(TensorMeta) == 8 * abi.META_FIELDS
    assert (SpecContext.ops.offset, SpecContext.constants.offset) == (8 * abi.CTX_OPS, 8 * abi.CTX_CONSTANTS)
    assert abi.TAG_TENSOR == header.TAG_TENSOR  # runtime_abi passes the header's codes through
    text = header.HEADER.read_text()
    externs = [v for v in vars(abi).values() if type(v).__name__ == "Extern"]
    assert externs
    for extern in externs:
        assert f" {extern.name}(" in text, extern.name
        assert hasattr(lib, extern.name), extern.name  # exported by the shared object

