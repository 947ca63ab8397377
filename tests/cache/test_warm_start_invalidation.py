"""Warm start must not reuse a specialization whose Triton kernels would now compile differently (docs/design.md,
"Warm start"): a new process recompiles when Triton's cache-invalidating environment variables, the kernel's
@triton.jit settings, a @triton.jit helper it calls, or a constexpr global it reads changed since the cold process.

Each case runs a cold process (compiles, stores) and then a warm one against the same cache with the changed kernel
module (same module and kernel name, another folder so no bytecode is shared). The warm process must load nothing,
compile once and compute the new kernel's result; an unchanged warm process (the control) loads without compiling,
so a rejection is the change's doing. On CPU the kernels run through Triton's interpreter."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helpers import finish, start, write_program

# The kernel module, formatted per version: {decorator}, {helper_op} and {scale} are what the cases change.
KERNELS = '''
import triton
import triton.language as tl

SCALE = tl.constexpr({scale})


@triton.jit
def combine(a, b):
    return a {helper_op} b


{decorator}
def scaled_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, combine(x, y) * SCALE, mask=mask)


def reference(x, y):
    return (x {helper_op} y) * {scale}
'''

PROGRAM = """
import triton
from wkernels import scaled_kernel, reference  # this folder's version of the kernel module


def launch(x, y):
    out = torch.empty_like(x)
    scaled_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out + 1


x, y = torch.randn(40), torch.randn(40)
with torch.no_grad(), count_compiles() as compiles:
    jitted = trident.jit(launch)
    out = jitted(x, y)
    again = jitted(x, y)
report(compiles(), ok=bool(torch.allclose(out, reference(x, y) + 1) and torch.equal(out, again)),
       hits=list(jitted._trident.entry.hits()), eager_calls=jitted._trident.eager_calls,
       explain=trident.explain(jitted))
"""

V1 = {"decorator": "@triton.jit", "helper_op": "+", "scale": 2}
# case -> (the warm process's kernel module settings, its extra environment)
CHANGES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "unchanged": (V1, {}),
    "triton environment": (V1, {"TRITON_DEFAULT_FP_FUSION": "0"}),  # one of Triton's cache-invalidating variables
    "decorator settings": ({**V1, "decorator": "@triton.jit(do_not_specialize=['n'])"}, {}),
    "helper function": ({**V1, "helper_op": "-"}, {}),
    "constexpr global": ({**V1, "scale": 3}, {}),
}

Runs = dict[str, dict[str, Any]]


def _program(folder: Path, settings: dict[str, Any]) -> Path:
    folder.mkdir(parents=True)
    (folder / "wkernels.py").write_text(KERNELS.format(**settings))
    return write_program(folder, PROGRAM)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    root = tmp_path_factory.mktemp("warm-invalidation")
    cold = {case: start(_program(root / case / "cold", V1), root / case / "cache") for case in CHANGES}
    results = {f"cold {case}": finish(process) for case, process in cold.items()}
    warm = {
        case: start(_program(root / case / "warm", settings), root / case / "cache", **env)
        for case, (settings, env) in CHANGES.items()
    }
    results.update({case: finish(process) for case, process in warm.items()})
    return results


def _assert_native(run: dict[str, Any]) -> None:
    """Right result, both calls through the native entry (the second a hit), nothing eager."""
    assert run["ok"], run
    assert run["eager_calls"] == 0 and sum(run["hits"]) == 2, run


@pytest.mark.parametrize("case", list(CHANGES))
def test_cold_process_compiles_and_stores(runs: Runs, case: str) -> None:
    cold = runs[f"cold {case}"]
    _assert_native(cold)
    assert cold["compiles"] == 1 and cold["stats"]["stores"] == 1, cold["log"]


def test_unchanged_kernel_loads_without_compiling(runs: Runs) -> None:
    warm = runs["unchanged"]
    _assert_native(warm)
    assert warm["compiles"] == 0 and warm["stats"]["loads"] == 1, warm["log"]
    assert "loaded from the disk cache" in warm["explain"]


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("triton environment", "Triton's cache-invalidating environment differs"),
        ("decorator settings", "the decorators of Triton kernel wkernels.scaled_kernel"),
        ("helper function", "Triton kernel wkernels.scaled_kernel changed since it was compiled"),
        ("constexpr global", "Triton kernel wkernels.scaled_kernel changed since it was compiled"),
    ],
)
def test_a_change_triton_compiles_differently_recompiles(runs: Runs, case: str, reason: str) -> None:
    warm = runs[case]
    _assert_native(warm)  # the changed kernel's result: (x - y) * 2, (x + y) * 3, ...
    assert warm["stats"]["loads"] == 0 and warm["compiles"] == 1, warm["log"]
    assert warm["stats"]["rejected"] == 1 and reason in warm["log"], warm["log"]
    assert "loaded from the disk cache" not in warm["explain"]
