"""A Triton launch site in the disk cache: its persisted form (LaunchRecipe) and its rebuild in a new process.

Compiled code reaches each launch through a context constant: the RecordedLaunch itself on CPU tensors (run by
Triton's interpreter), its TritonLaunch on CUDA tensors (runtime/triton_native.py; the site's LaunchSite, which
holds the RecordedLaunch, is its fallback). Neither object can be stored as it is: the RecordedLaunch names its
kernel and constexprs by their indices in torch's kernel_side_table, a table of this process; the TritonLaunch
holds CUfunction handles.
A LaunchRecipe holds instead:
  - the RecordedLaunch's own fields (grid, kwargs with Operand placeholders, operand kinds, device type);
  - the side table's constant arguments, pickled;
  - a KernelLocator: the module and qualified name of the innermost @triton.jit function, and where the side-table
    kernel sits on the `.fn` chain of the object bound to that name (Autotuner / Heuristics / JITFunction); or,
    when the launch passed num_warps / num_stages, the configs of the Autotuner torch synthesized around a chain
    object (torch's call_triton_kernel: `autotune(configs=..., key=[])(kernel)`), made again the same way;
  - what says the kernel is still the one compiled: the JITFunction's cache_key (Triton's hash of its source and
    of the @triton.jit functions and constexpr globals it uses), the decorator chain's settings (autotune
    configs and keys, do_not_specialize, debug) and Triton's cache-invalidating environment. A difference
    rejects the record (the call compiles instead): a stale binary or grid would compute the old kernel;
  - on CUDA, the binary (cubin) of each variant the site's TritonLaunch registered, deduplicated, with its
    VariantArguments. A new process loads them with Triton's load_binary and hands them to the new
    TritonLaunch, so the loaded specialization's first call launches natively. A launch whose key has no stored
    variant goes to Triton's launcher and registers one, as in the compiling process.
Rebuilding registers the kernel and the constant arguments in this process's side table and makes a fresh
RecordedLaunch with the new indices: the artifact's launch-site slot. Instantiating the artifact makes its
LaunchSite (runtime/specialization.py, as for a fresh compile); load_variants then hands it the stored variants.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import importlib
import pickle
import sys
import time
import types
from typing import Any

from ..capture.triton_launches import RecordedLaunch, compiled_form
from ..runtime.triton_native import (
    VariantTable, LaunchSite, VariantArguments, kernel_chain, launch_hooks_active, site_of,
)  # fmt: skip
from .fingerprint import code_digest
from .counters import stats


class LaunchSiteMismatch(Exception):
    """A persisted launch site that does not fit this process: its kernel changed, moved or is not found."""


@dataclasses.dataclass(frozen=True)
class KernelLocator:
    """How another process finds the side-table kernel of a launch, and checks it is the same kernel."""

    module: str  # of the innermost JITFunction's Python function
    qualname: str  # its qualified name: bound to the outermost decorator object
    depth: int  # position on that object's `.fn` chain of the side-table kernel (or of what torch's Autotuner wraps)
    configs: list[Any] | None  # the configs of the Autotuner torch synthesized; None: the kernel is on the chain
    cache_key: str  # the innermost JITFunction's Triton cache_key
    chain: tuple[str, ...]  # the chain's settings (_describe_chain)

    def describe(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclasses.dataclass(frozen=True)
class KernelBinary:
    name: str  # the kernel's symbol in the binary (metadata.name)
    cubin: bytes
    shared: int  # dynamic shared memory in bytes (load_binary raises the function's limit above 48 KB)
    arch: int  # compute capability it was compiled for, as Triton writes it (90 for sm_90)


@dataclasses.dataclass(frozen=True)
class LaunchRecipe:
    kernel_name: str
    grid: list[tuple[Any, ...]]
    tma_descriptor_metadata: dict[str, Any]
    kwargs: dict[str, Any]
    operand_kinds: list[str]
    device_type: str
    constant_args: bytes  # pickled: unpickling fails as a rejection, not as a corrupt record
    locator: KernelLocator
    environment: tuple[tuple[str, str], ...]  # triton_environment() when it was compiled
    key_spec: tuple[tuple[int, int], ...]  # of the TritonLaunch (CUDA); rebuilt from the kernel and checked
    binaries: dict[str, KernelBinary]  # by digest of the cubin
    variants: list[tuple[str, VariantArguments]]  # (binary digest, add_variant arguments), in registration order


# Knobs JITFunction.run copies into every launch's compile options (so they shape the binaries) although they
# are not among Triton's cache-invalidating environment variables: (knob group, name), read where present
# (fpsan_homomorphic_casts: Triton >= 3.9).
_LAUNCH_OPTION_KNOBS = (("compilation", "instrumentation_mode"), ("compilation", "fpsan_homomorphic_casts"))


def triton_environment() -> tuple[tuple[str, str], ...]:
    """What else shapes Triton's binaries: its cache-invalidating environment variables, the debug knob
    (TRITON_DEBUG turns on device assertions through the compile options, not through that list) and the other
    knobs each launch passes as compile options."""
    from triton import knobs as triton_knobs
    from triton._C.libtriton import get_cache_invalidating_env_vars

    env = sorted((str(k), str(v)) for k, v in get_cache_invalidating_env_vars().items())
    options = [(f"triton.knobs.{group}.{name}", str(getattr(getattr(triton_knobs, group), name, None)))
               for group, name in _LAUNCH_OPTION_KNOBS]
    return (*env, ("triton.knobs.runtime.debug", str(bool(triton_knobs.runtime.debug))), *options)


# ---------------------------------------------------------------------------------------------------------
# Persisting


def recipe_of(launch: RecordedLaunch, called: object) -> tuple[LaunchRecipe | None, str | None]:
    """The persisted form of a launch site (its record, with the variant table of its LaunchSite on CUDA),
    or why it has none. `called` is what compiled code calls for it (runtime/specialization.launch_site)."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    where = f"its launch of Triton kernel '{launch.kernel_name}' cannot be persisted"
    locator = locate(kernel_side_table.get_kernel(launch.kernel_idx))
    if isinstance(locator, str):
        return None, f"{where}: {locator}"
    try:
        constant_args = pickle.dumps(kernel_side_table.get_constant_args(launch.constant_args_idx))
        # The rest is pickled with the record; checked here so the reason names the launch.
        pickle.dumps((launch.grid, launch.kwargs, launch.tma_descriptor_metadata, locator))
    except Exception as e:
        return None, f"{where}: its arguments cannot be pickled ({type(e).__name__}: {e})"
    site = site_of(called)
    table = site.variant_table if site is not None else None
    binaries, variants = _stored_variants(table)
    recipe = LaunchRecipe(
        kernel_name=launch.kernel_name, grid=list(launch.grid),
        tma_descriptor_metadata=dict(launch.tma_descriptor_metadata), kwargs=dict(launch.kwargs),
        operand_kinds=list(launch.operand_kinds), device_type=launch.device_type, constant_args=constant_args,
        locator=locator, environment=triton_environment(),
        key_spec=tuple(tuple(k) for k in table.key_spec) if table is not None else (), binaries=binaries,
        variants=variants,
    )  # fmt: skip
    return recipe, None


