"""Raw Triton launches captured by make_fx on CPU, and recorded launches run through Triton's interpreter."""
from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
import triton
import triton.language as tl
from torch._dynamo.source import LocalSource
from torch._higher_order_ops.triton_kernel_wrap import (
    get_mutated_tensors,
    kernel_side_table,
    triton_kernel_wrapper_functional,
    triton_kernel_wrapper_mutation,
)
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext
from triton.runtime.autotuner import Autotuner, Heuristics
from triton.runtime.jit import JITFunction

from trident.capture.triton_launches import (
    exact_mutation_analysis,
    intercept_triton_launches,
    kernel_writes,
    run_recorded_launch_on_cpu,
)

# ---------------------------------------------------------------------------------------------------------
# Kernels (module level: the interpreter rewrites them from their source)


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _twice(v):
    return v * 2


@triton.jit
def row_sum_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    # A loop over a runtime scalar, a user @triton.jit helper and tl.sum (itself a jit function).
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + offs, mask=offs < n_cols, other=0.0)
    tl.store(out_ptr + row, _twice(tl.sum(acc, axis=0)))


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, eps, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, x * eps.to(tl.float32), mask=offs < n)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}, num_warps=2)], key=["n"])
@triton.jit
def autotuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.autotune(
    configs=[triton.Config({"BLOCK": 16}, num_warps=2), triton.Config({"BLOCK": 32}, num_warps=4)], key=["n"]
)
@triton.jit
def two_config_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def heuristic_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(out_ptr + offs, tl.load(x_ptr + offs) + tl.load(y_ptr + offs))
    else:
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})
@triton.jit
def autotuned_heuristic_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


# ---------------------------------------------------------------------------------------------------------
# User-style host functions


def add_tuple_grid(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 16),)](x, y, out, n, BLOCK=16)
    return out


def add_lambda_grid(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, y, out, n, BLOCK=16)
    return out


def add_num_warps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 16),)](x, y, out, n, BLOCK=16, num_warps=2, num_stages=3)
    return out


def add_with(kernel: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        kernel[lambda META: (triton.cdiv(n, META["BLOCK"]),)](x, y, out, n)
        return out

    return fn


def row_sum(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty(x.shape[0], dtype=x.dtype)
    row_sum_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=16)
    return out


def scale(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), 0.5, BLOCK=16)
    return out


# ---------------------------------------------------------------------------------------------------------
# Helpers: trace as trident's trace_function does, and run a traced graph on CPU


def trace(fn: Callable[..., Any], *inputs: torch.Tensor, dynamic: bool = False) -> torch.fx.GraphModule:
    shape_env = ShapeEnv()
    fake_mode = FakeTensorMode(shape_env=shape_env, allow_non_fake_inputs=True)
    fakes = []
    for i, t in enumerate(inputs):
        dims = [DimDynamic.DYNAMIC if dynamic else DimDynamic.STATIC] * t.dim()
        context = StatelessSymbolicContext(dynamic_sizes=dims)
        fakes.append(fake_mode.from_tensor(t, symbolic_context=context, source=LocalSource(f"a{i}")))
    with intercept_triton_launches(), torch.no_grad(), fake_mode:
        return make_fx(fn, tracing_mode="real", _allow_non_fake_inputs=True)(*fakes)


def hops(gm: torch.fx.GraphModule, target: Any = triton_kernel_wrapper_mutation) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


class _CpuRunner(torch.fx.Interpreter):
    """Runs a traced graph eagerly, executing each recorded launch through the Triton interpreter."""

    def call_function(self, target: Any, args: Any, kwargs: Any) -> Any:
        if target is triton_kernel_wrapper_mutation:
            return run_recorded_launch_on_cpu(**kwargs)
        return super().call_function(target, args, kwargs)


def run_on_cpu(gm: torch.fx.GraphModule, *inputs: torch.Tensor) -> Any:
    return _CpuRunner(gm).run(*inputs)


def kernel_of(node: torch.fx.Node) -> Any:
    return kernel_side_table.get_kernel(node.kwargs["kernel_idx"])  # type: ignore[arg-type]


def no_gpu_driver() -> bool:
    return not torch.cuda.is_available()


# ---------------------------------------------------------------------------------------------------------
# (1)-(4) capture


