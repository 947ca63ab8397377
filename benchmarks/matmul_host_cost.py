"""Host cost of one decode-shaped bf16 matmul on CUDA, by how far down torch's stack the call enters.

A decode step's matmuls are tiny on the device (a [1, 2048] x [2048, 3072] GEMM runs in a few µs), so each
costs what the host spends issuing it. This builds a small C++ library against the installed torch (needs a
CUDA torch, g++ and the CUDA headers) and times, per call, in one process:

    at::mm                 the dispatcher, a fresh result (eager's F.linear without bias)
    at::mm_out             the dispatcher, into an existing result
    at::cuda::mm_out       ATen's CUDA kernel called directly, into an existing result (Trident's pooled matmuls)
    cublasGemmEx           the same cuBLAS call on torch's handle, set up once
    cublasLtMatmul (plan)  cuBLASLt with its descriptors, workspace and algorithm chosen once (the heuristic's
                           first pick for torch's cuBLAS workspace size): what a per-call-site plan would cost

Each variant's result is compared bit for bit with at::mm's. (torch's own cuBLAS wrapper,
at::cuda::blas::gemm<at::BFloat16>, is not exported from libtorch_cuda in torch 2.11, so it is not a variant.)

    python benchmarks/matmul_host_cost.py [--calls N] [--json PATH]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

if __package__ in (None, ""):  # run as a file: `benchmarks.*` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine_info import machine

SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/mm_cuda_dispatch.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <chrono>

// cuBLASLt set up once for out[m, n] = a[m, k] @ w[n, k].t(): column-major out^T = w^T a^T, as cublasGemmEx.
struct LtPlan {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t w = nullptr, a = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  at::Tensor workspace;
  bool ok = false;

  LtPlan(int64_t m, int64_t k, int64_t n) {
    handle = at::cuda::getCurrentCUDABlasLtHandle();
    const cublasOperation_t t = CUBLAS_OP_T, none = CUBLAS_OP_N;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none));
    cublasLtMatrixLayoutCreate(&w, CUDA_R_16BF, k, n, k);
    cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, m, k);
    cublasLtMatrixLayoutCreate(&out, CUDA_R_16BF, n, m, n);
    const uint64_t bytes = at::cuda::getChosenWorkspaceSize();
    workspace = at::empty({static_cast<int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    cublasLtMatmulPreference_t preference = nullptr;
    cublasLtMatmulPreferenceCreate(&preference);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes, sizeof(bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ok = cublasLtMatmulAlgoGetHeuristic(handle, desc, w, a, out, out, preference, 1, &result, &found) ==
             CUBLAS_STATUS_SUCCESS && found > 0;
    algo = result.algo;
    cublasLtMatmulPreferenceDestroy(preference);
  }

  void run(at::Tensor& result, const at::Tensor& x, const at::Tensor& weight) const {
    const float alpha = 1.f, beta = 0.f;
    cublasLtMatmul(handle, desc, &alpha, weight.const_data_ptr(), w, x.const_data_ptr(), a, &beta, result.data_ptr(),
                   out, result.data_ptr(), out, &algo, workspace.data_ptr(), workspace.numel(),
                   at::cuda::getCurrentCUDAStream());
  }
};

// One call of variant `which` for out[m, n] = a[m, k] @ w[n, k].t(), the layout of F.linear.
static void call(int which, at::Tensor& out, const at::Tensor& a, const at::Tensor& w, const at::Tensor& wt,
                 cublasHandle_t handle, const LtPlan& plan) {
  switch (which) {
    case 4: plan.run(out, a, w); break;
    case 0: { at::Tensor y = at::mm(a, wt); break; }
    case 1: at::mm_out(out, a, wt); break;
    case 2: at::cuda::mm_out(out, a, wt); break;
    default: {  // row-major out = a @ w.t() is column-major out^T = (w as column-major [k, n])^T @ a^T
      const int m = a.size(0), k = a.size(1), n = wt.size(1);
      const float alpha = 1.f, beta = 0.f;
      cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w.const_data_ptr(), CUDA_R_16BF, k,
                   a.const_data_ptr(), CUDA_R_16BF, k, &beta, out.data_ptr(), CUDA_R_16BF, n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT_TENSOR_OP);
    }
  }
}

// µs per call over `calls` calls; *equal = whether the variant's result equals at::mm's bit for bit.
extern "C" double host_us(int which, long calls, int64_t m, int64_t k, int64_t n, int* equal) {
  auto options = at::TensorOptions().dtype(at::kBFloat16).device(at::kCUDA);
  at::Tensor a = at::randn({m, k}, options), w = at::randn({n, k}, options), out = at::empty({m, n}, options);
  at::Tensor wt = w.t();
  cublasHandle_t handle = at::cuda::getCurrentCUDABlasHandle();
  const LtPlan plan(m, k, n);
  if (which == 4 && !plan.ok) return -1;
  for (int i = 0; i < 50; ++i) call(which, out, a, w, wt, handle, plan);
  at::cuda::getCurrentCUDAStream().synchronize();
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) call(which, out, a, w, wt, handle, plan);
  const auto stop = std::chrono::steady_clock::now();
  at::cuda::getCurrentCUDAStream().synchronize();
  out.zero_();
  call(which, out, a, w, wt, handle, plan);
  *equal = which == 0 ? 1 : at::equal(out, at::mm(a, wt));
  return std::chrono::duration<double, std::micro>(stop - start).count() / calls;
}
"""

