/*
 * triton_launch.cpp — native launches of captured Triton kernels, and the TritonLaunch type behind them.
 *
 * One TritonLaunch object stands for one launch site of a compiled program. It holds the compiled variants
 * of its kernel that Triton built so far, each keyed by what Triton specializes a kernel on (16-byte
 * alignment of pointers, integers equal to 1, divisible by 16, or beyond 32 bits, autotune keys) and by the
 * CUDA context it was loaded in. Generated code calls trident_triton_launch with the launch's operands; the
 * key is computed from them natively and, on a match, the variant is launched with cuLaunchKernel on torch's
 * current stream. Anything else — no variant yet, a new alignment, a grid Triton would reject, a kernel
 * feature this launcher does not implement — goes to the Python fallback (Triton's own launcher), which
 * launches correctly and may register a new variant. The native path never guesses.
 *
 * The CUDA driver and torch's CUDA library are reached with dlopen when the first CUDA launch object is
 * made (init_cuda), so CPU-only machines load this runtime unchanged.
 *
 * Triton's launch ABI, the same in 3.6.0, 3.7.1, 3.8.0 and 3.9.0 for every kernel registered here (the
 * versions and the differences around it are listed at VERIFIED_LAUNCH_ABI in runtime/triton_native.py,
 * which keeps other versions off this path): the kernel's non-constexpr parameters in order (pointers as
 * 8-byte device addresses, integers and floats at their width), then two scratch pointers (global and profile
 * scratch, NULL when the kernel needs none, which is the only case registered here), block = 32 * num_warps
 * threads, dynamic shared memory = metadata.shared (Triton raised the kernel's limit above 48 KB when it
 * loaded it).
 */
#include <dlfcn.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime_internal.h"
#include "graphs/replay.h"

namespace {

// --- The CUDA driver and torch's current stream, resolved once -------------------------------------------

using CUresult = int;
using CUfunction = void*;
using CUstream = void*;
using CUcontext = void*;
using cuLaunchKernel_t = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, CUstream, void**, void**);
using cuCtxGetCurrent_t = CUresult (*)(CUcontext*);
using cuGetErrorName_t = CUresult (*)(CUresult, const char**);
using cuGetErrorString_t = CUresult (*)(CUresult, const char**);
using cuStreamIsCapturing_t = CUresult (*)(CUstream, int*);  // CUstreamCaptureStatus: 0 = not capturing
using current_stream_t = int32_t (*)(int32_t device_index, void** stream);  // aoti_torch_get_current_cuda_stream

struct CudaApi {
  cuLaunchKernel_t launch = nullptr;
  cuCtxGetCurrent_t current_context = nullptr;
  cuGetErrorName_t error_name = nullptr;
  cuGetErrorString_t error_string = nullptr;
  cuStreamIsCapturing_t is_capturing = nullptr;
  current_stream_t current_stream = nullptr;
};

CudaApi cuda;  // written once by init_cuda under the GIL; read by launches (GIL held)
PyObject* launch_error_type = nullptr;  // strong reference, set by init_cuda
bool graph_driver_ready = false;  // the driver has what CUDA graph replay needs (graphs/replay.cpp)
// The lists behind Triton's launch enter/exit HookChains (watch_launch_hooks; strong references, or null).
// A profiler that adds a hook after a site went native must still see every launch, so each native launch
// looks at them (two list sizes) and hands the launch to Triton's launcher, which calls the hooks, while one
// is set.
PyObject* launch_hook_lists[2] = {nullptr, nullptr};

bool launch_hooks_set() {
  for (PyObject* calls : launch_hook_lists) {
    if (calls != nullptr && PyList_GET_SIZE(calls) > 0) return true;
  }
  return false;
}

// --- Keys and parameters (TRIDENT_KEY_* and TRIDENT_PARAM_* kinds: trident_runtime.h) ---------------------

constexpr int64_t kMaxKey = 64;
constexpr int64_t kMaxParams = trident::graphs::kMaxLaunchParams - 2;  // and the two scratch pointers

struct KeyEntry {
  int64_t operand;
  int64_t kind;
};

struct Param {
  int64_t kind;
  int64_t source;  // operand index, or the literal's bits
};

struct GridDim {
  bool is_operand;
  int64_t value;  // operand index, or the literal dimension
};

