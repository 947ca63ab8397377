"""Native launches of captured Triton kernels: building a launch site's TritonLaunch and its variants.

A TritonLaunch (csrc/triton_launch.cpp) launches compiled variants of one kernel with cuLaunchKernel. Its
key spec names the operands Triton specializes the kernel on and how: 16-byte alignment of pointers,
integers equal to 1, divisible by 16 or wider than 32 bits (honouring do_not_specialize and
do_not_specialize_on_alignment), and the exact values of autotune keys and of ints that heuristics read.

Each CUDA launch site is a LaunchSite: capture's record of the launch, its VariantTable and its TritonLaunch.
Variants are learned, never assumed. A launch with no matching variant goes to the TritonLaunch's fallback,
the LaunchSite, which runs Triton's own launcher: it compiles (and autotunes) exactly as eager would.
`LaunchSite.register` then reads what cuLaunchKernel needs from the CompiledKernel Triton returned, checks that
the native key agrees with Triton's own specialization of that call (a disagreement disables native launches
for the site instead of risking a wrong kernel), and hands the variant over. Kernel features the native
launcher does not implement (clusters, cooperative or PDL launches, scratch buffers, TMA descriptors, fp16
scalars, hooks) disable native launches for the site with the reason; its launches stay correct through
Triton's launcher.

Each site's VariantTable remembers the variants handed to its TritonLaunch (VariantArguments), so that the disk
cache can store the variants' binaries and hand them to the TritonLaunch of a new process
(cache/launch_sites.py).

The launcher follows Triton's CUDA launch ABI, which is private and changes between releases; native launches
run only under the Triton versions in VERIFIED_LAUNCH_ABI. Under any other version every launch goes through
Triton's own launcher and explain says why.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from ..abi import (  # the TritonLaunch type's codes, defined in csrc/trident_runtime.h
    KEY_ALIGN, KEY_INT, KEY_INT_NO_ALIGN, KEY_INT_WIDTH, KEY_VALUE,
    PARAM_FP32, PARAM_FP64, PARAM_INT, PARAM_LITERAL, PARAM_POINTER,
)  # fmt: skip
from ..artifact import Operand
from ..native_numbers import float32_bits, float_bits, int64_bits

log = logging.getLogger("trident")

# Triton versions whose CUDA launch ABI csrc/triton_launch.cpp follows, read from each release's
# backends/nvidia/driver.py + driver.c (the launcher) and compiler/compiler.py (CompiledKernel). What was checked,
# identical in all four: the kernel's non-constexpr parameters in signature order, then two trailing device
# pointers (global_scratch, profile_scratch: NULL when the metadata's sizes are 0); block = 32 * num_warps threads;
# dynamic shared memory = metadata.shared, with load_binary raising the function's limit above 48 KB;
# cuLaunchKernelEx gets attributes only for num_ctas != 1, launch_cooperative_grid, launch_pdl (all refused in
# _unsupported_metadata); CompiledKernel.function is the CUfunction, .metadata holds num_warps / num_ctas /
# shared / name / target, .asm["cubin"] the binary; load_binary returns (module, function, n_regs, n_spills,
# max_threads). Differences found, and how they are handled:
#   3.6.0  a C launcher generated per signature (i1 passed as int8). Also run natively on the H200.
#   3.7.1  one generic launcher in driver.c (argument extractors; i1 passed as int32): the same bytes reach the
#          kernel from a zero-extended 8-byte slot.
#   3.8.0  GSan instrumentation appends an argument before the scratch pointers, and more than 228 KB of shared
#          memory adds a launch attribute: both refused (_unsupported_metadata). CompiledKernel.__del__ unloads
#          its module: a registered variant keeps its CompiledKernel alive (RegisteredVariant.compiled).
#   3.9.0  GSan appends three arguments (refused as in 3.8.0); __del__ unloads only in the loading process.
# Only 3.6.0 has launched natively on a GPU so far; the others are verified by reading their sources.
VERIFIED_LAUNCH_ABI = ("3.6.0", "3.7.1", "3.8.0", "3.9.0")

MAX_SHARED_BYTES = 228 * 1024  # above it Triton >= 3.8 launches with an oversized-shared-memory attribute
MAX_VARIANTS = 32  # per launch site; past it new specializations keep running through Triton's launcher
MAX_KEY = 64  # csrc kMaxKey
_INT_TYPES = frozenset({"i1", "i8", "i16", "i32", "i64", "u1", "u8", "u16", "u32", "u64"})


def kernel_chain(kernel: Any) -> tuple[list[Any], Any]:
    """(the Autotuner / Heuristics wrappers outermost first, the JITFunction they wrap)."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    wrappers = []
    while isinstance(kernel, (Autotuner, Heuristics)):
        wrappers.append(kernel)
        kernel = kernel.fn
    return wrappers, kernel