def locate(kernel: Any) -> KernelLocator | str:
    """The locator of a side-table kernel, or why another process could not find it by name."""
    _, jit = kernel_chain(kernel)
    fn = jit.fn
    module_name, qualname = fn.__module__, fn.__qualname__
    if "<locals>" in qualname:
        return (
            f"it is defined inside a function ({module_name}.{qualname}); another process finds a kernel by its "
            "module and name, so define it at module level to have it persisted"
        )
    module = sys.modules.get(module_name)
    if module is None or vars(module) is not fn.__globals__:
        return f"its module '{module_name}' is not importable by that name (code run from a string?)"
    chain = _named_chain(module, qualname)
    if not chain or chain[-1] is not jit:
        return f"the name {module_name}.{qualname} is bound to another object than this kernel"
    for depth, obj in enumerate(chain):
        if obj is kernel:
            return KernelLocator(module_name, qualname, depth, None, jit.cache_key, _describe_chain(chain))
    # Not on the chain: an Autotuner torch made around a chain object to carry num_warps / num_stages.
    reason = _unlike_synthesized_autotuner(kernel)
    if reason is not None:
        return f"the launched kernel object is not {module_name}.{qualname} or one of its decorators, and {reason}"
    depth = next((d for d, obj in enumerate(chain) if obj is kernel.fn), None)
    if depth is None:
        return f"the launched kernel object wraps none of {module_name}.{qualname} and its decorators"
    configs = copy.deepcopy(kernel.configs)
    return KernelLocator(module_name, qualname, depth, configs, jit.cache_key, _describe_chain(chain))


