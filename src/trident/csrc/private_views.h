/*
 * private_views.h — the views compiled code makes of its own tensors (lowering/aliasing.py: private views),
 * built without ATen's dispatcher (internal; private_views.cpp).
 *
 * Below the autograd and ADInplaceOrView layers, ATen's view kernels for strided CPU and CUDA tensors compute a
 * size, stride and storage offset and wrap them in a new TensorImpl over the base's storage, with the base's
 * key set and dtype. Going through the dispatcher for that costs two dispatches per view (the op, then
 * as_strided), 0.4-0.8 us each on the H200 host, at 80-170 views per decode step. These functions make the same
 * TensorImpl directly when the base is a plain strided CPU or CUDA tensor and the arguments are valid; anything
 * else (another tensor type or device, names, conjugate or negative bits, an index out of range) goes to ATen's
 * own operator, which then behaves, and raises, as it always does. The parameters are what the generated typed
 * entries decode (typed_ops.py), so the fallback passes them on unchanged.
 */
#ifndef TRIDENT_PRIVATE_VIEWS_H
#define TRIDENT_PRIVATE_VIEWS_H

#include <Python.h>

#include <optional>

#include <ATen/ATen.h>
#include <c10/core/SymIntArrayRef.h>

namespace trident::private_views {

at::Tensor t(const at::Tensor& self);
at::Tensor transpose(const at::Tensor& self, int64_t dim0, int64_t dim1);
at::Tensor permute(const at::Tensor& self, at::IntArrayRef dims);
at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size);
at::Tensor unsqueeze(const at::Tensor& self, int64_t dim);
at::Tensor squeeze_dim(const at::Tensor& self, int64_t dim);
at::Tensor expand(const at::Tensor& self, c10::SymIntArrayRef size, bool implicit);
at::Tensor slice(const at::Tensor& self, int64_t dim, std::optional<c10::SymInt> start, std::optional<c10::SymInt> end,
                 c10::SymInt step);
at::Tensor select(const at::Tensor& self, int64_t dim, c10::SymInt index);
at::Tensor alias(const at::Tensor& self);

// The module's functions for tests and tools (module.cpp registers them):
//   private_view(name, tensor, *args) -> Tensor: function `name` above on these arguments, as compiled code calls it
//   private_view_counts() -> (made directly, made by ATen's operator) since the runtime loaded
PyObject* py_private_view(PyObject* module, PyObject* args);
PyObject* py_private_view_counts(PyObject* module, PyObject* unused);

}  // namespace trident::private_views

#endif /* TRIDENT_PRIVATE_VIEWS_H */
