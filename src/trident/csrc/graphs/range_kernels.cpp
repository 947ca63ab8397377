/*
 * graphs/range_kernels.cpp — Trident's own kernels for a float32 or float64 arange or linspace whose bounds follow
 * the call (graphs/scalars.cpp), reading them from device memory that memset nodes write.
 *
 * ATen's kernels take start and step by parameter, which a replay cannot patch, and no ATen operator on 0-dim
 * stand-ins gives their bits: RangeFactories.cu computes an arange's element as `xstart + xstep * (acc)i` and a
 * linspace's as `start + step * (acc)i` (the first half) or `end - step * (acc)(steps - i - 1)` (the second), in
 * the accumulate type (the dtype itself for these two), and nvcc contracts each to one fused multiply-add, where
 * addcmul rounds the product first. These kernels compute exactly that: one `fma.rn` of the converted index
 * (`cvt.rn` from int64, as C++ converts it), and for linspace the step as the host computes it, `(end - start) /
 * (steps - 1)` with IEEE subtraction and division (`sub.rn`, `div.rn`, not the approximate division). No flush of
 * subnormals, as ATen is built without fast math. Every recording that uses them is proven bit for bit against
 * the direct run (ATen's kernel) before it replays.
 *
 * They are PTX, which the driver compiles for the device it runs on: loaded once per device before its first
 * capture begins (loading a module while the stream captures is not a capturable operation).
 */
#include "graphs/recording.h"

#include <mutex>
#include <string>

namespace trident::graphs {

namespace {

// A kernel is kEntry, its body, then kStore. Parameters: the result, the first and second operand (an arange's
// start and step, a linspace's start and end; 0-dim tensors of the element type) and the element count, which for
// linspace is its `steps`. kEntry leaves the index in %rd5, the count in %rd4, the result's address in %rd1 and
// the operands in %f1 and %f2; a body leaves the element in %f7.
constexpr const char* kEntry = R"(
.visible .entry trident_@K_@T(.param .u64 p_out, .param .u64 p_first, .param .u64 p_second, .param .u64 p_n)
{
  .reg .pred %p<3>;
  .reg .b32 %r<4>;
  .reg .b64 %rd<11>;
  .reg .@T %f<8>;
  ld.param.u64 %rd1, [p_out];
  ld.param.u64 %rd2, [p_first];
  ld.param.u64 %rd3, [p_second];
  ld.param.u64 %rd4, [p_n];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mul.wide.u32 %rd5, %r1, %r2;
  cvt.u64.u32 %rd6, %r3;
  add.s64 %rd5, %rd5, %rd6;
  setp.ge.s64 %p1, %rd5, %rd4;
  @%p1 bra DONE;
  cvta.to.global.u64 %rd1, %rd1;
  cvta.to.global.u64 %rd2, %rd2;
  cvta.to.global.u64 %rd3, %rd3;
  ld.global.@T %f1, [%rd2];
  ld.global.@T %f2, [%rd3];
)";

// start + step * i, rounded once.
constexpr const char* kArangeBody = R"(
  cvt.rn.@T.s64 %f3, %rd5;
  fma.rn.@T %f7, %f2, %f3, %f1;
)";

// step = (end - start) / (steps - 1); the first half start + step * i, the second end - step * (steps - i - 1),
// each rounded once. steps >= 2, so halfway = steps / 2 is a shift.
constexpr const char* kLinspaceBody = R"(
  add.s64 %rd8, %rd4, -1;
  cvt.rn.@T.s64 %f3, %rd8;
  sub.rn.@T %f4, %f2, %f1;
  div.rn.@T %f4, %f4, %f3;
  shr.s64 %rd9, %rd4, 1;
  setp.lt.s64 %p2, %rd5, %rd9;
  @%p2 bra FIRST_HALF;
  sub.s64 %rd10, %rd8, %rd5;
  cvt.rn.@T.s64 %f5, %rd10;
  neg.@T %f6, %f4;
  fma.rn.@T %f7, %f6, %f5, %f2;
  bra STORE;
FIRST_HALF:
  cvt.rn.@T.s64 %f5, %rd5;
  fma.rn.@T %f7, %f4, %f5, %f1;
)";

constexpr const char* kStore = R"(
STORE:
  shl.b64 %rd6, %rd5, @S;
  add.s64 %rd7, %rd1, %rd6;
  st.global.@T [%rd7], %f7;
DONE:
  ret;
}
)";

