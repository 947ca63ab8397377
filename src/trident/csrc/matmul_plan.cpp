/*
 * matmul_plan.cpp — a decode step's matmuls through cuBLASLt with everything but the pointers decided once.
 *
 * Why: a decode-shaped bf16 matmul costs ~12 µs of host time through ATen's CUDA kernel on an H200 host
 * (benchmarks/matmul_host_cost.py), and ~10 µs of that is cuBLAS itself: cublasGemmEx chooses its algorithm
 * on every call, and ATen's cuBLASLt path (addmm with a bias) asks cuBLASLt's heuristic on every call. A
 * Llama-3.2-1B step makes 65 of them. A pooled matmul site always sees the same problem (the specialization
 * fixes dtype, sizes and strides), so its descriptors, matrix layouts and algorithm can be made once.
 *
 * Same bits as eager, or no plan: the plan mirrors the cuBLAS problem ATen sets up (column-major
 * result^T = op(w) op(x) with ATen's transposes and leading dimensions; the bias as cuBLASLt's bias epilogue;
 * torch's workspace size; the operands' alignment) and asks cuBLASLt's heuristic for its first pick. That is
 * normally the kernel cuBLAS picks for ATen, but nothing promises it, so on the site's first call the plan
 * runs next to ATen's result and is kept only if the outputs are equal bit for bit. One kernel computes the
 * same bits for every input, so the check on one call stands for all (it compares ATen's and the plan's
 * results on real operands, where a different reduction order would show).
 *
 * A plan runs only for operands exactly like the ones it was made for (dtype, sizes, strides, each pointer at
 * least as aligned), in the same CUDA context, with the same cuBLAS settings torch exposes (preferred BLAS
 * backend, reduced-precision reductions, fp16 accumulation, deterministic algorithms). Anything else takes
 * ATen's kernel. bfloat16 and float16 only: float32 matmuls depend on TF32 settings ATen reads per call.
 *
 * cuBLASLt is reached with dlopen (RTLD_NOLOAD: the library torch's CUDA build already loaded), and its C API
 * is declared here, as triton_launch.cpp declares the driver's: a CPU-only torch builds and loads this file
 * unchanged, and no CUDA header is needed. The values below are cublasLt.h's and library_types.h's.
 */
#include "matmul_plan.h"

#include <dlfcn.h>

#include <algorithm>
#include <utility>
#include <vector>

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/equal.h>

#include "runtime_internal.h"

// torch's cuBLAS workspace size (the handle cublasGemmEx runs with) and its cuBLASLt workspace size (ATen's
// bias-epilogue matmuls), from libtorch_cuda; weak, so null on a CPU-only torch.
namespace at::cuda {
__attribute__((weak)) size_t getChosenWorkspaceSize();
__attribute__((weak)) size_t getCUDABlasLtWorkspaceSize();
}  // namespace at::cuda

