/*
 * entry.cpp — the Entry type: the callable a jitted function becomes.
 *
 * A call binds its arguments into parameter-order slots, hashes their structure (types; dtype, device, rank
 * and flags of tensors; identity of True/False/None) into a key, and tries the specializations compiled for
 * that key in the order they were added: the first whose guard accepts the slots runs. That is the fast path,
 * and it neither allocates Python objects nor runs Python code of its own. Anything else — a binding the
 * compiled signature does not cover, an unseen key, every guard saying no — is a miss: the original call goes
 * unchanged to the Python miss handler, which compiles and add_spec()s the new specialization.
 *
 * A function with **kwargs binds the keywords it has been called with as keyword-only parameters of their own,
 * which the miss handler appends (add_keyword) with a default that stands for "not passed"; a call passing a
 * keyword not seen before misses. A result that Python builds from its parts (a dataclass such as Hugging
 * Face's ModelOutput) comes back from the compiled run as a tuple headed by a ResultBuilder, which the entry
 * calls (the result's own constructor) before returning.
 */
#include <unordered_map>
#include <vector>

#include "runtime_internal.h"
#include "graphs/spec_graphs.h"

#include <structmember.h>  // PyMemberDef and T_* (still the spelling that works on 3.11 and 3.12)

namespace {

using trident::graphs::ReplayOutcome;
using trident::graphs::SpecGraphs;

struct Spec {
  trident_guard_fn guard;
  trident_run_fn run;
  TridentSpecContext* ctx;
  PyObject* context;    // strong: owns *ctx
  PyObject* keepalive;  // strong: whatever owns the guard/run machine code (the JIT engine)
  uint64_t hits;
  // Strong, or NULL until the graph recorder is first asked about it: its CUDA graph recordings and when they
  // replay (graphs/spec_graphs.h).
  SpecGraphs* graphs;
};

struct EntryState {
  std::vector<Spec> specs;                                   // by spec index, in insertion order
  std::unordered_map<uint64_t, std::vector<uint32_t>> by_key;  // structural key -> spec indices
  // Bumped by every add_spec/clear. Guards and runs may call Python that changes the entry, so the fast
  // path stops trusting its references into the containers above when this moves.
  uint64_t version = 0;
  uint64_t clears = 0;  // bumped by clear() only: spec indices taken before then are stale
};

struct EntryObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* dict;          // instance __dict__ (functools.update_wrapper writes __name__, __wrapped__, ...)
  PyObject* weakrefs;
  PyObject* name;
  PyObject* miss_handler;
  PyObject* param_names;   // tuple of interned str, in parameter order
  PyObject** defaults;     // n_params entries, strong or NULL (no default: the argument is required)
  PyObject* defaults_dict;  // the dict given to the constructor, for introspection
  Py_ssize_t n_params;
  Py_ssize_t n_positional;  // parameters [0, n_positional) are positional-or-keyword, the rest keyword-only
  unsigned long long misses;
  EntryState* state;
  PyObject* graph_recorder;  // strong or NULL: records CUDA graphs (graphs/spec_graphs.h, record_hit)
};

EntryObject* as_entry(PyObject* obj) { return reinterpret_cast<EntryObject*>(obj); }

// Slots live on the C stack for the usual parameter counts; only long signatures touch the heap.
struct SlotBuffer {
  static constexpr Py_ssize_t kInline = 16;
  PyObject* local[kInline];
  PyObject** data;
  explicit SlotBuffer(Py_ssize_t n)
      : data(n <= kInline ? local : static_cast<PyObject**>(PyMem_Malloc(sizeof(PyObject*) * n))) {}
  ~SlotBuffer() {
    if (data != local) PyMem_Free(data);
  }
  SlotBuffer(const SlotBuffer&) = delete;
  SlotBuffer& operator=(const SlotBuffer&) = delete;
};

// --- The fast path ---------------------------------------------------------------------------------------

Py_ssize_t find_parameter(const EntryObject* self, PyObject* keyword) {
  // Keyword names from call sites and parameter names are both interned in practice: pointers first.
  for (Py_ssize_t p = 0; p < self->n_params; ++p) {
    if (PyTuple_GET_ITEM(self->param_names, p) == keyword) return p;
  }
  for (Py_ssize_t p = 0; p < self->n_params; ++p) {
    if (PyUnicode_Compare(PyTuple_GET_ITEM(self->param_names, p), keyword) == 0) return p;
  }
  return -1;
}