def unverified_triton() -> str | None:
    """Why this Triton's launches cannot go native (its launch ABI is not one Trident follows), or None."""
    import triton

    if triton.__version__ in VERIFIED_LAUNCH_ABI:
        return None
    return (f"native launch not verified for Triton {triton.__version__} (verified: "
            f"{', '.join(VERIFIED_LAUNCH_ABI)})")


@functools.cache
def cuda_ready() -> str | None:
    """None once the runtime reached the CUDA driver and torch's stream accessor, else why not."""
    from trident.exc import KernelLaunchError
    from trident.runtime import load_runtime

    if not torch.cuda.is_available():
        return "CUDA is not available"
    torch.cuda.init()  # loads libtorch_cuda and creates the context Triton's kernels are loaded in
    path = Path(torch.__file__).resolve().parent / "lib" / "libtorch_cuda.so"
    try:
        load_runtime().init_cuda(str(path), KernelLaunchError)
    except RuntimeError as e:
        return str(e)
    return None


class VariantTable:
    """What a launch site's TritonLaunch is built from: its key spec and, per key entry, the kernel parameter
    whose Triton specialization it mirrors (None for exact-value entries)."""

    def __init__(self, launch: Any, kernel: Any) -> None:
        self.key_spec: list[tuple[int, int]] = []
        self.key_params: list[str | None] = []
        self.unsupported: str | None = None
        wrappers, jit = kernel_chain(kernel)
        self._key_wrappers(launch, wrappers)
        for param in jit.params:
            value = launch.kwargs.get(param.name)
            if not isinstance(value, Operand):  # literals (ints, strings, dtypes) are fixed per site
                continue
            kind = launch.operand_kinds[value.index]
            if param.is_constexpr:  # computed from sizes (triton.next_power_of_2(n)): one kernel per value
                self._add(value.index, KEY_VALUE, None)
                continue
            if param.annotation_type and kind in ("tensor", "int"):
                self.unsupported = f"parameter '{param.name}' has a type annotation ({param.annotation})"
            elif kind == "tensor" and not (param.do_not_specialize or param.do_not_specialize_on_alignment):
                self._add(value.index, KEY_ALIGN, param.name)
            elif kind == "int":
                mode = (KEY_INT_WIDTH if param.do_not_specialize else
                        KEY_INT_NO_ALIGN if param.do_not_specialize_on_alignment else KEY_INT)  # fmt: skip
                self._add(value.index, mode, param.name)
        if len(self.key_spec) > MAX_KEY:
            self.unsupported = f"the kernel specializes on {len(self.key_spec)} operands (more than {MAX_KEY})"
            self.key_spec, self.key_params = [], []
        if launch.tma_descriptor_metadata:
            self.unsupported = "TMA descriptor arguments"
        self.variants: list[RegisteredVariant] = []  # every variant handed to the site's TritonLaunch, in order

    def _add(self, operand: int, kind: int, param: str | None) -> None:
        self.key_spec.append((operand, kind))
        self.key_params.append(param)

    def _key_wrappers(self, launch: Any, wrappers: list[Any]) -> None:
        from triton.runtime.autotuner import Autotuner

        for wrapper in wrappers:
            if not isinstance(wrapper, Autotuner):  # heuristics may read any int: key on every int value
                for name, value in launch.kwargs.items():
                    if isinstance(value, Operand) and launch.operand_kinds[value.index] == "int":
                        self._add(value.index, KEY_VALUE, None)
                continue
            if any(config.pre_hook is not None for config in wrapper.configs):
                self.unsupported = "an autotune config has a pre_hook (it runs on every launch)"
            if len(wrapper.configs) > 1:  # the winning config is a function of the autotune key
                for name in wrapper.keys:
                    value = launch.kwargs.get(name)
                    if isinstance(value, Operand):
                        if launch.operand_kinds[value.index] != "int":
                            self.unsupported = f"autotune key '{name}' is not an int argument"
                        else:
                            self._add(value.index, KEY_VALUE, None)