struct Variant {
  CUcontext context;
  std::vector<int64_t> key;
  CUfunction function;
  unsigned block_threads;
  unsigned shared_bytes;
  int32_t device;
  std::vector<Param> params;
  GridDim grid[3];
};

struct TritonLaunchObject {
  PyObject_HEAD
  std::string* name;
  PyObject* fallback;  // called with the operands as Python objects when no variant matches
  std::vector<KeyEntry>* key_spec;
  std::vector<Variant>* variants;
  std::string* disabled_reason;  // non-empty: every launch goes to the fallback
  int64_t native_launches;
  int64_t fallback_launches;
};

int64_t int_key(int64_t value, int64_t kind) {
  const bool wide = value < INT32_MIN || value > INT32_MAX;  // Triton types such an int i64, else i32
  if (kind == TRIDENT_KEY_INT_WIDTH) return 2 + 2 * wide;
  if (value == 1) return 1;  // Triton makes it a constexpr (and drops the parameter)
  if (kind == TRIDENT_KEY_INT_NO_ALIGN) return 2 + 2 * wide;
  return 2 + 2 * wide + (value % 16 == 0);
}

int64_t key_of(int64_t value, int64_t kind) {
  switch (kind) {
    case TRIDENT_KEY_ALIGN: return (value % 16) == 0;
    case TRIDENT_KEY_VALUE: return value;
    default: return int_key(value, kind);
  }
}

// The value an operand contributes to keys and parameters: a tensor's data address, an int, a double's bits.
bool operand_value(const int64_t* args, int64_t index, int64_t* out) {
  const int64_t tag = args[2 * index] & TRIDENT_ARG_TAG_MASK, value = args[2 * index + 1];
  if (tag == TRIDENT_TAG_TENSOR) return trident::tensor_data_address(reinterpret_cast<AtenTensorHandle>(value), out);
  *out = value;
  return true;
}