// Binds a vectorcall into `slots` (borrowed, parameter order). false for anything the compiled signature
// does not take as is; the miss handler, a Python function, then binds again and raises the TypeError.
bool bind_arguments(const EntryObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames,
                    PyObject** slots) {
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs > self->n_positional) return false;
  for (Py_ssize_t i = 0; i < self->n_params; ++i) slots[i] = i < nargs ? args[i] : nullptr;
  if (kwnames != nullptr) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
      const Py_ssize_t p = find_parameter(self, PyTuple_GET_ITEM(kwnames, k));
      if (p < 0 || slots[p] != nullptr) return false;  // unknown, or given twice
      slots[p] = args[nargs + k];
    }
  }
  for (Py_ssize_t i = 0; i < self->n_params; ++i) {
    if (slots[i] == nullptr) {
      if (self->defaults[i] == nullptr) return false;  // a required argument is missing
      slots[i] = self->defaults[i];
    }
  }
  return true;
}

inline uint64_t mix(uint64_t h, uint64_t word) {
  // splitmix64's finalizer over (h ^ word): nearby pointers and small enums spread over all 64 bits.
  uint64_t z = (h ^ word) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// The key selects candidates only; guards decide. A collision costs a guard call, never a wrong result.
uint64_t structural_key(PyObject* const* slots, Py_ssize_t n) {
  uint64_t h = static_cast<uint64_t>(n);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* obj = slots[i];
    h = mix(h, reinterpret_cast<uintptr_t>(Py_TYPE(obj)));
    TridentTensorMeta meta;
    if (trident_read_tensor(obj, &meta)) {
      h = mix(h, static_cast<uint64_t>(meta.dtype) | static_cast<uint64_t>(meta.device_type) << 8 |
                     static_cast<uint64_t>(meta.device_index & 0xffff) << 16 | static_cast<uint64_t>(meta.dim) << 32);
      h = mix(h, static_cast<uint64_t>(meta.flags));
    } else if (obj == Py_True || obj == Py_False || obj == Py_None) {
      h = mix(h, reinterpret_cast<uintptr_t>(obj));
    }
  }
  return h;
}

enum class Outcome { kHit, kMiss, kError };

PyObject* slots_tuple(const EntryObject* self, PyObject* const* slots) {
  PyObject* tuple = PyTuple_New(self->n_params);
  if (tuple == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < self->n_params; ++i) PyTuple_SET_ITEM(tuple, i, Py_NewRef(slots[i]));
  return tuple;
}

PyObject* new_runner(EntryObject* self, uint32_t index, PyObject* slots);

// The call's result, from the graph recorder (which runs the call through a runner), or NULL with an error set.
PyObject* record_graph(EntryObject* self, uint32_t index, SpecGraphs* graphs, uint64_t hits, PyObject* const* slots) {
  PyObject* tuple = slots_tuple(self, slots);
  if (tuple == nullptr) return nullptr;
  PyObject* run = new_runner(self, index, tuple);
  PyObject* recorder = Py_NewRef(self->graph_recorder);
  PyObject* result = run == nullptr ? nullptr
                                    : trident::graphs::record_hit(graphs, recorder, run, index, tuple, hits);
  Py_DECREF(recorder);
  Py_XDECREF(run);
  Py_DECREF(tuple);
  return result;
}

enum class RunWay { kDirect, kDone, kFailed };

// A hit of a specialization with graphs: replays one of its recordings, or records one when its SpecGraphs says so
// (kDone: *out holds the result; kFailed: a Python error is set), or leaves the call to the direct run (kDirect).
// `spec` is the caller's copy; `clears`, the entry's clear() count when the caller took it.
RunWay run_with_graphs(EntryObject* self, uint32_t index, const Spec& spec, PyObject* const* slots, uint64_t clears,
                       PyObject** out) {
  SpecGraphs* graphs = spec.graphs;
  if (graphs == nullptr) {  // the first hit with a recorder: made now, in the entry's own spec
    if ((graphs = trident::graphs::new_spec_graphs()) == nullptr) return RunWay::kFailed;
    self->state->specs[index].graphs = graphs;
  }
  Py_INCREF(graphs);  // a replay or recording runs Python, which may clear() the entry
  RunWay way = RunWay::kDirect;
  bool not_here = false;  // no graph may run for this call: no recording either
  if (!graphs->policy.paused(spec.hits) && PyList_GET_SIZE(graphs->recordings) > 0) {
    switch (trident::graphs::replay_hit(graphs, spec.run, spec.ctx, slots, out, spec.hits)) {
      case ReplayOutcome::kReplayed: way = RunWay::kDone; break;
      case ReplayOutcome::kError: way = RunWay::kFailed; break;
      case ReplayOutcome::kNotHere: not_here = true; break;
      case ReplayOutcome::kDirect: break;  // a graph miss: it may pause replay, which wants_recording reads
    }
  }
  // A spec index taken before a clear() may name another specialization now: no recording for it.
  if (way == RunWay::kDirect && !not_here && self->graph_recorder != nullptr && self->state->clears == clears &&
      trident::graphs::wants_recording(graphs, spec.hits)) {
    // Python records (and proves) the graph, running this call; rare, like a miss.
    *out = record_graph(self, index, graphs, spec.hits, slots);
    way = *out != nullptr ? RunWay::kDone : RunWay::kFailed;
  }
  Py_DECREF(graphs);
  return way;
}

