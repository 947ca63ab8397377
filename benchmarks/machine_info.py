"""What a benchmark ran on, for the "machine" entry of its JSON results: one description shared by every script
here, so that results of different scripts name the same facts under the same keys.

    from benchmarks.machine_info import machine   # from the repository root, or a script that puts it on sys.path
    from machine_info import machine              # a sibling script run as a file (benchmarks/ is on sys.path)

Importing this module is cheap (torch and the version lookups load when `machine()` runs), so a script may import
it at the top even where it times its own imports.
"""
from __future__ import annotations

import datetime
import importlib
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Reported by version, None where not installed: a benchmark of Trident depends on these whether or not it imports
# them itself (torch-mlir and Triton are Trident's, transformers is the models').
DISTRIBUTIONS = ("triton", "transformers", "torch-mlir", "trident")


def machine(device: torch.device | str | None = None) -> dict[str, Any]:
    """date (UTC, ISO 8601), cpu (model name), cpu_count, threads (torch's intra-op threads), python, torch and
    each of DISTRIBUTIONS; where `device` is a CUDA device also gpu (its name), cuda (the CUDA version torch was
    built with) and driver (the NVIDIA driver's). With no device or a CPU one there are no GPU facts: describing a
    CPU benchmark must not initialize CUDA in its process."""
    import torch

    info: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "threads": torch.get_num_threads(),
        "python": platform.python_version(), "torch": torch.__version__,
    }
    info.update((dist, dist_version(dist)) for dist in DISTRIBUTIONS)
    if device is not None and torch.device(device).type == "cuda":
        info.update(gpu=torch.cuda.get_device_name(torch.device(device)), cuda=torch.version.cuda,
                    driver=_nvidia_driver())
    return info


def dist_version(dist: str) -> str | None:
    """The version of distribution `dist` (its PyPI name), or None where it is not installed.

    A module of that name already imported answers first: it is the code that ran, which may be a source tree on
    sys.path rather than what is installed. Without metadata (a source tree; a wheel under another name, such as
    pytorch-triton) the module is imported for its __version__."""
    from importlib.metadata import PackageNotFoundError, version

    module = dist.replace("-", "_")
    loaded = getattr(sys.modules.get(module), "__version__", None)
    if loaded is not None:
        return str(loaded)
    try:
        return version(dist)
    except PackageNotFoundError:
        pass
    try:
        return str(importlib.import_module(module).__version__)
    except Exception:  # noqa: BLE001 - not installed, or not importable here (e.g. it needs CUDA): nothing to report
        return None


def _cpu_model() -> str:
    """The CPU's model name (Linux), or the platform's processor or machine type (e.g. 'arm64')."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    """The NVIDIA driver's version, which torch does not expose: nvidia-smi's, or None without it."""
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
