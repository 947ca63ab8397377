"""Triton launches that must stay on Triton's own launcher (docs/design.md, "Triton launches"): kernels using
thread-block clusters, cooperative or programmatic-dependent (PDL) launches, scratch buffers, TMA descriptors or
fp16 scalar arguments, and every launch while a Triton launch hook (a profiler) is set.

On CPU: the decisions that refuse a native launch, given what Triton compiled (metadata, signature), and a host-side
tensor descriptor argument, which compiled code cannot pass (the call runs eagerly). On the GPU (`gpu`): each
feature end to end in a small kernel, asserting the site's disabled_reason, that no launch went native, that every
launch went through Triton's launcher, and eager's result.

Not expressible here: the VariantTable's "TMA descriptor arguments" refusal reads torch's tma_descriptor_metadata,
which only torch.compile's tracer fills in (Trident's make_fx capture records host descriptors as constants;
see the descriptor tests); its decision is checked on CPU below with a hand-made launch."""
from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

import trident
from trident.artifact import Operand
from trident.capture.triton_launches import RecordedLaunch
from trident.runtime import triton_native as tn
from trident.testing import count_compiles, expect_fallback, triton_launch_sites


@triton.jit
def double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 256}, num_ctas=2)], key=[])  # how torch passes num_ctas
@triton.jit
def cluster_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@triton.jit
def half_scalar_kernel(x_ptr, out_ptr, n, scale: tl.float16, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


@triton.jit
def device_descriptor_kernel(x_ptr, out_ptr, M, N, BM: tl.constexpr, BN: tl.constexpr):
    # descriptors made on the device live in Triton's global scratch memory
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    out_desc = tl.make_tensor_descriptor(out_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
    row = tl.program_id(0) * BM
    out_desc.store([row, 0], x_desc.load([row, 0]) * 2)


@triton.jit
def host_descriptor_kernel(x_desc, out_desc, BM: tl.constexpr):
    row = tl.program_id(0) * BM
    out_desc.store([row, 0], x_desc.load([row, 0]) * 2)


# --- CPU: the decisions ------------------------------------------------------------------------------------


def compiled_with(**metadata: Any) -> Any:
    """What LaunchSite.register reads of a CompiledKernel: its metadata."""
    fields = {"num_ctas": 1, "launch_cooperative_grid": False, "launch_pdl": False, "global_scratch_size": 0,
              "profile_scratch_size": 0, "tensordesc_meta": None, "instrumentation_mode": "", "shared": 0}  # fmt: skip
    return types.SimpleNamespace(metadata=types.SimpleNamespace(**{**fields, **metadata}))


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ({"num_ctas": 2}, "num_ctas=2 (thread block clusters)"),
        ({"launch_cooperative_grid": True}, "a cooperative or programmatic-dependent launch"),
        ({"launch_pdl": True}, "a cooperative or programmatic-dependent launch"),
        ({"global_scratch_size": 128}, "a global or profile scratch buffer"),
        ({"profile_scratch_size": 64}, "a global or profile scratch buffer"),
        ({"tensordesc_meta": [{"swizzle": 128}]}, "tensor descriptors"),
    ],
)
def test_kernel_features_the_native_launcher_lacks_are_refused(metadata: dict[str, Any], reason: str) -> None:
    assert tn._unsupported_metadata(compiled_with()) is None  # a plain kernel launches natively
    assert tn._unsupported_metadata(compiled_with(**metadata)) == reason


