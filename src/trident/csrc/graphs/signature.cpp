/*
 * graphs/signature.cpp — what an opaque step's work depends on besides memory contents: the signature a recording
 * keeps of its inputs and a replay compares (tensor addresses, layouts and dtypes, scalars, 0-dim CPU tensors by
 * value), why two differ (for explain), and the bytes a tensor reaches (what staging copies, what a result covers).
 */
#include "graphs/recording.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace trident::graphs {

namespace {

// Builds a signature (Out::word appends) or compares one with a recorded signature word by word (no writes: this
// runs for every opaque step of every replay).
struct Builder {
  std::vector<int64_t>* out;
  void word(int64_t w) { out->push_back(w); }
};
struct Comparer {
  const std::vector<int64_t>& recorded;
  size_t at = 0;
  bool same = true;
  void word(int64_t w) {
    same = same && at < recorded.size() && recorded[at] == w;
    ++at;
  }
};

// The signature of one tensor: what an operator's work depends on besides memory contents. false: a tensor a
// graph cannot stand for (a CPU tensor with more than one element is read by the host when the op runs).
template <typename Out>
bool tensor_signature(const at::Tensor& t, bool without_address, Out& out) {
  if (!t.defined()) {
    out.word(-1);
    return true;
  }
  out.word(static_cast<int64_t>(t.scalar_type()));
  if (!t.is_cuda()) {
    if (t.dim() != 0 || t.device().type() != c10::DeviceType::CPU) return false;
    int64_t bits = 0;
    std::memcpy(&bits, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof bits));
    out.word(bits);
    return true;
  }
  out.word(t.device().index());
  out.word(without_address ? 0 : reinterpret_cast<intptr_t>(t.const_data_ptr()));
  out.word(t.dim());
  for (int64_t s : t.sizes()) out.word(s);
  for (int64_t s : t.strides()) out.word(s);
  return true;
}

// A double argument's value word (its bits), as explain prints it.
std::string double_text(int64_t bits) {
  std::ostringstream text;
  text << std::setprecision(17) << as_double(bits);
  return text.str();
}

// Walks the staged list items of a FreeInputs alongside the arguments, which come in the same order: one
// signature is one pass over both.
struct FreeItems {
  const std::vector<TensorArgument>* items;
  size_t at = 0;
  bool contains(int64_t argument, int64_t item) {
    if (items == nullptr) return false;
    while (at < items->size() && ((*items)[at].argument < argument ||
                                  ((*items)[at].argument == argument && (*items)[at].item < item))) {
      ++at;
    }
    return at < items->size() && (*items)[at].argument == argument && (*items)[at].item == item;
  }
};

// The words of argument `i`. A list's length rides in its tag word, so a list of another length differs there.
template <typename Out>
bool write_argument(const int64_t* args, int64_t i, const FreeInputs& free, FreeItems& free_items, Out& out) {
  const int64_t tag_word = args[2 * i], value = args[2 * i + 1];
  const int64_t tag = tag_word & TRIDENT_ARG_TAG_MASK;
  const bool free_argument = i < 64 && (free.arguments >> i & 1);
  out.word(tag_word);
  switch (tag) {
    case TRIDENT_TAG_TENSOR:
      if (value == 0) {
        out.word(-1);
        return true;
      }
      return tensor_signature(tensor_at(value), free_argument, out);
    case TRIDENT_TAG_TENSOR_LIST:
    case TRIDENT_TAG_OPT_TENSOR_LIST: {
      const auto* items = reinterpret_cast<const int64_t*>(value);
      for (int64_t k = 0; k < (tag_word >> TRIDENT_ARG_LENGTH_SHIFT); ++k) {
        if (items[k] == 0) {
          out.word(-1);
        } else if (!tensor_signature(tensor_at(items[k]), free_items.contains(i, k), out)) {
          return false;
        }
      }
      return true;
    }
    case TRIDENT_TAG_INT_LIST: {
      const auto* items = reinterpret_cast<const int64_t*>(value);
      for (int64_t k = 0; k < (tag_word >> TRIDENT_ARG_LENGTH_SHIFT); ++k) out.word(items[k]);
      return true;
    }
    default:  // NONE, INT, DOUBLE, BOOL, DEVICE, and STRING (a constant of the compiled code: its address)
      out.word(free_argument ? 0 : value);
      return true;
  }
}

