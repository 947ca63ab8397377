"""Native Triton launches on the GPU: variants per specialization, never a kernel compiled for another one.

Each launch site starts on Triton's launcher; the variant Triton compiled is then launched natively for every
later call with the same specialization key (alignment, ints == 1 / % 16 / wider than 32 bits, autotune keys,
constexprs computed from sizes). These tests change exactly those facts inside one compiled specialization
(dynamic ints and sizes) and check results against eager plus the site's variant counts, and what ran
(helpers_native): exact specializations, every successful call a native hit, no eager call, and every site
through Triton's launcher only for the launch that registered each of its variants."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from helpers_native import assert_launches_native, assert_native

import trident
from trident.exc import KernelLaunchError
from trident.testing import count_compiles, triton_launch_sites

from .test_triton_kernels import add_kernel

pytestmark = pytest.mark.gpu


@triton.jit
def fill_rows_kernel(out_ptr, value, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + row * n_cols + cols, tl.full((BLOCK,), value, tl.float32), mask=cols < n_cols)


@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 128})], key=["n"])
@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def only_site(fn: object) -> object:
    sites = triton_launch_sites(fn)  # type: ignore[arg-type]
    return sites[-1]


def test_hits_launch_natively_after_triton_compiled_the_variant() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), BLOCK=64)
        return out

    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    for _ in range(5):
        torch.testing.assert_close(fn(x, y), x + y)
    site = only_site(fn)
    assert site.disabled_reason is None, site.disabled_reason
    assert (site.variant_count, site.fallback_launches, site.native_launches) == (1, 1, 4)
    assert "launched natively, 1 compiled variant(s), 4 native launch(es)" in trident.explain(fn)
    assert_native(fn, hits=5, compiles=1)


def test_misaligned_pointer_inside_one_specialization_gets_its_own_variant() -> None:
    @trident.jit
    def fn(x, y, k):  # type: ignore[no-untyped-def]
        view = x[k : k + 256]  # k is dynamic after two values: aligned only when k % 4 == 0 (fp32)
        out = torch.empty_like(y)
        add_kernel[(4,)](view, y, out, 256, BLOCK=64)
        return out

    x, y = torch.randn(1024, device="cuda"), torch.randn(256, device="cuda")
    with count_compiles() as compiles:
        for k in (0, 1, 4, 5, 8, 3, 12, 1):
            torch.testing.assert_close(fn(x, y, k), x[k : k + 256] + y)
    assert compiles() == 2  # k=0 a constant; k=1 makes it symbolic, which takes the rest
    site = only_site(fn)
    assert site.variant_count == 2  # aligned and unaligned x pointer
    assert (site.fallback_launches, site.native_launches) == (2, 5)  # k = 1 and 4 register; the rest native
    assert_native(fn, hits=8, compiles=2)
    assert_launches_native(fn)


def test_int_equal_to_one_divisible_by_16_and_other_get_their_variants() -> None:
    @trident.jit
    def fn(x, y, m):  # type: ignore[no-untyped-def]
        n = m - 100  # an expression of a dynamic int: its value 1 is not specialized away by the ShapeEnv
        out = torch.zeros_like(x)
        add_kernel[(triton.cdiv(n, 64),)](x, y, out, n, BLOCK=64)
        return out  # not out[:n]: a size n would make the ShapeEnv specialize n == 1 into its own entry

    x, y = torch.randn(256, device="cuda"), torch.randn(256, device="cuda")
    with count_compiles() as compiles:
        for m in (132, 148, 164, 117, 101, 133, 101, 260, 115):
            n = m - 100
            expected = torch.zeros_like(x)
            expected[:n] = (x + y)[:n]
            torch.testing.assert_close(fn(x, y, m), expected)
    assert compiles() == 2  # m=132 a constant; m=148 makes it symbolic, which takes the rest
    site = only_site(fn)
    assert site.variant_count == 3  # n % 16 == 0, n == 1 (a constexpr for Triton), other
    assert (site.fallback_launches, site.native_launches) == (3, 5)
    assert_native(fn, hits=9, compiles=2)
    assert_launches_native(fn)


def test_autotune_key_change_selects_the_winner_for_that_key() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        tuned_add_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, y, out, x.numel())
        return out

    for n in (4096, 8192, 100000, 8192, 16384, 100000):  # 4096 only: the first, static specialization
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        torch.testing.assert_close(fn(x, y), x + y)
    site = only_site(fn)
    assert site.disabled_reason is None, site.disabled_reason
    assert (site.variant_count, site.native_launches) == (3, 2)
    assert_native(fn, hits=6, compiles=2)  # n=4096 a constant; n=8192 makes it symbolic, which takes the rest
    assert_launches_native(fn)


def test_launch_error_names_the_kernel_and_the_function_stays_usable() -> None:
    @trident.jit
    def fn(out, rows):  # type: ignore[no-untyped-def]
        fill_rows_kernel[(1, rows)](out, 2.0, out.shape[1], BLOCK=32)
        return out

    out = torch.zeros(70000, 32, device="cuda")
    fn(out, 2)
    fn(out, 3)  # rows is dynamic now; this call registers the variant
    fn(out, 4)
    with pytest.raises(KernelLaunchError, match="fill_rows_kernel.*CUDA_ERROR_INVALID_VALUE"):
        fn(out, 70000)  # grid y above 65535: the driver refuses the launch
    out.zero_()
    fn(out, 5)
    torch.cuda.synchronize()
    assert out[:5].eq(2.0).all() and out[5:].eq(0.0).all()
    # rows=2 a constant; rows=3 makes it symbolic. The refused launch is no hit (the call raised): 4 hits.
    assert_native(fn, hits=4, compiles=2)
    assert_launches_native(fn)


def test_native_launches_follow_the_current_stream() -> None:
    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
        return out * 2

    x, y = torch.randn(1 << 20, device="cuda"), torch.randn(1 << 20, device="cuda")
    fn(x, y)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # delays the side stream: a kernel launched elsewhere would run first
        y.add_(1)  # ...and so read y before this update
        out = fn(x, y)
    stream.synchronize()
    torch.testing.assert_close(out, (x + y) * 2)
    assert only_site(fn).native_launches == 1
    assert_native(fn, hits=2, compiles=1)  # the current stream is read per call, not guarded
    assert_launches_native(fn)


def test_explain_lists_every_launch_of_a_multi_kernel_function() -> None:
    w = torch.randn(64, 64, device="cuda")

    @trident.jit
    def fn(x, y):  # type: ignore[no-untyped-def]
        a = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), 64),)](x, y, a, x.numel(), BLOCK=64)
        b = a @ w
        c = torch.empty_like(b)
        add_kernel[(triton.cdiv(b.numel(), 64),)](b, x, c, b.numel(), BLOCK=64)
        return c

    x, y = torch.randn(8, 64, device="cuda"), torch.randn(8, 64, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(fn(x, y), (x + y) @ w + x, rtol=1e-3, atol=1e-3)
    text = trident.explain(fn)
    print(text)
    # Both add_kernel sites describe alike, so explain lists them once with their count.
    assert "Triton kernel 'add_kernel': launched natively, 1 compiled variant(s), 2 native launch(es), 1 through " \
        "Triton's launcher (2 sites)" in text
    assert_native(fn, hits=3, compiles=1)
    assert_launches_native(fn)


@triton.jit
def big_tile_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * K + rk[None, :], mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * N + rn[None, :], mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))


def test_kernel_with_more_than_48kb_of_shared_memory() -> None:
    @trident.jit
    def fn(a, b):  # type: ignore[no-untyped-def]
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty(M, N, device=a.device, dtype=torch.bfloat16)
        big_tile_matmul_kernel[(triton.cdiv(M, 128), triton.cdiv(N, 256))](
            a, b, c, M, N, K, BM=128, BN=256, BK=64, num_stages=3, num_warps=8
        )
        return c

    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        torch.testing.assert_close(fn(a, b).float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-1)
    site = only_site(fn)
    (variant,) = site.fallback.variant_table.variants
    assert variant.compiled.metadata.shared > 48 * 1024, variant.compiled.metadata.shared
    assert site.native_launches == 2
    assert_native(fn, hits=3, compiles=1)
    assert_launches_native(fn)