def _unlike_synthesized_autotuner(kernel: Any) -> str | None:
    """Why `kernel` is not an Autotuner as torch's call_triton_kernel makes (autotune(configs, key=[]) and
    nothing else), which `triton.autotune(configs=configs, key=[])` would make again; None when it is one."""
    from triton.runtime.autotuner import Autotuner

    if not isinstance(kernel, Autotuner):
        return f"it is a {type(kernel).__name__}"
    features = {
        "an autotune key": bool(kernel.keys),
        "prune_configs_by (perf_model, early_config_prune, top_k)": (
            kernel.perf_model is not None or kernel.early_config_prune is not None or kernel.configs_top_k != 1.0
        ),
        "pre_hook / post_hook": kernel.user_defined_pre_hook or kernel.user_defined_post_hook,
        "reset_to_zero / restore_value": bool(kernel.reset_to_zero or kernel.restore_value),
        "a config pre_hook": any(config.pre_hook is not None for config in kernel.configs),
        "custom benchmarking": kernel._do_bench is not None or kernel.num_warmups is not None
        or kernel.num_reps is not None or kernel.use_cuda_graph,
    }  # fmt: skip
    present = [name for name, found in features.items() if found]
    return f"its autotuner has {', '.join(present)}, which is not rebuilt" if present else None


# One object per distinct binary in this process: every site of a record that launches the same kernel refers
# to it, so pickle writes its bytes once per record (a Llama step has 129 launch sites and 8 kernels).
_binaries: dict[str, KernelBinary] = {}


def _stored_variants(table: VariantTable | None) -> tuple[dict[str, KernelBinary], list[tuple[str, VariantArguments]]]:
    """The binaries of the variants registered on a CUDA site (each stored once), and the variants."""
    binaries: dict[str, KernelBinary] = {}
    variants: list[tuple[str, VariantArguments]] = []
    for variant in table.variants if table is not None else []:
        compiled = variant.compiled
        if compiled is None:  # loaded from the disk cache: its specialization is not published again
            continue
        cubin = bytes(compiled.asm["cubin"])
        digest = hashlib.blake2b(cubin, digest_size=20).hexdigest()
        if digest not in _binaries:
            arch = int(compiled.metadata.target.arch)
            _binaries[digest] = KernelBinary(compiled.metadata.name, cubin, int(compiled.metadata.shared), arch)
        binaries[digest] = _binaries[digest]
        variants.append((digest, variant.arguments))
    return binaries, variants


# ---------------------------------------------------------------------------------------------------------
# Loading


def rebuild(recipe: LaunchRecipe) -> RecordedLaunch:
    """The launch record of a loaded specialization, registered in this process's side table (instantiating the
    artifact makes its TritonLaunch on CUDA; load_variants then hands it the stored variants). Raises
    LaunchSiteMismatch when the kernel or Triton's environment differs."""
    from torch._higher_order_ops.triton_kernel_wrap import kernel_side_table

    if triton_environment() != recipe.environment:
        raise LaunchSiteMismatch(
            f"Triton's cache-invalidating environment differs from when kernel '{recipe.kernel_name}' was compiled "
            f"({dict(recipe.environment)} then, {dict(triton_environment())} now)"
        )
    kernel = find_kernel(recipe.locator)
    try:
        constant_args = pickle.loads(recipe.constant_args)
    except Exception as e:
        raise LaunchSiteMismatch(f"the constant arguments of kernel '{recipe.kernel_name}' do not unpickle: {e}") from e
    launch = RecordedLaunch(
        kernel_name=recipe.kernel_name, kernel_idx=kernel_side_table.add_kernel(kernel),
        constant_args_idx=kernel_side_table.add_constant_args(constant_args), grid=list(recipe.grid),
        tma_descriptor_metadata=dict(recipe.tma_descriptor_metadata), kwargs=dict(recipe.kwargs),
        operand_kinds=list(recipe.operand_kinds), device_type=recipe.device_type,
    )  # fmt: skip
    return launch


def load_variants(site: object, recipe: LaunchRecipe) -> None:
    """Hand the stored variants to the instantiated launch site of a CUDA launch (nothing to do on CPU). Raises
    LaunchSiteMismatch when the kernel specializes on other operands here than when it was compiled."""
    if recipe.device_type != "cuda":
        return
    launch_site = site_of(site)
    assert launch_site is not None, "a CUDA launch instantiates as a LaunchSite's TritonLaunch"
    if tuple(tuple(k) for k in launch_site.variant_table.key_spec) != recipe.key_spec:
        raise LaunchSiteMismatch(
            f"kernel '{recipe.kernel_name}' specializes on other operands here "
            f"({launch_site.variant_table.key_spec} now, "
            f"{list(recipe.key_spec)} when compiled)"
        )
    _load_variants(launch_site, recipe)


