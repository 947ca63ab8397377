"""Which Triton versions launch natively: only those whose launch ABI Trident follows (VERIFIED_LAUNCH_ABI).

Under any other version every launch goes through Triton's own launcher and explain says why. The gate is
checked on CPU by faking triton.__version__; the GPU test checks that a faked version really launches nothing
natively while results stay eager's."""
from __future__ import annotations

import collections
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
from trident.testing import triton_launch_sites


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def cuda_launch() -> RecordedLaunch:
    return RecordedLaunch(
        kernel_name="scale_kernel",
        kernel_idx=kernel_side_table.add_kernel(scale_kernel),
        constant_args_idx=kernel_side_table.add_constant_args({"BLOCK": 16}),
        grid=[(Operand(2), 1, 1)],
        tma_descriptor_metadata={},
        kwargs={"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2)},
        operand_kinds=["tensor", "tensor", "int"],
        device_type="cuda",
    )


def test_the_verified_versions_are_exact_releases() -> None:
    assert tn.VERIFIED_LAUNCH_ABI == ("3.6.0", "3.7.1", "3.8.0", "3.9.0")


@pytest.mark.parametrize("version", ["3.10.0", "3.7.0", "3.9.1", "3.6.0+git1a2b3c4", "4.0.0"])
def test_an_unverified_triton_launches_through_tritons_launcher(monkeypatch: pytest.MonkeyPatch,
                                                                 version: str) -> None:
    monkeypatch.setattr(triton, "__version__", version)
    expected = f"native launch not verified for Triton {version} (verified: 3.6.0, 3.7.1, 3.8.0, 3.9.0)"
    assert tn.unverified_triton() == expected
    native = tn.LaunchSite(cuda_launch()).native
    assert native.disabled_reason == expected  # before any other reason: nothing else matters then
    assert tn.describe_launch_site(native) == f"Triton kernel 'scale_kernel': through Triton's launcher ({expected})"


@pytest.mark.parametrize("version", tn.VERIFIED_LAUNCH_ABI)
def test_a_verified_triton_is_not_held_back(monkeypatch: pytest.MonkeyPatch, version: str) -> None:
    monkeypatch.setattr(triton, "__version__", version)
    assert tn.unverified_triton() is None
    native = tn.LaunchSite(cuda_launch()).native
    if torch.cuda.is_available():
        assert native.disabled_reason is None
    else:
        assert native.disabled_reason == "CUDA is not available"


Metadata = collections.namedtuple("Metadata", "num_ctas num_warps shared instrumentation_mode")


class FakeCompiled:
    def __init__(self, **changes: Any) -> None:
        self.metadata = Metadata(**{"num_ctas": 1, "num_warps": 4, "shared": 0, "instrumentation_mode": "", **changes})


def test_kernel_features_outside_the_shared_abi_are_refused() -> None:
    assert tn._unsupported_metadata(FakeCompiled()) is None
    assert tn._unsupported_metadata(FakeCompiled(shared=228 * 1024)) is None
    # Triton >= 3.8 launches these with a launch attribute (oversized shared memory) or extra arguments (GSan)
    assert tn._unsupported_metadata(FakeCompiled(shared=228 * 1024 + 1)) == (
        "233473 bytes of shared memory (more than 233472 needs a launch attribute)"
    )
    assert tn._unsupported_metadata(FakeCompiled(instrumentation_mode="gsan")) == (
        "Triton instrumentation (instrumentation_mode='gsan')"
    )


@pytest.mark.gpu
def test_on_the_gpu_an_unverified_triton_launches_nothing_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(triton, "__version__", "3.10.0")

    @trident.jit
    def fn(x):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 64),)](x, out, x.numel(), BLOCK=64)
        return out

    x = torch.randn(1000, device="cuda")
    for _ in range(3):
        torch.testing.assert_close(fn(x), x * 2)
    (site,) = triton_launch_sites(fn)
    assert (site.variant_count, site.native_launches, site.fallback_launches) == (0, 0, 3)  # type: ignore[attr-defined]
    assert "native launch not verified for Triton 3.10.0" in trident.explain(fn)
