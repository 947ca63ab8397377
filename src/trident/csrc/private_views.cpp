/*
 * private_views.cpp — private views made without ATen's dispatcher (private_views.h says when and why).
 *
 * Each function computes the view's sizes, strides and storage offset as ATen's kernel does for the plain case
 * it accepts, and otherwise returns ATen's own result. The plain cases are kept narrow on purpose (a slice
 * inside its dimension, a select of an index in range, a view whose sizes ATen's own helpers infer), since any
 * case left to ATen is still exact; tests/runtime/test_private_views.py compares every function with ATen's
 * operator over many shapes and arguments, in range and out of it.
 */
#include "private_views.h"

#include "runtime_internal.h"

#include <atomic>
#include <typeinfo>

#include <ATen/ExpandUtils.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <torch/csrc/autograd/python_variable.h>

namespace trident::private_views {

namespace {

std::atomic<int64_t> direct{0}, by_aten{0};

// Keys whose views another layer makes (or that must see them): Python subclasses and modes, functorch,
// functionalization, and the lazy conjugate and negative bits.
constexpr c10::DispatchKeySet kNotPlain =
    c10::python_ks | c10::functorch_transforms_ks |
    c10::DispatchKeySet({c10::DispatchKey::Functionalize, c10::DispatchKey::ZeroTensor, c10::DispatchKey::Conjugate,
                         c10::DispatchKey::Negative});

// Whether the tensor has dimension names (torch before 2.13; later torch has no named tensors, nor has_names).
template <typename T>
auto named(const T& t, int) -> decltype(t.has_names()) {
  return t.has_names();
}
template <typename T>
bool named(const T&, long) {
  return false;
}

// A strided CPU or CUDA tensor of ATen's own TensorImpl (not a subclass: sparse, quantized, nested, wrappers),
// without names.
bool plain(const at::Tensor& self) {
  const c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (typeid(*impl) != typeid(c10::TensorImpl) || self.layout() != c10::kStrided) return false;
  const c10::DeviceType device = self.device().type();
  return (device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA) && !self.key_set().has_any(kNotPlain) &&
         !named(self, 0);
}

// The view ATen's kernel makes below ADInplaceOrView: a TensorImpl over the base's storage, with its key set and
// dtype, and this geometry.
at::Tensor make(const at::Tensor& self, at::IntArrayRef sizes, at::IntArrayRef strides, int64_t storage_offset) {
  at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(c10::TensorImpl::VIEW, c10::Storage(self.storage()),
                                                             self.key_set(), self.dtype());
  view.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides, storage_offset);
  direct.fetch_add(1, std::memory_order_relaxed);
  return view;
}

// dim wrapped into [0, ndim), as maybe_wrap_dim; false when out of range (ATen then raises).
bool wrap(int64_t dim, int64_t ndim, int64_t* out) {
  if (ndim <= 0 || dim < -ndim || dim >= ndim) return false;
  *out = dim < 0 ? dim + ndim : dim;
  return true;
}

template <typename Call>
at::Tensor through_aten(Call call) {
  by_aten.fetch_add(1, std::memory_order_relaxed);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return call();
}

}  // namespace

at::Tensor alias(const at::Tensor& self) {
  if (!plain(self)) return through_aten([&] { return at::_ops::alias::call(self); });
  return make(self, self.sizes(), self.strides(), self.storage_offset());
}

at::Tensor transpose(const at::Tensor& self, int64_t dim0, int64_t dim1) {
  int64_t a = 0, b = 0;
  if (!plain(self) || !wrap(dim0, self.dim(), &a) || !wrap(dim1, self.dim(), &b)) {
    return through_aten([&] { return at::_ops::transpose_int::call(self, dim0, dim1); });
  }
  at::DimVector sizes(self.sizes()), strides(self.strides());
  std::swap(sizes[a], sizes[b]);
  std::swap(strides[a], strides[b]);
  return make(self, sizes, strides, self.storage_offset());
}

at::Tensor t(const at::Tensor& self) {
  if (!plain(self) || self.dim() < 1 || self.dim() > 2) return through_aten([&] { return at::_ops::t::call(self); });
  return self.dim() == 1 ? private_views::alias(self) : private_views::transpose(self, 0, 1);
}

