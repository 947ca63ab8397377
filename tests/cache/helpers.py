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

# Prepended to every program: the imports and `report`.
PRELUDE = '''
import json, os, sys
import torch
import trident
from trident.testing import count_compiles

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