// Bind, key, select, run — without the miss handler. On kHit *result holds the run's new reference; on
// kError a Python exception is set.
Outcome call_specialization(EntryObject* self, PyObject* const* args, size_t nargsf, PyObject* kwnames,
                            PyObject** result) {
  SlotBuffer slots(self->n_params);
  if (slots.data == nullptr) {
    PyErr_NoMemory();
    return Outcome::kError;
  }
  if (!bind_arguments(self, args, nargsf, kwnames, slots.data)) return Outcome::kMiss;
  EntryState* state = self->state;
  const auto found = state->by_key.find(structural_key(slots.data, self->n_params));
  if (found == state->by_key.end()) return Outcome::kMiss;

  const uint64_t version = state->version;
  const uint64_t clears = state->clears;
  const std::vector<uint32_t>& candidates = found->second;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const uint32_t index = candidates[i];
    // A copy, plus references to what owns the code and its context: a guard or run that calls Python
    // may clear() the entry, and the code must not be freed under it.
    const Spec spec = state->specs[index];
    Py_INCREF(spec.context);
    Py_INCREF(spec.keepalive);
    if (spec.guard(spec.ctx, slots.data) != TRIDENT_GUARD_MATCH) {
      Py_DECREF(spec.context);
      Py_DECREF(spec.keepalive);
      if (state->version != version) return Outcome::kMiss;  // `candidates` may be gone: let Python retry
      continue;
    }
    PyObject* out = nullptr;
    int32_t status = TRIDENT_OK;
    // Graphs, where there is a recorder or there were graphs. The copy holds no reference to them: after a
    // clear() (a guard may run Python) they may be gone.
    const bool graphs = (self->graph_recorder != nullptr || spec.graphs != nullptr) && state->clears == clears;
    const RunWay way = graphs ? run_with_graphs(self, index, spec, slots.data, clears, &out) : RunWay::kDirect;
    if (way == RunWay::kDirect) status = spec.run(spec.ctx, slots.data, &out);
    if (way == RunWay::kFailed) status = TRIDENT_ERROR;
    Py_DECREF(spec.context);
    Py_DECREF(spec.keepalive);
    if (status != TRIDENT_OK) {
      Py_XDECREF(out);
      // A run that set a Python error (e.g. from a Python callback or kernel) keeps that exact exception.
      if (!PyErr_Occurred()) trident::raise_last_error();
      return Outcome::kError;
    }
    if (out == nullptr) {
      PyErr_SetString(PyExc_SystemError, "trident: a compiled specialization succeeded without a result");
      return Outcome::kError;
    }
    if (state->clears == clears) ++state->specs[index].hits;
    if ((out = trident::finish_result(out)) == nullptr) return Outcome::kError;  // the result's constructor raised
    *result = out;
    return Outcome::kHit;
  }
  return Outcome::kMiss;
}

PyObject* entry_vectorcall(PyObject* callable, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  EntryObject* self = as_entry(callable);
  PyObject* result = nullptr;
  switch (call_specialization(self, args, nargsf, kwnames, &result)) {
    case Outcome::kHit: return result;
    case Outcome::kError: return nullptr;
    case Outcome::kMiss: break;
  }
  ++self->misses;
  if (self->miss_handler == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "trident: this entry has been cleared (no miss handler)");
    return nullptr;
  }
  // The original arguments, untouched (nargsf keeps PY_VECTORCALL_ARGUMENTS_OFFSET: we never wrote args[-1]).
  return PyObject_Vectorcall(self->miss_handler, args, nargsf, kwnames);
}

