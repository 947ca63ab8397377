/*
 * graphs/range_kernels.cpp — Trident's own kernels for a floating arange or linspace (float32, float64, half,
 * bfloat16) whose bounds follow the call (graphs/scalars.cpp), reading them from device memory that memset nodes
 * write.
 *
 * ATen's kernels take start and step by parameter, which a replay cannot patch, and no ATen operator on 0-dim
 * stand-ins gives their bits: RangeFactories.cu computes an arange's element as `xstart + xstep * (acc)i` in the
 * accumulate type, and a float32 or float64 linspace's as `start + step * i` (the first half) or `end - step *
 * (steps - i - 1)` (the second), and nvcc contracts each to one fused multiply-add, where addcmul rounds the
 * product first. These kernels compute exactly that: one `fma.rn` of the converted index (`cvt.rn` from int64, as
 * C++ converts it), and for linspace the step as the host computes it, `(end - start) / (steps - 1)` with IEEE
 * subtraction and division (`sub.rn`, `div.rn`, not the approximate division). Half and bfloat16 differ (below,
 * ElementType). No flush of subnormals, as ATen is built without fast math. Every recording that uses them is
 * proven bit for bit against the direct run (ATen's kernel) before it replays.
 *
 * They are PTX, which the driver compiles for the device it runs on: loaded once per device before its first
 * capture begins (loading a module while the stream captures is not a capturable operation).
 */
#include "graphs/recording.h"

#include <mutex>
#include <string>
#include <vector>

namespace trident::graphs {

namespace {

// Where a kernel's element type and ATen's arithmetic for it differ:
//   - float32 and float64 compute in the type itself, from operands of it.
//   - half and bfloat16: an arange computes in float32 (ATen's accumulate type) from float32 operands and rounds
//     the element once, at the store (`static_cast<scalar_t>(val)`). A linspace takes operands of the type itself
//     and computes with c10::Half / c10::BFloat16 arithmetic, where every operation runs in float32 and rounds its
//     result to the type: the step's subtraction, `static_cast<scalar_t>(steps - 1)`, the division, the index's
//     conversion (`step * ind` converts ind to the type first), the product and the sum. Nothing fuses: each
//     product is rounded to the type before the sum reads it.
// Rounding to half is `cvt.rn.f16.f32` (c10::Half's device conversion, __float2half); to bfloat16 `cvt.rn.bf16.f32`
// (__float2bfloat16 from sm_80 on), so the bfloat16 kernels are a module of their own for sm_80 and later. On the
// host, c10 rounds both to nearest even in software, which is the same for every value the step can take.
struct ElementType {
  at::ScalarType dtype;
  const char* name;          // in the kernel's name
  const char* compute;       // the PTX type of the arithmetic (and of the operands, but for a reduced linspace)
  const char* log2_size;     // of the element in bytes
  const char* round;         // PTX that rounds %f<n> (written @N) to the element type and back; empty: no rounding
  const char* reduced_load;  // PTX that loads a reduced linspace's operands of the type itself; null: none
  const char* store;         // PTX that stores %f7 at [%rd7]
  bool sm80;                 // in the sm_80 module
};

constexpr const char* kRoundHalf = "  cvt.rn.f16.f32 %h3, %f@N;\n  cvt.f32.f16 %f@N, %h3;\n";
constexpr const char* kRoundBf16 =
    "  cvt.rn.bf16.f32 %h3, %f@N;\n  cvt.u32.u16 %r6, %h3;\n  shl.b32 %r6, %r6, 16;\n  mov.b32 %f@N, %r6;\n";

// A kernel is kEntry, its operands' loads, its body, then kStore. Parameters: the result, the first and second
// operand (an arange's start and step, a linspace's start and end; 0-dim tensors) and the element count, which for
// linspace is its `steps`. kEntry leaves the index in %rd5, the count in %rd4, the result's address in %rd1 and the
// operands' addresses in %rd2 and %rd3; the loads leave the operands in %f1 and %f2 (@C values), and a body the
// element in %f7.
constexpr const char* kEntry = R"(
.visible .entry trident_@K_@T(.param .u64 p_out, .param .u64 p_first, .param .u64 p_second, .param .u64 p_n)
{
  .reg .pred %p<3>;
  .reg .b16 %h<4>;
  .reg .b32 %r<8>;
  .reg .b64 %rd<11>;
  .reg .@C %f<8>;
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
)";

constexpr const char* kLoadComputeType = "  ld.global.@C %f1, [%rd2];\n  ld.global.@C %f2, [%rd3];\n";
// Half and bfloat16 operands, widened to float32 exactly (a bfloat16 is a float32's high half).
constexpr const char* kLoadHalf =
    "  ld.global.b16 %h1, [%rd2];\n  cvt.f32.f16 %f1, %h1;\n  ld.global.b16 %h2, [%rd3];\n  cvt.f32.f16 %f2, %h2;\n";
constexpr const char* kLoadBf16 = R"(  ld.global.b16 %h1, [%rd2];
  cvt.u32.u16 %r4, %h1;
  shl.b32 %r4, %r4, 16;
  mov.b32 %f1, %r4;
  ld.global.b16 %h2, [%rd3];
  cvt.u32.u16 %r5, %h2;
  shl.b32 %r5, %r5, 16;
  mov.b32 %f2, %r5;
)";

constexpr ElementType kTypes[] = {
    {at::kFloat, "f32", "f32", "2", "", nullptr, "  st.global.f32 [%rd7], %f7;\n", false},
    {at::kDouble, "f64", "f64", "3", "", nullptr, "  st.global.f64 [%rd7], %f7;\n", false},
    {at::kHalf, "f16", "f32", "1", kRoundHalf, kLoadHalf, "  cvt.rn.f16.f32 %h3, %f7;\n  st.global.b16 [%rd7], %h3;\n",
     false},
    {at::kBFloat16, "bf16", "f32", "1", kRoundBf16, kLoadBf16,
     "  cvt.rn.bf16.f32 %h3, %f7;\n  st.global.b16 [%rd7], %h3;\n", true},
};

// start + step * i, rounded once (to the element type at the store).
constexpr const char* kArangeBody = R"(
  cvt.rn.@C.s64 %f3, %rd5;
  fma.rn.@C %f7, %f2, %f3, %f1;
)";

