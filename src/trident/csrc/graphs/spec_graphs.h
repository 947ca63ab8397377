/*
 * graphs/spec_graphs.h — one specialization's CUDA graphs (internal): the object that owns its recordings, the
 * GraphPolicy that says when it replays and when it records (policy.h), and why the recorder last kept no graph.
 * The entry holds one per specialization and, on each hit, asks it to replay or to record; Python reads it as
 * Entry.graphs(index) (explain, tests). The recorder (graphs/recorder.py) is called through record_hit and returns
 * what it made, a RecordOutcome, which this object takes: nothing else adds a recording or changes the policy.
 */
#ifndef TRIDENT_GRAPHS_SPEC_GRAPHS_H
#define TRIDENT_GRAPHS_SPEC_GRAPHS_H

#include "graphs/policy.h"
#include "graphs/replay.h"

namespace trident::graphs {

struct SpecGraphs {
  PyObject_HEAD
  PyObject* recordings;  // list (strong): most recently replayed first, at most kMaxRecordings
  PyObject* refusal;     // str (strong) or NULL: why the recorder kept no graph the last time it did not
  GraphPolicy policy;
};

extern PyTypeObject SpecGraphsType;
bool ready_spec_graphs_type();
// A new, empty one (a new reference), or NULL with a Python error set.
SpecGraphs* new_spec_graphs();

// A hit (`hits` before it) with recordings that are not paused: tries them in turn, most recently replayed
// first. kReplayed: *out holds the result; kDirect: no recording fits (a graph miss, counted); kNotHere: no graph
// may run now (the direct run compiles a new Triton variant, or the caller captures); kError: a Python error is set.
ReplayOutcome replay_hit(SpecGraphs* graphs, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
                         PyObject** out, uint64_t hits);
// Whether a hit that no recording replayed calls the recorder: from the TRIDENT_GRAPH_RECORD_AT_HIT-th hit on,
// unless replay is paused or the policy waits out a backoff (or never records again).
bool wants_recording(const SpecGraphs* graphs, uint64_t hits);
// Calls recorder(run, index, slots), which runs the call (through `run`, an Entry.runner) and returns a
// RecordOutcome (result, recording or None, refusal or None, never); keeps the recording and the refusal. The
// call's result as a new reference, or NULL with a Python error set. The caller holds a reference to `graphs`:
// the recorder runs Python, which may drop the entry's.
PyObject* record_hit(SpecGraphs* graphs, PyObject* recorder, PyObject* run, unsigned index, PyObject* slots,
                     uint64_t hits);

}  // namespace trident::graphs

#endif  // TRIDENT_GRAPHS_SPEC_GRAPHS_H
