"""The native launcher's specialization keys and variant tables, checked against Triton itself on CPU.

A wrong key would launch a kernel compiled for another specialization (an aligned-pointer kernel on `x[1:]`):
the worst bug this project can have. So the key the runtime computes natively is compared here with the key
implied by Triton's own specialization (`native_specialize_impl`, what JITFunction's binder calls) over the
values where Triton's decisions change."""
from __future__ import annotations

import struct

import pytest
import torch
import triton
import triton.language as tl
from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table
from triton.backends.nvidia.compiler import CUDABackend
from triton.runtime.jit import native_specialize_impl

from trident.artifact import Operand
from trident.capture.triton_launches import RecordedLaunch
from trident.runtime import load_runtime
from trident.runtime import triton_native as tn


@triton.jit
def plain_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * scale, mask=offs < n)


@triton.jit(do_not_specialize=["n"], do_not_specialize_on_alignment=["out_ptr", "m"])
def flagged_kernel(x_ptr, out_ptr, n, m, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n + m), mask=offs < n + m)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def tuned_kernel(x_ptr, out_ptr, n, m, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < m)


@triton.heuristics({"EVEN": lambda args: args["n"] % 16 == 0})
@triton.jit
def heuristic_kernel(x_ptr, out_ptr, n, m, EVEN: tl.constexpr):
    offs = tl.program_id(0) * 16 + tl.arange(0, 16)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < m)


INTS = [1, 0, 2, 15, 16, 17, 32, -16, -1, 2**31 - 16, 2**31 - 1, 2**31, 2**31 + 16, -(2**31), -(2**31) - 1, 2**40]
MODES = {  # key kind -> (specialize, align) as Triton's binder passes them for such a parameter
    tn.KEY_INT: (True, True),
    tn.KEY_INT_NO_ALIGN: (True, False),
    tn.KEY_INT_WIDTH: (False, True),
}


def expected_key(kind: int, value: object) -> int:
    """Our key from Triton's own specialization of one argument."""
    specialize, align = MODES.get(kind, (True, True))
    type_name, attribute = native_specialize_impl(CUDABackend, value, False, specialize, align)
    if kind == tn.KEY_ALIGN:
        return int(attribute == "D")
    if type_name == "constexpr":
        return 1
    return 2 + 2 * (type_name in ("i64", "u64")) + (attribute == "D")


@pytest.mark.parametrize("kind", [tn.KEY_INT, tn.KEY_INT_NO_ALIGN, tn.KEY_INT_WIDTH])
def test_native_int_keys_agree_with_triton(kind: int) -> None:
    launch = load_runtime().TritonLaunch("k", print, [(0, kind)])
    for value in INTS:
        assert launch.key([value]) == (expected_key(kind, value),), value


def test_native_pointer_keys_agree_with_triton() -> None:
    base = torch.zeros(64)
    launch = load_runtime().TritonLaunch("k", print, [(0, tn.KEY_ALIGN)])
    for offset in range(9):
        view = base[offset:]
        assert launch.key([view.data_ptr()]) == (expected_key(tn.KEY_ALIGN, view),), offset


def test_exact_value_keys_and_key_length_checks() -> None:
    launch = load_runtime().TritonLaunch("k", print, [(0, tn.KEY_VALUE), (1, tn.KEY_INT)])
    assert launch.key([12345, 16]) == (12345, 3)
    with pytest.raises(ValueError, match="2 entries"):
        launch.key([1])


def recorded(kernel: object, kwargs: dict[str, object], kinds: list[str]) -> RecordedLaunch:
    return RecordedLaunch(
        kernel_name="k",
        kernel_idx=kernel_side_table.add_kernel(kernel),
        constant_args_idx=kernel_side_table.add_constant_args({}),
        grid=[(Operand(len(kinds) - 1), 1, 1)],
        tma_descriptor_metadata={},
        kwargs=kwargs,
        operand_kinds=kinds,
        device_type="cuda",
    )


def table_of(kernel: object, kwargs: dict[str, object], kinds: list[str]) -> tn.VariantTable:
    return tn.VariantTable(recorded(kernel, kwargs, kinds), kernel)


