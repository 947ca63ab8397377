/*
 * module.cpp — the `_trident_runtime` extension module: init(), init_cuda(), the Context type, benchmarking
 * helpers.
 *
 * A Context is the process-specific half of a compiled specialization: the operator handles its code calls
 * and the Python objects it closed over, laid out as the TridentSpecContext struct generated code loads
 * from. Its `address` goes to the specialization; the Entry (entry.cpp) keeps the Context object alive for
 * as long as that specialization can run. The module name is chosen by runtime/build.py.
 */
#include <chrono>
#include <vector>

#include "runtime_internal.h"
#include "graphs/spec_graphs.h"
#include "private_views.h"

namespace {

struct ContextObject {
  PyObject_HEAD
  TridentSpecContext ctx;           // what generated code reads; points into the two vectors below
  std::vector<void*>* ops;          // owned heap c10::OperatorHandle*, freed with free_operator
  std::vector<PyObject*>* constants;  // strong references
};

// --- Context ----------------------------------------------------------------------------------------------

void context_release(ContextObject* self) {
  if (self->constants != nullptr) {
    for (PyObject*& obj : *self->constants) Py_CLEAR(obj);
  }
}

int context_traverse(PyObject* self, visitproc visit, void* arg) {
  auto* ctx = reinterpret_cast<ContextObject*>(self);
  if (ctx->constants != nullptr) {
    for (PyObject* obj : *ctx->constants) Py_VISIT(obj);
  }
  return 0;
}

int context_clear(PyObject* self) {
  context_release(reinterpret_cast<ContextObject*>(self));
  return 0;
}

void context_dealloc(PyObject* self) {
  auto* ctx = reinterpret_cast<ContextObject*>(self);
  PyObject_GC_UnTrack(self);
  context_release(ctx);
  if (ctx->ops != nullptr) {
    for (void* op : *ctx->ops) trident::free_operator(op);
  }
  delete ctx->ops;
  delete ctx->constants;
  Py_TYPE(self)->tp_free(self);
}

// Context(ops: list[tuple[str, str]], constants: list[object]). Resolving happens here, once, on a miss.
PyObject* context_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"ops", "constants", nullptr};
  PyObject* ops_arg = nullptr;
  PyObject* constants_arg = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO:Context", const_cast<char**>(kwlist), &ops_arg,
                                   &constants_arg)) {
    return nullptr;
  }
  auto* self = reinterpret_cast<ContextObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->ops = new std::vector<void*>();
  self->constants = new std::vector<PyObject*>();
  PyObject* self_obj = reinterpret_cast<PyObject*>(self);

  PyObject* ops = PySequence_Fast(ops_arg, "Context: ops must be a sequence of (name, overload) pairs");
  if (ops == nullptr) return Py_DECREF(self_obj), nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(ops); ++i) {
    const char* name = nullptr;
    const char* overload = nullptr;
    if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(ops, i), "ss:Context ops entry", &name, &overload)) {
      Py_DECREF(ops);
      Py_DECREF(self_obj);
      return nullptr;
    }
    void* op = trident::resolve_operator(name, overload);
    if (op == nullptr) {
      Py_DECREF(ops);
      Py_DECREF(self_obj);
      return nullptr;
    }
    self->ops->push_back(op);
  }
  Py_DECREF(ops);

  PyObject* constants = PySequence_Fast(constants_arg, "Context: constants must be a sequence");
  if (constants == nullptr) return Py_DECREF(self_obj), nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(constants); ++i) {
    PyObject* obj = PySequence_Fast_GET_ITEM(constants, i);
    Py_INCREF(obj);
    self->constants->push_back(obj);
  }
  Py_DECREF(constants);

  // The vectors are complete and never resized again, so these pointers stay valid for the Context's life.
  self->ctx.ops = self->ops->data();
  self->ctx.constants = self->constants->data();
  self->ctx.kernels = nullptr;
  return self_obj;
}

PyObject* context_address(PyObject* self, void*) {
  return PyLong_FromVoidPtr(&reinterpret_cast<ContextObject*>(self)->ctx);
}

PyObject* context_n_ops(PyObject* self, void*) {
  return PyLong_FromSize_t(reinterpret_cast<ContextObject*>(self)->ops->size());
}

