// What makes cuGraphLaunch itself slow? A graph of N small kernels, and the same graph with each feature a
// Trident recording has: M memset nodes, C device-to-device memcpy nodes, D disabled kernel nodes; the memsets
// and memcpys all before the kernels, or spread evenly between them (as a recording interleaves them). Per feature,
// median host us of cuGraphLaunch alone (patches are timed apart), the GPU idle before each launch
// (synchronize after it, as Hugging Face's generate does every token): nothing patched; after patching P kernel
// nodes; after patching the C memcpy nodes; after patching the M memset nodes. Build and run: graph_launch_cost.sh.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now_ns(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#define CK(x) do { CUresult r_ = (x); if (r_) { const char* s_; cuGetErrorString(r_, &s_); printf("line %d: %s\n", __LINE__, s_); exit(1); } } while (0)
static int by_value(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
enum { R = 300, MAXN = 8192 };
static CUfunction k;
static CUdeviceptr buf, src, dst, scalars;
static int n = 256;
static CUcontext ctx;

typedef struct {
  CUgraphExec exec;
  CUgraphNode kernels[MAXN], memcpys[512], memsets[512];
  int nk, nc, nm;
} Graph;

static void build(Graph* g, CUstream s, int N, int M, int C, int D, int spread) {
  CUgraph graph;
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  int pos = 5, copies = 0, sets = 0;
  for (int i = 0; i < N; ++i) {
    // before kernel i: the copies and memsets due by then (all of them before kernel 0 unless spread)
    for (; copies < C && (!spread || (long)copies * N <= (long)i * C); ++copies)
      CK(cuMemcpyDtoDAsync(dst + 4096 * copies, src + 4096 * (copies % 64), 64, s));
    for (; sets < M && (!spread || (long)sets * N <= (long)i * M); ++sets) CK(cuMemsetD32Async(scalars + 8 * sets, 7, 1, s));
    CUdeviceptr p = buf + 1024 * i;
    void* args[] = {&p, &pos, &n};
    CK(cuLaunchKernel(k, 1, 1, 1, 256, 1, 1, 0, s, args, 0));
  }
  CK(cuStreamEndCapture(s, &graph));
  size_t count = 0; CK(cuGraphGetNodes(graph, NULL, &count));
  CUgraphNode* all = malloc(count * sizeof *all); CK(cuGraphGetNodes(graph, all, &count));
  g->nk = g->nc = g->nm = 0;
  for (size_t i = 0; i < count; ++i) {
    CUgraphNodeType type; CK(cuGraphNodeGetType(all[i], &type));
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) g->kernels[g->nk++] = all[i];
    else if (type == CU_GRAPH_NODE_TYPE_MEMCPY) g->memcpys[g->nc++] = all[i];
    else if (type == CU_GRAPH_NODE_TYPE_MEMSET) g->memsets[g->nm++] = all[i];
  }
  free(all);
  CK(cuGraphInstantiateWithFlags(&g->exec, graph, 0));
  for (int i = 0; i < D && i < g->nk; ++i) CK(cuGraphNodeSetEnabled(g->exec, g->kernels[(long)i * g->nk / D], 0));
}

// what: 0 nothing, 1 P kernel nodes, 2 every memcpy node, 3 every memset node
static void patch(Graph* g, int what, int P, int value) {
  if (what == 1) {
    for (int i = 0; i < P && i < g->nk; ++i) {
      CUdeviceptr p = buf + 1024 * i;
      void* args[] = {&p, &value, &n};
      CUDA_KERNEL_NODE_PARAMS q = {0};
      q.func = k; q.gridDimX = 1; q.gridDimY = 1; q.gridDimZ = 1; q.blockDimX = 256; q.blockDimY = 1; q.blockDimZ = 1;
      q.kernelParams = args;
      CK(cuGraphExecKernelNodeSetParams(g->exec, g->kernels[i], &q));
    }
  } else if (what == 2) {
    for (int i = 0; i < g->nc; ++i) {
      CUDA_MEMCPY3D c = {0};
      c.srcMemoryType = CU_MEMORYTYPE_DEVICE; c.srcDevice = src + 4096 * ((i + value) % 64);
      c.dstMemoryType = CU_MEMORYTYPE_DEVICE; c.dstDevice = dst + 4096 * i;
      c.WidthInBytes = 64; c.Height = 1; c.Depth = 1;
      CK(cuGraphExecMemcpyNodeSetParams(g->exec, g->memcpys[i], &c, ctx));
    }
  } else if (what == 3) {
    for (int i = 0; i < g->nm; ++i) {
      CUDA_MEMSET_NODE_PARAMS m = {0};
      m.dst = scalars + 8 * i; m.elementSize = 4; m.width = 1; m.height = 1; m.value = (unsigned)value;
      CK(cuGraphExecMemsetNodeSetParams(g->exec, g->memsets[i], &m, ctx));
    }
  }
}

// Median host us of the patches and of the launch alone.
static void run(Graph* g, CUstream s, int what, int P, double* patch_us, double* launch_us) {
  double tp[R], tl[R];
  for (int r = 0; r < R; ++r) {
    double t0 = now_ns();
    patch(g, what, P, 9 + r);
    double t1 = now_ns();
    CK(cuGraphLaunch(g->exec, s));
    double t2 = now_ns();
    CK(cuStreamSynchronize(s));
    tp[r] = t1 - t0; tl[r] = t2 - t1;
  }
  qsort(tp, R, sizeof tp[0], by_value); qsort(tl, R, sizeof tl[0], by_value);
  *patch_us = tp[R / 2] / 1000; *launch_us = tl[R / 2] / 1000;
}

int main(int argc, char** argv) {
  int N = atoi(argv[2]), M = atoi(argv[3]), C = atoi(argv[4]), D = atoi(argv[5]), P = atoi(argv[6]);
  int spread = argc > 7 ? atoi(argv[7]) : 0;
  CUdevice dev; CUmodule mod; CUstream s;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  CK(cuModuleLoad(&mod, argv[1])); CK(cuModuleGetFunction(&k, mod, "k"));
  CK(cuMemAlloc(&buf, 1024 * (size_t)N)); CK(cuMemAlloc(&src, 4096 * 64)); CK(cuMemAlloc(&dst, 4096 * (size_t)(C + 1)));
  CK(cuMemAlloc(&scalars, 8 * (size_t)(M + 1)));
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  static Graph g;
  build(&g, s, N, M, C, D, spread);
  double p, l;
  for (int w = 0; w < 3; ++w) run(&g, s, 0, 0, &p, &l);
  double l0, p1, l1, p2, l2, p3, l3;
  run(&g, s, 0, 0, &p, &l0);
  run(&g, s, 1, P, &p1, &l1);
  run(&g, s, 2, 0, &p2, &l2);
  run(&g, s, 3, 0, &p3, &l3);
  printf("{\"kernels\":%d,\"memsets\":%d,\"memcpys\":%d,\"disabled\":%d,\"spread\":%d,\"launch_us\":%.2f,"
         "\"patched_kernels\":%d,\"kernel_patch_us\":%.2f,\"launch_after_kernel_patch_us\":%.2f,"
         "\"memcpy_patch_us\":%.2f,\"launch_after_memcpy_patch_us\":%.2f,"
         "\"memset_patch_us\":%.2f,\"launch_after_memset_patch_us\":%.2f}\n",
         N, M, C, D, spread, l0, P, p1, l1, p2, l2, p3, l3);
  return 0;
}