at::Tensor permute(const at::Tensor& self, at::IntArrayRef dims) {
  const int64_t ndim = self.dim();
  bool valid = plain(self) && static_cast<int64_t>(dims.size()) == ndim;
  at::DimVector sizes(ndim), strides(ndim);
  uint64_t seen = 0;
  for (int64_t i = 0; valid && i < ndim; ++i) {
    int64_t d = 0;
    valid = ndim <= 64 && wrap(dims[i], ndim, &d) && !(seen >> d & 1);
    if (!valid) break;
    seen |= uint64_t{1} << d;
    sizes[i] = self.size(d);
    strides[i] = self.stride(d);
  }
  if (!valid) return through_aten([&] { return at::_ops::permute::call(self, dims); });
  return make(self, sizes, strides, self.storage_offset());
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  if (plain(self)) {
    std::optional<at::DimVector> inferred;
    try {
      inferred = at::infer_size_dv(c10::asIntArrayRefUnchecked(size), self.numel());
    } catch (const c10::Error&) {
      // sizes that do not fit the tensor: ATen's view raises its own error below
    }
    if (inferred) {
      std::optional<at::DimVector> strides = at::detail::computeStride(self.sizes(), self.strides(), *inferred);
      if (strides) return make(self, *inferred, *strides, self.storage_offset());
    }
  }
  return through_aten([&] { return at::_ops::view::call(self, size); });
}

at::Tensor unsqueeze(const at::Tensor& self, int64_t dim) {
  int64_t d = 0;
  if (!plain(self) || !wrap(dim, self.dim() + 1, &d)) {
    return through_aten([&] { return at::_ops::unsqueeze::call(self, dim); });
  }
  at::DimVector sizes(self.sizes()), strides(self.strides());
  const int64_t stride = d >= self.dim() ? 1 : sizes[d] * strides[d];
  sizes.insert(sizes.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return make(self, sizes, strides, self.storage_offset());
}

at::Tensor squeeze_dim(const at::Tensor& self, int64_t dim) {
  int64_t d = 0;
  if (!plain(self) || !wrap(dim, self.dim(), &d)) {
    return through_aten([&] { return at::_ops::squeeze_dim::call(self, dim); });
  }
  at::DimVector sizes(self.sizes()), strides(self.strides());
  if (sizes[d] == 1) {  // a dimension of another size stays: the view has the base's geometry
    sizes.erase(sizes.begin() + d);
    strides.erase(strides.begin() + d);
  }
  return make(self, sizes, strides, self.storage_offset());
}

at::Tensor expand(const at::Tensor& self, c10::SymIntArrayRef size, bool implicit) {
  if (plain(self) && size.size() >= self.sizes().size()) {
    try {
      auto geometry =
          at::inferExpandGeometry_dimvector(self.sizes(), self.strides(), c10::asIntArrayRefUnchecked(size));
      return make(self, geometry.sizes, geometry.strides, self.storage_offset());
    } catch (const c10::Error&) {
      // a size the tensor does not expand to: ATen's expand raises its own error below
    }
  }
  return through_aten([&] { return at::_ops::expand::call(self, size, implicit); });
}

at::Tensor slice(const at::Tensor& self, int64_t dim, std::optional<c10::SymInt> start, std::optional<c10::SymInt> end,
                 c10::SymInt step) {
  int64_t d = 0;
  if (plain(self) && wrap(dim, self.dim(), &d)) {
    // Only a slice inside the dimension: from 0 <= begin <= size to begin <= finish (or past the end), step >= 1.
    const int64_t size = self.size(d);
    const int64_t by = step.expect_int();
    const int64_t begin = start ? start->expect_int() : 0;
    int64_t finish = end ? end->expect_int() : INT64_MAX;
    if (by >= 1 && begin >= 0 && begin <= size && finish >= begin) {
      finish = std::min(finish, size);
      at::DimVector sizes(self.sizes()), strides(self.strides());
      sizes[d] = (finish - begin + by - 1) / by;
      strides[d] *= by;
      return make(self, sizes, strides, self.storage_offset() + begin * self.stride(d));
    }
  }
  return through_aten([&] { return at::_ops::slice_Tensor::call(self, dim, start, end, step); });
}

at::Tensor select(const at::Tensor& self, int64_t dim, c10::SymInt index) {
  int64_t d = 0;
  if (plain(self) && wrap(dim, self.dim(), &d)) {
    const int64_t size = self.size(d);
    int64_t i = index.expect_int();
    if (i >= -size && i < size) {
      if (i < 0) i += size;
      at::DimVector sizes(self.sizes()), strides(self.strides());
      const int64_t offset = self.storage_offset() + i * strides[d];
      sizes.erase(sizes.begin() + d);
      strides.erase(strides.begin() + d);
      return make(self, sizes, strides, offset);
    }
  }
  return through_aten([&] { return at::_ops::select_int::call(self, dim, index); });
}

namespace {

// The Python arguments after (name, tensor), read as each function takes them; a bad one sets a Python error.
struct PyArgs {
  PyObject* tuple;
  PyObject* at(Py_ssize_t i) const { return PyTuple_GET_ITEM(tuple, 2 + i); }
  int64_t integer(Py_ssize_t i) const { return PyLong_AsLongLong(at(i)); }
  std::optional<c10::SymInt> optional(Py_ssize_t i) const {
    if (at(i) == Py_None) return std::nullopt;
    return c10::SymInt(integer(i));
  }
  std::vector<int64_t> ints(Py_ssize_t i) const {
    std::vector<int64_t> out;
    PyObject* items = PySequence_Fast(at(i), "private_view: expected a sequence of ints");
    if (items == nullptr) return out;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(items); ++k) {
      out.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, k)));
    }
    Py_DECREF(items);
    return out;
  }
};

