/*
 * graph_fills.cpp — operators that fill a tensor with a host scalar, followed by a replay instead of diverging.
 *
 * A decode step often builds a small device tensor from the position: `torch.full((batch,), pos + 1)` for the
 * sequence lengths, `torch.tensor([0, pos + 1])` for cumulative lengths (a full per element, then a cat). As an
 * opaque step the value is part of the signature, so every new position diverged and the call ran directly.
 * A fill's work is known, though: every element gets `value.to<scalar_t>()`, as ATen's fill kernel computes it.
 * So the recording adds memset nodes writing those bits right after the operator, disables the operator's own
 * fill kernel in the instantiated graph, and a replay patches the memset nodes' value
 * (cuGraphExecMemsetNodeSetParams) when the scalar converts to other bits. The first replay is proven against
 * the direct run like every other (runtime/cuda_graphs.py).
 */
#include "graph_recording.h"

#include <cstring>

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
  at::Scalar scalar;
  switch (tag_word & TRIDENT_ARG_TAG_MASK) {
    case TRIDENT_TAG_DOUBLE: {
      double d = 0;
      std::memcpy(&d, &value, sizeof d);
      scalar = at::Scalar(d);
      break;
    }
    case TRIDENT_TAG_BOOL: scalar = at::Scalar(value != 0); break;
    default: scalar = at::Scalar(value);
  }
  try {
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dtype, "trident_graph_fill", [&] {
      const scalar_t element = scalar.to<scalar_t>();
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

}  // namespace

int64_t fill_argument(const char* name, const int64_t* args, int64_t nargs) {
  if (!driver.fills) return -1;
  for (const FillOperator& op : kFillOperators) {
    if (std::strcmp(name, op.name) != 0 || op.value_argument >= nargs) continue;
    const int64_t tag = args[2 * op.value_argument] & TRIDENT_ARG_TAG_MASK;
    if (tag == TRIDENT_TAG_INT || tag == TRIDENT_TAG_DOUBLE || tag == TRIDENT_TAG_BOOL) return op.value_argument;
  }
  return -1;
}

bool record_fill(Step* step, CUstream stream, const at::Tensor& result, int64_t argument, int64_t tag_word,
                 int64_t value, CUgraphNode fill_kernel) {
  if (!result.defined() || !result.is_cuda() || !result.is_contiguous() || result.numel() == 0 ||
      !is_atens_fill_kernel(fill_kernel)) {
    return false;
  }
  const size_t count = static_cast<size_t>(result.numel()), item = result.element_size();
  Fill fill;
  fill.argument = argument;
  fill.dtype = result.scalar_type();
  if (!element_bits(fill.dtype, tag_word, value, &fill.bits)) return false;
  const uint64_t dst = reinterpret_cast<uintptr_t>(result.const_data_ptr());
  // One memset of the element's width; 8-byte elements as two 4-byte words (memsets stop at 4 bytes): a strided
  // memset of every element's low word, then of every high word (a single element: two plain 1-word memsets).
  const int nodes = item == 8 ? 2 : 1;
  for (int k = 0; k < nodes; ++k) {
    const unsigned word = node_value(item, k, fill.bits);
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
    // The step stays opaque (its value in its signature, so it replays only that value); a memset already added
    // writes the bits the operator wrote.
    if (status != 0 || !last_node(stream, &fill.nodes[k]) ||
        driver.get_memset_params(fill.nodes[k], &fill.params[k]) != 0) {
      return false;
    }
  }
  fill.superseded = fill_kernel;
  step->fill = fill;
  return true;
}

bool replay_fill(Recording* rec, Step* step, int64_t tag_word, int64_t value) {
  Fill& fill = step->fill;
  uint64_t bits = 0;
  if (!element_bits(fill.dtype, tag_word, value, &bits)) return false;
  if (bits == fill.bits) return true;
  CUcontext context = nullptr;
  if (!trident::current_cuda_context(&context)) return false;
  const size_t item = c10::elementSize(fill.dtype);
  for (int k = 0; k < 2 && fill.nodes[k] != nullptr; ++k) {
    MemsetParams params = fill.params[k];
    params.value = node_value(item, k, bits);
    if (params.value == fill.params[k].value) continue;
    if (driver.set_memset_params(rec->exec, fill.nodes[k], &params, context) != 0) return false;
    fill.params[k] = params;
    ++rec->patched_nodes;
  }
  fill.bits = bits;
  return true;
}

void disable_superseded_fills(Recording* rec) {
  for (const Step& step : *rec->steps) {
    // Failing to disable one leaves it running before its memsets: slower, not wrong.
    if (step.fill.superseded != nullptr) driver.set_node_enabled(rec->exec, step.fill.superseded, 0);
  }
}

}  // namespace trident::graphs
