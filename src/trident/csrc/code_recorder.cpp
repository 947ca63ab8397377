// code_recorder.cpp — the profile function behind cache/code_deps.py's recording_code: every code object that
// starts in this thread while a capture runs, for the disk cache's key.
//
// Not runtime work (hits never run it): it lives here because this is Trident's one native build. A Python
// profile function (sys.setprofile) runs a Python call for every call, return and builtin call the capture
// makes, which more than doubled the time make_fx takes on a Hugging Face model; this one sees the same events
// from the interpreter and costs a pointer comparison for most of them.

#include <unordered_set>

#include "runtime_internal.h"

namespace {

// Owned by the capsule PyEval_SetProfile keeps (the object sys.getprofile() returns while recording).
struct CodeRecording {
  PyObject* codes;        // dict: id(code) -> (code, the frame's globals, its caller's __name__ or None)
  PyObject* import_code;  // importlib's _find_and_load code, or None
  Py_ssize_t importing;   // _find_and_load frames open: code run by an import is not recorded
  // The codes already in `codes`, which keeps each alive, so an address is never reused while recording.
  std::unordered_set<PyCodeObject*> seen;
};

void free_recording(PyObject* capsule) {
  auto* recording = static_cast<CodeRecording*>(PyCapsule_GetPointer(capsule, nullptr));
  Py_XDECREF(recording->codes);
  Py_XDECREF(recording->import_code);
  delete recording;
}

// The entry of a code object's first start, as code_deps.CodeRecorder holds it; NULL with an exception set.
PyObject* code_entry(PyFrameObject* frame, PyCodeObject* code) {
  PyObject* globals = PyFrame_GetGlobals(frame);
  PyFrameObject* caller = PyFrame_GetBack(frame);
  PyObject* caller_name = Py_None;
  if (caller != nullptr) {
    PyObject* caller_globals = PyFrame_GetGlobals(caller);
    static PyObject* const name_key = PyUnicode_InternFromString("__name__");
    PyObject* name = name_key != nullptr ? PyDict_GetItemWithError(caller_globals, name_key) : nullptr;
    caller_name = name != nullptr ? name : Py_None;
    Py_INCREF(caller_name);
    Py_DECREF(caller_globals);
    Py_DECREF(caller);
  } else {
    Py_INCREF(caller_name);
  }
  PyObject* entry =
      PyErr_Occurred() ? nullptr : PyTuple_Pack(3, reinterpret_cast<PyObject*>(code), globals, caller_name);
  Py_DECREF(caller_name);
  Py_DECREF(globals);
  return entry;
}

// Runs on every profile event of the thread: returns 0, or -1 with an exception set (which the interpreter
// raises where the event happened, as it would from a Python profile function).
int record_event(PyObject* capsule, PyFrameObject* frame, int what, PyObject*) {
  if (what != PyTrace_CALL && what != PyTrace_RETURN) return 0;  // builtin calls start no code object
  auto* recording = static_cast<CodeRecording*>(PyCapsule_GetPointer(capsule, nullptr));
  PyCodeObject* code = PyFrame_GetCode(frame);
  Py_DECREF(code);  // borrowed from here on: the frame holds it
  if (reinterpret_cast<PyObject*>(code) == recording->import_code) {
    recording->importing += what == PyTrace_CALL ? 1 : -1;
    return 0;
  }
  if (what != PyTrace_CALL || recording->importing > 0 || recording->seen.count(code) > 0) return 0;
  PyObject* entry = code_entry(frame, code);
  PyObject* key = entry != nullptr ? PyLong_FromVoidPtr(code) : nullptr;
  const int status = key != nullptr ? PyDict_SetItem(recording->codes, key, entry) : -1;
  Py_XDECREF(key);
  Py_XDECREF(entry);
  if (status < 0) return -1;
  recording->seen.insert(code);
  return 0;
}

}  // namespace

// record_code(codes: dict, import_code) -> None: from now on this thread's profile function records into
// `codes`; sys.setprofile(previous) ends it.
PyObject* trident::record_code(PyObject*, PyObject* args) {
  PyObject* codes = nullptr;
  PyObject* import_code = nullptr;
  if (!PyArg_ParseTuple(args, "O!O:record_code", &PyDict_Type, &codes, &import_code)) return nullptr;
  auto* recording = new CodeRecording{codes, import_code, 0, {}};
  Py_INCREF(codes);
  Py_INCREF(import_code);
  PyObject* capsule = PyCapsule_New(recording, nullptr, free_recording);
  if (capsule == nullptr) {
    Py_DECREF(codes);
    Py_DECREF(import_code);
    delete recording;
    return nullptr;
  }
  PyEval_SetProfile(record_event, capsule);  // keeps its own reference
  Py_DECREF(capsule);
  Py_RETURN_NONE;
}