// A kernel's text for an element type: @K its kind, @T its PTX type, @S the log2 of its size in bytes.
std::string instantiate(const char* body, const char* kind, const char* type, const char* shift) {
  std::string out;
  for (const char* part : {kEntry, body, kStore}) {
    for (const char* c = part; *c != '\0'; ++c) {
      const char* with = c[0] != '@'   ? nullptr
                         : c[1] == 'K' ? kind
                         : c[1] == 'T' ? type
                         : c[1] == 'S' ? shift
                                       : nullptr;
      if (with != nullptr) {
        out += with;
        ++c;
      } else {
        out += *c;
      }
    }
  }
  return out;
}

// The kernels, indexed as DeviceKernels::functions: [kind][element type].
struct KernelKind {
  const char* body;
  const char* name;
};
constexpr KernelKind kKinds[2] = {{kArangeBody, "arange"}, {kLinspaceBody, "linspace"}};  // RangeKernel's order
struct ElementType {
  const char* ptx;
  const char* log2_size;
};
constexpr ElementType kTypes[2] = {{"f32", "2"}, {"f64", "3"}};  // float32, float64

std::string module_source() {
  std::string ptx = ".version 7.0\n.target sm_70\n.address_size 64\n";
  for (const KernelKind& kind : kKinds) {
    for (const ElementType& type : kTypes) ptx += instantiate(kind.body, kind.name, type.ptx, type.log2_size);
  }
  return ptx;
}

constexpr int kMaxDevices = 64;

struct DeviceKernels {
  bool loaded = false;  // tried: the functions below are null when the driver refused the module
  void* functions[2][2] = {};  // [kind][float64]
};

std::mutex loading;
DeviceKernels kernels[kMaxDevices];

// The function for this kind and element type on `device`, or null: never loaded here, since a capture is running
// (load_range_kernels ran before it began).
void* function_for(RangeKernel kind, bool float64, int32_t device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  std::lock_guard<std::mutex> hold(loading);
  return kernels[device].functions[kind == RangeKernel::kLinspace][float64];
}

}  // namespace

std::string range_kernels_ptx() { return module_source(); }

void load_range_kernels(int32_t device) {
  if (device < 0 || device >= kMaxDevices || driver.module_load_data == nullptr) return;
  std::lock_guard<std::mutex> hold(loading);
  DeviceKernels& d = kernels[device];
  if (d.loaded) return;
  d.loaded = true;
  void* module = nullptr;
  const std::string ptx = module_source();
  if (driver.module_load_data(&module, ptx.c_str()) != 0) return;
  for (int k = 0; k < 2; ++k) {
    for (int t = 0; t < 2; ++t) {
      const std::string name = std::string("trident_") + kKinds[k].name + "_" + kTypes[t].ptx;  // as kEntry names it
      void* function = nullptr;
      if (driver.module_get_function(&function, module, name.c_str()) == 0) d.functions[k][t] = function;
    }
  }
}

bool range_kernel_ready(RangeKernel kind, at::ScalarType dtype, int32_t device) {
  return (dtype == at::kFloat || dtype == at::kDouble) && function_for(kind, dtype == at::kDouble, device) != nullptr;
}

bool launch_range_kernel(RangeKernel kind, const at::Tensor& out, const at::Tensor& first, const at::Tensor& second,
                         CUstream stream) {
  const at::ScalarType dtype = out.scalar_type();
  if ((dtype != at::kFloat && dtype != at::kDouble) || !out.is_contiguous() || first.scalar_type() != dtype ||
      second.scalar_type() != dtype) {
    return false;
  }
  void* function = function_for(kind, dtype == at::kDouble, out.get_device());
  if (function == nullptr) return false;
  uint64_t out_address = reinterpret_cast<uintptr_t>(out.data_ptr());
  uint64_t first_address = reinterpret_cast<uintptr_t>(first.data_ptr());
  uint64_t second_address = reinterpret_cast<uintptr_t>(second.data_ptr());
  uint64_t count = static_cast<uint64_t>(out.numel());
  if (count == 0) return true;
  constexpr unsigned kThreads = 256;
  const uint64_t blocks = (count + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffffu) return false;
  void* params[] = {&out_address, &first_address, &second_address, &count};
  return driver.launch(function, static_cast<unsigned>(blocks), 1, 1, kThreads, 1, 1, 0, stream, params, nullptr) ==
         0;
}

}  // namespace trident::graphs