def test_tuple_grid_constexpr_is_one_mutation_hop() -> None:
    gm = trace(add_tuple_grid, torch.randn(40), torch.randn(40))
    (node,) = hops(gm)
    assert set(node.kwargs) - {"launch_kwargs"} == {
        "kernel_idx", "constant_args_idx", "grid", "tma_descriptor_metadata", "kwargs"
    }  # fmt: skip
    # torch >= 2.15 also records the names the launch passed by keyword (BLOCK=16 here); older torch does not
    assert node.kwargs.get("launch_kwargs", ("BLOCK",)) == ("BLOCK",)
    assert kernel_of(node) is add_kernel
    assert node.kwargs["grid"] == [(3, 1, 1)]  # normalized to one 3-tuple per config
    kw = node.kwargs["kwargs"]
    assert list(kw) == ["x_ptr", "y_ptr", "out_ptr", "n", "BLOCK"]  # type: ignore[arg-type]
    assert kw["BLOCK"] == 16 and kw["n"] == 40  # type: ignore[index]
    assert [a.op for a in (kw["x_ptr"], kw["y_ptr"])] == ["placeholder", "placeholder"]  # type: ignore[index]
    assert kernel_side_table.get_constant_args(node.kwargs["constant_args_idx"]) == {}  # type: ignore[arg-type]


def test_lambda_grid_is_evaluated_with_meta() -> None:
    gm = trace(add_lambda_grid, torch.randn(40), torch.randn(40))
    (node,) = hops(gm)
    assert node.kwargs["grid"] == [(3, 1, 1)]


def test_symbolic_sizes_give_symbolic_grid_and_scalar_args() -> None:
    gm = trace(add_lambda_grid, torch.randn(40), torch.randn(40), dynamic=True)
    (node,) = hops(gm)
    (grid,) = node.kwargs["grid"]  # type: ignore[misc]
    assert isinstance(grid[0], torch.fx.Node) and grid[1:] == (1, 1)
    assert isinstance(grid[0].meta["val"], torch.SymInt)
    assert isinstance(node.kwargs["kwargs"]["n"], torch.fx.Node)  # type: ignore[index]
    # ... and the graph still runs, at another size than the one traced.
    x, y = torch.randn(70), torch.randn(70)
    torch.testing.assert_close(run_on_cpu(gm, x, y), x + y)


def test_num_warps_and_num_stages_become_a_one_config_autotuner() -> None:
    gm = trace(add_num_warps, torch.randn(40), torch.randn(40))
    (node,) = hops(gm)
    kernel = kernel_of(node)
    assert isinstance(kernel, Autotuner) and kernel.fn is add_kernel
    (config,) = kernel.configs
    assert (config.num_warps, config.num_stages, config.kwargs) == (2, 3, {})
    assert "num_warps" not in node.kwargs["kwargs"]  # type: ignore[operator]


def test_autotuned_kernel_is_captured_with_its_configs() -> None:
    gm = trace(add_with(autotuned_add_kernel), torch.randn(40), torch.randn(40))
    (node,) = hops(gm)
    assert kernel_of(node) is autotuned_add_kernel
    assert node.kwargs["grid"] == [(3, 1, 1)]
    assert "BLOCK" not in node.kwargs["kwargs"]  # type: ignore[operator]  # it comes from the config

    gm = trace(add_with(two_config_add_kernel), torch.randn(40), torch.randn(40))
    (node,) = hops(gm)
    assert node.kwargs["grid"] == [(3, 1, 1), (2, 1, 1)]  # one grid per config, nothing benchmarked