double operand_as_double(const int64_t* args, int64_t index, int64_t value) {
  if ((args[2 * index] & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_DOUBLE) return trident::as_double(value);
  return static_cast<double>(value);
}

// --- The launch ---------------------------------------------------------------------------------------

void fail_launch(const TritonLaunchObject* self, const char* what, CUresult status) {
  const char* name = "?";
  const char* text = "";
  if (cuda.error_name != nullptr) cuda.error_name(status, &name);
  if (cuda.error_string != nullptr) cuda.error_string(status, &text);
  const std::string message = "Triton kernel '" + *self->name + "': " + what + " failed with " + name + " (" +
                              text + ", CUresult " + std::to_string(status) + ")";
  trident_set_error(TRIDENT_EXC_KERNEL_LAUNCH, message.c_str());
}

int32_t call_fallback(TritonLaunchObject* self, const int64_t* args, int64_t nargs) {
  ++self->fallback_launches;
  PyObject* operands = trident::python_operands(args, nargs);
  if (operands == nullptr) return TRIDENT_ERROR;
  PyObject* result = PyObject_Call(self->fallback, operands, nullptr);
  Py_DECREF(operands);
  if (result == nullptr) return TRIDENT_ERROR;  // Triton's exception stays set; the entry raises it
  Py_DECREF(result);
  return TRIDENT_OK;
}

// Everything cuLaunchKernel takes for variant `v` on these operands. 1: prepared (a zero grid launches
// nothing, as in Triton), 0: not launchable natively (use the fallback), -1: error set.
int32_t prepare_launch(TritonLaunchObject* self, const Variant& v, const int64_t* args,
                       trident::graphs::PreparedLaunch* p) {
  for (int d = 0; d < 3; ++d) {
    const int64_t dim = v.grid[d].is_operand ? args[2 * v.grid[d].value + 1] : v.grid[d].value;
    if (dim < 0 || dim > INT32_MAX) return 0;  // Triton rejects it; let it say so
    p->grid[d] = static_cast<unsigned>(dim);
  }
  const size_t n = v.params.size();
  for (size_t i = 0; i < n; ++i) {
    const Param& param = v.params[i];
    int64_t value = param.source;
    if (param.kind != TRIDENT_PARAM_LITERAL && !operand_value(args, param.source, &value)) return 0;
    uint64_t bits = static_cast<uint64_t>(value);
    if (param.kind == TRIDENT_PARAM_FP32) {
      const float f = static_cast<float>(operand_as_double(args, param.source, value));
      uint32_t b32;
      std::memcpy(&b32, &f, sizeof b32);
      bits = b32;
    } else if (param.kind == TRIDENT_PARAM_FP64) {
      const double d = operand_as_double(args, param.source, value);
      std::memcpy(&bits, &d, sizeof bits);
    }
    p->param_bits[i] = bits;  // little-endian: a narrower parameter reads the low bytes of its word
  }
  p->param_bits[n] = p->param_bits[n + 1] = 0;  // global and profile scratch: none
  p->n_params = n + 2;
  for (size_t i = 0; i < n + 2; ++i) p->params[i] = &p->param_bits[i];
  p->function = v.function;
  p->block_threads = v.block_threads;
  p->shared_bytes = v.shared_bytes;
  p->device = v.device;
  if (cuda.current_stream(v.device, &p->stream) != 0) {
    trident_set_error(TRIDENT_EXC_RUNTIME, ("Triton kernel '" + *self->name +
                                            "': torch could not give the current CUDA stream").c_str());
    return -1;
  }
  return 1;
}

int32_t launch_prepared(TritonLaunchObject* self, trident::graphs::PreparedLaunch* p) {
  if (p->grid[0] == 0 || p->grid[1] == 0 || p->grid[2] == 0) return TRIDENT_OK;  // Triton launches nothing either
  const CUresult status = cuda.launch(p->function, p->grid[0], p->grid[1], p->grid[2], p->block_threads, 1, 1,
                                      p->shared_bytes, p->stream, p->params, nullptr);
  if (status != 0) {
    fail_launch(self, "cuLaunchKernel", status);
    return TRIDENT_ERROR;
  }
  ++self->native_launches;
  return TRIDENT_OK;
}

bool compute_key(const TritonLaunchObject* self, const int64_t* args, int64_t* key) {
  const std::vector<KeyEntry>& spec = *self->key_spec;
  for (size_t i = 0; i < spec.size(); ++i) {
    int64_t value;
    if (!operand_value(args, spec[i].operand, &value)) return false;
    key[i] = key_of(value, spec[i].kind);
  }
  return true;
}

// --- The Python type ----------------------------------------------------------------------------------

TritonLaunchObject* as_launch(PyObject* obj) { return reinterpret_cast<TritonLaunchObject*>(obj); }

int launch_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(as_launch(self)->fallback);
  return 0;
}

int launch_clear(PyObject* self) {
  Py_CLEAR(as_launch(self)->fallback);
  return 0;
}

void launch_dealloc(PyObject* self) {
  TritonLaunchObject* launch = as_launch(self);
  PyObject_GC_UnTrack(self);
  Py_CLEAR(launch->fallback);
  delete launch->name;
  delete launch->key_spec;
  delete launch->variants;
  delete launch->disabled_reason;
  Py_TYPE(self)->tp_free(self);
}

bool read_int_pairs(PyObject* sequence, const char* what, std::vector<std::pair<int64_t, int64_t>>* out) {
  PyObject* items = PySequence_Fast(sequence, what);
  if (items == nullptr) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); ++i) {
    long long a = 0, b = 0;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(items, i), "LL", &a, &b)) {
      Py_DECREF(items);
      return false;
    }
    out->emplace_back(a, b);
  }
  Py_DECREF(items);
  return true;
}

bool read_ints(PyObject* sequence, const char* what, std::vector<int64_t>* out) {
  PyObject* items = PySequence_Fast(sequence, what);
  if (items == nullptr) return false;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); ++i) {
    const long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(items, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(items);
      return false;
    }
    out->push_back(v);
  }
  Py_DECREF(items);
  return true;
}

