"""Guards on the process state a capture baked in: grad mode, autocast, inference mode, the default dtype and the
torch function state (GlobalStateGuard), and the torch function mode stack (FunctionModesGuard)."""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch.utils._device import DeviceContext

from .. import abi
from ..lowering import runtime_abi as native_abi
from ..torch_codes import dtype_code, dtype_name
from .base import Guard, NativeCheck, PythonCheck


@dataclasses.dataclass(frozen=True)
class GlobalStateGuard(Guard):
    """Grad mode, autocast, inference mode, torch functions disabled, default dtype: packed as
    trident_global_state() packs them (current_global_state)."""

    state: int

    def describe(self) -> str:
        return f"global state: {describe_global_state(self.state)}"

    def check(self, call: PythonCheck) -> str | None:
        state = current_global_state()
        if state == self.state:
            return None
        expected, got = describe_global_state(self.state), describe_global_state(state)
        return f"global state mismatch: expected {expected}, got {got}"

    def lower(self, native: NativeCheck) -> None:
        fb = native.fb
        state = fb.call(native_abi.GLOBAL_STATE, [])
        assert state is not None
        fb.check(fb.cmp("eq", state, fb.const(self.state)))


@dataclasses.dataclass(frozen=True)
class FunctionModesGuard(Guard):
    """The torch function mode stack at capture (bottom first), held by the context: a default device set with
    torch.set_default_device or `with torch.device(...)` is such a mode, and the program bakes in the device it
    gave factories. Compared by identity, or by device for default-device modes (default_device_of)."""

    modes: tuple[object, ...] = ()

    def describe(self) -> str:
        return f"torch function modes: {describe_function_modes(self.modes)}"

    def check(self, call: PythonCheck) -> str | None:
        modes = current_function_modes()
        if same_function_modes(modes, self.modes):
            return None
        return (
            f"torch function modes changed (torch.set_default_device, `with torch.device(...)`, a "
            f"TorchFunctionMode): captured under {describe_function_modes(self.modes)}, called under "
            f"{describe_function_modes(modes)}"
        )

    def lower(self, native: NativeCheck) -> None:
        fb = native.fb
        count = fb.call(native_abi.FUNCTION_MODE_COUNT, [])
        assert count is not None
        fb.check(fb.cmp("eq", count, fb.const(len(self.modes))))
        for i, mode in enumerate(self.modes):  # held by the context (so never a reused address)
            device = default_device_of(mode)
            device_arg = fb.null() if device is None else native.constant(device)
            native.check_true(native_abi.FUNCTION_MODE_MATCHES, [fb.const(i), native.constant(mode), device_arg])


# ATen's TorchFunctionDisabledState, set by torch._C.DisableTorchFunctionSubclass / DisableTorchFunction.
_TORCH_FUNCTION_STATES = {
    abi.TORCH_FUNCTION_ENABLED: "torch functions on",
    abi.TORCH_FUNCTION_SUBCLASSES_DISABLED: "subclass torch functions off",
    abi.TORCH_FUNCTION_ALL_DISABLED: "torch functions off",
}


def torch_function_disabled_state() -> int:
    if torch._C._is_torch_function_all_disabled():
        return abi.TORCH_FUNCTION_ALL_DISABLED
    if torch._C._is_torch_function_enabled():
        return abi.TORCH_FUNCTION_ENABLED
    return abi.TORCH_FUNCTION_SUBCLASSES_DISABLED


def current_global_state() -> int:
    """What the runtime's trident_global_state returns now (its TRIDENT_STATE_* fields)."""
    autocast = any(torch.is_autocast_enabled(device) for device in ("cpu", "cuda"))
    return (
        (abi.STATE_GRAD_ENABLED if torch.is_grad_enabled() else 0)
        | (abi.STATE_AUTOCAST_ENABLED if autocast else 0)
        | (abi.STATE_INFERENCE_MODE if torch.is_inference_mode_enabled() else 0)
        | torch_function_disabled_state() << abi.STATE_TORCH_FUNCTION_SHIFT
        | dtype_code(torch.get_default_dtype()) << abi.STATE_DEFAULT_DTYPE_SHIFT
        | autocast_code("cpu") << abi.STATE_AUTOCAST_CPU_SHIFT
        | autocast_code("cuda") << abi.STATE_AUTOCAST_CUDA_SHIFT
    )


def autocast_code(device_type: str) -> int:
    """1 + the dtype code autocast casts to on `device_type`, or 0 when it is off there (as the runtime's
    trident_global_state packs it): the casts a capture records follow that dtype and device type."""
    if not torch.is_autocast_enabled(device_type):
        return 0
    return 1 + dtype_code(torch.get_autocast_dtype(device_type))


def describe_global_state(state: int) -> str:
    torch_functions = (state >> abi.STATE_TORCH_FUNCTION_SHIFT) & abi.STATE_TORCH_FUNCTION_MASK
    default_dtype = (state >> abi.STATE_DEFAULT_DTYPE_SHIFT) & abi.STATE_DTYPE_MASK
    return (
        f"grad {'on' if state & abi.STATE_GRAD_ENABLED else 'off'}, autocast {_describe_autocast(state)}, "
        f"inference mode {'on' if state & abi.STATE_INFERENCE_MODE else 'off'}, "
        + (f"{_TORCH_FUNCTION_STATES[torch_functions]}, " if torch_functions != abi.TORCH_FUNCTION_ENABLED else "")
        + f"default dtype {dtype_name(default_dtype)}"
    )


def _describe_autocast(state: int) -> str:
    shifts = (("cpu", abi.STATE_AUTOCAST_CPU_SHIFT), ("cuda", abi.STATE_AUTOCAST_CUDA_SHIFT))
    codes = [(device, (state >> shift) & abi.STATE_DTYPE_MASK) for device, shift in shifts]
    casts = [f"{device} {dtype_name(code - 1)}" for device, code in codes if code]
    if casts:
        return "on (" + ", ".join(casts) + ")"
    return "on" if state & abi.STATE_AUTOCAST_ENABLED else "off"


def current_function_modes() -> tuple[object, ...]:
    """The torch function mode stack, bottom first (what trident_function_mode_matches reads natively)."""
    return tuple(torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack()))


def default_device_of(mode: object) -> torch.device | None:
    """The device of a default-device mode (torch.set_default_device, `with torch.device(...)`), whose only
    state is that device, so two of them with equal devices act alike; None for any other mode (compared by
    identity). The native guard applies the same rule (trident_function_mode_matches)."""
    return mode.device if type(mode) is DeviceContext else None  # type: ignore[attr-defined]


def same_function_modes(now: Sequence[object], captured: Sequence[object]) -> bool:
    def same(a: object, b: object) -> bool:
        device = default_device_of(b)
        return a is b or (type(a) is type(b) and device is not None and a.device == device)  # type: ignore

    return len(now) == len(captured) and all(same(a, b) for a, b in zip(now, captured))


def describe_function_modes(modes: Sequence[object]) -> str:
    if not modes:
        return "none"
    return ", ".join(
        f"{type(m).__name__}({default_device_of(m)})" if default_device_of(m) is not None else type(m).__name__
        for m in modes
    )
