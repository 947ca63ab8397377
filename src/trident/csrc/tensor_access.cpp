/*
 * tensor_access.cpp — tensors between Python and the C ABI, and the process state guards depend on.
 *
 * Python -> native: trident_read_tensor gives a guard every piece of tensor metadata in one call, straight
 * from the at::Tensor inside the Python object (THPVariable_Unpack), with no Python-level attribute lookups.
 * Native -> Python: trident_wrap_tensor returns the tensor's Python object (the existing one if it has one).
 * Only plain strided tensors read as tensors: subclasses, sparse/nested layouts and tensors that another
 * interpreter handles (Python dispatch, functorch, functionalization) read as "not a tensor", so the entry
 * misses and Python decides what to do with them.
 */
#include "runtime_internal.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>

namespace {

// Set once by the module's init(); compared by pointer on every read (exact type, no subclass walk).
PyTypeObject* tensor_type = nullptr;
PyTypeObject* parameter_type = nullptr;

// Tensors whose meaning is defined by something other than ATen's strided kernels. Their metadata may be
// a wrapper's, or reading it may call back into Python, so compiled code must never see them.
constexpr c10::DispatchKeySet kForeignKeys = c10::python_ks | c10::functorch_transforms_ks |
                                             c10::DispatchKeySet({c10::DispatchKey::Functionalize,
                                                                  c10::DispatchKey::ZeroTensor});

AtenTensorHandle handle_of(const at::Tensor& t) {
  // The handle is the at::Tensor inside the Python object: borrowed, valid while the object lives.
  return reinterpret_cast<AtenTensorHandle>(const_cast<at::Tensor*>(&t));
}

const at::Tensor& tensor_of(AtenTensorHandle t) { return *reinterpret_cast<const at::Tensor*>(t); }

bool any_autocast_enabled() {
  // Every device type autocast had a dispatch key for as of torch 2.4; is_autocast_available guards
  // against a type this torch build does not know, since is_autocast_enabled throws for those.
  static constexpr c10::DeviceType kDeviceTypes[] = {
      c10::DeviceType::CPU, c10::DeviceType::CUDA, c10::DeviceType::XPU, c10::DeviceType::IPU,
      c10::DeviceType::HPU, c10::DeviceType::XLA,  c10::DeviceType::MPS, c10::DeviceType::PrivateUse1};
  for (const c10::DeviceType device_type : kDeviceTypes) {
    if (at::autocast::is_autocast_available(device_type) && at::autocast::is_autocast_enabled(device_type)) {
      return true;
    }
  }
  return false;
}

// 1 + the ScalarType autocast casts to on this device type, or 0 when autocast is off there (guards.py
// autocast_code computes the same from Python).
int64_t autocast_code(c10::DeviceType device_type) {
  if (!at::autocast::is_autocast_available(device_type) || !at::autocast::is_autocast_enabled(device_type)) return 0;
  return 1 + static_cast<int64_t>(at::autocast::get_autocast_dtype(device_type));
}

}  // namespace

void trident::set_tensor_types(PyTypeObject* tensor, PyTypeObject* parameter) {
  tensor_type = tensor;
  parameter_type = parameter;
}

