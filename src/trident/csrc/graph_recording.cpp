/*
 * graph_recording.cpp — the Python type of a CUDA graph recording (trident.runtime.GraphRecording): making one,
 * starting and ending the stream capture that records it (runtime/cuda_graphs.py drives these), what it reports
 * to Python, and releasing the graph and its memory.
 */
#include "graph_recording.h"

#include <torch/csrc/autograd/python_variable.h>

namespace trident::graphs {

namespace {

void recording_dealloc(PyObject* self) {
  Recording* rec = as_recording(self);
  PyObject_GC_UnTrack(self);
  if (rec->exec != nullptr) driver.destroy_exec(rec->exec);
  if (rec->graph != nullptr) driver.destroy_graph(rec->graph);
  delete rec->steps;  // the results first: their memory returns to the graph's pool, which the keepalive frees
  rec->steps = nullptr;
  Py_CLEAR(rec->keepalive);
  delete rec->internal;
  delete rec->external;
  delete rec->constants;
  delete rec->returned;
  delete rec->written;
  delete rec->copies;
  delete rec->fresh_spans;
  delete rec->failure;
  delete rec->times;
  Py_TYPE(self)->tp_free(self);
}

int recording_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(as_recording(self)->keepalive);
  return 0;
}

int recording_clear(PyObject* self) {
  Recording* rec = as_recording(self);
  if (rec->steps != nullptr) rec->steps->clear();  // graph memory before the pool that holds it
  Py_CLEAR(rec->keepalive);
  return 0;
}

// GraphRecording(device: int, constants: list[Tensor])
PyObject* recording_new(PyTypeObject* type, PyObject* args, PyObject*) {
  int device = 0;
  PyObject* constants = nullptr;
  if (!PyArg_ParseTuple(args, "iO:GraphRecording", &device, &constants)) return nullptr;
  PyObject* items = PySequence_Fast(constants, "GraphRecording: constants must be a sequence");
  if (items == nullptr) return nullptr;
  auto* rec = as_recording(type->tp_alloc(type, 0));
  if (rec == nullptr) return Py_DECREF(items), nullptr;
  rec->mode = Mode::kRecord;
  rec->device = device;
  rec->steps = new std::vector<Step>();
  rec->internal = new std::unordered_set<const void*>();
  rec->external = new std::unordered_set<const void*>();
  rec->constants = new std::unordered_set<const void*>();
  rec->returned = new std::unordered_map<const void*, ReturnedSpan>();
  rec->written = new std::vector<at::Tensor>();
  rec->copies = new std::deque<std::pair<at::Tensor, at::Tensor>>();
  rec->fresh_spans = new std::unordered_map<const void*, at::Tensor>();
  rec->failure = new std::string();
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(items); ++i) {
    PyObject* item = PySequence_Fast_GET_ITEM(items, i);
    if (THPVariable_Check(item)) rec->constants->insert(storage_of(THPVariable_Unpack(item)));
  }
  Py_DECREF(items);
  return reinterpret_cast<PyObject*>(rec);
}

// begin_capture(keepalive): starts capturing torch's current stream on the recording's device (thread-local
// mode: only this thread's unsafe calls invalidate it). The caller routes this thread's allocations to a private
// memory pool, which `keepalive` releases when the recording goes.
PyObject* recording_begin_capture(PyObject* self, PyObject* keepalive) {
  Recording* rec = as_recording(self);
  if (rec->capturing || rec->exec != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "begin_capture: this recording already captured");
    return nullptr;
  }
  CUstream stream = nullptr;
  bool capturing = true;
  if (!trident::current_cuda_stream(rec->device, &stream, &capturing) || capturing) {
    PyErr_SetString(PyExc_RuntimeError, "begin_capture: torch's current stream is unknown or already capturing");
    return nullptr;
  }
  const CUresult status = driver.begin_capture(stream, kCaptureModeThreadLocal);
  if (status != 0) return PyErr_Format(PyExc_RuntimeError, "cuStreamBeginCapture failed (CUresult %d)", status);
  rec->capture_stream = stream;
  rec->capturing = true;
  Py_INCREF(keepalive);
  Py_XSETREF(rec->keepalive, keepalive);
  Py_RETURN_NONE;
}

// end_capture() -> None: ends the capture and instantiates the graph; replays from now on. Raises RuntimeError
// when the capture was invalidated (an operation the stream could not capture) or cannot be instantiated.
PyObject* recording_end_capture(PyObject* self, PyObject*) {
  Recording* rec = as_recording(self);
  if (!rec->capturing) {
    PyErr_SetString(PyExc_RuntimeError, "end_capture: not capturing");
    return nullptr;
  }
  rec->capturing = false;
  CUgraph graph = nullptr;
  CUresult status = driver.end_capture(rec->capture_stream, &graph);
  if (status != 0 || graph == nullptr) {
    if (graph != nullptr) driver.destroy_graph(graph);
    return PyErr_Format(PyExc_RuntimeError, "the stream capture was invalidated (CUresult %d)", status);
  }
  rec->graph = graph;
  status = driver.instantiate(&rec->exec, graph, 0);
  if (status != 0) {
    rec->exec = nullptr;
    return PyErr_Format(PyExc_RuntimeError, "cuGraphInstantiate failed (CUresult %d)", status);
  }
  disable_superseded_fills(rec);
  rec->mode = Mode::kReplay;
  Py_RETURN_NONE;
}

