"""When a pooled CUDA matmul site's cuBLASLt plan may run (csrc/matmul_plan.cpp, docs/design.md): only for
operands with the strides and alignment it was made for and under the cuBLAS settings it was made under (preferred
BLAS library, deterministic algorithms); otherwise ATen's kernel computes the call, bit for bit eager's. A plan
that cannot be made leaves the call running on ATen's kernel, with the reason in explain.

Each test warms a site until it runs its plan, changes one condition, and checks that the plan stopped running
(planned_matmuls unchanged, direct_matmuls up), that the result is eager's bits, and, where the condition comes
back, that the plan runs again. The site is one bf16 decode-shaped projection whose plan test_matmul_plans.py
shows is made (cuBLASLt's first pick computes cuBLAS's bits there). GPU only."""
from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

import trident
from trident.knobs import override
from trident.testing import count_compiles


@pytest.fixture(autouse=True)
def _direct_path():  # type: ignore[no-untyped-def]
    """These tests count what the direct path does per call (pool reuses, plans, ATen matmuls); a CUDA graph
    replay does none of it, so graph replay is off here (tests/e2e/test_cuda_graphs.py covers it)."""
    with override(cuda_graphs=False):
        yield


F = torch.nn.functional

pytestmark = pytest.mark.gpu

ROWS, K, N = 8, 2048, 3072


def _pool(jitted: object) -> object:
    return jitted._trident.specializations[-1].compiled.buffer_pool  # type: ignore[attr-defined]


def _counts(jitted: object) -> tuple[int, int]:
    pool = _pool(jitted)
    return pool.planned_matmuls, pool.direct_matmuls  # type: ignore[attr-defined]


def _plans(jitted: object) -> list[str | None]:
    """Per site that tried: None (it has a plan) or why it has none."""
    return list(_pool(jitted).matmul_plans.values())  # type: ignore[attr-defined]


def _projection(seed: int) -> Callable[[torch.Tensor], torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16, generator=gen) * 0.02

    def layer(x):  # type: ignore[no-untyped-def]
        return (F.linear(x, w) * 2).sum(0)  # the mm's result is an intermediate: a pooled matmul site

    return layer