@dataclasses.dataclass(frozen=True)
class VariantArguments:
    """The arguments of one TritonLaunch.add_variant call besides the kernel function handle (which belongs to
    this process): what the disk cache stores next to the variant's binary (cache/launch_sites.py)."""

    key: tuple[int, ...]
    block_threads: int  # 32 * num_warps
    shared: int  # dynamic shared memory in bytes
    device: int  # CUDA device index
    param_sources: tuple[tuple[int, int], ...]  # (kind, source) per non-constexpr parameter
    grid: tuple[tuple[int, int], ...]  # (is_operand, value) per grid dimension


@dataclasses.dataclass(frozen=True)
class RegisteredVariant:
    arguments: VariantArguments
    compiled: Any  # the CompiledKernel Triton launched (held: it keeps its CUDA module loaded); None if loaded
    # from the disk cache (launch_sites.py keeps those modules loaded for the life of the process)


class LaunchSite:
    """The runtime object of one CUDA launch site: capture's record (plain data), its VariantTable (how launches
    are keyed, and every variant handed over) and its TritonLaunch, which compiled code calls. The site is the
    TritonLaunch's fallback: a launch with no native variant comes here, runs through Triton's launcher and
    registers the variant Triton compiled (`register`). The disk cache hands stored variants to `add_variant`."""

    def __init__(self, record: Any) -> None:
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

        from trident.runtime import load_runtime

        self.record = record
        self.variant_table = VariantTable(record, kernel_side_table.get_kernel(record.kernel_idx))
        self.native = load_runtime().TritonLaunch(record.kernel_name, self, self.variant_table.key_spec)
        reason = unverified_triton() or self.variant_table.unsupported or cuda_ready()
        if reason is not None:
            self.native.disable(reason)

    def __call__(self, *operands: Any) -> None:
        launched = self.record.launch(operands)
        if launched.interpreted_on_device and self.native.disabled_reason is None:
            self.native.disable("the kernel was decorated under TRITON_INTERPRET=1: it runs through Triton's "
                                "interpreter, as in eager")
        if launched.compiled is not None:
            self.register(launched.compiled, launched.kwargs, operands)

    def add_variant(self, function: int, arguments: VariantArguments, compiled: Any = None) -> None:
        """Hand one compiled variant to the TritonLaunch, and remember it in the variant table."""
        from trident.runtime import load_runtime

        a = arguments
        load_runtime().watch_launch_hooks(*_hook_lists())  # the chains now installed (Triton may have replaced them)
        self.native.add_variant(a.key, function, a.block_threads, a.shared, a.device, a.param_sources, a.grid)
        self.variant_table.variants.append(RegisteredVariant(arguments, compiled))

    def register(self, compiled: Any, kwargs: Mapping[str, Any], operands: Sequence[object]) -> None:
        """After Triton launched the kernel for `operands`, let later launches with the same specialization key
        go native."""
        native, launch = self.native, self.record
        if native.disabled_reason is not None or native.variant_count >= MAX_VARIANTS:
            return
        from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

        if launch_hooks_active():
            return  # a profiler is listening: keep launching through Triton while it is
        reason = _unsupported_metadata(compiled)
        kernel = kernel_side_table.get_kernel(launch.kernel_idx)
        _, jit = kernel_chain(kernel)
        if jit.pre_run_hooks:
            reason = "the kernel has pre-run hooks"
        if reason is not None:
            native.disable(reason)
            return
        args, grid_index = launch_arguments(launch, kernel, kwargs)
        defaults = {p.name: p.default for p in jit.params if p.has_default}
        sources = _param_sources(compiled.src.signature, args, defaults, launch.operand_kinds)
        if isinstance(sources, str):
            native.disable(sources)
            return
        values = [_operand_key_value(operands[i]) for i, _ in self.variant_table.key_spec]
        key = native.key(values)
        device = torch.cuda.current_device()
        binder = jit.device_caches[device][4]
        concrete = {name: (operands[v.index] if isinstance(v, Operand) else v) for name, v in args.items()}
        _, specialization, _ = binder(**concrete)
        param_index = {p.name: i for i, p in enumerate(jit.params)}
        expected = _expected_key(self.variant_table, specialization, param_index, values)
        if key != expected:
            native.disable(f"internal: native specialization key {key} differs from Triton's {expected}")
            log.warning("trident: launches of '%s' stay on Triton's launcher: %s", launch.kernel_name,
                        native.disabled_reason)
            return
        grid = [(1, d.index) if isinstance(d, Operand) else (0, int(d)) for d in launch.grid[grid_index]]
        grid += [(0, 1)] * (3 - len(grid))
        arguments = VariantArguments(
            tuple(key), 32 * compiled.metadata.num_warps, compiled.metadata.shared, device, tuple(sources), tuple(grid)
        )
        self.add_variant(compiled.function, arguments, compiled)  # the table keeps `compiled` (its CUDA module)