// written() -> list[Tensor]: the tensors from outside the graph its steps may write (verification snapshots
// them); forget_written() drops the references once verified.
PyObject* recording_written(PyObject* self, PyObject*) {
  const std::vector<at::Tensor>& written = *as_recording(self)->written;
  PyObject* list = PyList_New(0);
  if (list == nullptr) return nullptr;
  std::unordered_set<const void*> seen;
  for (const at::Tensor& t : written) {
    if (!seen.insert(t.unsafeGetTensorImpl()).second) continue;
    PyObject* obj = THPVariable_Wrap(t);
    if (obj == nullptr || PyList_Append(list, obj) < 0) {
      Py_XDECREF(obj);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(obj);
  }
  return list;
}

PyObject* recording_forget_written(PyObject* self, PyObject*) {
  as_recording(self)->written->clear();
  Py_RETURN_NONE;
}

PyObject* recording_failure(PyObject* self, void*) {
  const std::string& failure = *as_recording(self)->failure;
  if (failure.empty()) Py_RETURN_NONE;
  return PyUnicode_FromString(failure.c_str());
}

PyObject* recording_counts(PyObject* self, void*) {
  Recording* rec = as_recording(self);
  int64_t kernels = 0, opaque = 0, staged = 0, scalars = 0;
  for (const Step& s : *rec->steps) {
    if (s.kind == StepKind::kKernel) ++kernels;
    if (s.kind == StepKind::kOpaque) ++opaque;
    staged += static_cast<int64_t>(s.staged.size());
    if (s.followed.argument >= 0) ++scalars;
  }
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "kernel_nodes", (long long)kernels, "opaque_steps",
                       (long long)opaque, "staged_inputs", (long long)staged, "host_scalars", (long long)scalars,
                       "replays", (long long)rec->replays,
                       "divergences", (long long)rec->divergences, "patched_nodes", (long long)rec->patched_nodes);
}

// time_replays(on: bool): from now on, sum where each replay's host time goes (ReplayTimes), from zero; or stop.
PyObject* recording_time_replays(PyObject* self, PyObject* on) {
  Recording* rec = as_recording(self);
  delete rec->times;
  rec->times = PyObject_IsTrue(on) ? new ReplayTimes() : nullptr;
  Py_RETURN_NONE;
}

// times: None, or the ReplayTimes summed since time_replays(True), in nanoseconds.
PyObject* recording_times(PyObject* self, void*) {
  const ReplayTimes* t = as_recording(self)->times;
  if (t == nullptr) Py_RETURN_NONE;
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L}", "replays", (long long)t->replays, "program", (long long)t->program,
                       "opaque_steps", (long long)t->opaque_steps, "triton_steps", (long long)t->triton_steps,
                       "launch", (long long)t->launch, "result_copies", (long long)t->result_copies);
}

PyMethodDef recording_methods[] = {
    {"time_replays", recording_time_replays, METH_O, "time_replays(on): sum the replays' host time by phase"},
    {"begin_capture", recording_begin_capture, METH_O, "begin_capture(keepalive): capture torch's current stream"},
    {"end_capture", recording_end_capture, METH_NOARGS, "end_capture(): end the capture, instantiate, replay from now on"},
    {"written", recording_written, METH_NOARGS, "outside tensors the recorded steps may write"},
    {"forget_written", recording_forget_written, METH_NOARGS, "drop the references written() returns"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef recording_getset[] = {
    {"failure", recording_failure, nullptr, "why the program is not a graph, or why the last replay diverged", nullptr},
    {"counts", recording_counts, nullptr, "steps, replays, divergences and patched nodes", nullptr},
    {"times", recording_times, nullptr, "host ns by phase summed since time_replays(True), or None", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace


PyTypeObject RecordingType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool ready_recording_type() {
  PyTypeObject& t = RecordingType;
  t.tp_name = "trident.runtime.GraphRecording";
  t.tp_doc = "GraphRecording(device, constants): a specialization's host program recorded as a CUDA graph";
  t.tp_basicsize = sizeof(Recording);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t.tp_new = recording_new;
  t.tp_dealloc = recording_dealloc;
  t.tp_traverse = recording_traverse;
  t.tp_clear = recording_clear;
  t.tp_methods = recording_methods;
  t.tp_getset = recording_getset;
  return PyType_Ready(&t) == 0;
}

}  // namespace trident::graphs
