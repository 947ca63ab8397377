#!/usr/bin/env bash
# On the GPU machine: build graph_inflight.c and run it for a few graph shapes; JSON lines on stdout.
set -euo pipefail
d=$(mktemp -d); here=$(cd "$(dirname "$0")" && pwd)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc); inc=$(dirname "$(dirname "$(readlink -f "$nvcc")")")/include
cat > $d/k.cu <<'CU'
extern "C" __global__ void k(float* p, int pos, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = p[i] * 0.5f + pos; }
extern "C" __global__ void spin(long long cycles) { long long t0 = clock64(); while (clock64() - t0 < cycles) {} }
CU
$nvcc -cubin -arch=sm_90 -o $d/k.cubin $d/k.cu
gcc -O2 $here/graph_inflight.c -I$inc -o $d/probe -L/usr/local/nvidia/lib64 -L/usr/lib/x86_64-linux-gnu -L/usr/local/cuda/lib64/stubs -lcuda
for shape in "200 48 0" "200 48 8" "400 48 0" "400 48 100"; do $d/probe $d/k.cubin $shape; done
