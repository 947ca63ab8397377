/*
 * values.cpp — plain Python values across the C ABI: reading int/float/bool/None/tuple/list arguments in
 * guards, and building results (boxed scalars, tuples, lists) in run functions.
 *
 * Readers are exact-type checks (a bool is not an int here, a tuple subclass is not a tuple): a guard that
 * accepted a look-alike would run code compiled for something else. They never raise; 0 means "no".
 */
#include "runtime_internal.h"

#include <cstring>

extern "C" {

TRIDENT_API int32_t trident_read_int(PyObject* obj, int64_t* out) {
  if (!PyLong_CheckExact(obj)) return 0;
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
  // Ints past int64 are not something compiled code can hold: report "no", never an error.
  if (overflow != 0) return 0;
  *out = value;
  return 1;
}

TRIDENT_API int32_t trident_read_float(PyObject* obj, double* out) {
  if (!PyFloat_CheckExact(obj)) return 0;
  *out = PyFloat_AS_DOUBLE(obj);
  return 1;
}

TRIDENT_API int32_t trident_read_bool(PyObject* obj, int64_t* out) {
  if (obj == Py_True) {
    *out = 1;
    return 1;
  }
  if (obj == Py_False) {
    *out = 0;
    return 1;
  }
  return 0;
}

TRIDENT_API int32_t trident_is_none(PyObject* obj) { return obj == Py_None ? 1 : 0; }

TRIDENT_API int32_t trident_check_sequence(PyObject* obj, int64_t kind, int64_t length) {
  if (kind == TRIDENT_SEQ_TUPLE) return PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == length;
  if (kind == TRIDENT_SEQ_LIST) return PyList_CheckExact(obj) && PyList_GET_SIZE(obj) == length;
  if (kind == TRIDENT_SEQ_DICT) return PyDict_CheckExact(obj) && PyDict_GET_SIZE(obj) == length;
  return 0;
}

namespace {

// Borrowed instance __dict__ of obj, or NULL (none). The object keeps its dict, and so its values, alive.
PyObject* instance_dict(PyObject* obj) {
  PyObject* dict = PyObject_GenericGetDict(obj, nullptr);  // new reference, or NULL
  if (dict == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  Py_DECREF(dict);
  return dict;
}

}  // namespace

TRIDENT_API PyObject* trident_sequence_item(PyObject* obj, int64_t index) {
  // Checked by trident_check_sequence / trident_check_object first, so the exact type tells which case applies.
  if (PyTuple_CheckExact(obj)) return PyTuple_GET_ITEM(obj, index);
  if (PyList_CheckExact(obj)) return PyList_GET_ITEM(obj, index);
  PyObject* dict = PyDict_CheckExact(obj) ? obj : instance_dict(obj);
  if (dict == nullptr) return nullptr;
  Py_ssize_t position = 0;  // its value at `index` in insertion order (argument dicts and state are small)
  PyObject *key, *value = nullptr;
  for (int64_t i = 0; i <= index; ++i) {
    if (!PyDict_Next(dict, &position, &key, &value)) return nullptr;
  }
  return value;
}

TRIDENT_API PyObject* trident_instance_dict(PyObject* obj) { return instance_dict(obj); }

TRIDENT_API int32_t trident_check_object(PyObject* obj, PyObject* cls, PyObject* keys) {
  if ((PyObject*)Py_TYPE(obj) != cls) return 0;
  PyObject* dict = instance_dict(obj);
  return dict != nullptr && PyDict_CheckExact(dict) ? trident_dict_keys_are(dict, keys) : 0;
}

TRIDENT_API int32_t trident_state_write(PyObject* obj, PyObject* name, PyObject* value) {
  PyObject* dict = instance_dict(obj);
  if (dict == nullptr) {
    PyErr_Format(PyExc_SystemError, "trident: a %s object of the call has no instance __dict__",
                 Py_TYPE(obj)->tp_name);
    return 0;
  }
  return PyDict_SetItem(dict, name, value) == 0 ? 1 : 0;
}

TRIDENT_API int32_t trident_equals(PyObject* obj, PyObject* expected) {
  if (Py_TYPE(obj) != Py_TYPE(expected)) return 0;
  const int same = PyObject_RichCompareBool(obj, expected, Py_EQ);
  if (same < 0) {
    PyErr_Clear();
    return 0;
  }
  return same;
}

TRIDENT_API PyObject* trident_instance_attribute(PyObject* obj, PyObject* name) {
  // The instance __dict__ only: no descriptors, no __getattr__, so no Python code runs in a guard.
  PyObject* dict = instance_dict(obj);
  return dict == nullptr ? nullptr : trident_dict_item(dict, name);
}

TRIDENT_API PyObject* trident_dict_item(PyObject* dict, PyObject* key) {
  if (!PyDict_Check(dict)) return nullptr;
  PyObject* value = PyDict_GetItemWithError(dict, key);  // borrowed
  if (value == nullptr) PyErr_Clear();
  return value;
}

TRIDENT_API int32_t trident_dict_keys_are(PyObject* dict, PyObject* keys) {
  // The dict's keys are exactly `keys` (a tuple of str), in order: a ModuleDict iterated at capture must still
  // hold the children it held, in the order the program ran them. Keys are str, so comparing runs no user code.
  if (!PyDict_Check(dict) || PyDict_GET_SIZE(dict) != PyTuple_GET_SIZE(keys)) return 0;
  Py_ssize_t position = 0, index = 0;
  PyObject *key, *value;
  while (PyDict_Next(dict, &position, &key, &value)) {
    PyObject* expected = PyTuple_GET_ITEM(keys, index++);
    if (key == expected) continue;
    if (!PyUnicode_CheckExact(key) || PyUnicode_Compare(key, expected) != 0) {
      PyErr_Clear();
      return 0;
    }
  }
  return 1;
}

TRIDENT_API PyObject* trident_new_ref(PyObject* obj) {
  Py_INCREF(obj);
  return obj;
}

TRIDENT_API PyObject* trident_box_int(int64_t v) { return PyLong_FromLongLong(v); }

TRIDENT_API PyObject* trident_box_float(double v) { return PyFloat_FromDouble(v); }

TRIDENT_API PyObject* trident_box_bool(int64_t v) { return PyBool_FromLong(v != 0); }

TRIDENT_API PyObject* trident_sequence_new(int64_t kind, int64_t length) {
  if (kind == TRIDENT_SEQ_TUPLE) return PyTuple_New(length);
  if (kind == TRIDENT_SEQ_LIST) return PyList_New(length);
  PyErr_Format(PyExc_SystemError, "trident_sequence_new: unknown sequence kind %lld", (long long)kind);
  return nullptr;
}

TRIDENT_API void trident_sequence_set(PyObject* seq, int64_t index, PyObject* item) {
  // Both macros steal `item`; the empty slots of a fresh tuple/list hold NULL, so nothing is leaked.
  if (PyTuple_CheckExact(seq)) {
    PyTuple_SET_ITEM(seq, index, item);
  } else {
    PyList_SET_ITEM(seq, index, item);
  }
}

TRIDENT_API void trident_decref(PyObject* obj) { Py_XDECREF(obj); }

TRIDENT_API int32_t trident_python_call(PyObject* callable, const int64_t* args, int64_t nargs) {
  PyObject* operands = trident::python_operands(args, nargs);
  if (operands == nullptr) return TRIDENT_ERROR;
  PyObject* result = PyObject_Call(callable, operands, nullptr);
  Py_DECREF(operands);
  if (result == nullptr) return TRIDENT_ERROR;  // the callable's exception stays set; the entry raises it
  Py_DECREF(result);
  return TRIDENT_OK;
}

}  // extern "C"

PyObject* trident::python_operands(const int64_t* args, int64_t nargs) {
  PyObject* tuple = PyTuple_New(nargs);
  if (tuple == nullptr) return nullptr;
  for (int64_t i = 0; i < nargs; ++i) {
    const int64_t tag = args[2 * i] & TRIDENT_ARG_TAG_MASK, value = args[2 * i + 1];
    PyObject* item = nullptr;
    switch (tag) {
      case TRIDENT_TAG_TENSOR: item = trident_wrap_tensor(reinterpret_cast<AtenTensorHandle>(value)); break;
      case TRIDENT_TAG_INT: item = PyLong_FromLongLong(value); break;
      case TRIDENT_TAG_BOOL: item = PyBool_FromLong(value != 0); break;
      case TRIDENT_TAG_DOUBLE: {
        double d;
        std::memcpy(&d, &value, sizeof d);
        item = PyFloat_FromDouble(d);
        break;
      }
      default:
        PyErr_Format(PyExc_RuntimeError, "unsupported operand tag %lld for a Python call", (long long)tag);
    }
    if (item == nullptr) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, i, item);  // steals item
  }
  return tuple;
}