extern "C" {

TRIDENT_API int32_t trident_read_tensor(PyObject* obj, TridentTensorMeta* out) {
  // Runs for every tensor argument of every call (guards and the entry's structural key): keep it lean.
  PyTypeObject* const type = Py_TYPE(obj);
  int64_t type_tag;
  if (type == tensor_type) {
    type_tag = TRIDENT_TYPE_TENSOR;
  } else if (type == parameter_type) {
    type_tag = TRIDENT_TYPE_PARAMETER;
  } else {
    return 0;  // also the case before init(): both types are still NULL
  }
  try {
    const at::Tensor& t = THPVariable_Unpack(obj);
    if (!t.defined() || t.layout() != c10::kStrided || t.key_set().has_any(kForeignKeys)) return 0;
    const c10::Device device = t.device();
    TridentTensorMeta meta;
    meta.type_tag = type_tag;
    meta.dtype = static_cast<int64_t>(t.scalar_type());
    meta.device_type = static_cast<int64_t>(device.type());
    meta.device_index = device.index();
    meta.dim = t.dim();
    meta.storage_offset = t.storage_offset();
    // const_data_ptr: the mutable data_ptr() would materialize a copy-on-write storage as a side effect.
    // It throws for tensors without real storage data; that lands in the catch below (not a tensor).
    meta.data_ptr = static_cast<int64_t>(reinterpret_cast<intptr_t>(t.const_data_ptr()));
    meta.flags = (t.requires_grad() ? TRIDENT_FLAG_REQUIRES_GRAD : 0) | (t.is_conj() ? TRIDENT_FLAG_CONJ : 0) |
                 (t.is_neg() ? TRIDENT_FLAG_NEG : 0);
    meta.sizes = t.sizes().data();
    meta.strides = t.strides().data();
    meta.handle = handle_of(t);
    *out = meta;  // only now: on every "no" path the caller's struct stays untouched
    return 1;
  } catch (...) {
    return 0;
  }
}

TRIDENT_API AtenTensorHandle trident_tensor_handle(PyObject* obj) { return handle_of(THPVariable_Unpack(obj)); }

// The three accessors below run on tensors a guard already accepted, where sizes()/strides() cannot throw.
TRIDENT_API int64_t trident_tensor_size(AtenTensorHandle t, int64_t dim) { return tensor_of(t).sizes()[dim]; }

TRIDENT_API int64_t trident_tensor_stride(AtenTensorHandle t, int64_t dim) { return tensor_of(t).strides()[dim]; }

TRIDENT_API int64_t trident_tensor_storage_offset(AtenTensorHandle t) { return tensor_of(t).storage_offset(); }

TRIDENT_API PyObject* trident_wrap_tensor(AtenTensorHandle t) {
  // NULL is how trident_op_call reports a None/undefined return; it maps back to None.
  if (t == nullptr) Py_RETURN_NONE;
  try {
    return THPVariable_Wrap(tensor_of(t));
  } catch (python_error& e) {
    e.restore();
    return nullptr;
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "trident_wrap_tensor: unknown C++ exception");
    return nullptr;
  }
}

TRIDENT_API int64_t trident_global_state(void) {
  // Guards call this once per call: thread-local reads only, no allocation.
  try {
    int64_t state = 0;
    if (c10::GradMode::is_enabled()) state |= 1;
    if (any_autocast_enabled()) state |= 2;
    if (c10::InferenceMode::is_enabled()) state |= 4;
    // torch._C.DisableTorchFunction(Subclass): 0 enabled, 1 subclasses disabled, 2 all disabled (modes too).
    state |= static_cast<int64_t>(at::impl::PythonTorchFunctionTLS::get_disabled_state()) << 3;
    state |= static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())) << 8;
    // The dtype CPU and CUDA autocast cast to (0: that autocast is off): a capture bakes the casts in, so a
    // specialization captured under autocast(dtype=bfloat16) must not run under autocast(dtype=float16), nor
    // one captured under CUDA autocast for CPU tensors under CPU autocast.
    state |= autocast_code(c10::DeviceType::CPU) << 16;
    state |= autocast_code(c10::DeviceType::CUDA) << 24;
    return state;
  } catch (...) {
    // Cannot happen for the queries above; -1 matches no compiled state, so the call misses.
    return -1;
  }
}

TRIDENT_API int64_t trident_function_mode_count(void) { return at::impl::PythonTorchFunctionTLS::stack_len(); }

TRIDENT_API int32_t trident_function_mode_matches(int64_t index, PyObject* expected, PyObject* device) {
  if (index < 0 || index >= at::impl::PythonTorchFunctionTLS::stack_len()) return 0;
  PyObject* mode = at::impl::PythonTorchFunctionTLS::get_stack_at(index)->ptr(getPyInterpreter());
  if (mode == expected) return 1;
  if (device == nullptr || Py_TYPE(mode) != Py_TYPE(expected)) return 0;
  PyObject* actual = PyObject_GetAttrString(mode, "device");
  const int same = actual == nullptr ? -1 : PyObject_RichCompareBool(actual, device, Py_EQ);
  Py_XDECREF(actual);
  if (same < 0) PyErr_Clear();
  return same == 1;
}

}  // extern "C"

bool trident::tensor_data_address(AtenTensorHandle t, int64_t* out) {
  try {
    // The mutable pointer, as Triton's launcher takes it: a kernel may write through it.
    *out = static_cast<int64_t>(reinterpret_cast<intptr_t>(tensor_of(t).data_ptr()));
    return true;
  } catch (...) {
    return trident::fail_with_current_exception() == TRIDENT_OK;
  }
}
