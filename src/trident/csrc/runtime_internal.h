/*
 * runtime_internal.h — what the runtime's .cpp files share with each other and nobody else.
 *
 * The public contract is trident_runtime.h (the C ABI generated code calls). This header only connects the
 * pieces of the one shared object: the Python module (module.cpp, entry.cpp) needs to resolve operators
 * (op_call.cpp), name the tensor types (tensor_access.cpp) and raise the thread's last error (errors.cpp),
 * without including torch's heavy headers itself. Nothing here is exported from the shared object.
 */
#ifndef TRIDENT_RUNTIME_INTERNAL_H
#define TRIDENT_RUNTIME_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <cstring>

#include "trident_runtime.h"

namespace trident {

/* A double argument's value from the int64 word that carries its bits (TRIDENT_TAG_DOUBLE). */
inline double as_double(int64_t bits) {
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

/* tensor_access.cpp: the exact types trident_read_tensor accepts (torch.Tensor, torch.nn.Parameter).
 * Borrowed: module.cpp keeps the strong references. */
void set_tensor_types(PyTypeObject* tensor_type, PyTypeObject* parameter_type);

/* op_call.cpp: a heap c10::OperatorHandle* for "ns::name" + overload ("" = default overload), or NULL with a
 * Python ValueError naming the operator. Released with free_operator. */
void* resolve_operator(const char* name, const char* overload);
void free_operator(void* op);

/* op_call.cpp: inside a catch block, records the exception being handled in the thread-local error slot
 * (with the Python exception kind eager would raise) and returns TRIDENT_ERROR. */
int32_t fail_with_current_exception();

/* errors.cpp: raises this thread's last error (trident_last_error) as the matching Python exception class;
 * always returns NULL so callers can `return raise_last_error();`. */
PyObject* raise_last_error();

/* entry.cpp / module.cpp: the two extension types, readied and added to the module by PyInit. */
extern PyTypeObject EntryType;
extern PyTypeObject ContextType;
bool ready_entry_type();

// result_builder.cpp: a compiled run's result (a new reference, stolen) as the caller receives it, built by its
// constructor when it is headed by a ResultBuilder; NULL with an exception set when the constructor raised.
extern PyTypeObject ResultBuilderType;
PyObject* finish_result(PyObject* out);
bool ready_result_builder_type();

/* tensor_access.cpp: the (mutable) data address of a tensor, as Triton passes it to kernels; false with the
 * thread's error set if the tensor has no storage data. */
bool tensor_data_address(AtenTensorHandle t, int64_t* out);

/* values.cpp: a tuple of Python objects for (tag, value) operand pairs (TENSOR, INT, DOUBLE, BOOL), or NULL
 * with a Python error set. */
PyObject* python_operands(const int64_t* args, int64_t nargs);

/* triton_launch.cpp: the TritonLaunch type, the module function init_cuda(libtorch_cuda_path, error_type),
 * and the exception class for TRIDENT_EXC_KERNEL_LAUNCH (RuntimeError until init_cuda gave one). */
extern PyTypeObject TritonLaunchType;
bool ready_triton_launch_type();
PyObject* init_cuda(PyObject* module, PyObject* args);
PyObject* watch_launch_hooks(PyObject* module, PyObject* args);
PyObject* kernel_launch_error_type();

/* triton_launch.cpp: torch's current CUDA stream on a device and whether it is capturing a CUDA graph; false
 * before init_cuda succeeded or when the driver cannot tell. */
bool current_cuda_stream(int32_t device_index, void** stream, bool* capturing);
/* triton_launch.cpp: counts one native launch of a TritonLaunch (a graph replay ran its kernel node). */
void count_native_launch(const void* launch);
/* triton_launch.cpp: whether init_cuda found every driver entry point CUDA graph replay uses. */
bool cuda_graphs_available();
/* triton_launch.cpp: the calling thread's current CUDA context; false before init_cuda succeeded. */
bool current_cuda_context(void** context);

/* A symbol of a dlopen'ed library as a typed function pointer; false (and *out null) when it is missing. Used
 * for the CUDA driver and torch's CUDA library (triton_launch.cpp) and cuBLASLt (matmul_plan.cpp). */
template <typename T>
bool resolve(void* library, const char* symbol, T* out) {
  *out = reinterpret_cast<T>(dlsym(library, symbol));
  return *out != nullptr;
}

/* buffer_pool.cpp: the BufferPool type (a specialization's intermediate buffers, kept between calls). */
extern PyTypeObject BufferPoolType;
bool ready_buffer_pool_type();
// Whether ATen's CUDA kernels for mm.out/addmm.out are linked (a CUDA build of torch).
bool cuda_matmul_kernels_linked();

/* code_recorder.cpp: record_code(codes, import_code), the profile function cache/code_deps.py records the code
 * a capture runs with. */
PyObject* record_code(PyObject* module, PyObject* args);

/* module.cpp: the C struct inside a Context object (for Entry.add_spec, which keeps the object alive). */
TridentSpecContext* context_struct(PyObject* context);

}  // namespace trident

#endif /* TRIDENT_RUNTIME_INTERNAL_H */