def _operand_key_value(operand: object) -> int:
    if isinstance(operand, torch.Tensor):
        return operand.data_ptr()
    return int(operand)  # type: ignore[call-overload]


def _expected_key(table: VariantTable, specialization: Sequence[tuple[str, Any]], param_index: Mapping[str, int],
                  values: Sequence[int]) -> tuple[int, ...]:
    """The native key Triton's own specialization of the call implies (see csrc key_of)."""
    key = []
    for (operand, kind), param, value in zip(table.key_spec, table.key_params, values):
        if kind == KEY_VALUE or param is None:
            key.append(value)
            continue
        type_name, attribute = specialization[param_index[param]]
        if kind == KEY_ALIGN:
            key.append(int(attribute == "D"))
        elif type_name == "constexpr":
            key.append(1)
        else:
            key.append(2 + 2 * (type_name in ("i64", "u64")) + (attribute == "D"))
    return tuple(key)


def _param_sources(signature: Mapping[str, str], args: Mapping[str, Any], defaults: Mapping[str, Any],
                   operand_kinds: Sequence[str]) -> list[tuple[int, int]] | str:
    """(kind, source) per non-constexpr kernel parameter, in order; or why this kernel cannot launch natively."""
    sources = []
    for name, type_name in signature.items():
        if type_name == "constexpr":
            continue
        value = args[name] if name in args else defaults.get(name)
        operand = value.index if isinstance(value, Operand) else None
        if type_name.startswith("*"):
            if operand is None or operand_kinds[operand] != "tensor":
                return f"pointer parameter '{name}' is not a tensor operand"
            sources.append((PARAM_POINTER, operand))
        elif type_name in _INT_TYPES:
            if operand is not None:
                sources.append((PARAM_INT, operand))
            else:
                sources.append((PARAM_LITERAL, int64_bits(int(value))))  # the parameter word's low bytes
        elif type_name in ("fp32", "f32", "fp64"):
            if operand is not None:
                sources.append((PARAM_FP32 if type_name != "fp64" else PARAM_FP64, operand))
            else:
                bits = float_bits(float(value)) if type_name == "fp64" else float32_bits(float(value))
                sources.append((PARAM_LITERAL, bits))
        else:
            return f"parameter '{name}' of type {type_name}"
    return sources