// --- Methods (slow path: Python calls them on a miss, in tests and tools) --------------------------------

PyObject* entry_structural_key(PyObject* self_obj, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  EntryObject* self = as_entry(self_obj);
  SlotBuffer slots(self->n_params);
  if (slots.data == nullptr) return PyErr_NoMemory();
  // The same two functions the fast path uses, so the key a miss handler registers is the key calls compute.
  if (!bind_arguments(self, args, static_cast<size_t>(nargs), kwnames, slots.data)) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(structural_key(slots.data, self->n_params));
}

PyObject* entry_try_call(PyObject* self_obj, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* result = nullptr;
  switch (call_specialization(as_entry(self_obj), args, static_cast<size_t>(nargs), kwnames, &result)) {
    case Outcome::kHit: return Py_BuildValue("(ON)", Py_True, result);
    case Outcome::kError: return nullptr;
    case Outcome::kMiss: break;
  }
  return Py_BuildValue("(OO)", Py_False, Py_None);
}

PyObject* entry_add_spec(PyObject* self_obj, PyObject* args) {
  unsigned long long key = 0;
  PyObject* guard_address = nullptr;
  PyObject* run_address = nullptr;
  PyObject* context = nullptr;
  PyObject* keepalive = nullptr;
  if (!PyArg_ParseTuple(args, "KOOO!O:add_spec", &key, &guard_address, &run_address, &trident::ContextType, &context,
                        &keepalive)) {
    return nullptr;
  }
  auto guard = reinterpret_cast<trident_guard_fn>(PyLong_AsVoidPtr(guard_address));
  if (guard == nullptr && PyErr_Occurred()) return nullptr;
  auto run = reinterpret_cast<trident_run_fn>(PyLong_AsVoidPtr(run_address));
  if (run == nullptr && PyErr_Occurred()) return nullptr;
  if (guard == nullptr || run == nullptr) {
    PyErr_SetString(PyExc_ValueError, "add_spec: guard and run addresses must be non-zero");
    return nullptr;
  }
  EntryState* state = as_entry(self_obj)->state;
  const auto index = static_cast<uint32_t>(state->specs.size());
  Py_INCREF(context);
  Py_INCREF(keepalive);
  state->specs.push_back(Spec{guard, run, trident::context_struct(context), context, keepalive, 0, nullptr});
  state->by_key[key].push_back(index);
  ++state->version;
  return PyLong_FromUnsignedLong(index);
}

void release_specs(EntryState* state) {
  // Empty the containers before dropping references: a keepalive's finalizer may call back into the entry.
  std::vector<Spec> specs;
  specs.swap(state->specs);
  state->by_key.clear();
  ++state->version;
  ++state->clears;
  for (const Spec& spec : specs) {
    Py_DECREF(spec.context);
    Py_DECREF(spec.keepalive);
    Py_XDECREF(spec.graphs);
  }
}

// add_keyword(name, default) -> int: a keyword-only parameter appended (its slot index), bound when a call passes
// `name` and `default` otherwise. Every call has one more slot from now on: the specializations added so far
// are dropped from the key table (they stay in the list: indices, hits and graphs keep), since their guards
// never read the new slot. For **kwargs: the miss handler adds each keyword only **kwargs receives.
PyObject* entry_add_keyword(PyObject* self_obj, PyObject* args) {
  EntryObject* self = as_entry(self_obj);
  PyObject* name = nullptr;
  PyObject* default_value = nullptr;
  if (!PyArg_ParseTuple(args, "UO:add_keyword", &name, &default_value)) return nullptr;
  if (!PyUnicode_CheckExact(name)) {
    PyErr_SetString(PyExc_TypeError, "add_keyword: name must be a str");
    return nullptr;
  }
  if (find_parameter(self, name) >= 0) return PyErr_Format(PyExc_ValueError, "add_keyword: %R is a parameter already", name);
  const Py_ssize_t n = self->n_params;
  PyObject* position = PyLong_FromSsize_t(n);
  if (position == nullptr) return nullptr;
  if (PyDict_SetItem(self->defaults_dict, position, default_value) < 0) return Py_DECREF(position), nullptr;
  auto* defaults = static_cast<PyObject**>(PyMem_Realloc(self->defaults, sizeof(PyObject*) * (n + 1)));
  PyObject* names = PyTuple_New(n + 1);
  if (defaults == nullptr || names == nullptr) {
    if (defaults != nullptr) self->defaults = defaults;
    PyDict_DelItem(self->defaults_dict, position);
    Py_DECREF(position);
    Py_XDECREF(names);
    return PyErr_NoMemory();
  }
  self->defaults = defaults;
  for (Py_ssize_t i = 0; i < n; ++i) PyTuple_SET_ITEM(names, i, Py_NewRef(PyTuple_GET_ITEM(self->param_names, i)));
  Py_INCREF(name);
  PyUnicode_InternInPlace(&name);
  PyTuple_SET_ITEM(names, n, name);
  // Published together: a binding reads param_names and defaults up to n_params.
  Py_SETREF(self->param_names, names);
  self->defaults[n] = Py_NewRef(default_value);
  self->n_params = n + 1;
  EntryState* state = self->state;
  state->by_key.clear();
  ++state->version;
  return position;
}

