// Does patching a graph exec whose previous launch is still queued cost more than patching an idle one?
// Graph: N small kernels and M 4 KB device-to-device memcpys. The GPU is kept busy by a spin kernel, so every
// launch below queues behind it. Per iteration (median host us): patch K kernel nodes (+ the M memcpy nodes) and
// launch, (a) one exec, (b) two execs of the same graph alternating, (c) one exec, nothing patched; and the same
// with a synchronize after each launch (nothing in flight). Build and run: graph_inflight.sh.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#define CK(x) do { CUresult r_ = (x); if (r_) { const char* s_; cuGetErrorString(r_, &s_); printf("line %d: %s\n", __LINE__, s_); exit(1); } } while (0)
static int by_value(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
enum { R = 200 };
static CUfunction k, spin;
static CUdeviceptr buf, src, dst;
static int N, K, M, n = 1024;
static CUgraphNode knodes[4096], mnodes[512];
static int nk, nm;

static void patch(CUgraphExec e, int value, int memcpys) {
  for (int i = 0; i < K && i < nk; ++i) {
    CUdeviceptr p = buf + 4096 * i;
    void* args[] = {&p, &value, &n};
    CUDA_KERNEL_NODE_PARAMS q = {0};
    q.func = k; q.gridDimX = 4; q.gridDimY = 1; q.gridDimZ = 1; q.blockDimX = 256; q.blockDimY = 1; q.blockDimZ = 1;
    q.kernelParams = args;
    CK(cuGraphExecKernelNodeSetParams(e, knodes[i], &q));
  }
  for (int i = 0; i < memcpys && i < nm; ++i) {
    CUDA_MEMCPY3D c = {0};
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE; c.srcDevice = src + 4096 * ((i + value) % 64);
    c.dstMemoryType = CU_MEMORYTYPE_DEVICE; c.dstDevice = dst + 4096 * i;
    c.WidthInBytes = 4096; c.Height = 1; c.Depth = 1;
    CUcontext ctx; CK(cuCtxGetCurrent(&ctx));
    CK(cuGraphExecMemcpyNodeSetParams(e, mnodes[i], &c, ctx));
  }
}

static double run(CUgraphExec* execs, int nexec, int do_patch, int memcpys, int sync, CUstream s) {
  double t[R];
  long long cycles = 400000000LL;  // ~0.2 s at 2 GHz: longer than R launches queue
  if (!sync) { void* a[] = {&cycles}; CK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, s, a, 0)); }
  for (int r = 0; r < R; ++r) {
    CUgraphExec e = execs[r % nexec];
    double t0 = now_ns();
    if (do_patch) patch(e, 7 + r, memcpys);
    CK(cuGraphLaunch(e, s));
    t[r] = now_ns() - t0;
    if (sync) CK(cuStreamSynchronize(s));
  }
  CK(cuStreamSynchronize(s));
  qsort(t, R, sizeof t[0], by_value);
  return t[R / 2] / 1000;
}

int main(int argc, char** argv) {
  N = atoi(argv[2]); K = atoi(argv[3]); M = atoi(argv[4]);
  CUdevice dev; CUcontext ctx; CUmodule mod; CUstream s;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoad(&mod, argv[1])); CK(cuModuleGetFunction(&k, mod, "k")); CK(cuModuleGetFunction(&spin, mod, "spin"));
  CK(cuMemAlloc(&buf, 4096 * (size_t)N)); CK(cuMemAlloc(&src, 4096 * 64)); CK(cuMemAlloc(&dst, 4096 * (size_t)(M + 1)));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUgraph g;
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int pos = 5;
  for (int i = 0; i < N; ++i) {
    if (i < M) CK(cuMemcpyDtoDAsync(dst + 4096 * i, src + 4096 * (i % 64), 4096, s));
    CUdeviceptr p = buf + 4096 * i;
    void* args[] = {&p, &pos, &n};
    CK(cuLaunchKernel(k, 4, 1, 1, 256, 1, 1, 0, s, args, 0));
  }
  CK(cuStreamEndCapture(s, &g));
  size_t count = 0; CK(cuGraphGetNodes(g, NULL, &count));
  CUgraphNode* all = malloc(count * sizeof *all); CK(cuGraphGetNodes(g, all, &count));
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type; CK(cuGraphNodeGetType(all[i], &type));
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) knodes[nk++] = all[i]; else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) mnodes[nm++] = all[i];
  }
  CUgraphExec e[2]; CK(cuGraphInstantiate(&e[0], g, 0)); CK(cuGraphInstantiate(&e[1], g, 0));
  for (int w = 0; w < 3; ++w) run(e, 2, 1, M, 1, s);  // warm both
  printf("{\"kernels\":%d,\"patched_kernels\":%d,\"memcpys\":%d,"
         "\"busy_one_exec_patch_us\":%.2f,\"busy_two_execs_patch_us\":%.2f,\"busy_one_exec_no_patch_us\":%.2f,"
         "\"busy_one_exec_kernels_only_us\":%.2f,"
         "\"idle_one_exec_patch_us\":%.2f,\"idle_one_exec_no_patch_us\":%.2f,\"idle_one_exec_kernels_only_us\":%.2f}\n",
         N, K, M, run(e, 1, 1, M, 0, s), run(e, 2, 1, M, 0, s), run(e, 1, 0, 0, 0, s), run(e, 1, 1, 0, 0, s),
         run(e, 1, 1, M, 1, s), run(e, 1, 0, 0, 1, s), run(e, 1, 1, 0, 1, s));
  return 0;
}