PyGetSetDef context_getset[] = {
    {"address", context_address, nullptr, "address of this context's TridentSpecContext", nullptr},
    {"n_ops", context_n_ops, nullptr, "number of resolved operators", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// --- Module functions -------------------------------------------------------------------------------------

// Strong references to the two tensor types, so the pointers trident_read_tensor compares stay valid.
PyObject* tensor_type_ref = nullptr;
PyObject* parameter_type_ref = nullptr;

PyObject* module_init(PyObject*, PyObject* args) {
  PyObject* tensor_type = nullptr;
  PyObject* parameter_type = nullptr;
  if (!PyArg_ParseTuple(args, "O!O!:init", &PyType_Type, &tensor_type, &PyType_Type, &parameter_type)) {
    return nullptr;
  }
  Py_INCREF(tensor_type);
  Py_INCREF(parameter_type);
  Py_XSETREF(tensor_type_ref, tensor_type);
  Py_XSETREF(parameter_type_ref, parameter_type);
  trident::set_tensor_types(reinterpret_cast<PyTypeObject*>(tensor_type),
                            reinterpret_cast<PyTypeObject*>(parameter_type));
  Py_RETURN_NONE;
}

// A run that does nothing and a guard that always matches: an entry built from them costs only the entry.
int32_t noop_run(TridentSpecContext*, PyObject* const*, PyObject** result) {
  Py_INCREF(Py_None);
  *result = Py_None;
  return TRIDENT_OK;
}

int32_t always_guard(TridentSpecContext*, PyObject* const*) { return TRIDENT_GUARD_MATCH; }

PyObject* module_noop_run_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(reinterpret_cast<void*>(&noop_run));
}

PyObject* module_always_guard_address(PyObject*, PyObject*) {
  return PyLong_FromVoidPtr(reinterpret_cast<void*>(&always_guard));
}

// time_guard(guard_address, context, args: tuple, iterations) -> ns per call, timed natively.
PyObject* module_time_guard(PyObject*, PyObject* args) {
  PyObject* address = nullptr;
  PyObject* context = nullptr;
  PyObject* slots = nullptr;
  long long iterations = 0;
  if (!PyArg_ParseTuple(args, "OO!O!L:time_guard", &address, &trident::ContextType, &context, &PyTuple_Type,
                        &slots, &iterations)) {
    return nullptr;
  }
  auto guard = reinterpret_cast<trident_guard_fn>(PyLong_AsVoidPtr(address));
  if (guard == nullptr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "time_guard: guard address is 0");
    return nullptr;
  }
  if (iterations <= 0) {
    PyErr_SetString(PyExc_ValueError, "time_guard: iterations must be positive");
    return nullptr;
  }
  TridentSpecContext* ctx = trident::context_struct(context);
  // A tuple's items are laid out as one PyObject* array: exactly the `slots` a guard receives.
  PyObject* const* items = &PyTuple_GET_ITEM(slots, 0);
  int64_t matched = 0;  // consumed below so the calls cannot be dropped
  const auto start = std::chrono::steady_clock::now();
  for (long long i = 0; i < iterations; ++i) matched += guard(ctx, items);
  const auto stop = std::chrono::steady_clock::now();
  if (matched < 0) Py_RETURN_NONE;  // never: guards return 0 or 1
  const double ns = std::chrono::duration<double, std::nano>(stop - start).count();
  return PyFloat_FromDouble(ns / static_cast<double>(iterations));
}

// replay_words(words_fn_address, context, args: tuple, words) -> list[int]: what a replay plan's words function
// computes for this call (lowering/replay_plan.py), for tests; raises what the function reports.
PyObject* module_replay_words(PyObject*, PyObject* args) {
  PyObject* address = nullptr;
  PyObject* context = nullptr;
  PyObject* slots = nullptr;
  long long n = 0;
  if (!PyArg_ParseTuple(args, "OO!O!L:replay_words", &address, &trident::ContextType, &context, &PyTuple_Type, &slots,
                        &n)) {
    return nullptr;
  }
  auto words_fn = reinterpret_cast<trident::graphs::WordsFn>(PyLong_AsVoidPtr(address));
  if (words_fn == nullptr || n < 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "replay_words: address is 0 or words negative");
    return nullptr;
  }
  std::vector<int64_t> words(static_cast<size_t>(n) + 1, 0);
  if (words_fn(trident::context_struct(context), &PyTuple_GET_ITEM(slots, 0), words.data(), nullptr) != TRIDENT_OK) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, trident_last_error());
    return nullptr;
  }
  PyObject* list = PyList_New(n);
  for (long long i = 0; list != nullptr && i < n; ++i) PyList_SET_ITEM(list, i, PyLong_FromLongLong(words[i]));
  return list;
}

PyObject* module_cuda_graphs_available(PyObject*, PyObject*) { return PyBool_FromLong(trident::cuda_graphs_available()); }

PyObject* module_range_kernels_ptx(PyObject*, PyObject*) {
  const std::vector<std::string> modules = trident::graphs::range_kernels_ptx();
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(modules.size()));
  for (size_t i = 0; tuple != nullptr && i < modules.size(); ++i) {
    PyObject* text = PyUnicode_FromStringAndSize(modules[i].data(), static_cast<Py_ssize_t>(modules[i].size()));
    if (text == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), text);
  }
  return tuple;
}

