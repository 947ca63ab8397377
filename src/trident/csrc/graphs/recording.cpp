/*
 * graphs/recording.cpp — the Python type of a CUDA graph recording (trident.runtime.GraphRecording): making one,
 * starting and ending the stream capture that records it (graphs/recorder.py drives these), what it reports
 * to Python, and releasing the graph and its memory.
 */
#include "graphs/recording.h"

#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>

namespace trident::graphs {

namespace {

void recording_dealloc(PyObject* self) {
  Recording* rec = as_recording(self);
  PyObject_GC_UnTrack(self);
  if (rec->exec != nullptr) driver.destroy_exec(rec->exec);
  if (rec->graph != nullptr) driver.destroy_graph(rec->graph);
  delete rec->plan;  // its outputs and the steps' results first: their memory returns to the graph's pool, which
  rec->plan = nullptr;  // the keepalive frees
  delete rec->steps;
  rec->steps = nullptr;
  Py_CLEAR(rec->keepalive);
  delete rec->internal;
  delete rec->external;
  delete rec->constants;
  delete rec->returned;
  delete rec->written;
  delete rec->shared_copies;
  delete rec->copies;
  delete rec->fresh_spans;
  delete rec->failure;
  delete rec->launches;
  delete rec->times;
  Py_TYPE(self)->tp_free(self);
}

int recording_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(as_recording(self)->keepalive);
  return 0;
}

int recording_clear(PyObject* self) {
  Recording* rec = as_recording(self);
  if (rec->plan != nullptr) rec->plan->outputs.clear();  // graph memory before the pool that holds it
  if (rec->steps != nullptr) rec->steps->clear();
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
  rec->shared_copies = new std::vector<SharedCopy>();
  rec->copies = new std::deque<std::pair<at::Tensor, at::Tensor>>();
  rec->fresh_spans = new std::unordered_map<const void*, at::Tensor>();
  rec->failure = new std::string();
  rec->launches = new std::vector<const void*>();
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
  load_range_kernels(rec->device);  // a module cannot load while the stream captures
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
  for (const Step& step : *rec->steps) {
    if (step.kind == StepKind::kKernel) rec->launches->push_back(step.identity);
  }
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
  int64_t kernels = 0, opaque = 0, staged = 0, scalars = 0, disabled = 0;  // disabled: superseded fill kernels
  for (const Step& s : *rec->steps) {
    if (s.kind == StepKind::kKernel) ++kernels;
    if (s.kind == StepKind::kOpaque) ++opaque;
    for (const StagedInput& input : s.staged) staged += input.in != nullptr;  // a memcpy node each
    for (const FollowedScalar& f : s.followed) scalars += f.nodes[0] != nullptr;
    disabled += s.superseded_fill != nullptr;
  }
  // The instantiated graph's nodes by type (what its launch costs grows with): -1 where the driver cannot say.
  long long nodes = -1, memsets = -1, memcpys = -1;
  size_t n = 0;
  if (rec->graph != nullptr && driver.graph_nodes != nullptr && driver.graph_nodes(rec->graph, nullptr, &n) == 0) {
    std::vector<CUgraphNode> all(n);
    if (driver.graph_nodes(rec->graph, all.data(), &n) == 0) {
      nodes = static_cast<long long>(n);
      memsets = memcpys = 0;
      for (CUgraphNode node : all) {
        int type = -1;
        if (driver.node_type(node, &type) != 0) continue;
        memcpys += type == kNodeTypeMemcpy;
        memsets += type == kNodeTypeMemset;
      }
    }
  }
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "kernel_nodes", (long long)kernels,
                       "opaque_steps", (long long)opaque, "staged_inputs", (long long)staged, "host_scalars",
                       (long long)scalars, "replays", (long long)rec->replays, "divergences",
                       (long long)rec->divergences, "patched_nodes", (long long)rec->patched_nodes, "graph_nodes",
                       nodes, "memset_nodes", memsets, "memcpy_nodes", memcpys, "disabled_nodes",
                       (long long)disabled);
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
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "replays", (long long)t->replays, "program",
                       (long long)t->program, "opaque_steps", (long long)t->opaque_steps, "triton_steps",
                       (long long)t->triton_steps, "launch", (long long)t->launch, "result_copies",
                       (long long)t->result_copies, "words", (long long)t->words, "tries", (long long)t->tries,
                       "inside", (long long)t->inside, "unreplayed", (long long)t->unreplayed);
}