namespace {

// --- cuBLASLt's C API ------------------------------------------------------------------------------------

using LtStatus = int;  // cublasStatus_t: 0 = success
using LtHandle = void*;
using LtDesc = void*;
using LtLayout = void*;
using LtPreference = void*;
struct LtAlgo {
  uint64_t data[8];
};
struct LtHeuristic {
  LtAlgo algo;
  size_t workspace_bytes;
  LtStatus state;
  float waves;
  int reserved[4];
};
static_assert(sizeof(LtHeuristic) == 96, "cublasLtMatmulHeuristicResult_t is 96 bytes");

constexpr int kCompute32F = 68;                               // CUBLAS_COMPUTE_32F
constexpr int kR32F = 0, kR16F = 2, kR16BF = 14;              // cudaDataType_t
constexpr int kOpN = 0, kOpT = 1;                             // cublasOperation_t
constexpr int kDescTransA = 3, kDescTransB = 4;               // cublasLtMatmulDescAttributes_t
constexpr int kDescEpilogue = 7, kDescBiasPointer = 8;
constexpr int kEpilogueBias = 4;                              // CUBLASLT_EPILOGUE_BIAS
constexpr int kPrefMaxWorkspace = 1;                          // cublasLtMatmulPreferenceAttributes_t
constexpr int kPrefAlignA = 5, kPrefAlignB = 6, kPrefAlignC = 7, kPrefAlignD = 8;

struct LtApi {
  LtStatus (*create)(LtHandle*) = nullptr;
  LtStatus (*desc_create)(LtDesc*, int compute, int scale_type) = nullptr;
  LtStatus (*desc_set)(LtDesc, int attribute, const void* value, size_t bytes) = nullptr;
  LtStatus (*desc_destroy)(LtDesc) = nullptr;
  LtStatus (*layout_create)(LtLayout*, int dtype, uint64_t rows, uint64_t cols, int64_t ld) = nullptr;
  LtStatus (*layout_destroy)(LtLayout) = nullptr;
  LtStatus (*preference_create)(LtPreference*) = nullptr;
  LtStatus (*preference_set)(LtPreference, int attribute, const void* value, size_t bytes) = nullptr;
  LtStatus (*preference_destroy)(LtPreference) = nullptr;
  LtStatus (*heuristic)(LtHandle, LtDesc, LtLayout a, LtLayout b, LtLayout c, LtLayout d, LtPreference,
                        int requested, LtHeuristic* results, int* returned) = nullptr;
  LtStatus (*matmul)(LtHandle, LtDesc, const void* alpha, const void* a, LtLayout, const void* b, LtLayout,
                     const void* beta, const void* c, LtLayout, void* d, LtLayout, const LtAlgo*, void* workspace,
                     size_t workspace_bytes, void* stream) = nullptr;
};

// The cuBLASLt torch loaded, resolved once; null (and *why) when there is none.
const LtApi* lt_api(std::string* why) {
  static LtApi api;
  static std::string failure;
  static bool tried = false;
  if (!tried) {  // under the GIL, as every runtime entry
    tried = true;
    void* library = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"}) {
      if ((library = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) != nullptr) break;
    }
    if (library == nullptr) {
      failure = "torch has not loaded cuBLASLt (libcublasLt.so.11-13)";
    } else if (!trident::resolve(library, "cublasLtCreate", &api.create) ||
               !trident::resolve(library, "cublasLtMatmulDescCreate", &api.desc_create) ||
               !trident::resolve(library, "cublasLtMatmulDescSetAttribute", &api.desc_set) ||
               !trident::resolve(library, "cublasLtMatmulDescDestroy", &api.desc_destroy) ||
               !trident::resolve(library, "cublasLtMatrixLayoutCreate", &api.layout_create) ||
               !trident::resolve(library, "cublasLtMatrixLayoutDestroy", &api.layout_destroy) ||
               !trident::resolve(library, "cublasLtMatmulPreferenceCreate", &api.preference_create) ||
               !trident::resolve(library, "cublasLtMatmulPreferenceSetAttribute", &api.preference_set) ||
               !trident::resolve(library, "cublasLtMatmulPreferenceDestroy", &api.preference_destroy) ||
               !trident::resolve(library, "cublasLtMatmulAlgoGetHeuristic", &api.heuristic) ||
               !trident::resolve(library, "cublasLtMatmul", &api.matmul)) {
      failure = "the loaded cuBLASLt lacks an entry point plans need";
      api = LtApi();
    }
  }
  if (api.matmul == nullptr) *why = failure;
  return api.matmul != nullptr ? &api : nullptr;
}

// One cuBLASLt handle per CUDA context, made on first use and kept for the process.
LtHandle handle_for(const LtApi& api, void* context) {
  static std::vector<std::pair<void*, LtHandle>> handles;
  for (const auto& [ctx, handle] : handles) {
    if (ctx == context) return handle;
  }
  LtHandle handle = nullptr;
  if (api.create(&handle) != 0) return nullptr;
  handles.emplace_back(context, handle);
  return handle;
}

// --- What a plan depends on besides its operands -----------------------------------------------------------

// Reads a Context setting that is a bool in some torch versions and an enum in others, or 0 where this torch
// lacks it (then it cannot change either).
template <typename C>
auto fp16_accumulation(C& context, int) -> decltype(static_cast<int>(context.allowFP16AccumulationCuBLAS())) {
  return static_cast<int>(context.allowFP16AccumulationCuBLAS());
}
template <typename C>
int fp16_accumulation(C&, long) {
  return 0;
}

struct BlasSettings {
  int backend, bf16_reduction, fp16_reduction, fp16_accumulate;
  bool deterministic;

  static BlasSettings current() {
    at::Context& context = at::globalContext();
    return {static_cast<int>(context.blasPreferredBackend()), static_cast<int>(context.allowBF16ReductionCuBLAS()),
            static_cast<int>(context.allowFP16ReductionCuBLAS()), fp16_accumulation(context, 0),
            context.deterministicAlgorithms()};
  }
  bool operator==(const BlasSettings& o) const {
    return backend == o.backend && bf16_reduction == o.bf16_reduction && fp16_reduction == o.fp16_reduction &&
           fp16_accumulate == o.fp16_accumulate && deterministic == o.deterministic;
  }
};