struct PyFunction {
  const char* name;
  Py_ssize_t arity;
  at::Tensor (*call)(const at::Tensor&, const PyArgs&);
};
// Each entry reads its arguments (a bad one sets the Python error the caller checks) and calls the function.
using Py = const PyArgs;
const PyFunction kPyFunctions[] = {
    {"t", 0, [](const at::Tensor& x, Py&) { return private_views::t(x); }},
    {"alias", 0, [](const at::Tensor& x, Py&) { return private_views::alias(x); }},
    {"transpose", 2,
     [](const at::Tensor& x, Py& a) { return private_views::transpose(x, a.integer(0), a.integer(1)); }},
    {"permute", 1, [](const at::Tensor& x, Py& a) { return private_views::permute(x, a.ints(0)); }},
    {"view", 1, [](const at::Tensor& x, Py& a) { return private_views::view(x, c10::fromIntArrayRefSlow(a.ints(0))); }},
    {"unsqueeze", 1, [](const at::Tensor& x, Py& a) { return private_views::unsqueeze(x, a.integer(0)); }},
    {"squeeze_dim", 1, [](const at::Tensor& x, Py& a) { return private_views::squeeze_dim(x, a.integer(0)); }},
    {"expand", 1,
     [](const at::Tensor& x, Py& a) { return private_views::expand(x, c10::fromIntArrayRefSlow(a.ints(0)), false); }},
    {"slice", 4,
     [](const at::Tensor& x, Py& a) {
       return private_views::slice(x, a.integer(0), a.optional(1), a.optional(2), c10::SymInt(a.integer(3)));
     }},
    {"select", 2,
     [](const at::Tensor& x, Py& a) { return private_views::select(x, a.integer(0), c10::SymInt(a.integer(1))); }},
};

}  // namespace

PyObject* py_private_view(PyObject*, PyObject* args) {
  const Py_ssize_t n = PyTuple_GET_SIZE(args);
  if (n < 2 || !PyUnicode_Check(PyTuple_GET_ITEM(args, 0)) || !THPVariable_Check(PyTuple_GET_ITEM(args, 1))) {
    PyErr_SetString(PyExc_TypeError, "private_view(name, tensor, *args)");
    return nullptr;
  }
  const std::string name = PyUnicode_AsUTF8(PyTuple_GET_ITEM(args, 0));
  for (const PyFunction& f : kPyFunctions) {
    if (name != f.name || n != 2 + f.arity) continue;
    try {
      at::Tensor result = f.call(THPVariable_Unpack(PyTuple_GET_ITEM(args, 1)), PyArgs{args});
      if (PyErr_Occurred()) return nullptr;
      return THPVariable_Wrap(std::move(result));
    } catch (...) {
      trident::fail_with_current_exception();
      return trident::raise_last_error();
    }
  }
  PyErr_Format(PyExc_ValueError, "private_view: no function %s taking %zd argument(s)", name.c_str(), n - 2);
  return nullptr;
}

PyObject* py_private_view_counts(PyObject*, PyObject*) {
  return Py_BuildValue("(LL)", (long long)direct.load(std::memory_order_relaxed),
                       (long long)by_aten.load(std::memory_order_relaxed));
}

}  // namespace trident::private_views