// step = (end - start) / (steps - 1); the first half start + step * i, the second end - step * (steps - i - 1),
// each rounded once. steps >= 2, so halfway = steps / 2 is a shift.
constexpr const char* kLinspaceBody = R"(
  add.s64 %rd8, %rd4, -1;
  cvt.rn.@C.s64 %f3, %rd8;
  sub.rn.@C %f4, %f2, %f1;
  div.rn.@C %f4, %f4, %f3;
  shr.s64 %rd9, %rd4, 1;
  setp.lt.s64 %p2, %rd5, %rd9;
  @%p2 bra FIRST_HALF;
  sub.s64 %rd10, %rd8, %rd5;
  cvt.rn.@C.s64 %f5, %rd10;
  neg.@C %f6, %f4;
  fma.rn.@C %f7, %f6, %f5, %f2;
  bra STORE;
FIRST_HALF:
  cvt.rn.@C.s64 %f5, %rd5;
  fma.rn.@C %f7, %f4, %f5, %f1;
)";

// The same in half or bfloat16 arithmetic (c10's): each @R<n> rounds %f<n>, just computed, to the type. The sum is
// rounded by the store.
constexpr const char* kReducedLinspaceBody = R"(
  add.s64 %rd8, %rd4, -1;
  cvt.rn.f32.s64 %f3, %rd8;
@R3
  sub.rn.f32 %f4, %f2, %f1;
@R4
  div.rn.f32 %f4, %f4, %f3;
@R4
  shr.s64 %rd9, %rd4, 1;
  setp.lt.s64 %p2, %rd5, %rd9;
  @%p2 bra FIRST_HALF;
  sub.s64 %rd10, %rd8, %rd5;
  cvt.rn.f32.s64 %f5, %rd10;
@R5
  mul.rn.f32 %f6, %f4, %f5;
@R6
  sub.rn.f32 %f7, %f2, %f6;
  bra STORE;
FIRST_HALF:
  cvt.rn.f32.s64 %f5, %rd5;
@R5
  mul.rn.f32 %f6, %f4, %f5;
@R6
  add.rn.f32 %f7, %f1, %f6;
)";

constexpr const char* kStore = R"(
STORE:
  shl.b64 %rd6, %rd5, @S;
  add.s64 %rd7, %rd1, %rd6;
@V
DONE:
  ret;
}
)";

struct KernelKind {
  const char* name;
  bool linspace;
};
constexpr KernelKind kKinds[] = {{"arange", false}, {"linspace", true}};  // RangeKernel's order

bool reduced(const ElementType& type) { return type.round[0] != '\0'; }

// `text` with its tags replaced: @K the kind, @T the type's name, @C its compute type, @S the log2 of its size, @V
// its store, @R<n> its rounding of %f<n> (nothing for float32 and float64).
std::string instantiate(const char* text, const KernelKind& kind, const ElementType& type) {
  std::string out;
  for (const char* c = text; *c != '\0'; ++c) {
    if (c[0] != '@' || c[1] == '\0') {
      out += *c;
      continue;
    }
    ++c;
    switch (*c) {
      case 'K': out += kind.name; break;
      case 'T': out += type.name; break;
      case 'C': out += type.compute; break;
      case 'S': out += type.log2_size; break;
      case 'V': out += type.store; break;
      case 'R': {
        const char n = *++c;
        for (const char* r = type.round; *r != '\0'; ++r) {
          if (r[0] == '@' && r[1] == 'N') {
            out += n;
            ++r;
          } else {
            out += *r;
          }
        }
        break;
      }
      default: out += '@'; out += *c;
    }
  }
  return out;
}

