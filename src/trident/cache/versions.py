"""What the compiled code depends on besides the user's program: versions of everything that shaped it.

Any difference is a miss, so these go into the lookup key (key.py):
  - torch, Triton and torch-mlir (LLVM): versions and install locations;
  - Trident: package version plus a hash of its own sources (Python compiler and C++ runtime), because the
    lowering changes during development without a version bump; plus the runtime library the code links
    against (its path carries the hash of its build: sources, compiler flags, torch);
  - Python: the ABI tag (sys.implementation.cache_tag) and the exact version (the standard library's code is
    identified by name in fingerprints, so its version must match too);
  - the machine architecture and the host CPU's instruction-set features: LLVM generates code for the host
    CPU (MLIR's ExecutionEngine targets it), so code from an AVX-512 machine must not run on one without it;
  - for calls on CUDA tensors, the GPU's compute capability (device_facts).
Computed once per process: reading versions must not import Triton or torch-mlir on a warm start.
"""
from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import platform
import sys
from pathlib import Path

import torch

from ..capture.inputs import CallFacts

_TRIDENT_DIR = Path(__file__).resolve().parent.parent


def distribution_version(distribution: str, package: str) -> str:
    """'<version> at <location>' of an installed distribution, read without importing it.

    The version comes from the `<name>-<version>.dist-info` folder next to the package (what pip writes);
    importlib.metadata is the fallback (it scans every path entry: ~25 ms)."""
    spec = importlib.util.find_spec(package)
    if spec is None:
        return "absent"
    locations = list(spec.submodule_search_locations or ([spec.origin] if spec.origin else []))
    if not locations:
        return "unknown"
    package_dir = Path(locations[0]).resolve()
    site = package_dir.parent
    prefix = distribution.replace("-", "_") + "-"
    try:
        for entry in os.listdir(site):
            if entry.startswith(prefix) and entry.endswith(".dist-info"):
                return f"{entry[len(prefix):-len('.dist-info')]} at {package_dir}"
    except OSError:
        pass
    from importlib import metadata

    try:
        return f"{metadata.version(distribution)} at {package_dir}"
    except metadata.PackageNotFoundError:
        return f"unknown at {package_dir}"


@functools.cache
def trident_source_digest() -> str:
    """Hash of Trident's own sources: the compiler (Python) and the runtime (C++ header and sources)."""
    digest = hashlib.blake2b(digest_size=16)
    files = sorted(_TRIDENT_DIR.rglob("*.py")) + sorted((_TRIDENT_DIR / "csrc").rglob("*.[ch]*"))
    for path in files:
        digest.update(str(path.relative_to(_TRIDENT_DIR)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@functools.cache
def environment() -> tuple[tuple[str, str], ...]:
    """(name, value) pairs of everything version-like the compiled code depends on (the runtime aside)."""
    from .._version import __version__

    return (
        ("trident", __version__),
        ("trident sources", trident_source_digest()),
        ("torch", f"{torch.__version__} at {Path(torch.__file__).resolve().parent}"),
        ("torch cuda", str(torch.version.cuda)),
        ("triton", distribution_version("triton", "triton")),
        ("torch-mlir", distribution_version("torch-mlir", "torch_mlir")),
        ("python abi", sys.implementation.cache_tag or "none"),
        ("python", sys.version),
        ("machine", platform.machine()),
        ("cpu features", host_cpu_features()),
    )


def host_cpu_features() -> str:
    """Hash of the first CPU's feature flags (Linux /proc/cpuinfo: "flags" on x86, "Features" on Arm); the
    processor name elsewhere."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    features = " ".join(sorted(value.split()))
                    return hashlib.blake2b(features.encode(), digest_size=8).hexdigest()
    except OSError:
        pass
    return platform.processor() or "unknown"


def device_facts(facts: CallFacts) -> tuple[tuple[str, str], ...]:
    """Architecture of each CUDA device the call's tensors live on (none for CPU calls: querying it would
    initialize CUDA in a process that does not use it)."""
    indices = sorted({
        leaf.tensor.device.index or 0 for leaf in facts.leaves
        if leaf.tensor is not None and leaf.tensor.device.type == "cuda"
    })  # fmt: skip
    out = []
    for index in indices:
        major, minor = torch.cuda.get_device_capability(index)
        out.append((f"cuda:{index}", f"sm_{major}{minor} {torch.cuda.get_device_name(index)}"))
    return tuple(out)
