"""Warm start of specializations that launch Triton kernels, across processes.

A cold process compiles (and stores) programs with Triton launches; a new process must load them without
compiling and compute eager's result: a plain launch, an autotuned kernel, a launch passing num_warps (which
torch wraps in an Autotuner of its own, rebuilt by the loading process), and a kernel read through its module. A kernel whose source changed between
the processes must be rejected, so the new kernel runs. On CUDA, the loaded specialization's first call must
launch the kernels natively from the binaries stored with it, without Triton's launcher."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from .helpers import finish, start, write_program

HERE = Path(__file__).resolve().parent

PROGRAM = """
import triton
import kernels as kernel_module
from kernels import add_kernel, tuned_add_kernel  # tests/cache/kernels.py

DEVICE = os.environ.get("DEVICE", "cpu")


def plain(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out * 2


def autotuned(x, y):
    out = torch.empty_like(x)
    tuned_add_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, y, out, x.numel())
    return out - 1


def with_num_warps(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32, num_warps=2)
    return out + 1


def through_module(x, y):  # reads the kernels module itself: its globals are part of the state fingerprint
    out = torch.empty_like(x)
    kernel_module.add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out / 2


REFERENCES = {  # through_module first: on CPU, its first call is the first that interprets a kernel of the module
    through_module: lambda x, y: (x + y) / 2, plain: lambda x, y: (x + y) * 2, autotuned: lambda x, y: x + y - 1,
    with_num_warps: lambda x, y: x + y + 1,
}
torch.manual_seed(0)
x, y = torch.randn(100, device=DEVICE), torch.randn(100, device=DEVICE)
ok, explains, digests, hits = {}, {}, {}, {}
with torch.no_grad(), count_compiles() as compiles:
    for fn, reference in REFERENCES.items():
        jitted = trident.jit(fn)
        out = jitted(x, y)
        ok[fn.__name__] = bool(torch.allclose(out, reference(x, y)))
        digests[fn.__name__] = digest(out)
        hits[fn.__name__] = jitted._trident.entry.hits()
        explains[fn.__name__] = trident.explain(jitted)
report(compiles(), ok=ok, explains=explains, digests=digests, hits=hits)
"""

CHANGING_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def combine_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) {op} tl.load(y_ptr + offs, mask=mask), mask=mask)
'''

CHANGING_PROGRAM = """
import triton
from changing_kernels import combine_kernel  # this folder's version of the kernel


def combine(x, y):
    out = torch.empty_like(x)
    combine_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out


x, y = torch.randn(40), torch.randn(40)
with torch.no_grad(), count_compiles() as compiles:
    jitted = trident.jit(combine)
    out = jitted(x, y)
report(compiles(), added=bool(torch.allclose(out, x + y)), subtracted=bool(torch.allclose(out, x - y)),
       explain=trident.explain(jitted))
"""

Runs = dict[str, dict[str, Any]]


def _start(program: Path, cache: Path, **extra: str) -> Any:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return start(program, cache, PYTHONPATH=path, **extra)


def _changing_program(folder: Path, op: str) -> Path:
    """A program next to its own version of `changing_kernels` (separate folders: no stale bytecode)."""
    folder.mkdir(parents=True)
    (folder / "changing_kernels.py").write_text(CHANGING_KERNEL.format(op=op))
    return write_program(folder, CHANGING_PROGRAM)


def _run_cold_then_warm(root: Path, device: str) -> Runs:
    """PROGRAM in a cold process then in a warm one (same cache); on CPU, alongside the changing-kernel pair."""
    program = write_program(root, PROGRAM)
    cold = {"cold": _start(program, root / "cache", DEVICE=device)}
    if device == "cpu":
        cold["kernel v1"] = _start(_changing_program(root / "v1", "+"), root / "changing-cache")
    runs = {name: finish(process) for name, process in cold.items()}
    warm = {"warm": _start(program, root / "cache", DEVICE=device)}
    if device == "cpu":
        warm["kernel v2"] = _start(_changing_program(root / "v2", "-"), root / "changing-cache")
    runs.update({name: finish(process) for name, process in warm.items()})
    return runs


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return _run_cold_then_warm(tmp_path_factory.mktemp("triton-cpu"), "cpu")


def _assert_cold_persisted_all(cold: dict[str, Any]) -> None:
    assert cold["compiles"] == 4 and all(cold["ok"].values()), cold
    assert cold["stats"]["stores"] == 4, cold["log"]
    for explain in cold["explains"].values():
        assert "disk cache: persisted" in explain, explain


def _assert_warm_loaded_all(warm: dict[str, Any], cold: dict[str, Any]) -> None:
    assert all(warm["ok"].values()), warm  # eager's result, computed by the loaded specializations
    assert warm["digests"] == cold["digests"]  # and the cold process's, bit for bit
    assert warm["hits"] == cold["hits"] == {name: [1] for name in cold["hits"]}
    assert warm["compiles"] == 0, warm["log"]
    assert warm["stats"]["loads"] == 4 and warm["stats"]["rejected"] == 0, warm["log"]
    for explain in warm["explains"].values():
        assert "loaded from the disk cache" in explain, explain


def test_triton_launches_round_trip_on_cpu(cpu_runs: Runs) -> None:
    """A plain launch, an autotuned kernel, a num_warps launch and a kernel reached through its module (whose
    globals Triton's interpreter adds to when it first runs it): loaded, and run through the interpreter."""
    _assert_cold_persisted_all(cpu_runs["cold"])
    warm = cpu_runs["warm"]
    _assert_warm_loaded_all(warm, cpu_runs["cold"])
    interpreted = "Triton kernel 'tuned_add_kernel': CPU tensors, run through Triton's interpreter"
    assert interpreted in warm["explains"]["autotuned"]  # a loaded specialization lists its launch sites
    assert "Triton kernel 'add_kernel'" in warm["explains"]["with_num_warps"]


def test_a_changed_kernel_is_rejected_and_recompiled(cpu_runs: Runs) -> None:
    """Only the kernel's source differs (the function, its globals and the kernel's name are the same): the
    stored specialization must not be used, and the new kernel's result is computed."""
    v1, v2 = cpu_runs["kernel v1"], cpu_runs["kernel v2"]
    assert v1["compiles"] == 1 and v1["added"] and v1["stats"]["stores"] == 1, v1["log"]
    assert v2["stats"]["rejected"] == 1 and v2["stats"]["loads"] == 0, v2["log"]
    assert "Triton kernel changing_kernels.combine_kernel changed since it was compiled" in v2["log"]
    assert v2["compiles"] == 1 and v2["subtracted"], v2


@pytest.mark.gpu
def test_triton_launches_round_trip_natively_on_cuda(tmp_path: Path) -> None:
    """The warm process loads the binaries Triton compiled in the cold one: every site's first launch is native."""
    runs = _run_cold_then_warm(tmp_path, "cuda")
    _assert_cold_persisted_all(runs["cold"])
    for explain in runs["cold"]["explains"].values():  # the cold process's first call went to Triton's launcher
        assert "1 compiled variant(s), 0 native launch(es), 1 through Triton's launcher" in explain, explain
    warm = runs["warm"]
    _assert_warm_loaded_all(warm, runs["cold"])
    for explain in warm["explains"].values():
        native = "launched natively, 1 compiled variant(s), 1 native launch(es), 0 through Triton's launcher"
        assert native in explain, explain
