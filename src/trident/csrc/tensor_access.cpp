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
#include "graphs/replay.h"

#include <ATen/PythonTorchFunctionTLS.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/PyInterpreter.h>
#include <torch/csrc/autograd/python_variable.h>

// The header's codes for torch's enums are torch's own values (the runtime passes ScalarType, DeviceType and
// TorchFunctionDisabledState through as ints): a torch that renumbered one would fail to build here.
#define TRIDENT_SAME_CODE(code, value) static_assert((code) == static_cast<int>(value), #code " is not " #value)
TRIDENT_SAME_CODE(TRIDENT_DTYPE_UINT8, c10::ScalarType::Byte);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_INT8, c10::ScalarType::Char);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_INT16, c10::ScalarType::Short);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_INT32, c10::ScalarType::Int);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_INT64, c10::ScalarType::Long);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT16, c10::ScalarType::Half);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT32, c10::ScalarType::Float);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT64, c10::ScalarType::Double);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_COMPLEX32, c10::ScalarType::ComplexHalf);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_COMPLEX64, c10::ScalarType::ComplexFloat);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_COMPLEX128, c10::ScalarType::ComplexDouble);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_BOOL, c10::ScalarType::Bool);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_BFLOAT16, c10::ScalarType::BFloat16);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT8_E5M2, c10::ScalarType::Float8_e5m2);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT8_E4M3FN, c10::ScalarType::Float8_e4m3fn);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT8_E5M2FNUZ, c10::ScalarType::Float8_e5m2fnuz);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_FLOAT8_E4M3FNUZ, c10::ScalarType::Float8_e4m3fnuz);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_UINT16, c10::ScalarType::UInt16);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_UINT32, c10::ScalarType::UInt32);
TRIDENT_SAME_CODE(TRIDENT_DTYPE_UINT64, c10::ScalarType::UInt64);
TRIDENT_SAME_CODE(TRIDENT_DEVICE_TYPE_CPU, c10::DeviceType::CPU);
TRIDENT_SAME_CODE(TRIDENT_DEVICE_TYPE_CUDA, c10::DeviceType::CUDA);
TRIDENT_SAME_CODE(TRIDENT_DEVICE_TYPE_XPU, c10::DeviceType::XPU);
TRIDENT_SAME_CODE(TRIDENT_DEVICE_TYPE_MPS, c10::DeviceType::MPS);
TRIDENT_SAME_CODE(TRIDENT_DEVICE_TYPE_META, c10::DeviceType::Meta);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_STRIDED, c10::Layout::Strided);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_SPARSE_COO, c10::Layout::Sparse);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_SPARSE_CSR, c10::Layout::SparseCsr);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_SPARSE_CSC, c10::Layout::SparseCsc);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_SPARSE_BSR, c10::Layout::SparseBsr);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_SPARSE_BSC, c10::Layout::SparseBsc);
TRIDENT_SAME_CODE(TRIDENT_LAYOUT_JAGGED, c10::Layout::Jagged);
TRIDENT_SAME_CODE(TRIDENT_TORCH_FUNCTION_ENABLED, at::impl::TorchFunctionDisabledState::ENABLED);
TRIDENT_SAME_CODE(TRIDENT_TORCH_FUNCTION_SUBCLASSES_DISABLED, at::impl::TorchFunctionDisabledState::SUBCLASSES_DISABLED);
TRIDENT_SAME_CODE(TRIDENT_TORCH_FUNCTION_ALL_DISABLED, at::impl::TorchFunctionDisabledState::ALL_DISABLED);
#undef TRIDENT_SAME_CODE

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

TRIDENT_API int32_t trident_value_truth(int32_t status, PyObject* result) {
  int32_t truth = -1;
  if (status == TRIDENT_OK && result != nullptr && THPVariable_Check(result)) {
    try {
      const at::Tensor& t = THPVariable_Unpack(result);
      // A CUDA tensor's read syncs, as eager's does; while the stream is capturing (a user's CUDA graph) that
      // would end the capture, so the guard misses unread: libraries skip such reads while capturing, and the
      // call compiles what they do then.
      void* stream = nullptr;
      bool capturing = false;
      if (t.defined() && t.numel() == 1 &&
          !(t.is_cuda() && trident::current_cuda_stream(t.device().index(), &stream, &capturing) && capturing)) {
        truth = t.is_nonzero() ? 1 : 0;
      }
    } catch (...) {
      truth = -1;
    }
  }
  Py_XDECREF(result);
  if (truth < 0) PyErr_Clear();
  return truth;
}

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

TRIDENT_API int64_t trident_tensor_data_address(AtenTensorHandle t) {
  const at::Tensor& x = tensor_of(t);
  return x.has_storage() ? static_cast<int64_t>(reinterpret_cast<intptr_t>(x.const_data_ptr())) : 0;
}

TRIDENT_API PyObject* trident_wrap_tensor(AtenTensorHandle t) {
  // NULL is how trident_op_call reports a None/undefined return; it maps back to None.
  if (t == nullptr) Py_RETURN_NONE;
  // A replayed CUDA graph's result in graph memory goes to the caller as a fresh tensor (graphs/replay.h).
  if (trident::graphs::active != nullptr && !trident::graphs::result_for_caller(t, &t)) return nullptr;
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
    if (c10::GradMode::is_enabled()) state |= TRIDENT_STATE_GRAD_ENABLED;
    if (any_autocast_enabled()) state |= TRIDENT_STATE_AUTOCAST_ENABLED;
    if (c10::InferenceMode::is_enabled()) state |= TRIDENT_STATE_INFERENCE_MODE;
    // torch._C.DisableTorchFunction(Subclass): a TRIDENT_TORCH_FUNCTION_* (checked against ATen's enum below).
    state |= static_cast<int64_t>(at::impl::PythonTorchFunctionTLS::get_disabled_state())
             << TRIDENT_STATE_TORCH_FUNCTION_SHIFT;
    state |= static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype()))
             << TRIDENT_STATE_DEFAULT_DTYPE_SHIFT;
    // The dtype CPU and CUDA autocast cast to (0: that autocast is off): a capture bakes the casts in, so a
    // specialization captured under autocast(dtype=bfloat16) must not run under autocast(dtype=float16), nor
    // one captured under CUDA autocast for CPU tensors under CPU autocast.
    state |= autocast_code(c10::DeviceType::CPU) << TRIDENT_STATE_AUTOCAST_CPU_SHIFT;
    state |= autocast_code(c10::DeviceType::CUDA) << TRIDENT_STATE_AUTOCAST_CUDA_SHIFT;
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
