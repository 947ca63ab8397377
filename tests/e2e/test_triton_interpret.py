"""Triton kernels under trident.jit in a process that set TRITON_INTERPRET=1, as CPU Triton users do.

The variable is read when Triton is imported: `@triton.jit` then returns interpreter objects
(InterpretedFunction), and `@triton.autotune` / `@triton.heuristics` wrap those. Capture must still record each
launch (as the compiled twin of the kernel) and run it through the interpreter at execution. So the program runs
in a child Python with the variable set, prints one JSON line, and the test asserts on it: every function equals
eager (which launches through the interpreter), compiles once, hits natively, never falls back to eager. A
second child against the same disk cache must load every specialization instead of compiling."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

PROGRAM = '''
import json
import os

import torch
import triton
import triton.language as tl

import trident
from trident.capture.triton_launches import compiled_form
from trident.testing import count_compiles


@triton.jit
def _square(x):  # a @triton.jit helper: an interpreter object too
    return x * x


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def row_sumsq_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(_square(x), axis=0))


@triton.autotune(configs=[triton.Config({"BLOCK": 32})], key=["n"])
@triton.jit
def tuned_scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * scale, mask=mask)


@triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"])
@triton.jit
def tuned_add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


def whole_row(args):
    return triton.next_power_of_2(args["n"])


@triton.heuristics({"BLOCK": whole_row})
@triton.jit
def heuristic_neg_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, -tl.load(x_ptr + offs, mask=mask), mask=mask)


def plain(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out * 2


def twice(x, y):  # one kernel launched twice, the second reading the first's result
    a = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 16),)](x, y, a, x.numel(), BLOCK=16)
    b = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 16),)](a, x, b, x.numel(), BLOCK=16)
    return b


def reduction(x, y):  # tl.sum and a user helper: both interpreter objects under the variable
    out = torch.empty(x.shape[0])
    row_sumsq_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=32)
    return out + y.sum()


def autotuned(x, y):
    out = torch.empty_like(x)
    tuned_scale_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, out, x.numel(), 0.5)
    return out + y


def autotuned_two_configs(x, y):
    out = torch.empty_like(x)
    tuned_add_kernel[lambda META: (triton.cdiv(x.numel(), META["BLOCK"]),)](x, y, out, x.numel())
    return out


def heuristics(x, y):
    out = torch.empty_like(x)
    heuristic_neg_kernel[(1,)](x, out, x.numel())
    return out * y


def with_num_warps(x, y):  # torch wraps the kernel in an Autotuner of its own to carry num_warps
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 32),)](x, y, out, x.numel(), BLOCK=32, num_warps=2)
    return out + 1


@torch.library.triton_op("trident_interpret_test::add", mutates_args={})
def add_op(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    # Under the variable torch's wrap_triton hands the interpreter object back: the launch is still recorded.
    torch.library.wrap_triton(add_kernel)[(triton.cdiv(x.numel(), 16),)](x, y, out, x.numel(), BLOCK=16)
    return out


def through_triton_op(x, y):
    return add_op(x, y) * 3


# Triton's hash of each kernel as capture records it (with the helper it calls): the same with and without the
# variable, so one process's kernels are checked against another's by the same key.
cache_keys = {k.__name__: compiled_form(k).cache_key for k in (add_kernel, row_sumsq_kernel)}
if os.environ.get("ONLY_CACHE_KEYS"):
    print("RESULT " + json.dumps({"cache_keys": cache_keys, "kernel_type": type(add_kernel).__name__}), flush=True)
    raise SystemExit(0)

# Eager is the reference, except where Triton's interpreter cannot run the kernel eagerly on a CPU machine:
# an autotuner with several configs benchmarks them through the GPU driver ("0 active drivers").
REFERENCES = {
    plain: plain, twice: twice, reduction: reduction, autotuned: autotuned, heuristics: heuristics,
    with_num_warps: with_num_warps, through_triton_op: through_triton_op, autotuned_two_configs: lambda x, y: x + y,
}
torch.manual_seed(0)
inputs = [(torch.randn(4, 8), torch.randn(4, 8)) for _ in range(3)]
summary = {"kernel_types": sorted({type(k).__name__ for k in (add_kernel, _square, tuned_scale_kernel.fn)}),
           "cache_keys": cache_keys}
with torch.no_grad():
    for fn, reference in REFERENCES.items():
        jitted = trident.jit(fn)
        equal = True
        with count_compiles() as compiles:
            for x, y in inputs:
                equal = equal and torch.equal(jitted(x, y), reference(x, y))
        state = jitted._trident
        summary[fn.__name__] = {
            "equal": bool(equal), "compiles": compiles(), "hits": sum(state.entry.hits()),
            "eager_calls": state.eager_calls, "explain": trident.explain(jitted),
        }
summary["stats"] = trident.cache.stats()
print("RESULT " + json.dumps(summary), flush=True)
'''

# through_triton_op too: the name add_op is bound to torch's op object, whose function the disk cache finds.
PERSISTED = ["plain", "twice", "reduction", "autotuned", "autotuned_two_configs", "heuristics", "with_num_warps",
             "through_triton_op"]
FUNCTIONS = PERSISTED


def run_child(program: Path, disk_cache: Path, **extra: str) -> dict[str, Any]:
    env = {
        **os.environ, "TRITON_INTERPRET": "1", "TRIDENT_DISK_CACHE": "1", "TRIDENT_DISK_CACHE_DIR": str(disk_cache),
        **extra,
    }  # fmt: skip
    done = subprocess.run([sys.executable, str(program)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"child failed ({done.returncode}):\n{done.stderr}\n{done.stdout}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"child printed no RESULT line:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["stderr"] = done.stderr
    return result


def test_triton_interpret_captures_compiles_and_warm_starts(tmp_path: Path) -> None:
    program = tmp_path / "interpret_program.py"
    program.write_text(textwrap.dedent(PROGRAM))
    disk_cache = tmp_path / "specializations"

    cold = run_child(program, disk_cache)
    assert cold["kernel_types"] == ["InterpretedFunction"], "the child did not run with TRITON_INTERPRET=1"
    assert "ran eagerly" not in cold["stderr"], cold["stderr"]
    for name in FUNCTIONS:
        summary = cold[name]
        assert summary["equal"], f"{name}: differs from eager\n{summary['explain']}"
        assert (summary["compiles"], summary["eager_calls"]) == (1, 0), f"{name}:\n{summary['explain']}"
        assert summary["hits"] == 3, f"{name}:\n{summary['explain']}"  # every call ran the native entry
        assert "run through Triton's interpreter" in summary["explain"], summary["explain"]
    twice = cold["twice"]["explain"]
    assert "Triton kernel 'add_kernel': CPU tensors, run through Triton's interpreter (2 sites)" in twice, twice
    assert cold["stats"]["stores"] == len(PERSISTED), cold["stats"]

    # A new process with the variable set loads every specialization (its kernels found again by name and
    # checked by Triton's cache_key, computed as without the variable) and compiles nothing.
    warm = run_child(program, disk_cache)
    for name in FUNCTIONS:
        summary = warm[name]
        assert summary["equal"], f"{name}: differs from eager after a warm start\n{summary['explain']}"
        compiles = 0 if name in PERSISTED else 1
        assert (summary["compiles"], summary["eager_calls"], summary["hits"]) == (compiles, 0, 3), summary["explain"]
        assert ("loaded from the disk cache" in summary["explain"]) == (name in PERSISTED), summary["explain"]
    assert (warm["stats"]["loads"], warm["stats"]["rejected"]) == (len(PERSISTED), 0), warm["stats"]

    # Without the variable, Triton's own cache_key of the same kernels (a helper included) is the twin's.
    plain = run_child(program, disk_cache, TRITON_INTERPRET="0", ONLY_CACHE_KEYS="1")
    assert plain["kernel_type"] == "JITFunction"
    assert plain["cache_keys"] == cold["cache_keys"]