PyMethodDef module_methods[] = {
    {"init", module_init, METH_VARARGS, "init(tensor_type, parameter_type): the exact types read as tensors"},
    {"noop_run_address", module_noop_run_address, METH_NOARGS, "address of a run function returning None"},
    {"always_guard_address", module_always_guard_address, METH_NOARGS, "address of a guard returning 1"},
    {"time_guard", module_time_guard, METH_VARARGS,
     "time_guard(guard_address, context, args, iterations) -> float: ns per guard call"},
    {"replay_words", module_replay_words, METH_VARARGS,
     "replay_words(words_fn_address, context, args, words) -> list[int]: a replay plan's words for this call"},
    {"init_cuda", trident::init_cuda, METH_VARARGS,
     "init_cuda(libtorch_cuda_path, launch_error_type): resolve the CUDA driver and torch's current stream"},
    {"cuda_graphs_available", module_cuda_graphs_available, METH_NOARGS,
     "whether init_cuda found every CUDA driver entry point graph replay uses"},
    {"range_kernels_ptx", module_range_kernels_ptx, METH_NOARGS,
     "range_kernels_ptx() -> tuple[str, ...]: the PTX modules of graph replay's own floating arange and linspace "
     "kernels"},
    {"watch_launch_hooks", trident::watch_launch_hooks, METH_VARARGS,
     "watch_launch_hooks(enter_calls, exit_calls): Triton's hook lists; native launches yield while one is set"},
    {"private_view", trident::private_views::py_private_view, METH_VARARGS,
     "private_view(name, tensor, *args) -> Tensor: the runtime's private view `name` (csrc/private_views.h)"},
    {"private_view_counts", trident::private_views::py_private_view_counts, METH_NOARGS,
     "private_view_counts() -> (made directly, made by ATen's operator)"},
    {"record_code", trident::record_code, METH_VARARGS,
     "record_code(codes, import_code): this thread's profile function records each code object that starts into "
     "`codes` (cache/code_deps.py); sys.setprofile(previous) ends it"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_trident_runtime", "Trident's native runtime: the entry object and the C ABI.", -1,
    module_methods,
};

}  // namespace

PyTypeObject trident::ContextType = {PyVarObject_HEAD_INIT(nullptr, 0)};

TridentSpecContext* trident::context_struct(PyObject* context) {
  return &reinterpret_cast<ContextObject*>(context)->ctx;
}

PyMODINIT_FUNC PyInit__trident_runtime(void) {
  PyTypeObject& ctx = trident::ContextType;
  ctx.tp_name = "trident.runtime.Context";
  ctx.tp_doc = "Context(ops: list[tuple[str, str]], constants: list[object]): a specialization's operator "
               "handles and constants, as the TridentSpecContext at `address`.";
  ctx.tp_basicsize = sizeof(ContextObject);
  ctx.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  ctx.tp_new = context_new;
  ctx.tp_dealloc = context_dealloc;
  ctx.tp_traverse = context_traverse;
  ctx.tp_clear = context_clear;
  ctx.tp_getset = context_getset;
  if (PyType_Ready(&ctx) < 0 || !trident::ready_entry_type() || !trident::ready_triton_launch_type() ||
      !trident::ready_buffer_pool_type() || !trident::graphs::ready_recording_type() ||
      !trident::graphs::ready_spec_graphs_type()) {
    return nullptr;
  }

  PyObject* module = PyModule_Create(&module_def);
  if (module == nullptr) return nullptr;
  Py_INCREF(&trident::ContextType);
  Py_INCREF(&trident::EntryType);
  Py_INCREF(&trident::TritonLaunchType);
  Py_INCREF(&trident::BufferPoolType);
  Py_INCREF(&trident::graphs::RecordingType);
  Py_INCREF(&trident::graphs::SpecGraphsType);
  if (PyModule_AddObject(module, "Context", reinterpret_cast<PyObject*>(&trident::ContextType)) < 0 ||
      PyModule_AddObject(module, "Entry", reinterpret_cast<PyObject*>(&trident::EntryType)) < 0 ||
      PyModule_AddObject(module, "TritonLaunch", reinterpret_cast<PyObject*>(&trident::TritonLaunchType)) < 0 ||
      PyModule_AddObject(module, "BufferPool", reinterpret_cast<PyObject*>(&trident::BufferPoolType)) < 0 ||
      PyModule_AddObject(module, "GraphRecording", reinterpret_cast<PyObject*>(&trident::graphs::RecordingType)) < 0 ||
      PyModule_AddObject(module, "SpecGraphs", reinterpret_cast<PyObject*>(&trident::graphs::SpecGraphsType)) < 0 ||
      PyModule_AddObject(module, "cuda_matmul_kernels_linked",
                         PyBool_FromLong(trident::cuda_matmul_kernels_linked())) < 0) {
    Py_DECREF(module);
    return nullptr;
  }
  return module;
}