template <typename Out>
bool write_signature(const int64_t* args, int64_t nargs, const FreeInputs& free, Out& out) {
  FreeItems free_items{free.items};
  for (int64_t i = 0; i < nargs; ++i) {
    if (!write_argument(args, i, free, free_items, out)) return false;
  }
  return true;
}

// How one tensor's signature `one` differs from the recorded words at `at`, for explain. A CUDA tensor's signature
// is dtype, device, address, then its layout (tensor_signature): only the address differing is a tensor that moved.
std::string tensor_difference(const std::vector<int64_t>& one, const std::vector<int64_t>& recorded, size_t at) {
  const bool moved = one.size() > 3 && at + one.size() <= recorded.size() &&
                     std::equal(one.begin(), one.begin() + 2, recorded.begin() + at) &&
                     std::equal(one.begin() + 3, one.end(), recorded.begin() + at + 3);
  return moved ? " moved (a tensor at another address)" : " differs (its dtype, device or layout, or it is None)";
}

// Why list argument `i`, whose words differ from the recorded ones from `at` on, differs: its length, or its first
// item that differs.
std::string list_difference(const int64_t* args, int64_t i, const FreeInputs& free,
                            const std::vector<int64_t>& recorded, size_t at, const std::string& which) {
  const int64_t tag_word = args[2 * i];
  const int64_t length = tag_word >> TRIDENT_ARG_LENGTH_SHIFT;
  if (at >= recorded.size() || recorded[at] != tag_word) {
    const bool a_list =
        at < recorded.size() && (recorded[at] & TRIDENT_ARG_TAG_MASK) == (tag_word & TRIDENT_ARG_TAG_MASK);
    return which + (a_list ? " is a list of " + std::to_string(length) + " tensor(s), recorded " +
                                 std::to_string(recorded[at] >> TRIDENT_ARG_LENGTH_SHIFT)
                           : " differs (its type)");
  }
  ++at;
  const auto* items = reinterpret_cast<const int64_t*>(args[2 * i + 1]);
  FreeItems free_items{free.items};
  std::vector<int64_t> one;
  for (int64_t k = 0; k < length; ++k) {
    one.clear();
    Builder builder{&one};
    if (items[k] == 0) {
      builder.word(-1);
    } else {
      tensor_signature(tensor_at(items[k]), free_items.contains(i, k), builder);
    }
    if (at + one.size() > recorded.size() || !std::equal(one.begin(), one.end(), recorded.begin() + at)) {
      return which + ", item " + std::to_string(k) + tensor_difference(one, recorded, at);
    }
    at += one.size();
  }
  return which + " differs";
}

}  // namespace

bool signature(const int64_t* args, int64_t nargs, const FreeInputs& free, std::vector<int64_t>* out) {
  out->clear();
  Builder builder{out};
  return write_signature(args, nargs, free, builder);
}

bool same_signature(const std::vector<int64_t>& recorded, const int64_t* args, int64_t nargs,
                    const FreeInputs& free) {
  Comparer comparer{recorded};
  return write_signature(args, nargs, free, comparer) && comparer.same && comparer.at == recorded.size();
}