std::string kernel_source(const KernelKind& kind, const ElementType& type) {
  const bool reduced_linspace = kind.linspace && reduced(type);
  const char* load = reduced_linspace ? type.reduced_load : kLoadComputeType;
  const char* body = !kind.linspace ? kArangeBody : reduced_linspace ? kReducedLinspaceBody : kLinspaceBody;
  std::string text;
  for (const char* part : {kEntry, load, body, kStore}) text += instantiate(part, kind, type);
  return text;
}

// The kernels' modules: [0] for sm_70 and later (float32, float64, half), [1] for sm_80 and later (bfloat16).
size_t module_of(const ElementType& type) { return type.sm80 ? 1 : 0; }

std::vector<std::string> module_sources() {
  std::vector<std::string> modules = {".version 7.0\n.target sm_70\n.address_size 64\n",
                                      ".version 7.0\n.target sm_80\n.address_size 64\n"};
  for (const KernelKind& kind : kKinds) {
    for (const ElementType& type : kTypes) modules[module_of(type)] += kernel_source(kind, type);
  }
  return modules;
}

constexpr size_t kTypeCount = sizeof kTypes / sizeof kTypes[0];
constexpr size_t kKindCount = sizeof kKinds / sizeof kKinds[0];

// dtype's index in kTypes, or -1.
int type_index(at::ScalarType dtype) {
  for (size_t t = 0; t < kTypeCount; ++t) {
    if (kTypes[t].dtype == dtype) return static_cast<int>(t);
  }
  return -1;
}

constexpr int kMaxDevices = 64;

struct DeviceKernels {
  bool loaded = false;  // tried: the functions below are null when the driver refused a module
  void* functions[kKindCount][kTypeCount] = {};  // [kind][element type], kKinds' and kTypes' order
};

std::mutex loading;
DeviceKernels kernels[kMaxDevices];

// The function for this kind and element type on `device`, or null: never loaded here, since a capture is running
// (load_range_kernels ran before it began).
void* function_for(RangeKernel kind, at::ScalarType dtype, int32_t device) {
  const int type = type_index(dtype);
  if (device < 0 || device >= kMaxDevices || type < 0) return nullptr;
  std::lock_guard<std::mutex> hold(loading);
  return kernels[device].functions[kind == RangeKernel::kLinspace][type];
}

}  // namespace

std::vector<std::string> range_kernels_ptx() { return module_sources(); }

at::ScalarType range_operand_dtype(RangeKernel kind, at::ScalarType dtype) {
  const bool reduced_type = dtype == at::kHalf || dtype == at::kBFloat16;
  return reduced_type && kind == RangeKernel::kArange ? at::kFloat : dtype;
}

void load_range_kernels(int32_t device) {
  if (device < 0 || device >= kMaxDevices || driver.module_load_data == nullptr) return;
  std::lock_guard<std::mutex> hold(loading);
  DeviceKernels& d = kernels[device];
  if (d.loaded) return;
  d.loaded = true;
  const std::vector<std::string> sources = module_sources();
  for (size_t m = 0; m < sources.size(); ++m) {
    void* module = nullptr;
    if (driver.module_load_data(&module, sources[m].c_str()) != 0) continue;  // bfloat16's before sm_80
    for (size_t k = 0; k < kKindCount; ++k) {
      for (size_t t = 0; t < kTypeCount; ++t) {
        if (module_of(kTypes[t]) != m) continue;
        const std::string name = std::string("trident_") + kKinds[k].name + "_" + kTypes[t].name;  // as kEntry names it
        void* function = nullptr;
        if (driver.module_get_function(&function, module, name.c_str()) == 0) d.functions[k][t] = function;
      }
    }
  }
}

bool range_kernel_ready(RangeKernel kind, at::ScalarType dtype, int32_t device) {
  return function_for(kind, dtype, device) != nullptr;
}

bool launch_range_kernel(RangeKernel kind, const at::Tensor& out, const at::Tensor& first, const at::Tensor& second,
                         CUstream stream) {
  const at::ScalarType dtype = out.scalar_type(), operands = range_operand_dtype(kind, dtype);
  if (!out.is_contiguous() || first.scalar_type() != operands || second.scalar_type() != operands) return false;
  void* function = function_for(kind, dtype, out.get_device());
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
