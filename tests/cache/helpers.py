"""Running a program in a fresh Python process against a given disk-cache folder, and reading what it reports.

A program prints one line `RESULT <json>`; `report()` (inside the program) builds it from the compile count,
trident.cache.stats() and whatever the program adds. Only the specialization cache is per test
(TRIDENT_DISK_CACHE_DIR): the runtime library stays in the shared TRIDENT_CACHE_DIR, so no test rebuilds it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

# Prepended to every program: the imports, `digest` and `report`.
PRELUDE = '''
import hashlib, json, os, sys
import torch
import trident
from trident.testing import count_compiles

def digest(*tensors):
    """The exact bits of tensors (with dtype, sizes and strides): a warm process's result is compared with the
    cold one's through this, bit for bit."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(repr((t.dtype, tuple(t.shape), t.stride())).encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()

def report(compiles, **extra):
    print("RESULT " + json.dumps({"compiles": compiles, "stats": trident.cache.stats(), **extra}), flush=True)
'''


def write_program(folder: Path, body: str, name: str = "program.py") -> Path:
    path = folder / name
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


def cache_env(cache_dir: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"TRIDENT_DISK_CACHE": "1", "TRIDENT_DISK_CACHE_DIR": str(cache_dir), "TRIDENT_LOG": "cache"})
    env.update(extra)
    return env


def start(program: Path, cache_dir: Path, **extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(program)], env=cache_env(cache_dir, **extra), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def finish(process: subprocess.Popen[str], timeout: float = 300) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, f"program failed ({process.returncode}):\n{stderr}\n{stdout}"
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"program printed no RESULT line:\n{stdout}\n{stderr}"
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["log"] = stderr
    return result


def run(program: Path, cache_dir: Path, **extra: str) -> dict[str, Any]:
    return finish(start(program, cache_dir, **extra))


def assert_same_bits(actual: Any, expected: Any) -> None:
    """Same structure and types; tensors of the same dtype, sizes and strides with identical bits (a loaded
    specialization must compute exactly what the compiled one computed, not merely something close)."""
    import torch

    assert type(actual) is type(expected), (type(actual), type(expected))
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same_bits(a, e)
    elif isinstance(expected, torch.Tensor):
        assert (actual.dtype, actual.shape, actual.stride()) == (expected.dtype, expected.shape, expected.stride())
        bits = [t.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for t in (actual, expected)]
        assert torch.equal(bits[0], bits[1]), f"the bits differ:\n{actual}\n{expected}"
    else:
        assert actual == expected