def test_variant_table_keys_on_pointers_and_ints_but_not_floats_or_literals() -> None:
    table = table_of(
        plain_kernel,
        {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "scale": 2.0, "BLOCK": 16},
        ["tensor", "tensor", "int", "int"],
    )
    assert table.key_spec == [(0, tn.KEY_ALIGN), (1, tn.KEY_ALIGN), (2, tn.KEY_INT)]
    assert table.key_params == ["x_ptr", "out_ptr", "n"]
    assert table.unsupported is None


def test_variant_table_takes_string_and_dtype_literals_as_literals() -> None:
    # A str has an .index method and a dtype may carry attributes: only Operand placeholders are operands
    # (a string constexpr such as tl.dot's input_precision used to be read as an operand index).
    args = {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "m": "ieee", "EVEN": torch.float32}
    kinds = ["tensor", "tensor", "int", "int"]
    for kernel in (plain_kernel, heuristic_kernel):
        kwargs = dict(args) if kernel is heuristic_kernel else {**args, "scale": "tf32", "BLOCK": "ieee"}
        table = table_of(kernel, kwargs, kinds)
        assert table.unsupported is None
        assert {operand for operand, _ in table.key_spec} == {0, 1, 2}


def test_variant_table_honours_do_not_specialize_flags() -> None:
    table = table_of(
        flagged_kernel,
        {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "m": Operand(3), "BLOCK": 16},
        ["tensor", "tensor", "int", "int", "int"],
    )
    assert table.key_spec == [(0, tn.KEY_ALIGN), (2, tn.KEY_INT_WIDTH), (3, tn.KEY_INT_NO_ALIGN)]


def test_variant_table_keys_on_autotune_keys_and_on_ints_heuristics_read() -> None:
    kinds = ["tensor", "tensor", "int", "int", "int"]
    args = {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "m": Operand(3)}
    tuned = table_of(tuned_kernel, args, kinds)
    assert (2, tn.KEY_VALUE) in tuned.key_spec and (3, tn.KEY_VALUE) not in tuned.key_spec
    heuristic = table_of(heuristic_kernel, args, kinds)
    assert {(2, tn.KEY_VALUE), (3, tn.KEY_VALUE)} <= set(heuristic.key_spec)


def test_parameter_slots_follow_the_compiled_signature() -> None:
    signature = {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "one": "constexpr", "scale": "fp32",
                 "big": "i64", "BLOCK": "constexpr"}  # fmt: skip
    args = {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "one": 1, "scale": 0.5, "BLOCK": 16}
    sources = tn._param_sources(signature, args, {"big": -3}, ["tensor", "tensor", "int"])
    assert sources == [
        (tn.PARAM_POINTER, 0),
        (tn.PARAM_POINTER, 1),
        (tn.PARAM_INT, 2),
        (tn.PARAM_LITERAL, struct.unpack("<i", struct.pack("<f", 0.5))[0]),
        (tn.PARAM_LITERAL, -3),
    ]
    assert "bf16" in tn._param_sources({"s": "bf16"}, {"s": 1.0}, {}, [])  # type: ignore[operator]
    assert "not a tensor" in tn._param_sources({"p": "*fp32"}, {"p": Operand(0)}, {}, ["int"])  # type: ignore[operator]


def test_launch_hooks_are_seen() -> None:
    from triton import knobs

    assert not tn.launch_hooks_active()

    def hook(metadata: object) -> None:
        pass

    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert tn.launch_hooks_active()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert not tn.launch_hooks_active()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
def test_without_cuda_a_native_launch_is_disabled_with_the_reason() -> None:
    launch = recorded(
        plain_kernel,
        {"x_ptr": Operand(0), "out_ptr": Operand(1), "n": Operand(2), "scale": 2.0, "BLOCK": 16},
        ["tensor", "tensor", "int", "int"],
    )
    site = tn.LaunchSite(launch)
    native = site.native
    assert native.fallback is site and site.record is launch and tn.site_of(native) is site
    assert tn.site_of(launch) is None  # a CPU launch's record is called as it is
    assert native.disabled_reason == "CUDA is not available"
    assert "through Triton's launcher (CUDA is not available)" in tn.describe_launch_site(native)
