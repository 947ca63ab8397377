/*
 * graphs/scalars.cpp — host scalars that change every call (the position), written into a graph by memset nodes
 * that a replay patches, instead of diverging.
 *
 * An ATen kernel takes its scalar operands by parameter, which no patch may follow (the kernel's parameters are
 * not Trident's), so an opaque step whose scalar changes diverged on every call. Two kinds of operators are
 * followed instead; the first replay of each recording is proven against the direct run like every other
 * (graphs/recorder.py).
 *
 * Fills. A decode step often builds a small device tensor from the position: `torch.full((batch,), pos + 1)`
 * for the sequence lengths, `torch.tensor([0, pos + 1])` for cumulative lengths (a full per element, then a
 * cat). Every element gets `value.to<scalar_t>()`, as ATen's fill kernel computes it, so the recording adds
 * memset nodes writing those bits right after the operator and disables the operator's own fill kernel in the
 * instantiated graph.
 *
 * Arithmetic and comparisons (`slots + pos % block_size` for a paged cache, `arange <= pos` for a causal mask,
 * `inv_freq * pos` for a rotary angle). The recording runs the operator's Tensor overload on a 0-dim stand-in of
 * the dtype the scalar promotes to, which a memset node writes. That gives the Scalar overload's bits for every
 * value where the operator computes in that dtype:
 *  - integral and bool results: integer arithmetic is exact whichever way the operand reaches the kernel;
 *  - float32 and float64 results (a float tensor, or an integral one with a float operand): ATen's CUDA kernels
 *    convert a CPU scalar straight to the op math type (`scalar_value<opmath_t>`, Loops.cuh), which for these
 *    dtypes is the dtype itself, the conversion the stand-in's bits come from (`Scalar::to<scalar_t>`). `mul`
 *    and the comparisons apply one operation to the two values. `add`, `sub` and `rsub` compute
 *    `a + alpha * b` (sub with -alpha): with alpha 1 the product is exact, so a contraction to FMA, which may
 *    differ between the kernel with a scalar parameter and the one with two inputs, cannot change the sum;
 *    another alpha is not followed.
 * Half and bfloat16 results are not followed: their op math is float32, so the Scalar overload keeps a float32
 * operand where the stand-in would round it to the tensor's dtype. Neither is `div` (a float scalar divisor
 * becomes a multiplication by its reciprocal).
 *
 * Ranges (`torch.arange(pos, pos + 1)` for cache positions, `torch.arange(0, (batch + 1) * n, n)` for cumulative
 * lengths, `torch.linspace(0, pos, n)`). An integral arange's elements are start + step * i, computed in int64 and
 * converted to its dtype as ATen's kernel computes them, so the recording makes the result from int64 stand-ins of
 * start and step that memset nodes write and a constant iota (addcmul, then a conversion). A floating arange or
 * linspace is made by Trident's own kernel (graphs/range_kernels.cpp) from stand-ins (start and step, float32 for a
 * half or bfloat16 arange as ATen's accumulate type; a linspace's start and end of its dtype): ATen contracts a
 * float32 or float64 element's product and sum into one FMA, and computes a half or bfloat16 linspace with a
 * rounding after every operation, which no ATen operator on stand-ins reproduces. An arange's end is followed
 * without a node: with start and step it decides the length, which must stay the recorded one (ATen's
 * RangeFactories formula); a linspace's length is its steps, an int that stays in the signature.
 *
 * A replay patches the memset nodes (cuGraphExecMemsetNodeSetParams) when a scalar converts to other bits, and
 * diverges when it does not convert or gives another length (the direct call then does what eager does: raise
 * for a fill that overflows or an arange whose bounds contradict its step).
 */
#include "graphs/recording.h"
#include "typed_ops_support.h"  // scalar(): a Scalar argument as operators get it

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>

#include <ATen/Dispatch.h>