def test_fp16_scalar_parameters_are_refused() -> None:
    signature = {"x_ptr": "*fp16", "out_ptr": "*fp16", "n": "i32", "scale": "fp16", "BLOCK": "constexpr"}
    args = {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": 100, "scale": 2.0, "BLOCK": 64}
    assert tn._param_sources(signature, args, {}, ["tensor", "tensor"]) == "parameter 'scale' of type fp16"
    assert isinstance(tn._param_sources({**signature, "scale": "fp32"}, args, {}, ["tensor", "tensor"]), list)


def _recorded(tma_descriptor_metadata: dict[str, Any]) -> RecordedLaunch:
    return RecordedLaunch(
        kernel_name="double_kernel", kernel_idx=kernel_side_table.add_kernel(double_kernel),
        constant_args_idx=kernel_side_table.add_constant_args({}), grid=[(4, 1, 1)],
        tma_descriptor_metadata=tma_descriptor_metadata,
        kwargs={"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "BLOCK": 64},
        operand_kinds=["tensor", "tensor", "int"], device_type="cuda",
    )  # fmt: skip


def test_tma_descriptor_metadata_refuses_the_site_before_anything_else() -> None:
    """The variant table's own refusal comes before "CUDA is not available": the same reason on every machine."""
    native = tn.LaunchSite(_recorded({"x_ptr": ("stable", ([16],))})).native
    assert native.disabled_reason == "TMA descriptor arguments"
    assert "through Triton's launcher (TMA descriptor arguments)" in tn.describe_launch_site(native)
    assert tn.VariantTable(_recorded({}), double_kernel).unsupported is None


class _StubNative:
    disabled_reason = None
    variant_count = 0

    def __init__(self) -> None:
        self.calls: list[str] = []

    def disable(self, reason: str) -> None:
        self.calls.append(f"disable {reason}")

    def add_variant(self, *args: object) -> None:
        self.calls.append("add_variant")


@pytest.fixture
def launch_hook() -> Iterator[list[object]]:
    from triton import knobs

    seen: list[object] = []

    def hook(metadata: object) -> None:
        seen.append(metadata)

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        yield seen
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)


def test_no_variant_is_registered_while_a_launch_hook_is_set(launch_hook: list[object]) -> None:
    site = tn.LaunchSite(_recorded({}))
    site.native = _StubNative()
    site.register(compiled_with(), {}, [])
    assert site.native.calls == []  # neither registered nor disabled: native again once the hook is gone


def _host_descriptors(x: torch.Tensor) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    out = torch.empty_like(x)
    x_desc, out_desc = TensorDescriptor.from_tensor(x, [16, 32]), TensorDescriptor.from_tensor(out, [16, 32])
    host_descriptor_kernel[(x.shape[0] // 16,)](x_desc, out_desc, BM=16)
    return out


def test_a_host_tensor_descriptor_argument_runs_the_call_eagerly_on_cpu() -> None:
    """Compiled code would launch the descriptor of the capture's fake tensor on every call; the call runs
    eagerly instead, so it does what eager does (on CPU tensors without TRITON_INTERPRET: Triton's own error)."""
    x = torch.randn(64, 32)
    with pytest.raises(RuntimeError) as eager:
        _host_descriptors(x)
    jitted = trident.jit(_host_descriptors)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(2):  # the second call: remembered, no capture again
            with expect_fallback("of type TensorDescriptor, which holds a tensor"), pytest.raises(RuntimeError) as info:
                jitted(x)
            assert str(info.value) == str(eager.value)
    assert compiles() == 0


# --- GPU: end to end ---------------------------------------------------------------------------------------


def _site(fn: object) -> Any:
    (site,) = triton_launch_sites(fn)  # type: ignore[arg-type]
    return site


def _assert_all_through_triton(fn: object, calls: int, reason: str) -> None:
    site = _site(fn)
    assert site.disabled_reason == reason, trident.explain(fn)  # type: ignore[arg-type]
    assert (site.variant_count, site.native_launches, site.fallback_launches) == (0, 0, calls)
    assert f"through Triton's launcher ({reason})" in trident.explain(fn)  # type: ignore[arg-type]
    assert fn._trident.eager_calls == 0  # type: ignore[attr-defined]  # compiled code ran; only its launches did not


def _run(fn: Any, reference: Any, *args: torch.Tensor, calls: int = 3) -> Any:
    jitted = trident.jit(fn)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(calls):
            torch.testing.assert_close(jitted(*args), reference(*args))
    assert compiles() == 1
    return jitted


@pytest.mark.gpu
def test_thread_block_clusters_stay_on_tritons_launcher() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        cluster_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, out, x.numel())
        return out

    jitted = _run(fn, lambda x: x * 2, torch.randn(1000, device="cuda"))
    _assert_all_through_triton(jitted, 3, "num_ctas=2 (thread block clusters)")


@pytest.mark.gpu
@pytest.mark.parametrize("option", ["launch_pdl", "launch_cooperative_grid"])
def test_pdl_and_cooperative_launches_stay_on_tritons_launcher(option: str) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        double_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256, **{option: True})
        return out

    jitted = _run(fn, lambda x: x * 2, torch.randn(1000, device="cuda"))
    _assert_all_through_triton(jitted, 3, "a cooperative or programmatic-dependent launch")


@pytest.mark.gpu
def test_fp16_scalar_arguments_stay_on_tritons_launcher() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        half_scalar_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), 1.5, BLOCK=256)
        return out

    jitted = _run(fn, lambda x: x * 1.5, torch.randn(1000, device="cuda", dtype=torch.float16))
    _assert_all_through_triton(jitted, 3, "parameter 'scale' of type fp16")