// The largest power of two (at most 256) dividing an address: what cuBLAS may assume about a pointer.
uint32_t alignment_of(const void* pointer) {
  const auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 1;
  while (alignment < 256 && address % (2 * alignment) == 0) alignment *= 2;
  return alignment;
}

bool aligned(const void* pointer, uint32_t alignment) {
  return reinterpret_cast<uintptr_t>(pointer) % alignment == 0;
}

bool same_matrix(const at::Tensor& t, const int64_t sizes[2], const int64_t strides[2]) {
  return t.dim() == 2 && t.size(0) == sizes[0] && t.size(1) == sizes[1] && t.stride(0) == strides[0] &&
         t.stride(1) == strides[1];
}

// A workspace of at least `bytes` for `stream`, or null for none needed.
void* workspace_for(trident::PlanWorkspace& workspace, size_t bytes, int64_t stream, const at::Device& device) {
  if (bytes == 0) return nullptr;
  at::Tensor& buffer = workspace.buffer;
  if (!buffer.defined() || workspace.stream != stream || buffer.device() != device ||
      static_cast<size_t>(buffer.numel()) < bytes) {
    const int64_t size = std::max<int64_t>(static_cast<int64_t>(bytes), buffer.defined() ? buffer.numel() : 0);
    buffer = at::empty({size}, at::TensorOptions().dtype(at::kByte).device(device));
    workspace.stream = stream;
  }
  return buffer.data_ptr();
}

}  // namespace

// --- The plan ------------------------------------------------------------------------------------------------

namespace trident {

class MatmulPlan {
 public:
  // Problem identity: what run_matmul_plan compares before using the plan.
  at::ScalarType dtype = at::kFloat;
  void* context = nullptr;
  int64_t x_sizes[2] = {}, x_strides[2] = {}, w_sizes[2] = {}, w_strides[2] = {};
  bool has_bias = false;
  int64_t bias_stride = 0;
  uint32_t x_alignment = 1, w_alignment = 1, out_alignment = 1;
  BlasSettings settings{};

  // cuBLASLt objects.
  const LtApi* api = nullptr;
  LtHandle handle = nullptr;
  LtDesc desc = nullptr;
  LtLayout w_layout = nullptr, x_layout = nullptr, out_layout = nullptr;
  LtAlgo algo{};
  size_t workspace_bytes = 0;
  const void* bias_pointer = nullptr;  // the descriptor's bias attribute as last set

  MatmulPlan() = default;
  MatmulPlan(const MatmulPlan&) = delete;
  MatmulPlan& operator=(const MatmulPlan&) = delete;
  ~MatmulPlan() {
    if (api == nullptr) return;
    for (LtLayout layout : {w_layout, x_layout, out_layout}) {
      if (layout != nullptr) api->layout_destroy(layout);
    }
    if (desc != nullptr) api->desc_destroy(desc);
  }

  bool matches(const at::Tensor& result, const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias,
               void* current_context) const {
    return current_context == context && x.scalar_type() == dtype && w.scalar_type() == dtype &&
           same_matrix(x, x_sizes, x_strides) && same_matrix(w, w_sizes, w_strides) &&
           (bias != nullptr) == has_bias &&
           (bias == nullptr || (bias->scalar_type() == dtype && bias->dim() == 1 && bias->size(0) == w_sizes[1] &&
                                bias->stride(0) == bias_stride)) &&
           aligned(x.const_data_ptr(), x_alignment) && aligned(w.const_data_ptr(), w_alignment) &&
           aligned(result.const_data_ptr(), out_alignment) && BlasSettings::current() == settings;
  }

  LtStatus run(at::Tensor& result, const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias,
               PlanWorkspace& workspace, int64_t stream) {
    if (has_bias && bias->const_data_ptr() != bias_pointer) {
      const void* pointer = bias->const_data_ptr();
      const LtStatus status = api->desc_set(desc, kDescBiasPointer, &pointer, sizeof(pointer));
      if (status != 0) return status;
      bias_pointer = pointer;
    }
    const float alpha = 1.f, beta = 0.f;
    return api->matmul(handle, desc, &alpha, w.const_data_ptr(), w_layout, x.const_data_ptr(), x_layout, &beta,
                       result.data_ptr(), out_layout, result.data_ptr(), out_layout, &algo,
                       workspace_for(workspace, workspace_bytes, stream, x.device()), workspace_bytes,
                       reinterpret_cast<void*>(stream));
  }
};

}  // namespace trident

