/*
 * graphs/spec_graphs.cpp — one specialization's CUDA graphs: its recordings, policy and refusal reason
 * (spec_graphs.h), and their Python view, Entry.graphs(index).
 */
#include "graphs/spec_graphs.h"

#include <structmember.h>

namespace trident::graphs {

namespace {

SpecGraphs* as_graphs(PyObject* obj) { return reinterpret_cast<SpecGraphs*>(obj); }

void graphs_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  Py_CLEAR(as_graphs(self)->recordings);
  Py_CLEAR(as_graphs(self)->refusal);
  Py_TYPE(self)->tp_free(self);
}

int graphs_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(as_graphs(self)->recordings);
  return 0;
}

// Empties the list instead of dropping it: the entry may still hold this object and read the list.
int graphs_clear(PyObject* self) {
  PyObject* list = as_graphs(self)->recordings;
  if (list != nullptr && PyList_SetSlice(list, 0, PY_SSIZE_T_MAX, nullptr) < 0) PyErr_Clear();
  return 0;
}

// Room for one more recording: the least recently replayed one (the list's last) goes when it is full.
bool make_room(SpecGraphs* graphs) {
  const Py_ssize_t n = PyList_GET_SIZE(graphs->recordings);
  return n < kMaxRecordings || PyList_SetSlice(graphs->recordings, kMaxRecordings - 1, n, nullptr) == 0;
}

// What the recorder returned: a 4-tuple (result, recording or None, refusal or None, never), the RecordOutcome
// named tuple of graphs/recorder.py. The result as a new reference.
PyObject* take_outcome(SpecGraphs* graphs, PyObject* outcome) {
  if (!PyTuple_Check(outcome) || PyTuple_GET_SIZE(outcome) != 4) {
    return PyErr_Format(PyExc_TypeError, "the graph recorder must return a RecordOutcome, not %R", outcome);
  }
  PyObject* result = PyTuple_GET_ITEM(outcome, 0);
  PyObject* recording = PyTuple_GET_ITEM(outcome, 1);
  PyObject* refusal = PyTuple_GET_ITEM(outcome, 2);
  PyObject* never = PyTuple_GET_ITEM(outcome, 3);
  if ((recording != Py_None && !PyObject_TypeCheck(recording, &RecordingType)) ||
      (refusal != Py_None && !PyUnicode_Check(refusal)) || !PyBool_Check(never)) {
    return PyErr_Format(PyExc_TypeError,
                        "RecordOutcome: recording must be a GraphRecording or None, refusal a str or None and never "
                        "a bool; got %R",
                        outcome);
  }
  if (recording != Py_None && PyList_Insert(graphs->recordings, 0, recording) < 0) return nullptr;
  if (refusal != Py_None) Py_XSETREF(graphs->refusal, Py_NewRef(refusal));
  if (never == Py_True) graphs->policy.never_record = true;
  return Py_NewRef(result);
}

PyObject* get_recordings(PyObject* self, void*) {
  return PyList_GetSlice(as_graphs(self)->recordings, 0, PY_SSIZE_T_MAX);
}

PyObject* get_refusal(PyObject* self, void*) {
  PyObject* refusal = as_graphs(self)->refusal;
  return Py_NewRef(refusal != nullptr ? refusal : Py_None);
}

PyObject* get_record_after_hit(PyObject* self, void*) {
  return PyLong_FromUnsignedLongLong(as_graphs(self)->policy.record_after_hit());
}

PyObject* get_never_record(PyObject* self, void*) { return PyBool_FromLong(as_graphs(self)->policy.never_record); }

PyObject* graphs_repr(PyObject* self) {
  const SpecGraphs* graphs = as_graphs(self);
  const GraphPolicy& p = graphs->policy;
  return PyUnicode_FromFormat(
      "<SpecGraphs: %zd recording(s), %llu replay(s), %llu miss(es), %u recorder call(s), %u pause(s), paused until "
      "hit %llu, record after hit %llu%s, refusal %R>",
      PyList_GET_SIZE(graphs->recordings), (unsigned long long)p.replays, (unsigned long long)p.misses,
      p.recordings_tried, p.pauses, (unsigned long long)p.paused_until_hit,
      (unsigned long long)p.record_after_hit(), p.never_record ? " (never)" : "",
      graphs->refusal != nullptr ? graphs->refusal : Py_None);
}

