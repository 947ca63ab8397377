"""Triton kernels inside a jitted function, end to end against eager references.

Every program runs on CPU (launches go through Triton's interpreter from the compiled program) and, marked
`gpu`, on CUDA (launches go native once Triton compiled the variant). References are plain torch
computations of what each kernel does. Each test asserts what ran: exact specializations, every call a native
hit, no eager call; on CUDA, each launch site native after the launch that registers each variant."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from helpers_native import assert_launches_native, assert_native

import trident
from trident.testing import count_compiles


def assert_ran(fn: object, device: str, *, hits: int, compiles: int) -> None:
    """Native hits and specializations (helpers_native.assert_native); on CUDA also the launch sites' counts."""
    assert_native(fn, hits=hits, compiles=compiles)
    if device == "cuda":
        assert_launches_native(fn)

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def scale_rows_kernel(x_ptr, out_ptr, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * n_cols + cols, mask=mask)
        tl.store(out_ptr + row * n_cols + cols, x * scale, mask=mask)


@triton.jit
def write_cache_kernel(cache_ptr, k_ptr, pos, stride_row, D: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, D)
    tl.store(cache_ptr + row * stride_row + pos * D + cols, tl.load(k_ptr + row * D + cols))


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(out_ptr + row * stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0)
    mean = tl.sum(x, axis=0) / n_cols
    centered = tl.where(mask, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask)
    b = tl.load(b_ptr + cols, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, centered * rstd * w + b, mask=mask)


@triton.autotune(
    configs=[triton.Config({"BM": 16, "BN": 16, "BK": 16}, num_warps=2),
             triton.Config({"BM": 32, "BN": 16, "BK": 16}, num_warps=4)],
    key=["M", "N", "K"],
)
@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision="ieee")
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"])
@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@torch.library.triton_op("trident_test::scaled_add", mutates_args={})
def scaled_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    out = torch.empty_like(x)
    torch.library.wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out * alpha


@pytest.mark.parametrize("device", DEVICES)
def test_elementwise_tuple_grid_mixed_with_aten(device: str) -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out * 2

    x, y = torch.randn(37, device=device), torch.randn(37, device=device)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(fn(x, y), (x + y) * 2)
    assert_ran(fn, device, hits=2, compiles=1)


@pytest.mark.parametrize("device", DEVICES)
def test_lambda_grid_loop_kernel_and_float_argument(device: str) -> None:
    @trident.jit
    def fn(x, scale: float):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        grid = lambda meta: (x.shape[0],)  # noqa: E731
        scale_rows_kernel[grid](x, out, x.shape[1], scale, BLOCK=8)
        return out

    x = torch.randn(3, 21, device=device)
    for _ in range(2):
        torch.testing.assert_close(fn(x, 0.5), x * 0.5)
    assert_ran(fn, device, hits=2, compiles=1)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_writes_kv_cache_in_place_at_int_position(device: str) -> None:
    @trident.jit
    def step(cache, k, pos):  # type: ignore[no-untyped-def]
        write_cache_kernel[(cache.shape[0],)](cache, k, pos, cache.stride(0), D=4)
        return cache[:, : (pos + 1) * 4].sum(dim=1)

    cache, expected = torch.zeros(2, 8 * 4, device=device), torch.zeros(2, 8 * 4, device=device)
    with count_compiles() as compiles:
        for pos in range(6):
            k = torch.randn(2, 4, device=device)
            expected[:, pos * 4 : pos * 4 + 4] = k
            out = step(cache, k, pos)
            torch.testing.assert_close(cache, expected)
            torch.testing.assert_close(out, expected[:, : (pos + 1) * 4].sum(dim=1))
    assert compiles() == 2, trident.explain(step)  # pos 0 a constant, then pos symbolic for 1-5
    assert_ran(step, device, hits=6, compiles=2)