@pytest.fixture
def triton_allocator() -> Iterator[None]:
    """Device-side descriptors need Triton's runtime allocator for their global scratch memory."""
    from triton.runtime import _allocation

    previous = _allocation._allocator.get()
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device="cuda", dtype=torch.int8))
    yield
    triton.set_allocator(previous)


@pytest.mark.gpu
def test_global_scratch_of_device_side_tma_descriptors_stays_on_tritons_launcher(triton_allocator: None) -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        M, N = x.shape
        device_descriptor_kernel[(M // 16,)](x, out, M, N, BM=16, BN=32)
        return out

    jitted = _run(fn, lambda x: x * 2, torch.randn(64, 32, device="cuda"))
    _assert_all_through_triton(jitted, 3, "a global or profile scratch buffer")


@pytest.mark.gpu
def test_host_side_tma_descriptors_run_the_call_eagerly_through_tritons_launcher() -> None:
    jitted = trident.jit(_host_descriptors)
    x = torch.randn(64, 32, device="cuda")
    with torch.no_grad(), count_compiles() as compiles, expect_fallback("of type TensorDescriptor") as events:
        for _ in range(3):
            torch.testing.assert_close(jitted(x), x * 2)
    assert compiles() == 0 and len(events) == 3
    assert jitted._trident.eager_calls == 3  # type: ignore[attr-defined]


def _double(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


@pytest.mark.gpu
def test_launches_while_a_hook_is_set_from_the_start_go_through_triton_and_reach_the_hook(
    launch_hook: list[object],
) -> None:
    x = torch.randn(1000, device="cuda")
    jitted = _run(_double, lambda x: x * 2, x)
    site = _site(jitted)
    assert site.disabled_reason is None  # not refused: only kept off while the hook is set
    assert (site.variant_count, site.native_launches, site.fallback_launches) == (0, 0, 3)
    assert len(launch_hook) == 3  # the profiler saw every launch


@pytest.mark.gpu
def test_once_the_hook_is_removed_launches_go_native() -> None:
    from triton import knobs

    seen: list[object] = []

    def hook(metadata: object) -> None:
        seen.append(metadata)

    x = torch.randn(1000, device="cuda")
    jitted = trident.jit(_double)
    with torch.no_grad():
        knobs.runtime.launch_enter_hook.add(hook)
        try:
            torch.testing.assert_close(jitted(x), x * 2)
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        for _ in range(3):
            torch.testing.assert_close(jitted(x), x * 2)
    site = _site(jitted)
    assert len(seen) == 1
    assert (site.variant_count, site.native_launches, site.fallback_launches) == (1, 2, 2)


@pytest.mark.gpu
def test_a_hook_set_after_launches_went_native_sees_every_later_launch() -> None:
    """A profiler attached to a warm program: docs/semantics.md says launches stay on Triton's launcher while it is set.
    Each native launch looks at Triton's hook lists (csrc watch_launch_hooks), so the registered variant yields
    to Triton's launcher while the hook is set and goes native again once it is removed."""
    from triton import knobs

    x = torch.randn(1000, device="cuda")
    jitted = trident.jit(_double)
    seen: list[object] = []

    def hook(metadata: object) -> None:
        seen.append(metadata)

    with torch.no_grad():
        for _ in range(2):  # the first registers the variant, the second launches natively
            jitted(x)
        assert _site(jitted).native_launches == 1
        knobs.runtime.launch_enter_hook.add(hook)
        try:
            for _ in range(3):
                torch.testing.assert_close(jitted(x), x * 2)
        finally:
            knobs.runtime.launch_enter_hook.remove(hook)
        assert len(seen) == 3, f"the hook saw {len(seen)} of 3 launches; {_site(jitted).native_launches} went native"
        torch.testing.assert_close(jitted(x), x * 2)  # no hook: native again
    site = _site(jitted)
    assert (site.native_launches, site.fallback_launches, len(seen)) == (2, 4, 3)
