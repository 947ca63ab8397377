/*
 * matmul_plan.h — cuBLASLt plans for a buffer pool's CUDA matmul sites (matmul_plan.cpp).
 *
 * Shared by buffer_pool.cpp (which owns the slots and the workspace) and matmul_plan.cpp only.
 */
#ifndef TRIDENT_MATMUL_PLAN_H
#define TRIDENT_MATMUL_PLAN_H

#include <cstdint>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>

namespace trident {

class MatmulPlan;

// One pooled matmul site's plan: untried until the site's first matmul that reaches ATen's CUDA kernel on a
// usable stream; then either a plan verified against ATen's bits, or the reason there is none (never retried).
struct SiteMatmulPlan {
  std::shared_ptr<MatmulPlan> plan;
  std::string refusal;

  bool untried() const { return !plan && refusal.empty(); }
};

// The cuBLASLt workspace one pool's plans share: a byte buffer and the stream it was last used on (reused only
// on that stream, the caching allocator's own rule).
struct PlanWorkspace {
  at::Tensor buffer;
  int64_t stream = 0;
};

// Computes result = x @ w (+ bias) with the slot's plan if it was made for exactly these operands (dtype,
// sizes, strides, alignment), this CUDA context and the current cuBLAS settings: true when it ran. False
// leaves `result` untouched for ATen to compute; a plan whose call fails is dropped (its reason kept).
bool run_matmul_plan(SiteMatmulPlan& slot, PlanWorkspace& workspace, at::Tensor& result, const at::Tensor& x,
                     const at::Tensor& w, const at::Tensor* bias, int64_t stream);

// After ATen computed `aten_result` for these operands on `stream`: makes the slot's plan, runs it into a scratch
// tensor and keeps it only if the two are equal bit for bit (same kernel, same bits); otherwise records why.
// Synchronizes the stream once (the comparison), on the site's first call only.
void try_matmul_plan(SiteMatmulPlan& slot, PlanWorkspace& workspace, const at::Tensor& aten_result,
                     const at::Tensor& x, const at::Tensor& w, const at::Tensor* bias, int64_t stream);

}  // namespace trident

#endif /* TRIDENT_MATMUL_PLAN_H */