PyObject* entry_clear_specs(PyObject* self_obj, PyObject*) {
  release_specs(as_entry(self_obj)->state);
  Py_RETURN_NONE;
}

PyObject* entry_hits(PyObject* self_obj, PyObject*) {
  const std::vector<Spec>& specs = as_entry(self_obj)->state->specs;
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(specs.size()));
  if (list == nullptr) return nullptr;
  for (size_t i = 0; i < specs.size(); ++i) {
    PyObject* count = PyLong_FromUnsignedLongLong(specs[i].hits);
    if (count == nullptr) return Py_DECREF(list), nullptr;
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), count);
  }
  return list;
}

// set_graph_recorder(recorder): recorder(run, index, slots) -> RecordOutcome is called instead of the run when a
// specialization's SpecGraphs wants a recording (None: never).
PyObject* entry_set_graph_recorder(PyObject* self_obj, PyObject* recorder) {
  EntryObject* self = as_entry(self_obj);
  if (recorder != Py_None && !PyCallable_Check(recorder)) {
    PyErr_SetString(PyExc_TypeError, "set_graph_recorder: recorder must be callable or None");
    return nullptr;
  }
  Py_XSETREF(self->graph_recorder, recorder == Py_None ? nullptr : Py_NewRef(recorder));
  Py_RETURN_NONE;
}

bool spec_index(EntryObject* self, unsigned index) {
  if (index < self->state->specs.size()) return true;
  PyErr_Format(PyExc_IndexError, "no specialization %u", index);
  return false;
}

// graphs(index) -> SpecGraphs | None: the specialization's CUDA graphs (graphs/spec_graphs.h); None until the graph
// recorder was first asked about it.
PyObject* entry_graphs(PyObject* self_obj, PyObject* arg) {
  EntryObject* self = as_entry(self_obj);
  const unsigned long index = PyLong_AsUnsignedLong(arg);
  if (PyErr_Occurred() || !spec_index(self, index)) return nullptr;
  PyObject* graphs = reinterpret_cast<PyObject*>(self->state->specs[index].graphs);
  return Py_NewRef(graphs != nullptr ? graphs : Py_None);
}

// One call of a specialization for the graph recorder: its run function on `slots` (what a hit binds) in a
// TRIDENT_RUN_* mode: directly, recording into `recording` (the caller captures) or replaying it (RuntimeError
// with the reason when the replay diverges).
PyObject* run_spec(EntryObject* self, unsigned index, PyObject* slots, int mode, PyObject* recording) {
  if (!spec_index(self, index)) return nullptr;
  if (PyTuple_GET_SIZE(slots) != self->n_params) {
    PyErr_SetString(PyExc_ValueError, "Entry.runner: one slot per parameter");
    return nullptr;
  }
  if (mode != TRIDENT_RUN_DIRECT && !PyObject_TypeCheck(recording, &trident::graphs::RecordingType)) {
    PyErr_SetString(PyExc_TypeError, "Entry.runner: recording and replaying need a GraphRecording");
    return nullptr;
  }
  const Spec spec = self->state->specs[index];
  Py_INCREF(spec.context);
  Py_INCREF(spec.keepalive);
  PyObject* const* items = &PyTuple_GET_ITEM(slots, 0);
  PyObject* out = nullptr;
  int32_t status = TRIDENT_OK;
  if (mode == TRIDENT_RUN_REPLAY) {
    switch (trident::graphs::replay(recording, spec.run, spec.ctx, items, &out, false)) {
      case ReplayOutcome::kReplayed: break;
      case ReplayOutcome::kError: status = TRIDENT_ERROR; break;
      case ReplayOutcome::kDirect:
      case ReplayOutcome::kNotHere:
        status = TRIDENT_ERROR;
        PyErr_SetString(PyExc_RuntimeError, "the replay ran nothing: it diverged from the recording");
    }
  } else {
    status = mode == TRIDENT_RUN_RECORD ? trident::graphs::record(recording, spec.run, spec.ctx, items, &out)
                                        : spec.run(spec.ctx, items, &out);
    if (status != TRIDENT_OK && !PyErr_Occurred()) trident::raise_last_error();
  }
  Py_DECREF(spec.context);
  Py_DECREF(spec.keepalive);
  if (status != TRIDENT_OK) {
    Py_XDECREF(out);
    return nullptr;
  }
  return out;
}