// set_plan(words_fn: int, words: int, outputs: int, steps: [(kernel, [(argument, item, word)])]): replay without the
// host program once the plan is learned and proven (graphs/replay_plan.cpp); artifact.ReplayPlan has the layout. A plan
// whose steps are not the recording's is kept off, with the reason.
PyObject* recording_set_plan(PyObject* self, PyObject* args) {
  Recording* rec = as_recording(self);
  PyObject *address = nullptr, *steps_arg = nullptr;
  long long n_words = 0, n_outputs = 0;
  if (!PyArg_ParseTuple(args, "OLLO:set_plan", &address, &n_words, &n_outputs, &steps_arg)) return nullptr;
  auto* plan = new Plan();
  plan->words_fn = reinterpret_cast<WordsFn>(PyLong_AsVoidPtr(address));
  plan->words.assign(static_cast<size_t>(std::max(n_words, 1LL)), 0);
  plan->n_outputs = static_cast<size_t>(n_outputs);
  PyObject* steps = PySequence_Fast(steps_arg, "set_plan: steps must be a sequence");
  bool ok = plan->words_fn != nullptr && steps != nullptr;
  for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(steps); ++i) {
    PyObject* changing = nullptr;
    int kernel = 0;
    PlanStep step;
    ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(steps, i), "pO", &kernel, &changing) != 0;
    PyObject* pairs = ok ? PySequence_Fast(changing, "set_plan: a step's arguments must be a sequence") : nullptr;
    ok = pairs != nullptr;
    for (Py_ssize_t j = 0; ok && j < PySequence_Fast_GET_SIZE(pairs); ++j) {
      long long argument = 0, item = -1, word = 0;
      ok = PyArg_ParseTuple(PySequence_Fast_GET_ITEM(pairs, j), "LLL", &argument, &item, &word) != 0;
      if (ok && (argument < 0 || item < -1 || word < 0 || word >= n_words)) {
        PyErr_SetString(PyExc_ValueError, "set_plan: an argument, list item or word out of range");
        ok = false;
      }
      step.changing.emplace_back(argument, word);
      step.items.push_back(item);
    }
    Py_XDECREF(pairs);
    step.kernel = kernel != 0;
    if (step.kernel || !step.changing.empty()) plan->live.push_back(static_cast<uint32_t>(plan->steps.size()));
    plan->steps.push_back(std::move(step));
  }
  Py_XDECREF(steps);
  if (!ok) {
    delete plan;
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "set_plan: the words function's address is 0");
    return nullptr;
  }
  const std::vector<Step>& recorded = *rec->steps;
  if (plan->steps.size() != recorded.size()) {
    plan_off(plan, "the recording has " + std::to_string(recorded.size()) + " steps, the plan " +
                       std::to_string(plan->steps.size()));
  }
  for (size_t i = 0; i < recorded.size() && plan->state != PlanState::kOff; ++i) {
    if (plan->steps[i].kernel != (recorded[i].kind != StepKind::kOpaque)) {
      plan_off(plan, "step " + std::to_string(i) + " (" + recorded[i].name + ") is not of the kind the plan has");
    }
  }
  delete rec->plan;
  rec->plan = plan;
  Py_RETURN_NONE;
}

// plan: None (no plan), or {"state": "learning" | "proving" | "on" | "off", "reason", "replays", "fallbacks",
// "proofs", "nodes_computed", "fixed_words", "live_steps"}.
PyObject* recording_plan(PyObject* self, void*) {
  const Plan* plan = as_recording(self)->plan;
  if (plan == nullptr) Py_RETURN_NONE;
  static const char* states[] = {"learning", "proving", "on", "off"};
  return Py_BuildValue("{s:s,s:s,s:L,s:L,s:i,s:L,s:n,s:n}", "state", states[static_cast<int>(plan->state)], "reason",
                       plan->off_reason.c_str(), "replays", (long long)plan->replays, "fallbacks",
                       (long long)plan->fallbacks, "proofs", plan->proofs, "nodes_computed",
                       (long long)plan->nodes_computed, "fixed_words", static_cast<Py_ssize_t>(plan->fixed.size()),
                       "live_steps", static_cast<Py_ssize_t>(plan->live.size()));
}

PyMethodDef recording_methods[] = {
    {"set_plan", recording_set_plan, METH_VARARGS,
     "set_plan(words_fn, words, outputs, steps): replay without the host program once proven"},
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
    {"plan", recording_plan, nullptr, "the replay plan's state, or None", nullptr},
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