def _unsupported_metadata(compiled: Any) -> str | None:
    metadata = compiled.metadata
    if getattr(metadata, "num_ctas", 1) != 1:
        return f"num_ctas={metadata.num_ctas} (thread block clusters)"
    if getattr(metadata, "launch_cooperative_grid", False) or getattr(metadata, "launch_pdl", False):
        return "a cooperative or programmatic-dependent launch"
    if getattr(metadata, "global_scratch_size", 0) or getattr(metadata, "profile_scratch_size", 0):
        return "a global or profile scratch buffer"
    if getattr(metadata, "tensordesc_meta", None):
        return "tensor descriptors"
    if getattr(metadata, "instrumentation_mode", ""):  # Triton >= 3.8: GSan adds kernel arguments
        return f"Triton instrumentation (instrumentation_mode={metadata.instrumentation_mode!r})"
    if metadata.shared > MAX_SHARED_BYTES:
        return f"{metadata.shared} bytes of shared memory (more than {MAX_SHARED_BYTES} needs a launch attribute)"
    return None


def launch_arguments(launch: Any, kernel: Any, kwargs: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """The arguments Triton's JITFunction.run received for the launch that just ran (operands as Operand
    placeholders, the winning autotune config and heuristics applied), and the index of the config whose
    recorded grid the launch used."""
    from triton.runtime.autotuner import Autotuner

    wrappers, _ = kernel_chain(kernel)
    args = {**launch.kwargs, **launch.constants()}
    concrete = {**kwargs, **launch.constants()}
    grid_index = 0
    for wrapper in wrappers:
        if isinstance(wrapper, Autotuner):
            config = wrapper.best_config if len(wrapper.configs) > 1 else wrapper.configs[0]
            args.update(config.all_kwargs())
            concrete.update(config.all_kwargs())
            if wrapper is kernel:
                grid_index = next(
                    (i for i, c in enumerate(wrapper.configs) if c.all_kwargs() == config.all_kwargs()), 0
                )
        else:
            for name, heuristic in wrapper.values.items():
                args[name] = concrete[name] = heuristic(dict(concrete))
    return args, grid_index


def _hook_chains() -> tuple[Any, Any]:
    """Triton's launch enter and exit hooks: HookChain objects in Triton 3.6-3.9."""
    from triton import knobs as triton_knobs

    return triton_knobs.runtime.launch_enter_hook, triton_knobs.runtime.launch_exit_hook


def _hook_lists() -> tuple[list[Any] | None, list[Any] | None]:
    """The chains' `calls` lists, None where there is none: native launches check their sizes (csrc
    watch_launch_hooks) and go through Triton's launcher while one is set."""
    lists = tuple(getattr(chain, "calls", None) for chain in _hook_chains())
    return tuple(calls if isinstance(calls, list) else None for calls in lists)  # type: ignore[return-value]


def launch_hooks_active() -> bool:
    """Whether Triton has launch enter/exit hooks (profilers such as proton add them): native launches
    would bypass them."""
    return any(getattr(hook, "calls", hook is not None) for hook in _hook_chains())


def site_of(called: object) -> LaunchSite | None:
    """The LaunchSite of what a launch op of compiled code calls (its TritonLaunch); None for a CPU launch's record."""
    fallback = getattr(called, "fallback", None)
    return fallback if isinstance(fallback, LaunchSite) else None


def describe_launch_site(site: Any) -> str:
    """One explain line for what a launch op of compiled code calls."""
    if not hasattr(site, "variant_count"):  # no TritonLaunch: a CPU launch, whose record compiled code calls itself
        return f"Triton kernel '{site.kernel_name}': CPU tensors, run through Triton's interpreter"
    if site.disabled_reason is not None:
        return f"Triton kernel '{site.name}': through Triton's launcher ({site.disabled_reason})"
    return (
        f"Triton kernel '{site.name}': launched natively, {site.variant_count} compiled variant(s), "
        f"{site.native_launches} native launch(es), {site.fallback_launches} through Triton's launcher"
    )