@pytest.mark.parametrize("device", DEVICES)
def test_three_kernels_and_matmuls(device: str) -> None:
    w = torch.randn(16, 16, device=device)

    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        a = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, a, x.numel(), BLOCK=32)
        b = a @ w
        c = torch.empty_like(b)
        scale_rows_kernel[(b.shape[0],)](b, c, b.shape[1], 3.0, BLOCK=16)
        d = torch.empty_like(c)
        add_kernel[(triton.cdiv(c.numel(), 64),)](c, x, d, c.numel(), BLOCK=64)
        return d @ w.t()

    x, y = torch.randn(4, 16, device=device), torch.randn(4, 16, device=device)
    for _ in range(2):
        torch.testing.assert_close(fn(x, y), ((((x + y) @ w) * 3.0) + x) @ w.t(), rtol=1e-4, atol=1e-4)
    assert_ran(fn, device, hits=2, compiles=1)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_sized_grid_launches_nothing(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch whose grid has a zero dimension launches nothing (as in Triton) from the compiled code: neither
    the interpreter nor Triton's launcher is reached, the call is a native hit, and the results are eager's;
    the next non-empty call of the same program does launch (so the counting sees launches)."""
    import trident.capture.triton_launches as launches

    reached: list[str] = []
    run_on_cpu, with_triton = launches.run_recorded_launch_on_cpu, launches.RecordedLaunch._launch_with_triton
    monkeypatch.setattr(launches, "run_recorded_launch_on_cpu",
                        lambda *a, **k: reached.append("interpreter") or run_on_cpu(*a, **k))
    monkeypatch.setattr(launches.RecordedLaunch, "_launch_with_triton",
                        lambda self, *a, **k: reached.append("triton") or with_triton(self, *a, **k))

    def program(x, y):  # type: ignore[no-untyped-def]
        out = torch.full_like(x, 7.0)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out, x.numel(), (x * 2).sum()

    fn = trident.jit(program)
    empty = torch.randn(0, device=device)
    with torch.no_grad(), count_compiles() as compiles:
        out, n, total = fn(empty, empty)
        assert reached == []  # nothing launched
        # eager's values (computed without the kernel: an eager launch on CPU tensors needs TRITON_INTERPRET)
        assert (out.shape, out.stride(), out.dtype, out.device) == ((0,), (1,), empty.dtype, empty.device)
        assert n == 0 and torch.equal(total, (empty * 2).sum())
        x, y = torch.randn(40, device=device), torch.randn(40, device=device)
        torch.testing.assert_close(fn(x, y)[0], x + y)  # a grid of 3: launched once
    assert reached == ["interpreter" if device == "cpu" else "triton"]
    assert compiles() == 2 and fn._trident.entry.hits() == [1, 1] and fn._trident.eager_calls == 0


@pytest.mark.parametrize("device", DEVICES)
def test_misaligned_view_gives_the_right_result(device: str) -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
        return out

    base, y = torch.randn(33, device=device), torch.randn(32, device=device)
    with count_compiles() as compiles:
        torch.testing.assert_close(fn(base[:32], y), base[:32] + y)
        torch.testing.assert_close(fn(base[1:], y), base[1:] + y)  # offset 1: not 16-byte aligned
        torch.testing.assert_close(fn(base[:32], y), base[:32] + y)  # the first specialization again
    assert compiles() == 2  # storage offset 0, then offset 1 (a new offset; alignment guarded for Triton)
    assert_ran(fn, device, hits=3, compiles=2)


@pytest.mark.parametrize("device", DEVICES)
def test_fused_softmax_rows(device: str) -> None:
    @trident.jit
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), BLOCK=triton.next_power_of_2(x.shape[1]))
        return out

    for cols in (20, 20, 30):  # the second call hits, the third recompiles for the new width
        x = torch.randn(5, cols, device=device)
        torch.testing.assert_close(fn(x), torch.softmax(x, dim=1))
    assert_ran(fn, device, hits=3, compiles=2)


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_then_aten_linear(device: str) -> None:
    w, b = torch.randn(24, device=device), torch.randn(24, device=device)
    proj = torch.randn(24, 8, device=device)

    @trident.jit
    def fn(x, eps: float):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        layer_norm_kernel[(x.shape[0],)](x, w, b, out, x.shape[1], eps, BLOCK=32)
        return out @ proj

    x = torch.randn(6, 24, device=device)
    expected = torch.nn.functional.layer_norm(x, (24,), w, b, 1e-5) @ proj
    for _ in range(2):
        torch.testing.assert_close(fn(x, 1e-5), expected, rtol=1e-4, atol=1e-4)
    assert_ran(fn, device, hits=2, compiles=1)


@pytest.mark.parametrize("device", DEVICES)
def test_autotuned_matmul_with_meta_grid(device: str) -> None:
    @trident.jit
    def fn(a, b):  # type: ignore[no-untyped-def]
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, device=a.device)
        grid = lambda META: (triton.cdiv(M, META["BM"]), triton.cdiv(N, META["BN"]))  # noqa: E731
        matmul_kernel[grid](a, b, c, M, N, K)
        return c + 1

    for m in (40, 40, 24):
        a, b = torch.randn(m, 32, device=device), torch.randn(32, 48, device=device)
        torch.testing.assert_close(fn(a, b), a @ b + 1, rtol=1e-4, atol=1e-4)
    assert_ran(fn, device, hits=3, compiles=2)  # M=40 a constant; M=24 makes it symbolic


@pytest.mark.parametrize("device", DEVICES)
def test_autotuned_elementwise_meta_grid_over_changing_sizes(device: str) -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        tuned_add_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, y, out, x.numel())
        return out

    for n in (100, 64, 1, 48, 100, 17):
        x, y = torch.randn(n, device=device), torch.randn(n, device=device)
        torch.testing.assert_close(fn(x, y), x + y)
    # 3: n=100 a constant; n=64 makes it symbolic (a size >= 2), which takes 48 and 17; n=1 its own (the
    # ShapeEnv specializes a size of 1); 100 again is the first specialization's.
    assert_ran(fn, device, hits=6, compiles=3)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_library_triton_op_is_traced_into(device: str) -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        return scaled_add(x, y, 0.5) + 1

    x, y = torch.randn(40, device=device), torch.randn(40, device=device)
    for _ in range(2):
        torch.testing.assert_close(fn(x, y), (x + y) * 0.5 + 1)
    (spec,) = fn._trident.specializations
    assert len(spec.compiled.launch_sites) == 1  # the kernel launch itself, not the custom op
    assert not any("scaled_add" in call for call in spec.compiled.aten_calls)
    assert_ran(fn, device, hits=2, compiles=1)


@pytest.mark.gpu
def test_kernels_on_cuda_and_a_non_default_stream() -> None:
    w = torch.randn(16, 16, device="cuda")

    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        a = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, a, x.numel(), BLOCK=32)
        b = torch.empty_like(a)
        scale_rows_kernel[(a.shape[0],)](a, b, a.shape[1], 3.0, BLOCK=16)
        return b @ w

    x, y = torch.randn(4, 16, device="cuda"), torch.randn(4, 16, device="cuda")
    expected = ((x + y) * 3.0) @ w
    torch.testing.assert_close(fn(x, y), expected, rtol=1e-3, atol=1e-3)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        out = fn(x, y)
    stream.synchronize()
    torch.testing.assert_close(out, expected, rtol=1e-3, atol=1e-3)
    text = trident.explain(fn)
    assert "specialization 0" in text and "cuda:0" in text
    assert_ran(fn, "cuda", hits=2, compiles=1)  # the stream is read per call, not guarded
