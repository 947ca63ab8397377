"""Host cost of launching one small Triton kernel, every system in one process (needs a CUDA GPU).

The kernel adds two 1024-element fp32 vectors (4 arguments + a constexpr), so the GPU finishes each launch
far sooner than the host issues the next one: per-call wall time over many calls is host cost.

Systems: a C loop calling cuLaunchKernel on the same cubin (the floor), Triton CompiledKernel.run,
kernel[grid](...), torch eager x + y, torch.compile of a function launching the kernel, CUDA-graph replay
of one launch, and trident.jit of that function (with the output allocated inside, and launching into a
preallocated output: the work the floor and kernel[grid] do). Also a 10-kernel function, trident and eager.

    python benchmarks/launch_overhead.py [--calls N] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

import trident

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


N, BLOCK = 1024, 1024

C_LOOP = r"""
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#define CHECK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { printf("error %d at %s\n", r, #x); return 1; } } while (0)
int main(int argc, char** argv) {
  const char* cubin = argv[1]; const char* name = argv[2]; int warps = atoi(argv[3]); int shared = atoi(argv[4]);
  long calls = atol(argv[5]);
  CHECK(cuInit(0)); CUdevice dev; CHECK(cuDeviceGet(&dev, 0)); CUcontext ctx; CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  FILE* f = fopen(cubin, "rb"); fseek(f, 0, SEEK_END); long size = ftell(f); fseek(f, 0, SEEK_SET);
  char* image = malloc(size); fread(image, 1, size, f); fclose(f);
  CUmodule mod; CHECK(cuModuleLoadData(&mod, image)); CUfunction fn; CHECK(cuModuleGetFunction(&fn, mod, name));
  CUdeviceptr x, y, out; CHECK(cuMemAlloc(&x, 4096)); CHECK(cuMemAlloc(&y, 4096)); CHECK(cuMemAlloc(&out, 4096));
  int n = 1024; CUdeviceptr scratch = 0, profile = 0;
  void* params[] = {&x, &y, &out, &n, &scratch, &profile};
  for (int i = 0; i < 1000; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32 * warps, 1, 1, shared, 0, params, 0));
  CHECK(cuCtxSynchronize());
  struct timespec a, b; clock_gettime(CLOCK_MONOTONIC, &a);
  for (long i = 0; i < calls; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 32 * warps, 1, 1, shared, 0, params, 0));
  CHECK(cuCtxSynchronize()); clock_gettime(CLOCK_MONOTONIC, &b);
  printf("%.4f\n", ((b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3) / calls);
  return 0;
}
"""


def per_call_us(fn: Callable[[], object], calls: int, rounds: int = 5) -> float:
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def c_loop_floor(compiled: object, calls: int) -> float | None:
    """µs per cuLaunchKernel from a C loop on the same cubin, or None if it cannot be built here."""
    with tempfile.TemporaryDirectory() as work:
        cubin = Path(work) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])  # type: ignore[attr-defined]
        source = Path(work) / "loop.c"
        source.write_text(C_LOOP)
        exe = Path(work) / "loop"
        cuda_include = os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/include"
        build = subprocess.run(
            ["gcc", "-O2", str(source), "-o", str(exe), f"-I{cuda_include}", "-L/usr/local/nvidia/lib64", "-lcuda"],
            capture_output=True, text=True,
        )
        if build.returncode != 0:
            print("C loop not built:", build.stderr[-500:], file=sys.stderr)
            return None
        md = compiled.metadata  # type: ignore[attr-defined]
        run = subprocess.run(
            [str(exe), str(cubin), md.name, str(md.num_warps), str(md.shared), str(calls)],
            capture_output=True, text=True,
            env={**os.environ, "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:" + os.environ.get("LD_LIBRARY_PATH", "")},
        )
        if run.returncode != 0:
            print("C loop failed:", run.stdout, run.stderr, file=sys.stderr)
            return None
        return float(run.stdout.strip().splitlines()[-1])


def one_launch(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, N, BLOCK=BLOCK)
    return out


def launch_into(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The work of `kernel[grid](...)` and of the C loop: one launch, no allocation."""
    add_kernel[(1,)](x, y, out, N, BLOCK=BLOCK)
    return out