VARIANTS = ("at::mm", "at::mm_out", "at::cuda::mm_out", "cublasGemmEx", "cublasLtMatmul (plan)")
# (rows, in, out): Llama-3.2-1B's fused qkv, o, gate+up and down projections at batch 1, and qkv at batch 8.
SHAPES = ((1, 2048, 3072), (1, 2048, 2048), (1, 2048, 16384), (1, 8192, 2048), (8, 2048, 3072))


def build(folder: Path) -> ctypes.CDLL:
    torch_dir = Path(torch.__file__).parent
    nvidia = torch_dir.parent / "nvidia"
    lib_dirs = [torch_dir / "lib", *nvidia.glob("*/lib"), Path("/usr/local/cuda/lib64")]
    includes = [torch_dir / "include", torch_dir / "include/torch/csrc/api/include", Path("/usr/local/cuda/include"),
                *nvidia.glob("*/include")]
    (folder / "matmul_host_cost.cpp").write_text(SOURCE)
    cmd = ["g++", "-O2", "-std=c++20", "-shared", "-fPIC", str(folder / "matmul_host_cost.cpp"), "-o",
           str(folder / "matmul_host_cost.so"), f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
           *[f"-I{d}" for d in includes], *[f"-L{d}" for d in lib_dirs], *[f"-Wl,-rpath,{d}" for d in lib_dirs],
           "-ltorch", "-ltorch_cpu", "-ltorch_cuda", "-lc10", "-lc10_cuda", "-lcublas", "-lcublasLt"]
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(folder / "matmul_host_cost.so"))
    lib.host_us.restype = ctypes.c_double
    lib.host_us.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                            ctypes.POINTER(ctypes.c_int)]
    return lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("matmul_host_cost needs a CUDA GPU")
    torch.cuda.init()
    with tempfile.TemporaryDirectory() as folder:
        lib = build(Path(folder))
        rows = []
        for m, k, n in SHAPES:
            row = {"shape": [m, k, n]}
            for which, name in enumerate(VARIANTS):
                equal = ctypes.c_int(0)
                row[name] = lib.host_us(which, args.calls, m, k, n, ctypes.byref(equal))
                row[name + " equal"] = bool(equal.value)
            rows.append(row)
    info = {**machine("cuda"), "blas": str(torch.backends.cuda.preferred_blas_library())}
    print(f"host µs per call, {info}")
    print(f"{'[m, k, n]':<18}" + "".join(f"{name:>18}" for name in VARIANTS))
    for row in rows:
        cells = "".join(f"{row[name]:>11.2f} {'same' if row[name + ' equal'] else 'DIFF':>6}" if row[name] >= 0
                        else f"{'no algorithm':>18}" for name in VARIANTS)
        print(f"{str(row['shape']):<18}{cells}")
    if args.json:
        args.json.write_text(json.dumps({"machine": info, "calls": args.calls, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