namespace {

// Builds the plan for these operands, or returns null with *why. Mirrors ATen's cuBLAS arguments for a
// row-major result: result^T (column-major, N x M, ld N) = op(w) (N x K) * x^T (K x M).
std::shared_ptr<trident::MatmulPlan> make_plan(const at::Tensor& result, const at::Tensor& x, const at::Tensor& w,
                                               const at::Tensor* bias, void* context, std::string* why) {
  const at::ScalarType dtype = x.scalar_type();
  if (dtype != at::kBFloat16 && dtype != at::kHalf) {
    *why = std::string("dtype ") + c10::toString(dtype) + ": plans cover bfloat16 and float16";
    return nullptr;
  }
  const int64_t m = x.size(0), k = x.size(1), n = w.size(1);
  if (m < 1 || k < 2 || n < 2) {
    *why = "a degenerate problem (no rows, or an inner or output width below 2)";
    return nullptr;
  }
  // x [M, K] row-major is column-major K x M: op N, ld = its row stride (K when there is one row, as ATen
  // adjusts it).
  if (x.stride(1) != 1 || (m > 1 && x.stride(0) < k)) {
    *why = "the first operand is not row-major";
    return nullptr;
  }
  const int64_t x_ld = m == 1 ? k : x.stride(0);
  // w [K, N]: column-major (a transposed row-major weight, F.linear's case) is op T of K x N; row-major is op N
  // of N x K.
  int w_op = kOpN;
  uint64_t w_rows = 0, w_cols = 0;
  int64_t w_ld = 0;
  if (w.stride(0) == 1 && w.stride(1) >= k) {
    w_op = kOpT, w_rows = k, w_cols = n, w_ld = w.stride(1);
  } else if (w.stride(1) == 1 && w.stride(0) >= n) {
    w_op = kOpN, w_rows = n, w_cols = k, w_ld = w.stride(0);
  } else {
    *why = "the second operand is neither row- nor column-major";
    return nullptr;
  }
  if (bias != nullptr && (bias->dim() != 1 || bias->size(0) != n || bias->stride(0) != 1)) {
    *why = "the bias is not a contiguous vector of the output's width";
    return nullptr;
  }
  const BlasSettings settings = BlasSettings::current();
  if (settings.deterministic) {
    *why = "deterministic algorithms are on (ATen's cuBLAS calls check the workspace config)";
    return nullptr;
  }
  // ATen's plain matmuls run cublasGemmEx on a handle with torch's cuBLAS workspace; its bias matmuls run
  // cuBLASLt with torch's cuBLASLt workspace.
  size_t (*workspace_size)() = bias == nullptr ? &at::cuda::getChosenWorkspaceSize : &at::cuda::getCUDABlasLtWorkspaceSize;
  if (workspace_size == nullptr) {
    *why = "this torch does not export its cuBLAS workspace size";
    return nullptr;
  }
  const LtApi* api = lt_api(why);
  if (api == nullptr) return nullptr;
  auto plan = std::make_shared<trident::MatmulPlan>();
  plan->api = api;
  plan->handle = handle_for(*api, context);
  if (plan->handle == nullptr) {
    *why = "cublasLtCreate failed";
    return nullptr;
  }
  plan->dtype = dtype;
  plan->context = context;
  for (int d = 0; d < 2; ++d) {
    plan->x_sizes[d] = x.size(d), plan->x_strides[d] = x.stride(d);
    plan->w_sizes[d] = w.size(d), plan->w_strides[d] = w.stride(d);
  }
  plan->has_bias = bias != nullptr;
  plan->bias_stride = bias != nullptr ? bias->stride(0) : 0;
  plan->x_alignment = alignment_of(x.const_data_ptr());
  plan->w_alignment = alignment_of(w.const_data_ptr());
  plan->out_alignment = alignment_of(result.const_data_ptr());
  plan->settings = settings;
  const int element = dtype == at::kBFloat16 ? kR16BF : kR16F;
  const int x_op = kOpN;
  if (api->desc_create(&plan->desc, kCompute32F, kR32F) != 0 ||
      api->desc_set(plan->desc, kDescTransA, &w_op, sizeof(w_op)) != 0 ||
      api->desc_set(plan->desc, kDescTransB, &x_op, sizeof(x_op)) != 0 ||
      api->layout_create(&plan->w_layout, element, w_rows, w_cols, w_ld) != 0 ||
      api->layout_create(&plan->x_layout, element, k, m, x_ld) != 0 ||
      api->layout_create(&plan->out_layout, element, n, m, n) != 0) {
    *why = "cuBLASLt refused the matmul's descriptors";
    return nullptr;
  }
  if (bias != nullptr) {
    const int epilogue = kEpilogueBias;
    const void* pointer = bias->const_data_ptr();
    if (api->desc_set(plan->desc, kDescEpilogue, &epilogue, sizeof(epilogue)) != 0 ||
        api->desc_set(plan->desc, kDescBiasPointer, &pointer, sizeof(pointer)) != 0) {
      *why = "cuBLASLt refused the bias epilogue";
      return nullptr;
    }
    plan->bias_pointer = pointer;
  }
  LtPreference preference = nullptr;
  if (api->preference_create(&preference) != 0) {
    *why = "cublasLtMatmulPreferenceCreate failed";
    return nullptr;
  }
  const uint64_t max_workspace = workspace_size();
  const uint32_t alignments[4] = {plan->w_alignment, plan->x_alignment, plan->out_alignment, plan->out_alignment};
  bool ok = api->preference_set(preference, kPrefMaxWorkspace, &max_workspace, sizeof(max_workspace)) == 0;
  const int alignment_attributes[4] = {kPrefAlignA, kPrefAlignB, kPrefAlignC, kPrefAlignD};
  for (int i = 0; i < 4 && ok; ++i) {
    ok = api->preference_set(preference, alignment_attributes[i], &alignments[i], sizeof(uint32_t)) == 0;
  }
  LtHeuristic heuristic{};
  int found = 0;
  ok = ok && api->heuristic(plan->handle, plan->desc, plan->w_layout, plan->x_layout, plan->out_layout,
                            plan->out_layout, preference, 1, &heuristic, &found) == 0 && found > 0 &&
       heuristic.state == 0;
  api->preference_destroy(preference);
  if (!ok) {
    *why = "cuBLASLt's heuristic offers no algorithm";
    return nullptr;
  }
  plan->algo = heuristic.algo;
  plan->workspace_bytes = heuristic.workspace_bytes;
  return plan;
}

// The bits of a tensor, as integers of its element width (torch.equal on floats would take -0.0 for 0.0).
at::Tensor bits(const at::Tensor& t) {
  return t.view(t.element_size() == 2 ? at::kShort : at::kInt);
}

}  // namespace