def test_heuristics_kernels_are_captured() -> None:
    def even(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        heuristic_add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out

    (node,) = hops(trace(even, torch.randn(48), torch.randn(48)))
    assert kernel_of(node) is heuristic_add_kernel.fn  # the heuristic ran at capture time, as Heuristics.run does
    assert node.kwargs["kwargs"]["EVEN"] is True  # type: ignore[index]

    (node,) = hops(trace(add_with(autotuned_heuristic_add_kernel), torch.randn(40), torch.randn(40)))
    kernel = kernel_of(node)
    assert isinstance(kernel, Autotuner) and isinstance(kernel.fn, JITFunction)  # torch folds it into configs
    assert kernel.configs[0].kwargs == {"BLOCK": 16, "EVEN": False}


def test_kernel_run_spelling_is_captured() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        add_kernel.run(x, y, out, x.numel(), BLOCK=16, grid=(3,), warmup=False)
        return out

    assert len(hops(trace(fn, torch.randn(40), torch.randn(40)))) == 1


def test_explicit_wrap_triton_inside_the_context_is_recorded_once() -> None:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        torch.library.wrap_triton(add_kernel)[(3,)](x, y, out, x.numel(), BLOCK=16)
        return out

    assert len(hops(trace(fn, torch.randn(40), torch.randn(40)))) == 1


def test_trident_trace_function_sees_launches() -> None:
    from trident.capture.inputs import describe_call
    from trident.capture.trace import Dynamism, trace_function
    from trident.lowering.symbolic_ints import SCALAR_LOWERING

    def fn(x, y):  # type: ignore[no-untyped-def]
        return add_lambda_grid(x, y) * 2

    args = [torch.randn(40), torch.randn(40)]
    facts = describe_call(["x", "y"], args)
    with intercept_triton_launches():
        t = trace_function(fn, 2, ["x", "y"], args, facts, Dynamism(), SCALAR_LOWERING)
    assert len(hops(t.graph_module)) == 1
    (result,) = run_on_cpu(t.graph_module, *args)  # trace_function's graphs return a list of outputs
    torch.testing.assert_close(result, (args[0] + args[1]) * 2)


# ---------------------------------------------------------------------------------------------------------
# (5) patches are scoped


def _launch_state() -> tuple[object, ...]:
    from triton.runtime import driver

    return (
        JITFunction.__dict__["run"],
        Autotuner.__dict__["run"],
        Heuristics.__dict__["run"],
        JITFunction.__dict__["__call__"],
        driver._active,
    )


def test_patches_are_restored_after_the_context() -> None:
    before = _launch_state()
    with intercept_triton_launches():
        with intercept_triton_launches():  # nesting keeps the outer patches
            assert JITFunction.__dict__["run"] is not before[0]
        assert JITFunction.__dict__["run"] is not before[0]
    assert all(a is b for a, b in zip(_launch_state(), before))

    with pytest.raises(ZeroDivisionError), intercept_triton_launches():
        1 / 0
    assert all(a is b for a, b in zip(_launch_state(), before))

    # The CPU runner patches JITFunction.__call__ only while it runs.
    x, y, out = torch.randn(40), torch.randn(40), torch.empty(40)
    (node,) = hops(trace(add_tuple_grid, x, y))
    concrete = {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": 40, "BLOCK": 16}
    run_recorded_launch_on_cpu(**{**node.kwargs, "kwargs": concrete})
    assert all(a is b for a, b in zip(_launch_state(), before))


@pytest.mark.skipif(not no_gpu_driver(), reason="checks the GPU-less launch failure")
def test_raw_launch_outside_the_context_behaves_as_before() -> None:
    def launch() -> str:
        x = torch.randn(4)
        with pytest.raises(RuntimeError) as info:
            add_kernel[(1,)](x, x, x, 4, BLOCK=4)
        return str(info.value)

    before = launch()
    with intercept_triton_launches():
        pass
    assert launch() == before and "active drivers" in before


def test_other_threads_are_not_rerouted() -> None:
    launched: list[BaseException] = []
    n_constant_args = len(kernel_side_table.constant_args)

    def other_thread() -> None:
        x = torch.randn(4)
        try:
            add_kernel[(1,)](x, x, x, 4, BLOCK=4)
        except BaseException as e:  # noqa: BLE001  (no GPU: the real launch path fails; that is the point)
            launched.append(e)

    with intercept_triton_launches():
        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
    assert len(kernel_side_table.constant_args) == n_constant_args  # wrap_triton never ran
    if no_gpu_driver():
        assert launched and not isinstance(launched[0], AssertionError)


# ---------------------------------------------------------------------------------------------------------
# (6) recorded launches run on CPU


def test_recorded_add_runs_on_cpu() -> None:
    x, y = torch.randn(40), torch.randn(40)
    (node,) = hops(trace(add_tuple_grid, x, y))
    out = torch.full((40,), float("nan"))
    concrete = {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": 40, "BLOCK": 16}
    run_recorded_launch_on_cpu(**{**node.kwargs, "kwargs": concrete})
    torch.testing.assert_close(out, x + y)


def test_lambda_grid_is_accepted_by_the_cpu_runner() -> None:
    x, y = torch.randn(40), torch.randn(40)
    (node,) = hops(trace(add_lambda_grid, x, y))
    out = torch.empty(40)
    concrete = {"x_ptr": x, "y_ptr": y, "out_ptr": out, "n": 40, "BLOCK": 16}
    grid = lambda META: (triton.cdiv(META["n"], META["BLOCK"]),)  # noqa: E731
    indices = node.kwargs["kernel_idx"], node.kwargs["constant_args_idx"]
    run_recorded_launch_on_cpu(*indices, grid, {}, concrete)  # type: ignore[arg-type]
    torch.testing.assert_close(out, x + y)


@pytest.mark.parametrize(
    "fn",
    [add_tuple_grid, add_lambda_grid, add_num_warps, add_with(autotuned_add_kernel), add_with(two_config_add_kernel),
     add_with(autotuned_heuristic_add_kernel)],
    ids=["tuple", "lambda", "num_warps", "autotune", "autotune2", "autotune+heuristics"],
)  # fmt: skip
def test_traced_add_graphs_run_on_cpu(fn: Callable[..., torch.Tensor]) -> None:
    x, y = torch.randn(40), torch.randn(40)
    torch.testing.assert_close(run_on_cpu(trace(fn, x, y), x, y), x + y)


@pytest.mark.filterwarnings("error::DeprecationWarning")  # numpy >= 2.4 turns this one into an error
def test_loop_over_runtime_scalar_runs_on_cpu() -> None:
    x = torch.randn(5, 37)
    gm = trace(row_sum, x)
    (node,) = hops(gm)
    assert node.kwargs["grid"] == [(5, 1, 1)]
    torch.testing.assert_close(run_on_cpu(gm, x), 2 * x.sum(1))
    wide = torch.randn(3, 70)  # the trace is static; the kernel itself takes any n_cols
    out = torch.empty(3)
    run_recorded_launch_on_cpu(
        node.kwargs["kernel_idx"], node.kwargs["constant_args_idx"], [(3, 1, 1)], {},  # type: ignore[arg-type]
        {"x_ptr": wide, "out_ptr": out, "n_cols": 70, "stride": 70, "BLOCK": 16},
    )  # fmt: skip
    torch.testing.assert_close(out, 2 * wide.sum(1))


def test_float_scalar_arguments_are_fp32_like_compiled_triton() -> None:
    x = torch.randn(40)
    torch.testing.assert_close(run_on_cpu(trace(scale, x), x), x * 0.5)


def test_tma_metadata_is_rejected_by_the_cpu_runner() -> None:
    (node,) = hops(trace(add_tuple_grid, torch.randn(40), torch.randn(40)))
    with pytest.raises(NotImplementedError):
        indices = node.kwargs["kernel_idx"], node.kwargs["constant_args_idx"]
        run_recorded_launch_on_cpu(*indices, [(1, 1, 1)], {"x_ptr": ("stable", ([16],))}, {})  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------------------
# (7) mutation analysis


def test_only_stored_to_arguments_are_mutated() -> None:
    x = torch.randn(40)
    gm = trace(lambda x: copy_kernel[(3,)](x, out := torch.empty_like(x), 40, BLOCK=16) or out, x)
    (node,) = hops(gm)
    assert kernel_writes(node).names == ["out_ptr"]

    (node,) = hops(trace(add_num_warps, x, x.clone()))
    assert kernel_writes(node).names == ["out_ptr"]  # through the Autotuner that num_warps creates


@pytest.mark.skipif(not no_gpu_driver(), reason="shows the GPU-less fallback that exact_mutation_analysis fixes")
def test_without_a_driver_torch_assumes_every_tensor_is_mutated() -> None:
    (node,) = hops(trace(add_tuple_grid, torch.randn(40), torch.randn(40)))
    hop_kwargs: dict[str, Any] = node.kwargs["kwargs"]  # type: ignore[assignment]
    values = {k: (v.meta["val"] if isinstance(v, torch.fx.Node) else v) for k, v in hop_kwargs.items()}
    args = (node.kwargs["kernel_idx"], node.kwargs["constant_args_idx"], values, {})
    assert get_mutated_tensors(*args) == ["x_ptr", "y_ptr", "out_ptr"]  # type: ignore[arg-type]
    with exact_mutation_analysis():
        assert get_mutated_tensors(*args) == ["out_ptr"]  # type: ignore[arg-type]


def test_functionalized_capture_clones_only_stored_to_tensors() -> None:
    # A functionalizing trace runs torch's analysis while tracing; intercept_triton_launches keeps it exact.
    x = torch.randn(40)
    fake_mode = FakeTensorMode(shape_env=ShapeEnv(), allow_non_fake_inputs=True)
    fakes = [fake_mode.from_tensor(x, static_shapes=True), fake_mode.from_tensor(x, static_shapes=True)]
    with intercept_triton_launches(), torch.no_grad(), fake_mode:
        gm = make_fx(torch.func.functionalize(add_tuple_grid), tracing_mode="real", _allow_non_fake_inputs=True)(*fakes)
    assert not hops(gm)
    (node,) = hops(gm, triton_kernel_wrapper_functional)
    assert node.kwargs["tensors_to_clone"] == ["out_ptr"]


def test_signature_of_the_cpu_runner_matches_the_hop() -> None:
    signature = inspect.signature(run_recorded_launch_on_cpu)
    params = list(signature.parameters)
    (node,) = hops(trace(add_tuple_grid, torch.randn(40), torch.randn(40)))
    assert set(node.kwargs) <= set(params)
    # what this torch's node may leave out (launch_kwargs before torch 2.15) has a default
    assert all(signature.parameters[p].default is None for p in params if p not in node.kwargs)


@pytest.mark.gpu
def test_captured_launch_replays_on_the_gpu() -> None:
    # With a real driver exact_mutation_analysis changes nothing, and the recorded HOP launches for real.
    x, y = torch.randn(40, device="cuda"), torch.randn(40, device="cuda")
    for fn in (add_tuple_grid, add_lambda_grid, add_num_warps, add_with(autotuned_add_kernel)):
        gm = trace(fn, x, y)
        (node,) = hops(gm)
        assert kernel_writes(node).names == ["out_ptr"]
        torch.testing.assert_close(gm(x, y), x + y)
