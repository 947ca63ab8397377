/*
 * errors.cpp — the thread-local "last error" slot of the C ABI.
 *
 * Runtime functions and generated code report a failure by storing a message and a Python exception kind
 * here and returning non-zero; the entry object (entry.cpp) turns the slot into the Python exception when a
 * specialization's run returns a failure status without having set a Python error itself.
 */
#include <string>

#include "runtime_internal.h"

namespace {

struct LastError {
  int32_t kind = TRIDENT_EXC_RUNTIME;
  std::string message;
};

// One slot per thread: generated code can run on any thread that holds the GIL, and a failure must not be
// overwritten by another thread's before its entry reads it.
thread_local LastError last_error;

}  // namespace

extern "C" {

TRIDENT_API const char* trident_last_error(void) { return last_error.message.c_str(); }

TRIDENT_API int32_t trident_last_error_kind(void) { return last_error.kind; }

TRIDENT_API void trident_set_error(int32_t kind, const char* message) {
  // assign() copes with `message` pointing into the slot itself (re-reporting trident_last_error()).
  try {
    last_error.kind = kind;
    last_error.message.assign(message != nullptr ? message : "");
  } catch (...) {
    // Out of memory while copying the message: keep the kind; no exception may cross the C ABI.
  }
}

}  // extern "C"

PyObject* trident::raise_last_error() {
  PyObject* type = PyExc_RuntimeError;
  switch (last_error.kind) {
    case TRIDENT_EXC_INDEX: type = PyExc_IndexError; break;
    case TRIDENT_EXC_VALUE: type = PyExc_ValueError; break;
    case TRIDENT_EXC_TYPE: type = PyExc_TypeError; break;
    case TRIDENT_EXC_NOT_IMPLEMENTED: type = PyExc_NotImplementedError; break;
    case TRIDENT_EXC_KERNEL_LAUNCH: type = trident::kernel_launch_error_type(); break;
    case TRIDENT_EXC_ZERO_DIVISION: type = PyExc_ZeroDivisionError; break;
    case TRIDENT_EXC_OVERFLOW: type = PyExc_OverflowError; break;
    default: break;  // TRIDENT_EXC_RUNTIME and unknown kinds
  }
  // An empty message would give a bare "RuntimeError" that says nothing about where it came from.
  const char* message = last_error.message.empty() ? "trident: compiled code failed without an error message"
                                                   : last_error.message.c_str();
  PyErr_SetString(type, message);
  return nullptr;
}
