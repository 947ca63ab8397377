"""cuBLASLt plans of pooled CUDA matmul sites (csrc/matmul_plan.cpp): made on a site's first call, kept only
when they compute ATen's bits, used only for the operands and cuBLAS settings they were made for."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.knobs import override
from trident.runtime import load_runtime


@pytest.fixture(autouse=True)
def _direct_path():  # type: ignore[no-untyped-def]
    """These tests count what the direct path does per call (pool reuses, plans, ATen matmuls); a CUDA graph
    replay does none of it, so graph replay is off here (tests/e2e/test_cuda_graphs.py covers it)."""
    with override(cuda_graphs=False):
        yield


F = torch.nn.functional


def _pool(jitted: object) -> object:
    return jitted._trident.specializations[-1].compiled.buffer_pool  # type: ignore[attr-defined]


def test_cpu_matmuls_never_make_plans() -> None:
    weight = torch.randn(16, 8)

    def f(x):  # type: ignore[no-untyped-def]
        return F.linear(x, weight).relu()

    jitted = trident.jit(f)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 8)
            torch.testing.assert_close(jitted(x), f(x))
    pool = _pool(jitted)
    assert (pool.planned_matmuls, pool.direct_matmuls, pool.matmul_plans) == (0, 0, {})  # type: ignore[attr-defined]


def _decode_layer(dtype: torch.dtype, seed: int):  # type: ignore[no-untyped-def]
    """A Llama-shaped projection pair (mm, mm) and a GPT-2-shaped biased one (addmm), all pooled."""
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w_in = torch.randn(3072, 2048, device="cuda", dtype=dtype, generator=gen) * 0.02
    w_out = torch.randn(2048, 3072, device="cuda", dtype=dtype, generator=gen) * 0.02
    bias = torch.randn(2048, device="cuda", dtype=dtype, generator=gen)

    def layer(x):  # type: ignore[no-untyped-def]
        h = F.linear(x, w_in)  # mm
        y = F.linear(h, w_out, bias)  # addmm
        return (F.linear(h, w_out) + y).sum(0)  # mm; the result is a fresh sum

    return layer, gen


def _jit_and_run(layer, gen, dtype: torch.dtype, rows: int, calls: int):  # type: ignore[no-untyped-def]
    """trident.jit(layer) called `calls` times on fresh inputs, each result bitwise equal to eager's."""
    jitted = trident.jit(layer)
    with torch.no_grad():
        for _ in range(calls):
            x = torch.randn(rows, 2048, device="cuda", dtype=dtype, generator=gen)
            assert torch.equal(jitted(x), layer(x))
    return jitted


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_plans_compute_eagers_bits(rows: int, dtype: torch.dtype) -> None:
    layer, gen = _decode_layer(dtype, rows)
    pool = _pool(_jit_and_run(layer, gen, dtype, rows, calls=4))
    plans = pool.matmul_plans  # type: ignore[attr-defined]
    assert len(plans) == 3, plans  # every CUDA matmul site tried once
    assert all(why is None or isinstance(why, str) and why for why in plans.values()), plans
    planned = sum(why is None for why in plans.values())
    # The two plain matmuls are the decode step's bulk: cuBLASLt's first pick must be cuBLAS's own there.
    assert planned >= 2, plans
    assert pool.planned_matmuls == 3 * planned  # type: ignore[attr-defined]  # calls 2-4 of each planned site
    assert pool.direct_matmuls == 3 + 3 * (3 - planned)  # type: ignore[attr-defined]
    assert "through cuBLASLt plans" in trident.explain(_jit_and_run(layer, gen, dtype, rows, calls=2))


@pytest.mark.gpu
def test_float32_and_the_knob_keep_atens_kernel() -> None:
    for dtype, plans_on in ((torch.float32, True), (torch.bfloat16, False)):
        layer, gen = _decode_layer(dtype, 0)
        with override(matmul_plans=plans_on):
            pool = _pool(_jit_and_run(layer, gen, dtype, 1, calls=3))
        assert pool.planned_matmuls == 0, (dtype, pool.matmul_plans)  # type: ignore[attr-defined]
        assert pool.direct_matmuls == 9  # type: ignore[attr-defined]
        if plans_on:
            assert set(pool.matmul_plans.values()) == {"dtype Float: plans cover bfloat16 and float16"}  # type: ignore[attr-defined]
        else:
            assert pool.matmul_plans == {}  # type: ignore[attr-defined]


@pytest.mark.gpu
def test_a_changed_cublas_setting_bypasses_the_plan() -> None:
    """allow_bf16_reduced_precision_reduction changes ATen's cuBLAS math mode: a plan made under the other
    setting must not run, and the result follows eager under the new setting."""
    layer, gen = _decode_layer(torch.bfloat16, 1)
    jitted = trident.jit(layer)
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_bf16_reduced_precision_reduction
    with torch.no_grad():
        x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16, generator=gen)
        jitted(x)
        jitted(x)
        planned = _pool(jitted).planned_matmuls  # type: ignore[attr-defined]
        assert planned > 0, _pool(jitted).matmul_plans  # type: ignore[attr-defined]
        try:
            matmul.allow_bf16_reduced_precision_reduction = not saved
            assert torch.equal(jitted(x), layer(x))
            assert _pool(jitted).planned_matmuls == planned  # type: ignore[attr-defined]
        finally:
            matmul.allow_bf16_reduced_precision_reduction = saved
        assert torch.equal(jitted(x), layer(x))
        assert _pool(jitted).planned_matmuls > planned  # type: ignore[attr-defined]  # back under the plan's setting


@pytest.mark.gpu
def test_plans_stay_out_of_cuda_graph_captures() -> None:
    layer, gen = _decode_layer(torch.bfloat16, 2)
    jitted = trident.jit(layer)
    x = torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16, generator=gen)
    with torch.no_grad():
        jitted(x)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            jitted(x)
        torch.cuda.current_stream().wait_stream(side)
        planned = _pool(jitted).planned_matmuls  # type: ignore[attr-defined]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = jitted(x)
        assert _pool(jitted).planned_matmuls == planned  # type: ignore[attr-defined]
        x.copy_(torch.randn(1, 2048, device="cuda", dtype=torch.bfloat16, generator=gen))
        graph.replay()
        assert torch.equal(out, layer(x))
