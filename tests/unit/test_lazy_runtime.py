"""Decorating builds nothing (nor imports the compiler); the first call builds the native runtime (issue 15).

Run in a fresh process with an empty TRIDENT_CACHE_DIR, where `build._build` is replaced by a copy of this
process's runtime library that records each call: a real build would take ~40 s and prove nothing more."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch

from trident.runtime import runtime_library_path

CHILD = textwrap.dedent(
    """
    import shutil, sys
    import torch
    from trident.runtime import build

    builds = []
    build._build = lambda target: (builds.append(target), shutil.copy(sys.argv[1], target))

    import trident

    @trident.jit
    def f(x, y):
        return x * 2 + y

    assert "trident.driver" not in sys.modules, "decorating a function imported the compiler"

    class M(torch.nn.Module):
        def forward(self, x):
            return x - 1

    m = trident.jit(M())
    assert builds == [] and build._module is None, "decorating built the runtime"
    x = torch.randn(4)
    with torch.no_grad():
        assert torch.equal(f(x, x), x * 2 + x)
        assert len(builds) == 1, builds
        assert torch.equal(f(x, x), x * 2 + x)  # through the class slot, now the native entry
        assert torch.equal(m(x), x - 1)
        assert torch.equal(m(x), x - 1)
    assert len(builds) == 1
    assert f._trident.entry.hits() == [2] and m._trident.entry.hits() == [2]
    assert type(f).__call__ is f._trident.entry and type(m).__call__ is m._trident.entry
    print("ok")
    """
)


def test_decorating_builds_nothing_and_the_first_call_builds(tmp_path: Path) -> None:
    built = runtime_library_path()  # this process's (built or cached) runtime
    env = dict(os.environ, TRIDENT_CACHE_DIR=str(tmp_path), TRIDENT_DISK_CACHE="0")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", CHILD, built], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"
    assert list(tmp_path.glob("runtime/*/_trident_runtime.so"))  # the first call built (copied) into the empty cache


def test_a_lazy_entry_answers_for_its_native_entry() -> None:
    """Before its first call a LazyEntry has no native entry; the entry's methods (hits(), ...) are still there,
    made on use, while introspection of private and dunder names builds nothing."""
    from trident.lazy_entry import LazyEntry

    def double(x):  # type: ignore[no-untyped-def]
        return x * 2

    lazy = LazyEntry.wrapping(double)
    assert not hasattr(lazy, "__signature__") and type(lazy)._jit is None
    assert lazy.hits() == []  # made on use: no specialization yet
    x = torch.randn(3)
    with torch.no_grad():
        assert torch.equal(lazy(x), x * 2)
    assert lazy.hits() == [1]