namespace trident::graphs {

namespace {

struct FillOperator {
  const char* name;
  int64_t value_argument;
};

// The operators whose every result element is their value argument (schema order of arguments).
constexpr FillOperator kFillOperators[] = {
    {"aten::full", 1}, {"aten::full_like", 1}, {"aten::new_full", 2}, {"aten::fill_.Scalar", 1},
    {"aten::scalar_tensor", 0},
};

// The bits `value` has as an element of `dtype`, converted as ATen's fill kernel converts it; false when it does
// not convert (an overflow, which the direct call raises) or the dtype is not one a fill dispatches.
bool element_bits(at::ScalarType dtype, int64_t tag_word, int64_t value, uint64_t* bits) {
  const at::Scalar fill_value = scalar(tag_word, value);
  try {
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dtype, "trident_graph_fill", [&] {
      const scalar_t element = fill_value.to<scalar_t>();
      *bits = 0;
      std::memcpy(bits, &element, sizeof element);
    });
  } catch (...) {
    return false;
  }
  return true;
}

// What memset node k of an element `item` bytes wide writes: the element itself, or for 8-byte elements its low
// (k = 0) or high (k = 1) 4-byte word.
unsigned node_value(size_t item, int k, uint64_t bits) {
  switch (item) {
    case 1: return static_cast<unsigned>(bits & 0xffu);
    case 2: return static_cast<unsigned>(bits & 0xffffu);
    case 8: return static_cast<unsigned>(k == 0 ? bits & 0xffffffffu : bits >> 32);
    default: return static_cast<unsigned>(bits & 0xffffffffu);
  }
}

// Whether graph node `node` is ATen's own fill kernel (at::native::FillFunctor<T> among the template arguments of
// its mangled name, where at::native is usually a substitution, hence only the functor's own name): the
// memsets replace exactly its work. A library that overrides the operator (a Triton fill) may convert the value
// its own way; its kernel stays, and the step stays opaque.
bool is_atens_fill_kernel(CUgraphNode node) {
  KernelNodeParamsV2 params{};
  const char* name = nullptr;
  if (node == nullptr || driver.kernel_node_params(node, &params) != 0) return false;
  const CUresult named = params.v1.func != nullptr ? driver.function_name(&name, params.v1.func)
                                                  : driver.kernel_name(&name, params.kernel);
  return named == 0 && name != nullptr && std::strstr(name, "11FillFunctorI") != nullptr;
}

// Adds the memset nodes writing `bits` to `count` elements of `item` bytes at `dst` on `stream`: one memset
// of the element's width; 8-byte elements as two 4-byte words (memsets stop at 4 bytes): a strided memset of
// every element's low word, then of every high word (a single element: two plain 1-word memsets). false when the
// driver refused one; the step then stays opaque (its value in its signature, so it replays only that value),
// and a memset already added writes bits the operator writes too.
bool add_memsets(FollowedScalar* followed, uint64_t bits, uint64_t dst, size_t count, size_t item, CUstream stream) {
  const int nodes = item == 8 ? 2 : 1;
  for (int k = 0; k < nodes; ++k) {
    const unsigned word = node_value(item, k, bits);
    CUresult status = 1;
    switch (item) {
      case 1: status = driver.memset_d8(dst, static_cast<unsigned char>(word), count, stream); break;
      case 2: status = driver.memset_d16(dst, static_cast<unsigned short>(word), count, stream); break;
      case 4: status = driver.memset_d32(dst, word, count, stream); break;
      case 8:
        status = count == 1 ? driver.memset_d32(dst + 4 * k, word, 1, stream)
                            : driver.memset_d2d32(dst + 4 * k, 8, word, 1, count, stream);
        break;
      default: return false;
    }
    if (status != 0 || !last_node(stream, &followed->nodes[k]) ||
        driver.get_memset_params(followed->nodes[k], &followed->params[k]) != 0) {
      return false;
    }
  }
  return true;
}

enum class Arithmetic { kAdd, kSub, kRsub, kMul, kEq, kNe, kLt, kLe, kGt, kGe };

struct ArithmeticOperator {
  const char* name;
  Arithmetic op;
};

// Operators (self, other[, alpha]) whose Scalar overload equals the Tensor overload on a 0-dim `other` of the
// dtype the scalar promotes to, where that dtype is integral, bool, float32 or float64 (and alpha is 1 for a
// floating one; see the file's comment).
constexpr ArithmeticOperator kArithmeticOperators[] = {
    {"aten::add.Scalar", Arithmetic::kAdd}, {"aten::sub.Scalar", Arithmetic::kSub},
    {"aten::rsub.Scalar", Arithmetic::kRsub}, {"aten::mul.Scalar", Arithmetic::kMul},
    {"aten::eq.Scalar", Arithmetic::kEq}, {"aten::ne.Scalar", Arithmetic::kNe}, {"aten::lt.Scalar", Arithmetic::kLt},
    {"aten::le.Scalar", Arithmetic::kLe}, {"aten::gt.Scalar", Arithmetic::kGt}, {"aten::ge.Scalar", Arithmetic::kGe},
};

const ArithmeticOperator* arithmetic_operator(const char* name) {
  for (const ArithmeticOperator& op : kArithmeticOperators) {
    if (std::strcmp(name, op.name) == 0) return &op;
  }
  return nullptr;
}

at::Tensor apply(Arithmetic op, const at::Tensor& self, const at::Tensor& other, const at::Scalar& alpha) {
  switch (op) {
    case Arithmetic::kAdd: return at::add(self, other, alpha);
    case Arithmetic::kSub: return at::sub(self, other, alpha);
    case Arithmetic::kRsub: return at::rsub(self, other, alpha);
    case Arithmetic::kMul: return at::mul(self, other);
    case Arithmetic::kEq: return at::eq(self, other);
    case Arithmetic::kNe: return at::ne(self, other);
    case Arithmetic::kLt: return at::lt(self, other);
    case Arithmetic::kLe: return at::le(self, other);
    case Arithmetic::kGt: return at::gt(self, other);
    case Arithmetic::kGe: return at::ge(self, other);
  }
  return at::Tensor();
}

// The length aten::arange gives (start, end, step) for a result of `dtype`, as RangeFactories computes it (bounds
// checked in doubles; an exact integer formula for int64, doubles otherwise); false where the direct call raises
// instead (a zero step, a bound that is not finite, an end on the wrong side of start for the step's sign, a size
// out of range).
bool range_length(at::ScalarType dtype, const at::Scalar& start, const at::Scalar& end, const at::Scalar& step,
                  int64_t* length) {
  const double xstart = start.to<double>(), xend = end.to<double>(), xstep = step.to<double>();
  if (!(xstep > 0 || xstep < 0) || !std::isfinite(xstart) || !std::isfinite(xend) ||
      !((xstep > 0 && xend >= xstart) || (xstep < 0 && xend <= xstart))) {
    return false;
  }
  double size;
  if (dtype == at::kLong) {
    if (!start.isIntegral(false) || !end.isIntegral(false) || !step.isIntegral(false)) return false;
    const int64_t istart = start.to<int64_t>(), iend = end.to<int64_t>(), istep = step.to<int64_t>();
    // int64 arithmetic as ATen's (two's complement: computed unsigned, where an overflow is defined)
    const int64_t sign = (istep > 0) - (istep < 0);
    const auto span = static_cast<int64_t>(static_cast<uint64_t>(iend) - static_cast<uint64_t>(istart) +
                                           static_cast<uint64_t>(istep) - static_cast<uint64_t>(sign));
    if (span == std::numeric_limits<int64_t>::min() && istep == -1) return false;  // the division itself traps
    size = std::ceil(static_cast<double>(span / istep));
  } else {
    size = std::ceil((xend - xstart) / xstep);
  }
  if (!(size >= 0 && size <= static_cast<double>(std::numeric_limits<int64_t>::max()))) return false;
  *length = static_cast<int64_t>(size);
  return true;
}

// A followed scalar written into a fresh 0-dim stand-in of `dtype` by memset nodes on `stream`; false when the
// value does not fit `dtype` or the driver refused a node.
bool stand_in(FollowedScalar* followed, CUstream stream, const at::TensorOptions& options) {
  uint64_t bits = 0;
  if (!element_bits(followed->dtype, followed->tag_word, followed->value, &bits)) return false;
  followed->stand_in = at::empty({}, options.dtype(followed->dtype));
  const uint64_t address = reinterpret_cast<uintptr_t>(followed->stand_in.const_data_ptr());
  return add_memsets(followed, bits, address, 1, followed->stand_in.element_size(), stream);
}

FollowedScalar followed_argument(int64_t argument, int64_t tag_word, int64_t value, at::ScalarType dtype) {
  FollowedScalar followed;
  followed.argument = argument;
  followed.tag_word = tag_word;
  followed.value = value;
  followed.dtype = dtype;
  return followed;
}

FollowedScalar followed_argument(const int64_t* args, int64_t argument, at::ScalarType dtype) {
  return followed_argument(argument, args[2 * argument], args[2 * argument + 1], dtype);
}

// A followed scalar as the operator gets it.
at::Scalar scalar_of(const FollowedScalar& followed) { return scalar(followed.tag_word, followed.value); }

// An arange's step: its third followed scalar, or 1 for arange.start.
at::Scalar range_step(const Step& step) {
  return step.followed.size() > 2 ? scalar_of(step.followed[2]) : at::Scalar(int64_t{1});
}

void follow(Step* step, std::vector<FollowedScalar> followed) {
  for (const FollowedScalar& f : followed) step->followed_arguments |= uint64_t{1} << f.argument;
  step->followed = std::move(followed);
}

// A dtype as torch names it (bfloat16, half, float, ...), for explain.
std::string dtype_name(at::ScalarType dtype) {
  std::string name = c10::toString(dtype);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

constexpr const char* kNoRangeKernel = "Trident's range kernel could not be loaded or launched on this device";

bool is_int(int64_t tag_word) { return (tag_word & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_INT; }
bool is_number(int64_t tag_word) { return is_int(tag_word) || (tag_word & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_DOUBLE; }

struct RangeOperator {
  const char* name;
  int64_t scalars;  // its Scalar arguments, first in the schema: start, end[, step]
  int64_t options;  // where dtype, layout, device and pin_memory begin
  bool linspace;
};

constexpr RangeOperator kRangeOperators[] = {
    {"aten::arange.start", 2, 2, false}, {"aten::arange.start_step", 3, 3, false}, {"aten::linspace", 2, 3, true},
};

const RangeOperator* range_operator(const char* name) {
  for (const RangeOperator& op : kRangeOperators) {
    if (std::strcmp(name, op.name) == 0) return &op;
  }
  return nullptr;
}

}  // namespace

HostScalar host_scalar(const char* name, const int64_t* args, int64_t nargs) {
  if (!driver.memsets) return {};
  // A constant of the program stays in the signature (it never changes): its memset nodes would cost every launch
  // (0.7-1.5 us each on an H100, benchmarks/probes/graph_launch_cost.c) for nothing.
  const auto constant = [&](int64_t argument) { return (args[2 * argument] & TRIDENT_ARG_CONSTANT) != 0; };
  for (const FillOperator& op : kFillOperators) {
    if (std::strcmp(name, op.name) != 0 || op.value_argument >= nargs) continue;
    const int64_t tag = args[2 * op.value_argument] & TRIDENT_ARG_TAG_MASK;
    if ((tag == TRIDENT_TAG_INT || tag == TRIDENT_TAG_DOUBLE || tag == TRIDENT_TAG_BOOL) &&
        !constant(op.value_argument)) {
      return {HostScalar::kFill, uint64_t{1} << op.value_argument};
    }
  }
  if (arithmetic_operator(name) != nullptr && nargs >= 2 && (args[0] & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_TENSOR) {
    const int64_t tag = args[2] & TRIDENT_ARG_TAG_MASK;
    if ((tag == TRIDENT_TAG_INT || tag == TRIDENT_TAG_DOUBLE || tag == TRIDENT_TAG_BOOL) && !constant(1)) {
      return {HostScalar::kOperand, uint64_t{1} << 1};
    }
  }
  const RangeOperator* range = range_operator(name);
  if (range != nullptr && nargs >= range->options + 4) {
    bool numbers = true, constants = true;
    for (int64_t a = 0; a < range->scalars; ++a) {
      numbers = numbers && is_number(args[2 * a]);
      constants = constants && constant(a);
    }
    if (numbers && !constants) return {HostScalar::kRange, (uint64_t{1} << range->scalars) - 1};
  }
  return {};
}

bool record_operand(Step* step, CUstream stream, const char* name, const int64_t* args, int64_t nargs,
                    at::Tensor* result) {
  const ArithmeticOperator* op = arithmetic_operator(name);
  if (op == nullptr || args[1] == 0) return false;
  const at::Tensor& self = tensor_at(args[1]);
  const at::Scalar other = scalar(args[2], args[3]);
  if (!self.is_cuda()) return false;
  const at::ScalarType promoted = at::result_type(self, other);
  const at::Scalar alpha = nargs >= 3 ? scalar(args[4], args[5]) : at::Scalar(1);
  if (promoted == at::kHalf || promoted == at::kBFloat16) {
    step->unfollowed = "its " + dtype_name(promoted) +
                       " result keeps the operand in float32, which a stand-in of that dtype would round";
    return false;
  }
  const bool exact = at::isIntegralType(promoted, /*includeBool=*/true) ||
                     ((promoted == at::kFloat || promoted == at::kDouble) && alpha.equal(1));
  if (!exact) {
    step->unfollowed = "a float32 or float64 sum with an alpha other than 1, whose product two kernels may round "
                       "apart";
    return false;
  }
  FollowedScalar followed = followed_argument(args, 1, promoted);
  if (!stand_in(&followed, stream, self.options())) return false;  // the operand does not fit its dtype
  *result = apply(op->op, self, followed.stand_in, alpha);
  follow(step, {followed});
  return true;
}

bool record_range(Step* step, CUstream stream, int32_t device, const char* name, const int64_t* args, int64_t nargs,
                  at::Tensor* result) {
  const RangeOperator* op = range_operator(name);
  if (op == nullptr || nargs < op->options + 4) return false;
  const int64_t options_at = op->options;
  const int64_t dtype_tag = args[2 * options_at] & TRIDENT_ARG_TAG_MASK;
  const int64_t layout_tag = args[2 * (options_at + 1)] & TRIDENT_ARG_TAG_MASK;
  const int64_t device_tag = args[2 * (options_at + 2)] & TRIDENT_ARG_TAG_MASK;
  const int64_t device_code = args[2 * (options_at + 2) + 1];
  bool ints = true;
  for (int64_t a = 0; a < op->scalars; ++a) ints = ints && is_int(args[2 * a]);
  // No dtype: int64 for an arange of ints, the default dtype otherwise, as eager's factories choose.
  const at::ScalarType dtype = dtype_tag == TRIDENT_TAG_INT ? static_cast<at::ScalarType>(args[2 * options_at + 1])
                               : ints && !op->linspace   ? at::kLong
                                                         : c10::typeMetaToScalarType(c10::get_default_dtype());
  if (dtype_tag != TRIDENT_TAG_INT && dtype_tag != TRIDENT_TAG_NONE) return false;
  if (layout_tag == TRIDENT_TAG_INT ? args[2 * (options_at + 1) + 1] != static_cast<int64_t>(at::kStrided)
                                    : layout_tag != TRIDENT_TAG_NONE) {
    return false;
  }
  const int64_t device_index = device_code & TRIDENT_DEVICE_CODE_INDEX_MASK;
  if (device_tag != TRIDENT_TAG_DEVICE ||
      (device_code >> TRIDENT_DEVICE_CODE_TYPE_SHIFT) != static_cast<int64_t>(c10::DeviceType::CUDA) ||
      (device_index != TRIDENT_DEVICE_CODE_NO_INDEX && device_index != device)) {
    return false;
  }
  // An integral arange of ints is made by ATen's operators from int64 stand-ins; a floating arange or linspace by
  // Trident's own kernel from stand-ins of the dtype its operands take (range_operand_dtype).
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/false);
  const RangeKernel kernel = op->linspace ? RangeKernel::kLinspace : RangeKernel::kArange;
  if (integral ? op->linspace || !ints : !at::isFloatingType(dtype)) {
    step->unfollowed = std::string(op->linspace ? "a linspace" : "an arange") + " of " + dtype_name(dtype) +
                       (integral ? " with float bounds" : "") +
                       " (Trident follows integral aranges of ints, and floating ranges)";
    return false;
  }
  if (!integral && !range_kernel_ready(kernel, dtype, device)) {
    step->unfollowed = kNoRangeKernel;
    return false;
  }
  const at::ScalarType operands = integral ? at::kLong : range_operand_dtype(kernel, dtype);
  std::vector<FollowedScalar> followed;
  for (int64_t a = 0; a < op->scalars; ++a) followed.push_back(followed_argument(args, a, operands));
  const at::TensorOptions options = at::TensorOptions().device(at::kCUDA, device);
  at::Tensor values;
  if (op->linspace) {
    // Its steps stay in the signature: a replay never changes the length. 0 or 1 steps launch no range kernel.
    const int64_t steps = args[2 * 2 + 1];
    if (!is_int(args[2 * 2]) || steps < 2 || !stand_in(&followed[0], stream, options) ||
        !stand_in(&followed[1], stream, options)) {
      return false;
    }
    values = at::empty({steps}, options.dtype(dtype));
    if (!launch_range_kernel(RangeKernel::kLinspace, values, followed[0].stand_in, followed[1].stand_in, stream)) {
      step->unfollowed = kNoRangeKernel;
      return false;
    }
    *result = values;
    follow(step, std::move(followed));
    return true;
  }
  const bool with_step = op->scalars > 2;
  int64_t length = 0;
  const at::Scalar step_value = with_step ? scalar_of(followed[2]) : at::Scalar(int64_t{1});
  if (!range_length(dtype, scalar_of(followed[0]), scalar_of(followed[1]), step_value, &length) ||
      !stand_in(&followed[0], stream, options) || (with_step && !stand_in(&followed[2], stream, options))) {
    return false;
  }
  if (integral) {
    const at::Tensor iota = at::arange(length, options.dtype(at::kLong));
    values = with_step ? at::addcmul(followed[0].stand_in, iota, followed[2].stand_in)
                       : at::add(iota, followed[0].stand_in);
    if (dtype != at::kLong) values = values.to(dtype);
  } else {
    const at::Tensor unit_step = with_step ? followed[2].stand_in : at::ones({}, options.dtype(operands));
    values = at::empty({length}, options.dtype(dtype));
    if (!launch_range_kernel(RangeKernel::kArange, values, followed[0].stand_in, unit_step, stream)) {
      step->unfollowed = kNoRangeKernel;
      return false;
    }
  }
  *result = values;
  follow(step, std::move(followed));
  step->range = {length, dtype};
  return true;
}

bool record_fill(Step* step, CUstream stream, const at::Tensor& result, int64_t argument, int64_t tag_word,
                 int64_t value, CUgraphNode fill_kernel) {
  if (!result.defined() || !result.is_cuda() || !result.is_contiguous() || result.numel() == 0) return false;
  if (!is_atens_fill_kernel(fill_kernel)) {
    step->unfollowed = "its fill kernel is not ATen's (a library's kernel may convert the value its own way)";
    return false;
  }
  const size_t count = static_cast<size_t>(result.numel()), item = result.element_size();
  FollowedScalar followed = followed_argument(argument, tag_word, value, result.scalar_type());
  uint64_t bits = 0;
  if (!element_bits(followed.dtype, tag_word, value, &bits)) return false;
  const uint64_t address = reinterpret_cast<uintptr_t>(result.const_data_ptr());
  if (!add_memsets(&followed, bits, address, count, item, stream)) return false;
  step->superseded_fill = fill_kernel;
  follow(step, {followed});
  return true;
}

void take_followed(Step* step, int64_t argument, int64_t tag_word, int64_t value) {
  for (FollowedScalar& followed : step->followed) {
    if (followed.argument != argument) continue;
    followed.tag_word = tag_word;
    followed.value = value;
  }
}

bool replay_followed_scalars(Recording* rec, Step* step) {
  const FollowedRange& range = step->range;
  if (range.length >= 0) {
    int64_t length = 0;
    if (!range_length(range.dtype, scalar_of(step->followed[0]), scalar_of(step->followed[1]), range_step(*step),
                      &length) ||
        length != range.length) {
      return false;
    }
  }
  CUcontext context = nullptr;
  for (FollowedScalar& followed : step->followed) {
    if (followed.nodes[0] == nullptr) continue;
    uint64_t bits = 0;
    if (!element_bits(followed.dtype, followed.tag_word, followed.value, &bits)) return false;
    // Each node is compared with what it writes now (its parameters), so a patch the driver refused half-way
    // leaves nothing stale: the next call compares again.
    const size_t item = c10::elementSize(followed.dtype);
    for (int k = 0; k < 2 && followed.nodes[k] != nullptr; ++k) {
      MemsetParams params = followed.params[k];
      params.value = node_value(item, k, bits);
      if (params.value == followed.params[k].value) continue;
      if (context == nullptr && !trident::current_cuda_context(&context)) return false;
      if (driver.set_memset_params(rec->exec, followed.nodes[k], &params, context) != 0) return false;
      followed.params[k] = params;
      ++rec->patched_nodes;
    }
  }
  return true;
}

void disable_superseded_fills(Recording* rec) {
  for (const Step& step : *rec->steps) {
    // Failing to disable one leaves it running before its memsets: slower, not wrong.
    if (step.superseded_fill != nullptr) driver.set_node_enabled(rec->exec, step.superseded_fill, 0);
  }
}

}  // namespace trident::graphs
