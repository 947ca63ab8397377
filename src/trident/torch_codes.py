"""torch's dtypes and device types as the native runtime's codes (trident_runtime.h's TRIDENT_DTYPE_<NAME> and
TRIDENT_DEVICE_TYPE_<NAME>, which the runtime build checks against c10's enums).

Used by whatever states a dtype or device to native code: the guards (a tensor's dtype, the default dtype and
autocast dtypes in the global state), the torch-dialect import (dtype literals) and the host program (devices).
"""
from __future__ import annotations

import torch

from . import abi

# The header's TRIDENT_DTYPE_<NAME> is torch.<name>.
DTYPE_CODES: dict[torch.dtype, int] = {
    getattr(torch, name.lower()): code for name, code in abi.family("DTYPE_").items()
}
_DTYPE_OF_CODE = {code: dtype for dtype, code in DTYPE_CODES.items()}
# c10::DeviceType values by torch.device type name: the header's TRIDENT_DEVICE_TYPE_<NAME> is "<name>".
_DEVICE_TYPES = {name.lower(): code for name, code in abi.family("DEVICE_TYPE_").items()}


def dtype_code(dtype: torch.dtype) -> int:
    """c10::ScalarType value of a dtype, as the runtime reports it."""
    code = DTYPE_CODES.get(dtype)
    if code is None:  # a guard or a global state Trident cannot state: not a silent wrong code
        raise NotImplementedError(f"trident: {dtype} has no code in trident_runtime.h (TRIDENT_DTYPE_*)")
    return code


def dtype_name(code: int) -> str:
    """How explain names the dtype of a code ("float32"; "dtype#<code>" for one the header does not name)."""
    return str(_DTYPE_OF_CODE.get(code, f"dtype#{code}")).removeprefix("torch.")


def device_type_code(device_type: str) -> int:
    return _DEVICE_TYPES[device_type]
