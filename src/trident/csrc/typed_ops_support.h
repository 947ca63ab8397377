/*
 * typed_ops_support.h — decoding helpers for the generated typed operator entries (typed_ops.cpp, written
 * at build time by trident/typed_ops.py). Each helper reads one (tag, value) argument pair as
 * trident_runtime.h defines them; the generator picks the helper from the operator's schema type.
 */
#ifndef TRIDENT_TYPED_OPS_SUPPORT_H
#define TRIDENT_TYPED_OPS_SUPPORT_H

#include "runtime_internal.h"

#include <cstring>
#include <optional>
#include <vector>

#include <ATen/Operators.h>
#include <ATen/core/List.h>
#include <c10/core/SymIntArrayRef.h>

namespace {

inline bool is_none(int64_t tag) { return (tag & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_NONE; }

// Handles point at tensors owned by a Python object or by the generated function; in-place operators
// mutate the TensorImpl, never the handle, so a non-const reference is safe.
inline at::Tensor& tensor(int64_t value) { return *reinterpret_cast<at::Tensor*>(value); }

// Tensor?: an explicit None or a NULL handle is absent.
inline std::optional<at::Tensor> opt_tensor(int64_t tag, int64_t value) {
  if (is_none(tag) || value == 0) return std::nullopt;
  return tensor(value);
}

using trident::as_double;

// Scalar: the tag keeps Python's int / float / bool distinction, which decides type promotion.
inline at::Scalar scalar(int64_t tag, int64_t value) {
  switch (tag & TRIDENT_ARG_TAG_MASK) {
    case TRIDENT_TAG_DOUBLE: return at::Scalar(as_double(value));
    case TRIDENT_TAG_BOOL: return at::Scalar(value != 0);
    default: return at::Scalar(value);
  }
}

inline at::IntArrayRef ints(int64_t tag, int64_t value) {
  return at::IntArrayRef(reinterpret_cast<const int64_t*>(value), static_cast<size_t>(tag >> TRIDENT_ARG_LENGTH_SHIFT));
}

inline std::vector<at::Tensor> tensors(int64_t tag, int64_t value) {
  const auto* items = reinterpret_cast<const int64_t*>(value);
  std::vector<at::Tensor> list;
  const int64_t length = tag >> TRIDENT_ARG_LENGTH_SHIFT;
  list.reserve(length);
  for (int64_t i = 0; i < length; ++i) list.push_back(tensor(items[i]));
  return list;
}

inline c10::List<std::optional<at::Tensor>> optional_tensors(int64_t tag, int64_t value) {
  const auto* items = reinterpret_cast<const int64_t*>(value);
  c10::List<std::optional<at::Tensor>> list;
  const int64_t length = tag >> TRIDENT_ARG_LENGTH_SHIFT;
  list.reserve(length);
  for (int64_t i = 0; i < length; ++i) list.push_back(opt_tensor(TRIDENT_TAG_TENSOR, items[i]));
  return list;
}

inline at::Device device(int64_t value) {
  const int64_t index = value & TRIDENT_DEVICE_CODE_INDEX_MASK;
  return at::Device(static_cast<c10::DeviceType>(value >> TRIDENT_DEVICE_CODE_TYPE_SHIFT),
                    static_cast<c10::DeviceIndex>(index == TRIDENT_DEVICE_CODE_NO_INDEX ? -1 : index));
}

inline AtenTensorHandle own(at::Tensor t) {
  if (!t.defined()) return nullptr;
  return reinterpret_cast<AtenTensorHandle>(new at::Tensor(std::move(t)));
}

}  // namespace

#endif /* TRIDENT_TYPED_OPS_SUPPORT_H */