// What Entry.runner(index, slots) returns: run(mode, recording=None) runs that call of the specialization
// (run_spec). The recorder gets one and needs nothing else of the entry.
struct RunnerObject {
  PyObject_HEAD
  PyObject* entry;  // strong
  unsigned index;
  PyObject* slots;  // strong: a tuple, one item per parameter
};

PyTypeObject RunnerType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject* new_runner(EntryObject* self, uint32_t index, PyObject* slots) {
  auto* run = PyObject_GC_New(RunnerObject, &RunnerType);
  if (run == nullptr) return nullptr;
  run->entry = Py_NewRef(reinterpret_cast<PyObject*>(self));
  run->index = index;
  run->slots = Py_NewRef(slots);
  PyObject_GC_Track(run);
  return reinterpret_cast<PyObject*>(run);
}

PyObject* runner_call(PyObject* self_obj, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"mode", "recording", nullptr};
  int mode = TRIDENT_RUN_DIRECT;
  PyObject* recording = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i|O:run", const_cast<char**>(kwlist), &mode, &recording)) {
    return nullptr;
  }
  auto* run = reinterpret_cast<RunnerObject*>(self_obj);
  if (run->entry == nullptr) return PyErr_Format(PyExc_RuntimeError, "this runner has been cleared");
  return run_spec(as_entry(run->entry), run->index, run->slots, mode, recording);
}

int runner_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<RunnerObject*>(self_obj)->entry);
  Py_VISIT(reinterpret_cast<RunnerObject*>(self_obj)->slots);
  return 0;
}

int runner_clear(PyObject* self_obj) {
  Py_CLEAR(reinterpret_cast<RunnerObject*>(self_obj)->entry);
  Py_CLEAR(reinterpret_cast<RunnerObject*>(self_obj)->slots);
  return 0;
}

void runner_dealloc(PyObject* self_obj) {
  PyObject_GC_UnTrack(self_obj);
  runner_clear(self_obj);
  Py_TYPE(self_obj)->tp_free(self_obj);
}

// runner(index, slots) -> run (for the graph recorder and tests).
PyObject* entry_runner(PyObject* self_obj, PyObject* args) {
  EntryObject* self = as_entry(self_obj);
  unsigned index = 0;
  PyObject* slots = nullptr;
  if (!PyArg_ParseTuple(args, "IO!:runner", &index, &PyTuple_Type, &slots) || !spec_index(self, index)) return nullptr;
  return new_runner(self, index, slots);
}

// --- Type plumbing ---------------------------------------------------------------------------------------