std::string difference(const Step& step, const int64_t* args, int64_t nargs, const FreeInputs& free) {
  std::vector<int64_t> one;
  size_t at = 0;
  const std::vector<int64_t>& recorded = step.signature;
  FreeItems free_items{free.items};
  for (int64_t i = 0; i < nargs; ++i) {
    const std::string which = "argument " + std::to_string(i) + " of " + step.name;
    one.clear();
    Builder builder{&one};
    if (!write_argument(args, i, free, free_items, builder)) return which + " is or holds a CPU tensor";
    const bool same = at + one.size() <= recorded.size() && std::equal(one.begin(), one.end(), recorded.begin() + at);
    if (!same) {
      const int64_t tag = args[2 * i] & TRIDENT_ARG_TAG_MASK;
      if (tag == TRIDENT_TAG_TENSOR_LIST || tag == TRIDENT_TAG_OPT_TENSOR_LIST) {
        return list_difference(args, i, free, recorded, at, which);
      }
      if (tag == TRIDENT_TAG_TENSOR && at < recorded.size() && recorded[at] == one[0]) {
        const std::vector<int64_t> tensor(one.begin() + 1, one.end());  // without the tag word
        return which + tensor_difference(tensor, recorded, at + 1);
      }
      if ((tag == TRIDENT_TAG_INT || tag == TRIDENT_TAG_BOOL) && one.size() == 2 && at + 2 <= recorded.size() &&
          recorded[at] == one[0]) {
        return which + " is " + std::to_string(one[1]) + ", recorded " + std::to_string(recorded[at + 1]);
      }
      if (tag == TRIDENT_TAG_DOUBLE && one.size() == 2 && at + 2 <= recorded.size() && recorded[at] == one[0]) {
        return which + " is " + double_text(one[1]) + ", recorded " + double_text(recorded[at + 1]);
      }
      return which + " differs (its type, dtype, value or layout)";
    }
    at += one.size();
  }
  return step.name + " has other inputs than recorded";
}

void for_each_tensor(const int64_t* args, int64_t nargs,
                     const std::function<void(int64_t, int64_t, const at::Tensor&)>& f) {
  for (int64_t i = 0; i < nargs; ++i) {
    const int64_t tag_word = args[2 * i], value = args[2 * i + 1];
    const int64_t tag = tag_word & TRIDENT_ARG_TAG_MASK;
    if (tag == TRIDENT_TAG_TENSOR && value != 0) {
      f(i, -1, tensor_at(value));
    } else if (tag == TRIDENT_TAG_TENSOR_LIST || tag == TRIDENT_TAG_OPT_TENSOR_LIST) {
      const auto* items = reinterpret_cast<const int64_t*>(value);
      for (int64_t k = 0; k < (tag_word >> TRIDENT_ARG_LENGTH_SHIFT); ++k) {
        if (items[k] != 0) f(i, k, tensor_at(items[k]));
      }
    }
  }
}

const at::Tensor* tensor_argument(const int64_t* args, int64_t nargs, TensorArgument where) {
  if (where.argument < 0 || where.argument >= nargs) return nullptr;
  const int64_t tag_word = args[2 * where.argument], value = args[2 * where.argument + 1];
  const int64_t tag = tag_word & TRIDENT_ARG_TAG_MASK;
  if (where.item < 0) return tag == TRIDENT_TAG_TENSOR && value != 0 ? &tensor_at(value) : nullptr;
  if ((tag != TRIDENT_TAG_TENSOR_LIST && tag != TRIDENT_TAG_OPT_TENSOR_LIST) ||
      where.item >= (tag_word >> TRIDENT_ARG_LENGTH_SHIFT)) {
    return nullptr;
  }
  const int64_t item = reinterpret_cast<const int64_t*>(value)[where.item];
  return item != 0 ? &tensor_at(item) : nullptr;
}

void byte_span(const at::Tensor& t, int64_t* begin, int64_t* end) {
  const int64_t item = static_cast<int64_t>(t.element_size());
  *begin = t.storage_offset() * item;
  *end = *begin;
  if (t.numel() == 0) return;
  int64_t last = 0;  // the offset of the last element, in elements (strides of a result are not negative)
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  *end = *begin + (last + 1) * item;
}

}  // namespace trident::graphs