// TritonLaunch(name, fallback, key_spec: [(operand, kind)])
PyObject* launch_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"name", "fallback", "key_spec", nullptr};
  const char* name = nullptr;
  PyObject* fallback = nullptr;
  PyObject* key_spec = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "sOO:TritonLaunch", const_cast<char**>(kwlist), &name, &fallback,
                                   &key_spec)) {
    return nullptr;
  }
  std::vector<std::pair<int64_t, int64_t>> spec;
  if (!read_int_pairs(key_spec, "TritonLaunch: key_spec must be a sequence of (operand, kind)", &spec)) return nullptr;
  if (static_cast<int64_t>(spec.size()) > kMaxKey) {
    PyErr_Format(PyExc_ValueError, "TritonLaunch: a key of %zd entries exceeds %lld", spec.size(), (long long)kMaxKey);
    return nullptr;
  }
  auto* self = as_launch(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->name = new std::string(name);
  Py_INCREF(fallback);
  self->fallback = fallback;
  self->key_spec = new std::vector<KeyEntry>();
  for (const auto& [operand, kind] : spec) self->key_spec->push_back({operand, kind});
  self->variants = new std::vector<Variant>();
  self->disabled_reason = new std::string();
  return reinterpret_cast<PyObject*>(self);
}

// key(values) -> tuple: the key of a launch whose key operands have these values (data addresses for
// tensors), computed by the same code as a native launch.
PyObject* launch_key(PyObject* self, PyObject* values_arg) {
  std::vector<int64_t> values;
  if (!read_ints(values_arg, "TritonLaunch.key: values must be a sequence of ints", &values)) return nullptr;
  const std::vector<KeyEntry>& spec = *as_launch(self)->key_spec;
  if (values.size() != spec.size()) {
    PyErr_Format(PyExc_ValueError, "TritonLaunch.key: %zd values for a key of %zd entries", values.size(), spec.size());
    return nullptr;
  }
  PyObject* key = PyTuple_New(static_cast<Py_ssize_t>(spec.size()));
  if (key == nullptr) return nullptr;
  for (size_t i = 0; i < spec.size(); ++i) {
    PyTuple_SET_ITEM(key, i, PyLong_FromLongLong(key_of(values[i], spec[i].kind)));
  }
  return key;
}

// add_variant(key, function, block_threads, shared_bytes, device, params: [(kind, source)],
//             grid: [(is_operand, value)] * 3). The variant belongs to the calling thread's current context.
PyObject* launch_add_variant(PyObject* self_obj, PyObject* args) {
  TritonLaunchObject* self = as_launch(self_obj);
  PyObject *key_arg, *function_arg, *params_arg, *grid_arg;
  unsigned block_threads = 0, shared_bytes = 0;
  int device = 0;
  if (!PyArg_ParseTuple(args, "OOIIiOO:add_variant", &key_arg, &function_arg, &block_threads, &shared_bytes, &device,
                        &params_arg, &grid_arg)) {
    return nullptr;
  }
  if (cuda.launch == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "TritonLaunch.add_variant: init_cuda() has not succeeded");
    return nullptr;
  }
  Variant v{};
  std::vector<std::pair<int64_t, int64_t>> params, grid;
  if (!read_ints(key_arg, "add_variant: key must be a sequence of ints", &v.key) ||
      !read_int_pairs(params_arg, "add_variant: params must be (kind, source) pairs", &params) ||
      !read_int_pairs(grid_arg, "add_variant: grid must be three (is_operand, value) pairs", &grid)) {
    return nullptr;
  }
  v.function = PyLong_AsVoidPtr(function_arg);
  if (v.function == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "add_variant: the kernel function handle is NULL");
    return nullptr;
  }
  if (v.key.size() != self->key_spec->size() || grid.size() != 3 || params.size() > kMaxParams) {
    PyErr_SetString(PyExc_ValueError, "add_variant: key, grid or parameter count does not fit this launch");
    return nullptr;
  }
  for (const auto& [kind, source] : params) v.params.push_back({kind, source});
  for (int d = 0; d < 3; ++d) v.grid[d] = {grid[d].first != 0, grid[d].second};
  v.block_threads = block_threads;
  v.shared_bytes = shared_bytes;
  v.device = device;
  const CUresult status = cuda.current_context(&v.context);
  if (status != 0 || v.context == nullptr) {
    PyErr_Format(PyExc_RuntimeError, "add_variant: no current CUDA context (CUresult %d)", status);
    return nullptr;
  }
  self->variants->push_back(std::move(v));
  Py_RETURN_NONE;
}

