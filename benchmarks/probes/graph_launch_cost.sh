#!/usr/bin/env bash
# On the GPU machine: build graph_launch_cost.c and run it for graphs shaped like Trident's recordings of Hugging
# Face steps (about 1000-2000 kernels, 32-56 memsets, 3 memcpys, 0-40 disabled fills); JSON lines on stdout.
set -euo pipefail
d=$(mktemp -d); here=$(cd "$(dirname "$0")" && pwd)
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc); inc=$(dirname "$(dirname "$(readlink -f "$nvcc")")")/include
echo 'extern "C" __global__ void k(float* p, int pos, int n) { int i = threadIdx.x; if (i < n) p[i] = p[i] * 0.5f + pos; }' > $d/k.cu
$nvcc -cubin -arch=sm_90 -o $d/k.cubin $d/k.cu
gcc -O2 $here/graph_launch_cost.c -I$inc -o $d/probe -L/usr/local/nvidia/lib64 -L/usr/lib/x86_64-linux-gnu -L/usr/local/cuda/lib64/stubs -lcuda
#        kernels memsets memcpys disabled patched-kernels spread
for shape in "1000 0 0 0 3 0" "1000 32 0 0 3 0" "1000 32 0 0 3 1" "1000 0 3 0 3 1" "1000 0 0 32 3 1" "1000 32 3 32 3 1" \
             "1000 8 0 0 3 1" "1000 0 32 0 3 1" "2000 0 0 0 3 0" "2000 56 3 56 3 1"; do
  $d/probe $d/k.cubin $shape
done