PyGetSetDef graphs_getset[] = {
    {"recordings", get_recordings, nullptr, "the recordings, most recently replayed first (a copy of the list)",
     nullptr},
    {"refusal", get_refusal, nullptr, "why the recorder kept no graph the last time it did not (None: never so)",
     nullptr},
    {"record_after_hit", get_record_after_hit, nullptr,
     "the hit from which a call no recording fits is recorded (2**64 - 1: never again)", nullptr},
    {"never_record", get_never_record, nullptr, "whether the recorder refused for good", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef graphs_members[] = {
    {"replays", T_ULONGLONG, offsetof(SpecGraphs, policy.replays), READONLY, "hits a recording replayed"},
    {"misses", T_ULONGLONG, offsetof(SpecGraphs, policy.misses), READONLY, "hits no recording fitted"},
    {"paused_until_hit", T_ULONGLONG, offsetof(SpecGraphs, policy.paused_until_hit), READONLY,
     "replay is paused before this hit"},
    {"pauses", T_UINT, offsetof(SpecGraphs, policy.pauses), READONLY, "how often replay paused"},
    {"recordings_tried", T_UINT, offsetof(SpecGraphs, policy.recordings_tried), READONLY,
     "how often the recorder ran"},
    {nullptr, 0, 0, 0, nullptr},
};

}  // namespace

PyTypeObject SpecGraphsType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool ready_spec_graphs_type() {
  PyTypeObject& t = SpecGraphsType;
  t.tp_name = "trident.runtime.SpecGraphs";
  t.tp_doc = "One specialization's CUDA graphs: recordings, replay policy and refusal reason (Entry.graphs(index))";
  t.tp_basicsize = sizeof(SpecGraphs);
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  t.tp_dealloc = graphs_dealloc;
  t.tp_traverse = graphs_traverse;
  t.tp_clear = graphs_clear;
  t.tp_repr = graphs_repr;
  t.tp_getset = graphs_getset;
  t.tp_members = graphs_members;
  return PyType_Ready(&t) == 0;
}

SpecGraphs* new_spec_graphs() {
  auto* graphs = PyObject_GC_New(SpecGraphs, &SpecGraphsType);
  if (graphs == nullptr) return nullptr;
  graphs->recordings = PyList_New(0);
  graphs->refusal = nullptr;
  new (&graphs->policy) GraphPolicy();
  if (graphs->recordings == nullptr) {
    Py_DECREF(graphs);
    return nullptr;
  }
  PyObject_GC_Track(graphs);
  return graphs;
}

ReplayOutcome replay_hit(SpecGraphs* graphs, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
                         PyObject** out, uint64_t hits) {
  // The list stays alive while a replay runs Python (a result's constructor, a Triton launcher).
  PyObject* list = Py_NewRef(graphs->recordings);
  ReplayOutcome outcome = ReplayOutcome::kDirect;
  bool new_variant = false;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(list); ++i) {
    PyObject* recording = Py_NewRef(PyList_GET_ITEM(list, i));
    outcome = replay(recording, run, ctx, slots, out, true);
    new_variant = new_variant || diverged_for_launcher(recording);
    if (outcome == ReplayOutcome::kReplayed && i > 0) {  // most recently replayed first
      PyObject* first = PyList_GET_ITEM(list, 0);
      PyList_SET_ITEM(list, 0, recording);
      PyList_SET_ITEM(list, i, first);
      Py_INCREF(recording);
      Py_DECREF(recording);
    }
    Py_DECREF(recording);
    if (outcome != ReplayOutcome::kDirect) break;
  }
  Py_DECREF(list);
  if (outcome == ReplayOutcome::kReplayed) graphs->policy.on_replay();
  if (outcome == ReplayOutcome::kDirect) graphs->policy.on_miss(hits);
  // A kernel variant Triton has yet to compile: the direct run does, and the recordings patch it in later.
  if (outcome == ReplayOutcome::kDirect && new_variant) return ReplayOutcome::kNotHere;
  return outcome;
}

bool wants_recording(const SpecGraphs* graphs, uint64_t hits) {
  return hits + 1 >= kRecordAtHit && !graphs->policy.paused(hits) && hits >= graphs->policy.record_after_hit();
}

PyObject* record_hit(SpecGraphs* graphs, PyObject* recorder, PyObject* run, unsigned index, PyObject* slots,
                     uint64_t hits) {
  if (!make_room(graphs)) return nullptr;
  graphs->policy.on_record(hits);
  PyObject* outcome = PyObject_CallFunction(recorder, "OIO", run, index, slots);
  PyObject* result = outcome != nullptr ? take_outcome(graphs, outcome) : nullptr;
  Py_XDECREF(outcome);
  return result;
}

}  // namespace trident::graphs