PyObject* launch_disable(PyObject* self, PyObject* reason) {
  if (!PyUnicode_Check(reason)) {
    PyErr_SetString(PyExc_TypeError, "TritonLaunch.disable: reason must be a str");
    return nullptr;
  }
  *as_launch(self)->disabled_reason = PyUnicode_AsUTF8(reason);
  Py_RETURN_NONE;
}

PyObject* launch_disabled_reason(PyObject* self, void*) {
  const std::string& reason = *as_launch(self)->disabled_reason;
  if (reason.empty()) Py_RETURN_NONE;
  return PyUnicode_FromString(reason.c_str());
}

PyObject* launch_variant_count(PyObject* self, void*) { return PyLong_FromSize_t(as_launch(self)->variants->size()); }
PyObject* launch_native_launches(PyObject* self, void*) { return PyLong_FromLongLong(as_launch(self)->native_launches); }
PyObject* launch_fallback_launches(PyObject* self, void*) {
  return PyLong_FromLongLong(as_launch(self)->fallback_launches);
}
PyObject* launch_name(PyObject* self, void*) { return PyUnicode_FromString(as_launch(self)->name->c_str()); }
PyObject* launch_fallback(PyObject* self, void*) { return Py_NewRef(as_launch(self)->fallback); }

PyMethodDef launch_methods[] = {
    {"key", launch_key, METH_O, "key(values) -> tuple: the specialization key for these operand values"},
    {"add_variant", launch_add_variant, METH_VARARGS,
     "add_variant(key, function, block_threads, shared_bytes, device, params, grid): launch natively from now on"},
    {"disable", launch_disable, METH_O, "disable(reason): every launch goes through the fallback from now on"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef launch_getset[] = {
    {"name", launch_name, nullptr, "the kernel's name", nullptr},
    {"fallback", launch_fallback, nullptr, "the Python launcher used when no variant matches", nullptr},
    {"disabled_reason", launch_disabled_reason, nullptr, "why launches never go native, or None", nullptr},
    {"variant_count", launch_variant_count, nullptr, "compiled variants launched natively", nullptr},
    {"native_launches", launch_native_launches, nullptr, "launches made natively", nullptr},
    {"fallback_launches", launch_fallback_launches, nullptr, "launches handed to the fallback", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyTypeObject trident::TritonLaunchType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool trident::ready_triton_launch_type() {
  PyTypeObject& t = TritonLaunchType;
  t.tp_name = "trident.runtime.TritonLaunch";
  t.tp_doc = "TritonLaunch(name, fallback, key_spec): one launch site of a Triton kernel in compiled code.";
  t.tp_basicsize = sizeof(TritonLaunchObject);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t.tp_new = launch_new;
  t.tp_dealloc = launch_dealloc;
  t.tp_traverse = launch_traverse;
  t.tp_clear = launch_clear;
  t.tp_methods = launch_methods;
  t.tp_getset = launch_getset;
  return PyType_Ready(&t) == 0;
}

// watch_launch_hooks(enter_calls, exit_calls) -> None: the `calls` lists of Triton's launch hook chains (None
// where the installed Triton keeps none); re-sent by Python whenever it registers a variant, so a chain Triton
// replaced is picked up.
PyObject* trident::watch_launch_hooks(PyObject*, PyObject* args) {
  PyObject* lists[2] = {nullptr, nullptr};
  if (!PyArg_ParseTuple(args, "OO:watch_launch_hooks", &lists[0], &lists[1])) return nullptr;
  for (int i = 0; i < 2; ++i) {
    if (lists[i] != Py_None && !PyList_Check(lists[i])) {
      return PyErr_Format(PyExc_TypeError, "watch_launch_hooks: expected a list or None, got %s",
                          Py_TYPE(lists[i])->tp_name);
    }
    PyObject* held = lists[i] == Py_None ? nullptr : Py_NewRef(lists[i]);
    Py_XSETREF(launch_hook_lists[i], held);
  }
  Py_RETURN_NONE;
}

PyObject* trident::kernel_launch_error_type() {
  return launch_error_type != nullptr ? launch_error_type : PyExc_RuntimeError;
}

// init_cuda(libtorch_cuda_path, launch_error_type) -> None: resolves the driver and torch's stream accessor,
// or raises why not.
PyObject* trident::init_cuda(PyObject*, PyObject* args) {
  const char* torch_cuda_path = nullptr;
  PyObject* error_type = nullptr;
  if (!PyArg_ParseTuple(args, "sO!:init_cuda", &torch_cuda_path, &PyType_Type, &error_type)) return nullptr;
  Py_INCREF(error_type);
  Py_XSETREF(launch_error_type, error_type);
  if (cuda.launch != nullptr) Py_RETURN_NONE;
  // Both libraries stay loaded for the life of the process (torch already holds them), so never dlclose.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (driver == nullptr) return PyErr_Format(PyExc_RuntimeError, "cannot load libcuda.so.1: %s", dlerror());
  void* torch_cuda = dlopen(torch_cuda_path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (torch_cuda == nullptr) {
    return PyErr_Format(PyExc_RuntimeError, "torch's CUDA library %s is not loaded: %s", torch_cuda_path, dlerror());
  }
  CudaApi api;
  if (!trident::resolve(driver, "cuLaunchKernel", &api.launch) || !trident::resolve(driver, "cuCtxGetCurrent", &api.current_context) ||
      !resolve(driver, "cuGetErrorName", &api.error_name) || !trident::resolve(driver, "cuGetErrorString", &api.error_string) ||
      !resolve(driver, "cuStreamIsCapturing", &api.is_capturing)) {
    return PyErr_Format(PyExc_RuntimeError, "libcuda.so.1 lacks a driver entry point Trident needs");
  }
  if (!trident::resolve(torch_cuda, "aoti_torch_get_current_cuda_stream", &api.current_stream)) {
    return PyErr_Format(PyExc_RuntimeError, "%s does not export aoti_torch_get_current_cuda_stream", torch_cuda_path);
  }
  cuda = api;
  graph_driver_ready = trident::graphs::resolve_driver(driver);
  Py_RETURN_NONE;
}

bool trident::current_cuda_stream(int32_t device_index, void** stream, bool* capturing) {
  int status = 0;
  if (cuda.current_stream == nullptr || cuda.current_stream(device_index, stream) != 0 ||
      cuda.is_capturing(*stream, &status) != 0) {
    return false;
  }
  *capturing = status != 0;
  return true;
}

bool trident::cuda_graphs_available() { return graph_driver_ready; }

void trident::count_native_launch(const void* launch) {
  ++as_launch(const_cast<PyObject*>(static_cast<const PyObject*>(launch)))->native_launches;
}

bool trident::current_cuda_context(void** context) {
  return cuda.current_context != nullptr && cuda.current_context(context) == 0;
}

bool trident::graphs::triton_launch_native(const void* launch) {
  const TritonLaunchObject* self = as_launch(const_cast<PyObject*>(static_cast<const PyObject*>(launch)));
  return self->disabled_reason->empty() && !self->variants->empty() && !launch_hooks_set();
}

int32_t trident::graphs::prepare_triton_launch(const void* launch, const int64_t* args, PreparedLaunch* prepared) {
  TritonLaunchObject* self = as_launch(const_cast<PyObject*>(static_cast<const PyObject*>(launch)));
  if (!triton_launch_native(launch)) return 0;
  int64_t key[kMaxKey];
  CUcontext context = nullptr;
  if (!compute_key(self, args, key) || cuda.current_context(&context) != 0) return 0;
  const size_t n = self->key_spec->size();
  for (const Variant& v : *self->variants) {
    if (v.context != context || (n != 0 && std::memcmp(v.key.data(), key, n * sizeof(int64_t)) != 0)) continue;
    return prepare_launch(self, v, args, prepared);
  }
  return 0;
}

extern "C" {

TRIDENT_API int32_t trident_triton_launch(PyObject* launch_obj, const int64_t* args, int64_t nargs) {
  TritonLaunchObject* self = as_launch(launch_obj);
  trident::graphs::PreparedLaunch prepared;
  const int32_t ready = trident::graphs::prepare_triton_launch(self, args, &prepared);
  if (ready < 0) return TRIDENT_ERROR;
  if (trident::graphs::active != nullptr) {  // recorded into, or patched in, a CUDA graph
    return trident::graphs::triton_step(self, self->name->c_str(), ready > 0 ? &prepared : nullptr, args, nargs);
  }
  if (ready > 0) return launch_prepared(self, &prepared);
  return call_fallback(self, args, nargs);
}

}  // extern "C"
