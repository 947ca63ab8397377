"""The runtime reads and packs what trident.abi's codes say it does: dtype and device codes, the global state.

(The struct layout and the externs are checked against the header in test_native_entry.py; the header's own
consistency in tests/unit/test_abi.py.)"""
from __future__ import annotations

import contextlib
import ctypes

import pytest
import torch
from global_state import default_dtype

from trident import abi
from trident.lowering import runtime_abi
from trident.runtime import load_runtime, runtime_library_path


@pytest.fixture(scope="module")
def lib() -> ctypes.PyDLL:
    load_runtime()
    lib = ctypes.PyDLL(runtime_library_path())
    lib.trident_read_tensor.argtypes, lib.trident_read_tensor.restype = [ctypes.py_object, ctypes.c_void_p], ctypes.c_int32
    lib.trident_global_state.argtypes, lib.trident_global_state.restype = [], ctypes.c_int64
    return lib


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")  # torch.empty of complex32
def test_dtype_and_device_codes_are_what_the_runtime_reads(lib: ctypes.PyDLL) -> None:
    """Python names each TRIDENT_DTYPE_<NAME> torch.<name> (tensor_access.cpp checks the codes against c10 when it
    builds): a tensor of every such dtype reads natively as that code, and the code guards compare it with."""
    from trident.torch_codes import DTYPE_CODES, device_type_code, dtype_code

    assert len(DTYPE_CODES) >= 20 and torch.float8_e4m3fn in DTYPE_CODES
    for dtype, code in DTYPE_CODES.items():
        meta = (ctypes.c_int64 * runtime_abi.META_FIELDS)()  # the fields as generated code indexes them
        assert lib.trident_read_tensor(torch.empty(2, dtype=dtype), meta) == 1, dtype
        assert meta[runtime_abi.META_DTYPE] == code == dtype_code(dtype), dtype
        assert meta[runtime_abi.META_DEVICE_TYPE] == device_type_code("cpu") == abi.DEVICE_TYPE_CPU
    with pytest.raises(NotImplementedError, match="torch.qint8 has no code in trident_runtime.h"):
        dtype_code(torch.qint8)


@pytest.mark.parametrize("state", ["default", "no_grad", "inference", "autocast_bf16", "float64", "no_torch_function"])
def test_python_packs_the_global_state_as_the_runtime(lib: ctypes.PyDLL, state: str) -> None:
    """guards.global_state.current_global_state (what a specialization is compiled for) and trident_global_state (what
    its guard reads on each call) pack the same TRIDENT_STATE_* fields."""
    from trident.guards.global_state import current_global_state, describe_global_state

    contexts = {
        "default": contextlib.nullcontext, "no_grad": torch.no_grad, "inference": torch.inference_mode,
        "autocast_bf16": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
        "float64": lambda: default_dtype(torch.float64), "no_torch_function": torch._C.DisableTorchFunction,
    }  # fmt: skip
    with contexts[state]():
        assert lib.trident_global_state() == current_global_state()
        text = describe_global_state(current_global_state())
    expected = {
        "default": "grad on, autocast off, inference mode off, default dtype float32",
        "no_grad": "grad off, autocast off, inference mode off, default dtype float32",
        "inference": "grad off, autocast off, inference mode on, default dtype float32",
        "autocast_bf16": "grad on, autocast on (cpu bfloat16), inference mode off, default dtype float32",
        "float64": "grad on, autocast off, inference mode off, default dtype float64",
        "no_torch_function": "grad on, autocast off, inference mode off, torch functions off, default dtype float32",
    }
    assert text == expected[state]


