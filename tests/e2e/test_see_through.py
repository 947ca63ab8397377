"""Python-implemented operators seen through at capture (capture/python_kernels.py, issue 20).

Small libraries written the way real ones are: `torch.library.custom_op`s whose implementation picks a config
from a module-level dict and launches a (autotuned) Triton kernel, one with a mutated `out` argument; Python
kernels registered for ATen's pointwise operators with `torch.library.Library("aten", "IMPL")`, as flag-gems'
`enable()` does; a body with `.item()`, and bodies that break their schema. Each runs under trident.jit on CPU
(Triton through its interpreter; eager's own launches through `interpret_cpu_launches`, as the library tests do)
and, marked `gpu`, on CUDA; each is compared with eager, with its launch sites, native hits and `explain`.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import torch
import triton
import triton.language as tl

from helpers_native import assert_launches_native, assert_native
from list_operand_ops import shifted_sum_step
from region_kernels import HAS_MAP_ELEMENTWISE, clamp_kernel

import trident
from trident.capture import triton_launches
from trident.capture.triton_launches import interpret_cpu_launches
from trident.knobs import override
from trident.testing import count_compiles, expect_fallback, triton_launch_sites

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def eager(device: str) -> contextlib.AbstractContextManager[None]:
    """Eager Triton launches on CPU tensors through the interpreter (no GPU here); nothing on CUDA."""
    return interpret_cpu_launches() if device == "cpu" else contextlib.nullcontext()


def hits(f: object) -> int:
    return sum(f._trident.entry.hits())  # type: ignore[attr-defined]


def aten_calls(f: object) -> list[str]:
    return [call for spec in f._trident.specializations for call in spec.compiled.aten_calls]  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------------------
# A GEMV library: custom ops, a config table, an autotuned kernel


@triton.autotune(
    configs=[triton.Config({"BLOCK_K": 16}, num_warps=2), triton.Config({"BLOCK_K": 32}, num_warps=4)],
    key=["N", "K"],
)
@triton.jit
def _gemv_kernel(w_ptr, x_ptr, out_ptr, N, K, scale, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        w = tl.load(w_ptr + rows[:, None] * K + cols[None, :], mask=(rows[:, None] < N) & (cols[None, :] < K), other=0.0)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(out_ptr + rows, acc * scale, mask=rows < N)


# What a library keeps at module level: rows per program by problem size, read on every call.
GEMV_CONFIGS = {"small": {"BLOCK_N": 16}, "large": {"BLOCK_N": 32}}


def _gemv_config(n: int) -> dict[str, int]:
    return GEMV_CONFIGS["small" if n <= 48 else "large"]


def _launch_gemv(w: torch.Tensor, x: torch.Tensor, out: torch.Tensor, scale: float) -> None:
    n, k = w.shape
    block_n = _gemv_config(n)["BLOCK_N"]
    _gemv_kernel[(triton.cdiv(n, block_n),)](w, x, out, n, k, scale, BLOCK_N=block_n)


@torch.library.custom_op("trident_see_through::gemv", mutates_args=())
def gemv(w: torch.Tensor, x: torch.Tensor, scale: float) -> torch.Tensor:
    out = torch.empty(w.shape[0], device=x.device, dtype=torch.float32)
    _launch_gemv(w, x, out, scale)
    return out


@gemv.register_fake
def _(w: torch.Tensor, x: torch.Tensor, scale: float) -> torch.Tensor:
    return w.new_empty(w.shape[0], dtype=torch.float32)


@torch.library.custom_op("trident_see_through::gemv_out", mutates_args=("out",))
def gemv_out(w: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    _launch_gemv(w, x, out, 1.0)


@gemv_out.register_fake
def _(w: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> None:
    return None


@torch.library.custom_op("trident_see_through::normalize", mutates_args=())
def normalize(x: torch.Tensor) -> torch.Tensor:
    return x / x.abs().max().item()  # a host read: capture cannot see through this one


@normalize.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


_addresses_seen: list[int] = []


@torch.library.custom_op("trident_see_through::by_address", mutates_args=())
def by_address(x: torch.Tensor) -> torch.Tensor:
    _addresses_seen.append(x.data_ptr())  # as a library keying a cache or a host descriptor on the address
    return x * 2


@by_address.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("trident_see_through::bump", mutates_args=())
def bump(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)  # writes its argument, which the schema does not declare
    return x * 2


@bump.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


# ---------------------------------------------------------------------------------------------------------
# A quantization library's launches: what torch's own analysis of a kernel's writes cannot read from the call


@triton.heuristics({"EVEN_K": lambda args: args["K"] % 32 == 0})
@triton.jit
def _int8_gemv_kernel(w_ptr, s_ptr, x_ptr, out_ptr, N, K, stride_w, BLOCK_N: tl.constexpr,
                      BLOCK_K: tl.constexpr = 32, EVEN_K: tl.constexpr = False, ACC_FP32: tl.constexpr = True):
    rows = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = (rows[:, None] < N) & (cols[None, :] < K)
        w = tl.load(w_ptr + rows[:, None] * stride_w + cols[None, :], mask=mask, other=0).to(tl.float32)
        x = tl.load(x_ptr + cols, mask=cols < K, other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    scales = tl.load(s_ptr + rows, mask=rows < N, other=0.0)
    tl.store(out_ptr + rows, acc * scales, mask=rows < N)


@torch.library.custom_op("trident_see_through::int8_gemv", mutates_args=())
def int8_gemv(w: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    n, k = w.shape
    out = torch.empty(n, device=x.device, dtype=torch.float32)
    # BLOCK_K and ACC_FP32 left to their defaults, EVEN_K to the heuristic
    _int8_gemv_kernel[(triton.cdiv(n, 16),)](w, scales, x, out, n, k, w.stride(0), BLOCK_N=16)
    return out


@int8_gemv.register_fake
def _(w: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return x.new_empty(w.shape[0], dtype=torch.float32)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})
@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) * factor, mask=offsets < n)


@torch.library.custom_op("trident_see_through::scale", mutates_args=())
def scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.numel()
    # keywords in another order than the signature's; BLOCK from the autotuner, EVEN from the heuristic
    _scale_kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](factor=factor, n=n, out_ptr=out, x_ptr=x)
    return out


@scale.register_fake
def _(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.empty_like(x)


def gemv_reference(w: torch.Tensor, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    return (w.double() @ x.double()).float() * scale


@pytest.mark.parametrize("device", DEVICES)
def test_custom_op_gemv_is_traced_into(device: str) -> None:
    """The custom op's body joins the host program: its launch is a launch site of the program, the op is no
    ATen call, every call after the first is a native hit, the result is eager's."""

    def step(w1: torch.Tensor, w2: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(gemv(w1, x, 0.5))
        return gemv(w2, h, 2.0) + 1

    f = trident.jit(step)
    w1, w2, x = torch.randn(40, 24, device=device), torch.randn(40, 40, device=device), torch.randn(24, device=device)
    with torch.no_grad(), count_compiles() as compiles:
        with eager(device):
            expected = step(w1, w2, x)
        for _ in range(3):
            torch.testing.assert_close(f(w1, w2, x), expected, rtol=0, atol=0)
    assert compiles() == 1 and hits(f) == 3 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    torch.testing.assert_close(expected, gemv_reference(w2, torch.relu(gemv_reference(w1, x, 0.5)), 2.0) + 1)
    sites = triton_launch_sites(f)
    assert len(sites) == 2, trident.explain(f)
    assert not any("gemv" in call for call in aten_calls(f))
    text = trident.explain(f)
    assert "traced into trident_see_through::gemv (custom op, " in text and ": 2 call(s)" in text, text
    assert "Python kernel of trident_see_through::gemv for " in text  # guarded
    if device == "cuda":  # the autotuner tuned in eager's call; the winner launches natively
        assert all(site.disabled_reason is None for site in sites), text  # type: ignore[attr-defined]
        assert sum(site.native_launches for site in sites) >= 4, text  # type: ignore[attr-defined]


@pytest.mark.parametrize("device", DEVICES)
def test_launches_leaving_parameters_to_defaults_configs_and_heuristics_are_traced_into(device: str) -> None:
    """A launch that leaves constexprs to their defaults, to a heuristic and to the autotuner, and one that names
    its arguments in another order: what the kernel writes is decided from every parameter the launch binds, so
    both custom ops are traced into (not kept opaque as writing their inputs), natively, with eager's bits."""

    def step(w: torch.Tensor, scales: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return scale(int8_gemv(w, scales, x), 0.5) + 1

    f = trident.jit(step)
    w = torch.randint(-128, 127, (64, 96), dtype=torch.int8, device=device)
    scales, x = torch.rand(64, device=device), torch.randn(96, device=device)
    with torch.no_grad(), count_compiles() as compiles:
        with eager(device):
            expected = step(w, scales, x)
        for _ in range(3):
            torch.testing.assert_close(f(w, scales, x), expected, rtol=0, atol=0)
    text = trident.explain(f)
    assert compiles() == 1 and hits(f) == 3 and f._trident.eager_calls == 0, text  # type: ignore[attr-defined]
    assert "traced into trident_see_through::int8_gemv" in text and "traced into trident_see_through::scale" in text
    assert not any("int8_gemv" in call or "scale" in call for call in aten_calls(f)), text
    sites = triton_launch_sites(f)
    assert len(sites) == 2, text
    if device == "cpu":  # the defaults are bound in the recorded launch, as Triton's binding adds them
        gemv_site = next(s for s in sites if "int8" in s.kernel_name)  # type: ignore[attr-defined]
        bound = {**gemv_site.kwargs, **gemv_site.constants()}  # type: ignore[attr-defined]
        assert (bound["BLOCK_K"], bound["ACC_FP32"], bound["EVEN_K"]) == (32, True, True), bound


def test_a_kernel_whose_writes_cannot_be_analysed_stays_opaque_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no analysis of a kernel's stores decides, every tensor it gets counts as written (never a guess):
    the op stays an opaque call, and explain names the kernel and the analysis's error."""
    import torch._higher_order_ops.triton_kernel_wrap as kernel_wrap

    def failing_ttir(*args: object, **kwargs: object) -> object:
        raise RuntimeError("no TTIR for this kernel")

    monkeypatch.setattr(kernel_wrap, "generate_ttir", failing_ttir)  # torch's analysis
    monkeypatch.setattr(triton_launches, "generate_ttir", failing_ttir)  # Trident's (capture/kernel_stores.py)

    def step(x: torch.Tensor) -> torch.Tensor:
        return scale(x, 2.0) + 1

    f = trident.jit(step)
    x = torch.randn(64)
    with torch.no_grad(), eager("cpu"):  # the opaque op's own launch runs through the interpreter here
        expected = step(x)
        torch.testing.assert_close(f(x), expected, rtol=0, atol=0)
    text = trident.explain(f)
    assert f._trident.eager_calls == 0 and any("scale" in call for call in aten_calls(f)), text  # type: ignore[attr-defined]
    assert ("opaque trident_see_through::scale: the analysis of what Triton kernel '_scale_kernel' stores to failed "
            "(RuntimeError: no TTIR for this kernel), so it counts as writing every tensor it gets, argument 'x' "
            "too") in text, text


@torch.library.custom_op("trident_see_through::clamp_to_one", mutates_args=())
def clamp_to_one(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    clamp_kernel[(1,)](x, out, x.numel(), BLOCK=triton.next_power_of_2(x.numel()))
    return out


@clamp_to_one.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_MAP_ELEMENTWISE, reason="tl.map_elementwise is newer than this Triton")
def test_a_kernel_torchs_analysis_cannot_read_is_traced_into_on_trident_s_own() -> None:
    """torch's analysis stops at `tl.map_elementwise` (an op with a region it does not model) and would count
    the input as written, keeping the op opaque; Trident's own reading of the TTIR (capture/kernel_stores.py)
    finds the one store, so the op is traced into and its launch runs natively. (Triton's interpreter cannot
    run map_elementwise, so this runs on CUDA only; tests/unit/test_kernel_stores.py covers the analysis.)"""

    def step(x: torch.Tensor) -> torch.Tensor:
        return clamp_to_one(x) * 2

    f = trident.jit(step)
    x = torch.randn(64, device="cuda") * 2
    with torch.no_grad():
        expected = step(x)
        for _ in range(3):
            torch.testing.assert_close(f(x), expected, rtol=0, atol=0)
    text = trident.explain(f)
    assert hits(f) == 3 and f._trident.eager_calls == 0, text  # type: ignore[attr-defined]
    assert "traced into trident_see_through::clamp_to_one" in text, text
    assert not any("clamp_to_one" in call for call in aten_calls(f)), text


@pytest.mark.parametrize("device", DEVICES)
def test_a_custom_op_with_list_operands_is_traced_into_and_its_int_list_follows_the_call(device: str) -> None:
    """Tensor[], Tensor?[] and SymInt[] operands (issue 41): the items become the launch's own arguments. The offsets
    follow the step's int, so one specialization serves every position (no recompile per value), every call is a
    native hit with eager's bits, and the op is no ATen call of the program."""

    f = trident.jit(shifted_sum_step)
    a, b, bias = (torch.randn(160, device=device), torch.randn(160, device=device), torch.randn(48, device=device))
    positions = [3, 7, 0, 11, 5, 9]
    with torch.no_grad():
        for pos in positions:
            with eager(device):
                expected = shifted_sum_step(a, b, bias, pos)
            got = f(a, b, bias, pos)
            assert torch.equal(got, expected), pos
            assert torch.equal(expected, a[pos:pos + 48] + 2 * b[2 * pos + 1:2 * pos + 49] + bias - 1), pos
    assert_native(f, hits=len(positions), compiles=2)  # the first position's, then one symbolic in pos
    text = trident.explain(f)
    assert "traced into trident_test_lists::shifted_sum (custom op, " in text, text
    assert not any("shifted_sum" in call for call in aten_calls(f)), text
    specs = f._trident.specializations  # type: ignore[attr-defined]
    assert all(len(spec.compiled.launch_sites) == 1 for spec in specs), text
    if device == "cuda":
        assert_launches_native(f)


@pytest.mark.parametrize("device", DEVICES)
def test_custom_op_with_a_mutated_out_argument(device: str) -> None:
    """mutates_args=("out",): the body's kernel writes `out`, as declared; the config the module-level dict
    gives for the shape is part of the specialization (a larger N compiles again, with the other config)."""

    def step(w: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        gemv_out(w, x, out)
        return out * 2

    f = trident.jit(step)
    with torch.no_grad(), count_compiles() as compiles:
        for n in (40, 40, 100, 100):
            w, x = torch.randn(n, 32, device=device), torch.randn(32, device=device)
            out, expected_out = torch.zeros(n, device=device), torch.zeros(n, device=device)
            with eager(device):
                expected = step(w, x, expected_out)
            result = f(w, x, out)
            torch.testing.assert_close(result, expected, rtol=0, atol=0)
            torch.testing.assert_close(out, expected_out, rtol=0, atol=0)  # the mutation is seen
    assert compiles() == 2 and hits(f) == 4 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    sites = triton_launch_sites(f)
    assert len(sites) == 2, trident.explain(f)
    if device == "cpu":  # RecordedLaunch: the config each specialization's body chose, by its shape
        assert sorted({**s.kwargs, **s.constants()}["BLOCK_N"] for s in sites) == [16, 32]  # type: ignore[attr-defined]
    assert "traced into trident_see_through::gemv_out (custom op, " in trident.explain(f)


@pytest.mark.parametrize("device", DEVICES)
def test_a_body_reading_a_value_stays_opaque(device: str) -> None:
    """`.item()` in the body: that op is recorded as one call (through the dispatcher), the rest compiles, and
    explain says which op and why."""

    def step(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return normalize(gemv(w, x, 1.0)) + 1

    f = trident.jit(step)
    w, x = torch.randn(40, 24, device=device), torch.randn(24, device=device)
    with torch.no_grad():
        with eager(device):
            expected = step(w, x)
        for _ in range(2):
            torch.testing.assert_close(f(w, x), expected, rtol=0, atol=0)
    assert hits(f) == 2 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert len(triton_launch_sites(f)) == 1  # gemv's launch, traced into
    assert any("normalize" in call for call in aten_calls(f))
    text = trident.explain(f)
    assert "opaque trident_see_through::normalize: its " in text and ".item()" in text, text
    assert "traced into trident_see_through::gemv" in text


def test_a_body_reading_an_address_stays_opaque() -> None:
    """`.data_ptr()` in the body: a traced tensor has no address, and one baked in at capture would be stale for
    later calls (flag-gems' kernels traced into made illegal memory accesses on the H200). The op stays one
    dispatcher call, so its body runs, and reads the real address, on every call."""

    def step(x: torch.Tensor) -> torch.Tensor:
        return by_address(x) + 1

    f = trident.jit(step)
    xs = [torch.randn(8) for _ in range(3)]
    with torch.no_grad():
        for x in xs:
            torch.testing.assert_close(f(x), x * 2 + 1, rtol=0, atol=0)
    assert hits(f) == 3 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert _addresses_seen[-3:] == [x.data_ptr() for x in xs]  # each call's own tensor, read by the body
    assert "opaque trident_see_through::by_address: its CPU kernel: .data_ptr() reads a tensor's address" in (
        trident.explain(f))


def test_user_code_reading_an_address_runs_eagerly() -> None:
    """In the jitted function itself, as `.item()` is: the call runs eagerly (the address of each call's own
    tensor), warned once, nothing compiled."""

    def step(x: torch.Tensor) -> torch.Tensor:
        return x + (x.data_ptr() % 64)

    f = trident.jit(step)
    x = torch.randn(8)
    with torch.no_grad(), count_compiles() as compiles, expect_fallback(".data_ptr() reads a tensor's address"):
        torch.testing.assert_close(f(x), step(x), rtol=0, atol=0)
    assert compiles() == 0 and f._trident.eager_calls == 1  # type: ignore[attr-defined]


def test_a_refusal_the_function_catches_still_keeps_the_op_opaque() -> None:
    """Capture raises out of a refused body; a function that catches every exception around the op must not
    leave the partial body in the program: the capture is retried with the op opaque."""

    def step(x: torch.Tensor) -> torch.Tensor:
        try:
            y = normalize(x)
        except Exception:  # noqa: BLE001 -- eager never gets here
            y = x * 0
        return y + 1

    f = trident.jit(step)
    x = torch.randn(8)
    with torch.no_grad():
        for _ in range(2):
            torch.testing.assert_close(f(x), x / x.abs().max() + 1, rtol=0, atol=0)
    assert hits(f) == 2 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert "opaque trident_see_through::normalize: its CPU kernel: .item()" in trident.explain(f)


def test_a_body_breaking_its_schema_stays_opaque() -> None:
    """A body writing an argument its schema does not declare mutable runs opaquely, as eager calls it."""

    def step(x: torch.Tensor) -> torch.Tensor:
        return bump(x) + 1

    f = trident.jit(step)
    x, x_eager = torch.randn(8), torch.randn(8)
    x_eager.copy_(x)
    with torch.no_grad():
        expected = step(x_eager)
        torch.testing.assert_close(f(x), expected, rtol=0, atol=0)
        torch.testing.assert_close(x, x_eager, rtol=0, atol=0)
    assert f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert any("bump" in call for call in aten_calls(f))
    text = trident.explain(f)
    assert "opaque trident_see_through::bump: its kernel writes argument 'x', which the schema does not declare " \
           "mutable" in text, text


@pytest.mark.parametrize("device", DEVICES)
def test_knob_and_per_op_opt_out_keep_ops_opaque(device: str) -> None:
    def step(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return gemv(w, x, 1.0) * 2

    w, x = torch.randn(40, 24, device=device), torch.randn(24, device=device)
    with torch.no_grad(), eager(device):
        expected = step(w, x)
    for knob, why in ((dict(see_through=False), "TRIDENT_SEE_THROUGH=0"),
                      (dict(opaque_ops=frozenset({"trident_see_through::gemv"})), "TRIDENT_OPAQUE_OPS")):
        f = trident.jit(step)
        with override(**knob), torch.no_grad(), eager(device):  # type: ignore[arg-type]
            f(w, x)  # the capture happens under the knob
        # The opaque op's body runs at every call, through the dispatcher: its launch goes through Triton's
        # launcher, on CPU through the interpreter as in eager.
        with torch.no_grad(), eager(device):
            for _ in range(2):
                torch.testing.assert_close(f(w, x), expected, rtol=0, atol=0)
        assert hits(f) == 3 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
        assert triton_launch_sites(f) == [] and any("gemv" in call for call in aten_calls(f))
        text = trident.explain(f)
        assert f"opaque trident_see_through::gemv: {why}" in text or \
            f"opaque trident_see_through::gemv: kept opaque by {why}" in text, text


# ---------------------------------------------------------------------------------------------------------
# ATen's pointwise operators overridden by Triton kernels (flag-gems' pattern)


@triton.jit
def _binary_kernel(x_ptr, y_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, x + y if OP == 0 else x * y, mask=m)


@triton.jit
def _sigmoid_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    tl.store(out_ptr + offs, 1.0 / (1.0 + tl.exp(-x)), mask=m)


OVERRIDE_CALLS = {"add": 0, "mul": 0, "sigmoid": 0}


def _binary(op: int, name: str):  # type: ignore[no-untyped-def]
    def kernel(x: torch.Tensor, y: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
        OVERRIDE_CALLS[name] += 1
        if not isinstance(y, torch.Tensor) or x.shape != y.shape or alpha != 1 or not x.is_contiguous() or not y.is_contiguous():
            raise NotImplementedError(f"this test library's {name} takes same-shape contiguous tensors")
        out = torch.empty_like(x)
        _binary_kernel[(triton.cdiv(x.numel(), 64),)](x, y, out, x.numel(), OP=op, BLOCK=64)
        return out

    return kernel


_add, _mul = _binary(0, "add"), _binary(1, "mul")


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    OVERRIDE_CALLS["sigmoid"] += 1
    out = torch.empty_like(x)
    _sigmoid_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
    return out


@contextlib.contextmanager
def triton_pointwise(device: str) -> Iterator[None]:
    """aten::add.Tensor, aten::mul.Tensor, aten::sigmoid as Triton kernels for the device, removed after."""
    lib = torch.library.Library("aten", "IMPL")
    key = "CPU" if device == "cpu" else "CUDA"
    try:
        lib.impl("add.Tensor", _add, key)
        lib.impl("mul.Tensor", _mul, key)
        lib.impl("sigmoid", _sigmoid, key)
        yield
    finally:
        lib._destroy()


def _silu_mlp(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = x * torch.sigmoid(x)
    return h * y + x


@pytest.mark.parametrize("device", DEVICES)
def test_aten_pointwise_overrides_are_traced_into(device: str) -> None:
    f = trident.jit(_silu_mlp)
    x, y = torch.randn(200, device=device), torch.randn(200, device=device)
    with triton_pointwise(device), torch.no_grad(), count_compiles() as compiles:
        with eager(device):
            expected = _silu_mlp(x, y)
        before = dict(OVERRIDE_CALLS)
        for _ in range(3):
            torch.testing.assert_close(f(x, y), expected, rtol=0, atol=0)
        # The Python kernels ran once each, at the capture, on traced tensors; never on the native calls.
        assert {k: OVERRIDE_CALLS[k] - before[k] for k in before} == {"add": 1, "mul": 2, "sigmoid": 1}
        text = trident.explain(f)
    assert compiles() == 1 and hits(f) == 3 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert len(triton_launch_sites(f)) == 4, text  # sigmoid, mul, mul, add
    assert not any(op in call for call in aten_calls(f) for op in ("add", "mul", "sigmoid")), aten_calls(f)
    assert "traced into aten::mul.Tensor (Python kernel, " in text and "traced into aten::sigmoid (Python kernel, " in text
    torch.testing.assert_close(expected, x * torch.sigmoid(x) * y + x)


def test_removing_an_override_recompiles_and_registering_it_again_hits() -> None:
    """Which kernel an op has is guarded: after the override is removed the specialization that traced into it
    misses, and the new one calls ATen's own kernel; registering the same functions again (a library's
    context manager entered anew) matches the first specialization again."""
    f = trident.jit(_silu_mlp)
    x, y = torch.randn(64), torch.randn(64)
    with torch.no_grad(), count_compiles() as compiles:
        with triton_pointwise("cpu"):
            f(x, y)
            f(x, y)
        torch.testing.assert_close(f(x, y), x * torch.sigmoid(x) * y + x, rtol=0, atol=0)
        assert "Python kernel of aten::" in f._trident.last_miss_reason  # type: ignore[attr-defined]
        torch.testing.assert_close(f(x, y), x * torch.sigmoid(x) * y + x, rtol=0, atol=0)
        with triton_pointwise("cpu"):
            with interpret_cpu_launches():
                expected = _silu_mlp(x, y)
            before = dict(OVERRIDE_CALLS)
            torch.testing.assert_close(f(x, y), expected, rtol=0, atol=0)
            assert OVERRIDE_CALLS == before  # the first specialization, natively
    assert compiles() == 2 and f._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert f._trident.entry.hits() == [3, 2], trident.explain(f)  # type: ignore[attr-defined]
    assert "Python kernel of aten::sigmoid for CPU" in trident.explain(f)
    (first, second) = f._trident.specializations  # type: ignore[attr-defined]
    assert len(first.compiled.launch_sites) == 4 and not second.compiled.launch_sites


@pytest.mark.gpu
@pytest.mark.flag_gems
def test_flag_gems_enabled_around_the_calls_is_traced_into() -> None:
    """flag-gems registers its Triton kernels as ATen's CUDA implementations; with them registered around the
    calls (not inside the jitted function), their bodies are traced into. Ops whose body capture refuses stay
    opaque (explain says which and why) and still compute gems' result."""
    flag_gems = pytest.importorskip("flag_gems", reason="flag-gems is not installed")

    def step(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.nn.functional.silu(x @ w + b)
        return h * torch.sigmoid(h) + torch.exp(x[:, :1])

    x, w, b = torch.randn(4, 64, device="cuda"), torch.randn(64, 64, device="cuda"), torch.randn(64, device="cuda")
    f = trident.jit(step)
    with flag_gems.use_gems(), torch.no_grad():
        expected = step(x, w, b)
        for _ in range(3):
            torch.testing.assert_close(f(x, w, b), expected, rtol=1e-5, atol=1e-5)
        text = trident.explain(f)
    print(text)
    assert hits(f) == 3 and f._trident.eager_calls == 0, text  # type: ignore[attr-defined]
    assert "traced into aten::" in text and triton_launch_sites(f), text


EARLY_OP_PROGRAM = """
import json, torch
@torch.library.custom_op("trident_see_through_early::twice", mutates_args=())
def twice(x: torch.Tensor) -> torch.Tensor:
    return x * 2
@twice.register_fake
def _(x):
    return torch.empty_like(x)
import trident  # after the op is defined: capture finds it in torch's own table of custom ops
f = trident.jit(lambda x: twice(x) + 1)
x = torch.randn(5)
with torch.no_grad():
    ok = all(torch.equal(f(x), x * 2 + 1) for _ in range(2))
state = f._trident
print(json.dumps({"ok": ok, "hits": sum(state.entry.hits()), "explain": trident.explain(f),
                  "calls": [c for s in state.specializations for c in s.compiled.aten_calls]}))
"""


def test_a_custom_op_defined_before_trident_is_imported_is_traced_into() -> None:
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRIDENT_DISK_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", EARLY_OP_PROGRAM], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["hits"] == 2, result["explain"]
    assert result["calls"] == ["aten::mul.Scalar", "aten::add.Scalar"], result["explain"]
    assert "traced into trident_see_through_early::twice (custom op, CPU kernel)" in result["explain"]


EARLY_OVERRIDE_PROGRAM = """
import json, torch
calls = []
def mul(x, y):
    calls.append(1)
    return torch.ops.aten.mul.out(x, y, out=torch.empty_like(x))
lib = torch.library.Library("aten", "IMPL")
lib.impl("mul.Tensor", mul, "CPU")
import trident  # after the override: trident never saw it registered
f = trident.jit(lambda x, y: x * y + 1)
x, y = torch.randn(5), torch.randn(5)
with torch.no_grad():
    ok = all(torch.equal(f(x, y), torch.ops.aten.mul.out(x, y, out=torch.empty_like(x)) + 1) for _ in range(3))
state = f._trident
print(json.dumps({"ok": ok, "hits": sum(state.entry.hits()), "explain": trident.explain(f), "calls": len(calls)}))
"""


def test_an_aten_override_registered_before_trident_is_imported_stays_opaque_and_says_why() -> None:
    """The dispatcher cannot hand a Python kernel back, and Library.impl was wrapped only at `import trident`:
    the op is called through the dispatcher (its Python kernel runs on every call, as in eager) and explain says
    why and what to do."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TRIDENT_DISK_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", EARLY_OVERRIDE_PROGRAM], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"] and result["hits"] == 3, result["explain"]  # the compiling call runs natively too
    # Capture calls the op once on fake tensors (no kernel runs); each of the three calls runs the override once.
    assert result["calls"] == 3, result
    assert ("opaque aten::mul.Tensor: its Python kernel for CPU was registered at <string>:7 before trident was "
            "imported, and the dispatcher gives no way to read it back; import trident before the library "
            "registers it; called through the dispatcher") in result["explain"], result["explain"]


def _marked_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An aten::mm override whose result is recognisably its own: the product plus 1000."""
    return (a.unsqueeze(2) * b.unsqueeze(0)).sum(1) + 1000


@contextlib.contextmanager
def mm_override() -> Iterator[None]:
    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("mm", _marked_mm, "CPU")
        yield
    finally:
        lib._destroy()


def _project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.relu(x @ w) + 1


def test_an_override_registered_after_the_compile_of_a_pooled_matmul_recompiles_and_is_traced_into() -> None:
    """The compiled program computes its matmul into a pooled result without the functional op's dispatch (on CUDA
    it calls ATen's kernel directly), so a Python kernel registered for aten::mm later would not be reached: the
    specialization guards that none is. Registered, the call misses and the new specialization traces into it (the
    override's result, as eager's); removed, the first one matches again."""
    f = trident.jit(_project)
    x, w = torch.randn(4, 8), torch.randn(8, 5)
    with torch.no_grad(), count_compiles() as compiles:
        torch.testing.assert_close(f(x, w), _project(x, w), rtol=0, atol=0)
        assert "Python kernel of aten::mm for CPU: absent" in trident.explain(f)
        product = x @ w
        with mm_override():
            expected = _project(x, w)
            torch.testing.assert_close(expected, torch.relu(product + 1000) + 1, rtol=1e-5, atol=1e-4)  # the override's
            torch.testing.assert_close(f(x, w), expected, rtol=0, atol=0)
            miss = f._trident.last_miss_reason  # type: ignore[attr-defined]
            assert "Python kernel of aten::mm for CPU: added since capture" in miss, miss
        torch.testing.assert_close(f(x, w), _project(x, w), rtol=0, atol=0)
    assert compiles() == 2 and f._trident.entry.hits() == [2, 1], trident.explain(f)  # type: ignore[attr-defined]
    assert "traced into aten::mm (Python kernel, CPU kernel)" in trident.explain(f)
    assert f._trident.eager_calls == 0  # type: ignore[attr-defined]


def test_a_matmul_whose_override_stays_opaque_is_not_pooled_and_reaches_the_override() -> None:
    """With aten::mm's Python kernel kept opaque (a per-op opt-out), the program calls the op through the
    dispatcher, which reaches the override as eager does, instead of computing into a pooled result past it."""
    f = trident.jit(_project)
    x, w = torch.randn(4, 8), torch.randn(8, 5)
    with torch.no_grad(), mm_override(), override(opaque_ops=frozenset({"aten::mm"})):
        expected = _project(x, w)
        for _ in range(2):
            torch.testing.assert_close(f(x, w), expected, rtol=0, atol=0)
    text = trident.explain(f)
    assert f._trident.entry.hits() == [2] and f._trident.eager_calls == 0, text  # type: ignore[attr-defined]
    assert "aten::mm" in " ".join(aten_calls(f)) and "opaque aten::mm" in text, text