def find_kernel(locator: KernelLocator) -> Any:
    """The side-table kernel the locator names, in this process; raises LaunchSiteMismatch when it is not there
    or is not the kernel that was compiled."""
    module = sys.modules.get(locator.module)
    if module is None and locator.module != "__main__":
        try:
            module = importlib.import_module(locator.module)
        except Exception as e:
            raise LaunchSiteMismatch(f"module {locator.module} of Triton kernel {locator.describe()} does not import "
                                     f"here: {type(e).__name__}: {e}") from e
    chain = _named_chain(module, locator.qualname) if module is not None else []
    if not chain or locator.depth >= len(chain):
        raise LaunchSiteMismatch(f"Triton kernel {locator.describe()} is not defined in this process")
    if chain[-1].cache_key != locator.cache_key:
        raise LaunchSiteMismatch(
            f"Triton kernel {locator.describe()} changed since it was compiled (its source, or a @triton.jit "
            "function or constexpr global it uses)"
        )
    if _describe_chain(chain) != locator.chain:
        raise LaunchSiteMismatch(f"the decorators of Triton kernel {locator.describe()} (autotune configs or keys, "
                                 "heuristics, jit options) changed since it was compiled")
    target = chain[locator.depth]
    if locator.configs is None:
        return target
    from triton import autotune

    return autotune(configs=locator.configs, key=[])(target)


# Binaries loaded in this process, by (digest, device): (CUfunction handle, max threads per block). Each is loaded
# once however many sites and records use it; like Triton, Trident never unloads a kernel module.
_loaded: dict[tuple[str, int], tuple[int, int]] = {}


def _load_variants(site: LaunchSite, recipe: LaunchRecipe) -> None:
    """Load each stored binary once per device and hand every stored variant to the site's TritonLaunch.

    Variants are skipped (their keys go to Triton's launcher, which compiles and registers them again) where
    native launches are off for the site, while a launch hook is set (native launches would bypass it), and
    for a device index this process does not have or whose architecture differs."""
    import torch

    native = site.native
    if native.disabled_reason is not None or not recipe.variants or launch_hooks_active():
        return
    from triton.runtime import driver

    for digest, arguments in recipe.variants:
        device = arguments.device
        if device >= torch.cuda.device_count():
            continue
        binary = recipe.binaries[digest]
        major, minor = torch.cuda.get_device_capability(device)
        if major * 10 + minor != binary.arch:
            continue
        if (digest, device) not in _loaded:
            start = time.perf_counter()
            with torch.cuda.device(device):  # load_binary loads into the current context, as Triton does
                _, function, _, _, max_threads = driver.active.utils.load_binary(
                    binary.name, binary.cubin, binary.shared, device
                )
            _loaded[(digest, device)] = (function, max_threads)
            stats.triton_binaries_loaded += 1
            stats.triton_binary_load_ms += (time.perf_counter() - start) * 1e3
        function, max_threads = _loaded[(digest, device)]
        if arguments.block_threads > max_threads:
            raise LaunchSiteMismatch(
                f"kernel '{recipe.kernel_name}' needs {arguments.block_threads} threads per block; its binary "
                f"allows {max_threads} on device {device} here"
            )
        with torch.cuda.device(device):  # a variant belongs to the context current when it is added
            site.add_variant(function, arguments)


# ---------------------------------------------------------------------------------------------------------
# The chain of decorator objects bound to a kernel's name


def _named_chain(module: types.ModuleType, qualname: str) -> list[Any]:
    """The object bound to `qualname` in `module` and the objects on its `.fn` chain, outermost first, ending
    with a JITFunction; [] when the name leads elsewhere. A kernel decorated under TRITON_INTERPRET=1 is named
    by its compiled form, the twin capture recorded."""
    from triton.runtime.jit import JITFunction

    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return []
    wrappers, jit = kernel_chain(compiled_form(obj))
    return [*wrappers, jit] if isinstance(jit, JITFunction) else []


def _describe_chain(chain: list[Any]) -> tuple[str, ...]:
    """The settings of each decorator object that shape the trace, the grids or the binaries: an Autotuner's
    key and configs (one recorded grid per config), a Heuristics' functions, a JITFunction's options. Neither
    the state fingerprint (it names Triton objects by type) nor the cache_key (source only) covers them."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    described = []
    for obj in chain:
        if isinstance(obj, Autotuner):
            configs = [(sorted(c.all_kwargs().items()), c.pre_hook is not None) for c in obj.configs]
            described.append(f"autotune key={list(obj.keys)} configs={configs}")
        elif isinstance(obj, Heuristics):
            functions = {name: _callable_text(fn) for name, fn in obj.values.items()}
            described.append(f"heuristics {sorted(functions.items())}")
        else:
            options = (obj.do_not_specialize, obj.do_not_specialize_on_alignment, obj.debug, obj.noinline)
            described.append(f"jit {options!r}")
    return tuple(described)


def _callable_text(fn: object) -> str:
    if isinstance(fn, types.FunctionType):
        return f"{fn.__module__}.{fn.__qualname__} {code_digest(fn.__code__)}"
    return type(fn).__qualname__