// Entry(name, miss_handler, param_names, n_positional, defaults)
PyObject* entry_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"name", "miss_handler", "param_names", "n_positional", "defaults", nullptr};
  PyObject* name = nullptr;
  PyObject* miss_handler = nullptr;
  PyObject* param_names = nullptr;
  Py_ssize_t n_positional = 0;
  PyObject* defaults = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "UOO!nO!:Entry", const_cast<char**>(kwlist), &name, &miss_handler,
                                   &PyTuple_Type, &param_names, &n_positional, &PyDict_Type, &defaults)) {
    return nullptr;
  }
  if (!PyCallable_Check(miss_handler)) {
    PyErr_SetString(PyExc_TypeError, "Entry: miss_handler must be callable");
    return nullptr;
  }
  const Py_ssize_t n_params = PyTuple_GET_SIZE(param_names);
  if (n_positional < 0 || n_positional > n_params) {
    PyErr_Format(PyExc_ValueError, "Entry: n_positional must be in [0, %zd], got %zd", n_params, n_positional);
    return nullptr;
  }
  // Interned copies make keyword matching a pointer comparison for names that come from source code.
  PyObject* names = PyTuple_New(n_params);
  if (names == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < n_params; ++i) {
    PyObject* item = PyTuple_GET_ITEM(param_names, i);
    if (!PyUnicode_CheckExact(item)) {
      Py_DECREF(names);
      PyErr_SetString(PyExc_TypeError, "Entry: param_names must be a tuple of str");
      return nullptr;
    }
    Py_INCREF(item);
    PyUnicode_InternInPlace(&item);
    PyTuple_SET_ITEM(names, i, item);
  }

  auto* self = as_entry(type->tp_alloc(type, 0));
  if (self == nullptr) return Py_DECREF(names), nullptr;
  PyObject* self_obj = reinterpret_cast<PyObject*>(self);
  self->vectorcall = entry_vectorcall;
  self->state = new EntryState();
  self->param_names = names;
  self->n_params = n_params;
  self->n_positional = n_positional;
  Py_INCREF(name);
  self->name = name;
  Py_INCREF(miss_handler);
  self->miss_handler = miss_handler;
  Py_INCREF(defaults);
  self->defaults_dict = defaults;
  self->defaults = static_cast<PyObject**>(PyMem_Calloc(n_params > 0 ? n_params : 1, sizeof(PyObject*)));
  if (self->defaults == nullptr) return Py_DECREF(self_obj), PyErr_NoMemory();

  PyObject* position = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t cursor = 0;
  while (PyDict_Next(defaults, &cursor, &position, &value)) {
    const Py_ssize_t p = PyLong_Check(position) ? PyLong_AsSsize_t(position) : -1;
    if (p < 0 || p >= n_params) {
      PyErr_Clear();
      PyErr_SetString(PyExc_ValueError, "Entry: defaults keys must be parameter indices");
      Py_DECREF(self_obj);
      return nullptr;
    }
    Py_INCREF(value);
    Py_XSETREF(self->defaults[p], value);
  }
  // An unwrapped Entry still reports a useful __name__; update_wrapper overwrites it.
  if (PyObject_SetAttrString(self_obj, "__name__", name) < 0) return Py_DECREF(self_obj), nullptr;
  return self_obj;
}

int entry_traverse(PyObject* self_obj, visitproc visit, void* arg) {
  EntryObject* self = as_entry(self_obj);
  Py_VISIT(self->dict);
  Py_VISIT(self->name);
  Py_VISIT(self->miss_handler);
  Py_VISIT(self->param_names);
  Py_VISIT(self->defaults_dict);
  if (self->defaults != nullptr) {
    for (Py_ssize_t i = 0; i < self->n_params; ++i) Py_VISIT(self->defaults[i]);
  }
  if (self->state != nullptr) {
    for (const Spec& spec : self->state->specs) {
      Py_VISIT(spec.context);
      Py_VISIT(spec.keepalive);
      Py_VISIT(spec.graphs);
    }
  }
  Py_VISIT(self->graph_recorder);
  return 0;
}

int entry_clear(PyObject* self_obj) {
  EntryObject* self = as_entry(self_obj);
  Py_CLEAR(self->dict);
  Py_CLEAR(self->miss_handler);
  Py_CLEAR(self->defaults_dict);
  Py_CLEAR(self->graph_recorder);
  if (self->defaults != nullptr) {
    for (Py_ssize_t i = 0; i < self->n_params; ++i) Py_CLEAR(self->defaults[i]);
  }
  if (self->state != nullptr) release_specs(self->state);
  // name and param_names stay: plain strings cannot be part of a cycle, and binding still reads them.
  return 0;
}

void entry_dealloc(PyObject* self_obj) {
  EntryObject* self = as_entry(self_obj);
  PyObject_GC_UnTrack(self_obj);
  if (self->weakrefs != nullptr) PyObject_ClearWeakRefs(self_obj);
  entry_clear(self_obj);
  Py_CLEAR(self->name);
  Py_CLEAR(self->param_names);
  PyMem_Free(self->defaults);
  delete self->state;
  Py_TYPE(self_obj)->tp_free(self_obj);
}

// Makes a jitted function defined in a class body bind like a method: instance.f(x) calls f(instance, x).
PyObject* entry_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* entry_repr(PyObject* self_obj) {
  EntryObject* self = as_entry(self_obj);
  return PyUnicode_FromFormat("<trident.runtime.Entry %R: %zd specializations>", self->name,
                              static_cast<Py_ssize_t>(self->state->specs.size()));
}

