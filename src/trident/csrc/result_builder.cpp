/* Results a compiled run hands back in parts, built by their own constructor (entry.cpp calls finish_result).
 *
 * A result eager returns as a dataclass (Hugging Face's ModelOutput), a named tuple or a dict with str keys comes
 * back from compiled code as (builder, v1, ..., vn); the entry calls cls(**dict(zip(kwnames, values))) before it
 * returns (capture/results.py checks at capture that this rebuilds an equal object). */
#include <vector>

#include "runtime_internal.h"

#include <structmember.h>  // PyMemberDef and T_* (still the spelling that works on 3.11 and 3.12)

PyTypeObject trident::ResultBuilderType = {PyVarObject_HEAD_INIT(nullptr, 0)};

namespace {

using trident::ResultBuilderType;

// ResultBuilder(cls, kwnames, nested): a compiled run returns (builder, v1, ..., vn) for a result eager built as
// cls(**dict(zip(kwnames, values))) (capture/trace.py checks at capture that this rebuilds an equal object);
// cls None returns v1 itself. `nested`: some vi holds such tuples too (in tuples and lists).
struct ResultBuilderObject {
  PyObject_HEAD
  PyObject* cls;      // strong: a type, or None
  PyObject* kwnames;  // strong: tuple of str, one per value (empty when cls is None)
  char nested;  // a bool (T_BOOL reads a char)
};

bool is_built_result(PyObject* obj) {
  return PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) > 0 && Py_IS_TYPE(PyTuple_GET_ITEM(obj, 0), &ResultBuilderType);
}

PyObject* build_result(PyObject* tagged);

// A new reference to `value` with every builder-headed tuple in it built (tuples and lists are rebuilt).
PyObject* build_nested(PyObject* value) {
  if (is_built_result(value)) return build_result(value);
  const bool tuple = PyTuple_CheckExact(value);
  if (!tuple && !PyList_CheckExact(value)) return Py_NewRef(value);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
  PyObject* copy = tuple ? PyTuple_New(n) : PyList_New(n);
  if (copy == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = build_nested(PySequence_Fast_GET_ITEM(value, i));
    if (item == nullptr) return Py_DECREF(copy), nullptr;
    if (tuple) {
      PyTuple_SET_ITEM(copy, i, item);
    } else {
      PyList_SET_ITEM(copy, i, item);
    }
  }
  return copy;
}

// `tagged` (borrowed): (builder, v1, ..., vn). Returns the built object (new reference) or NULL.
PyObject* build_result(PyObject* tagged) {
  auto* builder = reinterpret_cast<ResultBuilderObject*>(PyTuple_GET_ITEM(tagged, 0));
  const Py_ssize_t n = PyTuple_GET_SIZE(tagged) - 1;
  if (builder->cls == Py_None) {
    if (n != 1) return PyErr_SetString(PyExc_SystemError, "trident: a ResultBuilder without a type takes one value"), nullptr;
    return builder->nested ? build_nested(PyTuple_GET_ITEM(tagged, 1)) : Py_NewRef(PyTuple_GET_ITEM(tagged, 1));
  }
  if (n != PyTuple_GET_SIZE(builder->kwnames)) {
    PyErr_SetString(PyExc_SystemError, "trident: a built result has another number of values than its names");
    return nullptr;
  }
  if (!builder->nested) {  // the values as they are, by keyword (the tuple's items after the builder)
    return PyObject_Vectorcall(builder->cls, &PyTuple_GET_ITEM(tagged, 1), 0, builder->kwnames);
  }
  std::vector<PyObject*> values(static_cast<size_t>(n), nullptr);
  PyObject* result = nullptr;
  bool ok = true;
  for (Py_ssize_t i = 0; i < n && ok; ++i) ok = (values[i] = build_nested(PyTuple_GET_ITEM(tagged, i + 1))) != nullptr;
  if (ok) result = PyObject_Vectorcall(builder->cls, values.data(), 0, builder->kwnames);
  for (PyObject* value : values) Py_XDECREF(value);
  return result;
}

PyObject* result_builder_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"cls", "kwnames", "nested", nullptr};
  PyObject* cls = nullptr;
  PyObject* kwnames = nullptr;
  int nested = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO!p:ResultBuilder", const_cast<char**>(kwlist), &cls,
                                   &PyTuple_Type, &kwnames, &nested)) {
    return nullptr;
  }
  if (cls != Py_None && !PyCallable_Check(cls)) {
    PyErr_SetString(PyExc_TypeError, "ResultBuilder: cls must be callable or None");
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
    if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(kwnames, i))) {
      PyErr_SetString(PyExc_TypeError, "ResultBuilder: kwnames must be a tuple of str");
      return nullptr;
    }
  }
  auto* self = reinterpret_cast<ResultBuilderObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->cls = Py_NewRef(cls);
  self->kwnames = Py_NewRef(kwnames);
  self->nested = static_cast<char>(nested != 0);
  return reinterpret_cast<PyObject*>(self);
}

void result_builder_dealloc(PyObject* self_obj) {
  auto* self = reinterpret_cast<ResultBuilderObject*>(self_obj);
  Py_CLEAR(self->cls);
  Py_CLEAR(self->kwnames);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

PyObject* result_builder_repr(PyObject* self_obj) {
  auto* self = reinterpret_cast<ResultBuilderObject*>(self_obj);
  return PyUnicode_FromFormat("<trident.runtime.Entry.ResultBuilder %R %R>", self->cls, self->kwnames);
}

PyMemberDef result_builder_members[] = {
    {"cls", T_OBJECT, offsetof(ResultBuilderObject, cls), READONLY, "the result's type (None: the one value)"},
    {"kwnames", T_OBJECT, offsetof(ResultBuilderObject, kwnames), READONLY, "keyword of each value"},
    {"nested", T_BOOL, offsetof(ResultBuilderObject, nested), READONLY, "values hold built results too"},
    {nullptr, 0, 0, 0, nullptr},
};

}  // namespace

PyObject* trident::finish_result(PyObject* out) {
  if (!is_built_result(out)) return out;
  PyObject* built = build_result(out);
  Py_DECREF(out);
  return built;
}

bool trident::ready_result_builder_type() {
  PyTypeObject& r = ResultBuilderType;
  r.tp_name = "trident.runtime.Entry.ResultBuilder";
  r.tp_doc = "ResultBuilder(cls, kwnames, nested): heads a compiled run's result that the entry builds as cls(**...)";
  r.tp_basicsize = sizeof(ResultBuilderObject);
  r.tp_flags = Py_TPFLAGS_DEFAULT;
  r.tp_new = result_builder_new;
  r.tp_dealloc = result_builder_dealloc;
  r.tp_repr = result_builder_repr;
  r.tp_members = result_builder_members;
  return PyType_Ready(&r) == 0;
}