def ten_launches_into(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Ten launches, no allocation: (this - launch_into) / 9 is the cost of one more launch inside the SCM."""
    for _ in range(10):
        add_kernel[(1,)](x, y, out, N, BLOCK=BLOCK)
    return out


def entry_only(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """No work: the cost of entering the SCM, checking the guards on three tensors and returning."""
    return out


def allocate(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


def ten_launches(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    out = x
    for _ in range(10):
        nxt = torch.empty_like(x)
        add_kernel[(1,)](out, y, nxt, N, BLOCK=BLOCK)
        out = nxt
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    calls = args.calls
    x, y = torch.randn(N, device="cuda"), torch.randn(N, device="cuda")
    out = torch.empty_like(x)
    results: dict[str, float | None] = {}

    compiled = add_kernel[(1,)](x, y, out, N, BLOCK=BLOCK)
    results["cuLaunchKernel C loop (floor)"] = c_loop_floor(compiled, calls)
    stream = torch.cuda.current_stream().cuda_stream
    # Triton 3.6's own launch call (jit.py): grid, stream, function, packed metadata, launch metadata and
    # hooks (None: no hooks), then every bound argument, constexprs included.
    results["Triton CompiledKernel.run"] = per_call_us(
        lambda: compiled.run(1, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                             x, y, out, N, BLOCK),
        calls,
    )
    results["Triton kernel[grid](...)"] = per_call_us(lambda: add_kernel[(1,)](x, y, out, N, BLOCK=BLOCK), calls)
    results["torch eager x + y"] = per_call_us(lambda: torch.add(x, y, out=out), calls)
    compiled_fn = torch.compile(one_launch)
    results["torch.compile(one launch)"] = per_call_us(lambda: compiled_fn(x, y), calls)
    graph = torch.cuda.CUDAGraph()
    static_out = torch.empty_like(x)
    with torch.cuda.graph(graph):
        add_kernel[(1,)](x, y, static_out, N, BLOCK=BLOCK)
    results["CUDA graph replay (one launch)"] = per_call_us(graph.replay, calls)
    with torch.no_grad():
        jitted = trident.jit(one_launch)
        torch.testing.assert_close(jitted(x, y), x + y)
        results["trident.jit(one launch)"] = per_call_us(lambda: jitted(x, y), calls)
        jitted_into = trident.jit(launch_into)
        torch.testing.assert_close(jitted_into(x, y, out), x + y)
        results["trident.jit(launch into out)"] = per_call_us(lambda: jitted_into(x, y, out), calls)
        jitted10 = trident.jit(ten_launches)
        torch.testing.assert_close(jitted10(x, y), x + 10 * y, rtol=1e-4, atol=1e-4)
        results["eager 10-kernel function"] = per_call_us(lambda: ten_launches(x, y), calls // 10)
        results["trident.jit 10-kernel function"] = per_call_us(lambda: jitted10(x, y), calls // 10)
        # Where the time goes: entry + guards, one allocation, one more launch inside the SCM.
        jitted_entry = trident.jit(entry_only)
        assert jitted_entry(x, y, out) is out
        results["breakdown: trident entry + guards only"] = per_call_us(lambda: jitted_entry(x, y, out), calls)
        jitted_alloc = trident.jit(allocate)
        jitted_alloc(x)
        results["breakdown: trident empty_like only"] = per_call_us(lambda: jitted_alloc(x), calls)
        results["breakdown: eager torch.empty_like"] = per_call_us(lambda: torch.empty_like(x), calls)
        jitted_into10 = trident.jit(ten_launches_into)
        torch.testing.assert_close(jitted_into10(x, y, out), x + y)
        into10 = per_call_us(lambda: jitted_into10(x, y, out), calls // 10)
        results["breakdown: trident one more launch"] = (into10 - results["trident.jit(launch into out)"]) / 9
        print("\n" + trident.explain(jitted_into) + "\n" + trident.explain(jitted10) + "\n")

    floor = results["cuLaunchKernel C loop (floor)"]
    info = machine("cuda")
    print(f"machine: {info['gpu']}, driver {info['driver']}; torch {info['torch']}, Triton {info['triton']}, "
          f"Python {info['python']}")
    print(f"{'system':<36} {'µs/call':>9} {'x floor':>8}")
    for name, value in results.items():
        if value is None:
            continue
        ratio = f"{value / floor:7.2f}x" if floor else "      -"
        print(f"{name:<36} {value:>9.2f} {ratio}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"machine": info, "results_us": results}, indent=2))


if __name__ == "__main__":
    main()