PyMethodDef entry_methods[] = {
    {"add_spec", entry_add_spec, METH_VARARGS,
     "add_spec(key, guard_address, run_address, context, keepalive) -> int: spec index; keeps context and "
     "keepalive alive until clear()"},
    {"clear", entry_clear_specs, METH_NOARGS, "drop every specialization (and the references they hold)"},
    {"add_keyword", entry_add_keyword, METH_VARARGS,
     "add_keyword(name, default) -> int: append a keyword-only parameter (its slot); earlier specializations stop "
     "matching"},
    {"set_graph_recorder", entry_set_graph_recorder, METH_O,
     "set_graph_recorder(recorder): record CUDA graphs through recorder(run, index, slots) -> RecordOutcome"},
    {"graphs", entry_graphs, METH_O,
     "graphs(index) -> SpecGraphs | None: the specialization's CUDA graphs (None before the recorder was asked)"},
    {"runner", entry_runner, METH_VARARGS,
     "runner(index, slots) -> run: run(mode, recording=None) runs that call in a TRIDENT_RUN_* mode"},
    {"hits", entry_hits, METH_NOARGS, "hits() -> list[int]: calls each specialization served, by spec index"},
    {"structural_key", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(entry_structural_key)),
     METH_FASTCALL | METH_KEYWORDS, "structural_key(*args, **kwargs) -> int | None (None: binding fails)"},
    {"try_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(entry_try_call)),
     METH_FASTCALL | METH_KEYWORDS,
     "try_call(*args, **kwargs) -> (bool, object): the fast path without the miss handler"},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef entry_members[] = {
    {"name", T_OBJECT, offsetof(EntryObject, name), READONLY, "the jitted function's name"},
    {"miss_handler", T_OBJECT, offsetof(EntryObject, miss_handler), READONLY,
     "called with the original arguments on a miss"},
    {"param_names", T_OBJECT, offsetof(EntryObject, param_names), READONLY, "parameter names, in slot order"},
    {"n_positional", T_PYSSIZET, offsetof(EntryObject, n_positional), READONLY, "positional-or-keyword parameters"},
    {"defaults", T_OBJECT, offsetof(EntryObject, defaults_dict), READONLY, "parameter index -> default value"},
    {"misses", T_ULONGLONG, offsetof(EntryObject, misses), 0, "calls that went to the miss handler (writable)"},
    {nullptr, 0, 0, 0, nullptr},
};

PyGetSetDef entry_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

}  // namespace

PyTypeObject trident::EntryType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool trident::ready_entry_type() {
  PyTypeObject& t = EntryType;
  t.tp_name = "trident.runtime.Entry";
  t.tp_doc = "Entry(name, miss_handler, param_names, n_positional, defaults): a jitted function's native entry";
  t.tp_basicsize = sizeof(EntryObject);
  // METHOD_DESCRIPTOR: `obj.f(x)` may call f(obj, x) without building a bound method, as for functions.
  t.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR;
  t.tp_vectorcall_offset = offsetof(EntryObject, vectorcall);
  t.tp_call = PyVectorcall_Call;
  t.tp_dictoffset = offsetof(EntryObject, dict);
  t.tp_weaklistoffset = offsetof(EntryObject, weakrefs);
  t.tp_new = entry_new;
  t.tp_dealloc = entry_dealloc;
  t.tp_traverse = entry_traverse;
  t.tp_clear = entry_clear;
  t.tp_descr_get = entry_descr_get;
  t.tp_repr = entry_repr;
  t.tp_methods = entry_methods;
  t.tp_members = entry_members;
  t.tp_getset = entry_getset;
  PyTypeObject& runner = RunnerType;
  runner.tp_name = "trident.runtime.Runner";
  runner.tp_doc = "run(mode, recording=None): one call of a specialization, for the graph recorder (Entry.runner)";
  runner.tp_basicsize = sizeof(RunnerObject);
  runner.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC;
  runner.tp_call = runner_call;
  runner.tp_traverse = runner_traverse;
  runner.tp_clear = runner_clear;
  runner.tp_dealloc = runner_dealloc;
  if (!trident::ready_result_builder_type() || PyType_Ready(&runner) < 0 || PyType_Ready(&t) < 0) return false;
  // Entry.ResultBuilder: the one name the runtime's Python side needs (module.cpp lists the module's types).
  if (PyDict_SetItemString(t.tp_dict, "ResultBuilder", reinterpret_cast<PyObject*>(&trident::ResultBuilderType)) < 0) {
    return false;
  }
  PyType_Modified(&t);
  return true;
}