def _inputs(count: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.randn(ROWS, K, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(count)]


def _call(jitted: Callable[..., torch.Tensor], layer: Callable[..., torch.Tensor], x: torch.Tensor) -> None:
    with torch.no_grad():
        actual, expected = jitted(x), layer(x)
    assert torch.equal(actual, expected), "not eager's bits"


def _warm(layer: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """The jitted layer after two calls: the first made the plan, the second ran it."""
    jitted = trident.jit(layer)
    for x in _inputs(2):
        _call(jitted, layer, x)
    assert _plans(jitted) == [None], _plans(jitted)
    assert _counts(jitted) == (1, 1)
    return jitted


@pytest.fixture
def deterministic() -> Iterator[Callable[[bool], None]]:
    """Switches torch.use_deterministic_algorithms (warn_only: cuBLAS's workspace check warns, in eager too)."""
    saved = torch.are_deterministic_algorithms_enabled()
    saved_warn = torch.is_deterministic_algorithms_warn_only_enabled()

    def switch(on: bool) -> None:
        torch.use_deterministic_algorithms(on, warn_only=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield switch
    torch.use_deterministic_algorithms(saved, warn_only=saved_warn)


def test_deterministic_algorithms_bypass_the_plan(deterministic: Callable[[bool], None]) -> None:
    layer = _projection(0)
    jitted = _warm(layer)
    x = _inputs(1, seed=1)[0]
    with count_compiles() as compiles:
        deterministic(True)
        _call(jitted, layer, x)
        _call(jitted, layer, x)
        assert _counts(jitted) == (1, 3)  # ATen's kernel both times: the plan was made with them off
        deterministic(False)
        _call(jitted, layer, x)
        assert _counts(jitted) == (2, 3)  # the plan again
    assert compiles() == 0  # not a guard: the same specialization decides per call


def test_a_changed_preferred_blas_library_bypasses_the_plan() -> None:
    layer = _projection(1)
    jitted = _warm(layer)
    x = _inputs(1, seed=2)[0]
    saved = torch.backends.cuda.preferred_blas_library()
    other = "cublaslt" if saved == torch._C._BlasBackend.Cublas else "cublas"
    with count_compiles() as compiles:
        try:
            torch.backends.cuda.preferred_blas_library(other)
            assert torch.backends.cuda.preferred_blas_library() != saved
            _call(jitted, layer, x)  # eager's bits under the other library
            assert _counts(jitted) == (1, 2)
        finally:
            torch.backends.cuda.preferred_blas_library(saved)
        _call(jitted, layer, x)
        assert _counts(jitted) == (2, 2)
    assert compiles() == 0


def test_new_strides_in_a_symbolic_specialization_bypass_the_plan() -> None:
    """Rows of wider buffers: the row stride changes every call, so the second call's specialization traces it
    symbolically; its site makes a plan for that stride and must not run it for another."""
    layer = _projection(2)
    jitted = trident.jit(layer)
    gen = torch.Generator(device="cuda").manual_seed(3)

    def rows(width: int) -> torch.Tensor:
        return torch.randn(ROWS, width, device="cuda", dtype=torch.bfloat16, generator=gen)[:, :K]

    with count_compiles() as compiles:
        _call(jitted, layer, rows(K + 64))  # specialization 0: constant strides
        _call(jitted, layer, rows(K + 128))  # specialization 1: symbolic row stride; the plan is made for K + 128
        assert compiles() == 2, trident.explain(jitted)
        assert _plans(jitted) == [None], _plans(jitted)
        _call(jitted, layer, rows(K + 128))
        assert _counts(jitted) == (1, 1)
        _call(jitted, layer, rows(K + 192))  # another stride: ATen's kernel
        assert _counts(jitted) == (1, 2)
        _call(jitted, layer, rows(K + 128))
        assert _counts(jitted) == (2, 2)
    assert compiles() == 2


def test_a_less_aligned_operand_bypasses_the_plan() -> None:
    """Alignment is not guarded: a symbolic storage offset lets one specialization see x at 256-byte and at
    16-byte alignment. A plan made for the former must not run for the latter."""
    layer = _projection(3)
    jitted = trident.jit(layer)
    storage = torch.randn(ROWS * K + 512, device="cuda", dtype=torch.bfloat16)
    assert storage.data_ptr() % 512 == 0  # the caching allocator's blocks

    def at(offset: int) -> torch.Tensor:  # bf16: 2 bytes per element
        return storage[offset : offset + ROWS * K].view(ROWS, K)

    with count_compiles() as compiles:
        _call(jitted, layer, at(0))  # specialization 0: offset 0
        _call(jitted, layer, at(128))  # specialization 1: symbolic offset; plan made at 256-byte alignment
        assert compiles() == 2, trident.explain(jitted)
        assert _plans(jitted) == [None], _plans(jitted)
        _call(jitted, layer, at(256))
        assert _counts(jitted) == (1, 1)
        _call(jitted, layer, at(8))  # 16 bytes: aligned for the guards' 16-byte view of the world, not the plan's
        assert _counts(jitted) == (1, 2)
        _call(jitted, layer, at(384))
        assert _counts(jitted) == (2, 2)
    assert compiles() == 2


def test_a_plan_that_cannot_be_made_leaves_the_call_on_atens_kernel(deterministic: Callable[[bool], None]) -> None:
    """The site's first call happens under deterministic algorithms: no plan is made (the site tries once), the
    call and every later one are computed by ATen's kernel, and explain says why."""
    layer = _projection(4)
    jitted = trident.jit(layer)
    deterministic(True)
    xs = _inputs(3, seed=5)
    _call(jitted, layer, xs[0])
    deterministic(False)
    for x in xs[1:]:
        _call(jitted, layer, x)
    (why,) = _pool(jitted).matmul_plans.values()  # type: ignore[attr-defined]
    assert why is not None and why.startswith("deterministic algorithms are on"), why
    assert _counts(jitted) == (0, 3)
    assert "not planned: deterministic algorithms are on" in trident.explain(jitted)
    assert jitted._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_a_degenerate_problem_makes_no_plan_and_runs() -> None:
    w = torch.randn(64, 1, device="cuda", dtype=torch.bfloat16)

    def outer(x):  # type: ignore[no-untyped-def]
        return F.linear(x, w).float().sum(0)  # inner width 1: cuBLASLt plans need 2

    jitted = trident.jit(outer)
    with count_compiles() as compiles:
        for _ in range(3):  # fresh tensors: the same layout every call, one specialization
            _call(jitted, outer, torch.randn(ROWS, 1, device="cuda", dtype=torch.bfloat16))
    assert compiles() == 1
    plans = _pool(jitted).matmul_plans  # type: ignore[attr-defined]
    assert list(plans.values()) == ["a degenerate problem (no rows, or an inner or output width below 2)"], plans
    assert _counts(jitted) == (0, 3)