bool trident::run_matmul_plan(SiteMatmulPlan& slot, PlanWorkspace& workspace, at::Tensor& result,
                              const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias, int64_t stream) {
  if (!slot.plan) return false;
  void* context = nullptr;
  if (!current_cuda_context(&context) || !slot.plan->matches(result, x, w, bias, context)) return false;
  MatmulPlan& plan = *slot.plan;
  LtStatus status = 0;
  try {  // the workspace allocation may fail; ATen's kernel then computes the result as before
    status = plan.run(result, x, w, bias, workspace, stream);
  } catch (const std::exception& e) {
    slot.plan.reset();
    slot.refusal = std::string("running the plan failed: ") + e.what();
    return false;
  }
  if (status == 0) return true;
  slot.plan.reset();
  slot.refusal = "cublasLtMatmul returned status " + std::to_string(status);
  return false;
}

void trident::try_matmul_plan(SiteMatmulPlan& slot, PlanWorkspace& workspace, const at::Tensor& aten_result,
                              const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias, int64_t stream) {
  void* context = nullptr;
  if (!current_cuda_context(&context) || context == nullptr) {
    slot.refusal = "no current CUDA context";
    return;
  }
  // An optimization attempt: whatever goes wrong here leaves a reason, never a failed call.
  try {
    std::string why;
    std::shared_ptr<MatmulPlan> plan = make_plan(aten_result, x, w, bias, context, &why);
    if (!plan) {
      slot.refusal = why;
      return;
    }
    at::Tensor scratch = at::empty_like(aten_result);
    const LtStatus status = plan->run(scratch, x, w, bias, workspace, stream);
    if (status != 0) {
      slot.refusal = "cublasLtMatmul returned status " + std::to_string(status);
    } else if (!at::equal(bits(scratch), bits(aten_result))) {
      slot.refusal = "cuBLASLt's first algorithm computes other bits than ATen's kernel";
    } else {
      slot.plan = std::move(plan);
    }
  } catch (const std::exception& e) {
    slot.refusal = std::string("making the plan failed: ") + e.what();
  }
}
