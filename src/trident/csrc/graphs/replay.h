/*
 * graphs/replay.h — recording a specialization's host program as a CUDA graph, and replaying it (internal).
 *
 * A recording is made by running the compiled host program once while torch's current stream captures
 * (graphs/replay.cpp says how, and graphs/recorder.py when). A replay runs the same host program again,
 * natively, but in replay mode: every runtime function that would do device work instead checks that its
 * work is the recorded work, or patches the graph where it can, and nothing is launched until the host
 * program finished; then the entry launches the whole graph once. The runtime functions call the hooks
 * below only while `active` is set (one thread-local load on the direct path).
 */
#ifndef TRIDENT_GRAPH_REPLAY_H
#define TRIDENT_GRAPH_REPLAY_H

#include "runtime_internal.h"

#include <string>
#include <vector>

namespace trident::graphs {

struct Recording;
// The recording or replay the calling thread is inside; null during direct execution.
extern thread_local Recording* active;

// Runs an operator for real: (closure, args, nargs, rets, nrets) -> status, as trident_op_call.
using OpRunner = int32_t (*)(const void* closure, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                             int64_t nrets);

// An operator whose kernels the runtime cannot see (ATen, cuBLAS, custom ops, the buffer pool). Recording:
// runs it (stream-captured) and keeps its results and a signature of its inputs (addresses, layouts,
// scalars). Replay: hands out the recorded results when the inputs are the recorded ones, else diverges.
// `written` has bit i set when argument i is written in place; `scalar_results` bit k when result k is a Python
// scalar carried in its slot as 64 bits (op_call.cpp), which a replay hands out as recorded: with the same inputs
// the operator computes the same scalar, since reading device memory on the host would have broken the capture.
int32_t opaque_step(const void* identity, const char* name, const int64_t* args, int64_t nargs, uint64_t written,
                    OpRunner run, const void* closure, AtenTensorHandle* rets, int64_t nrets,
                    uint64_t scalar_results = 0);

// A replay plan's compiled function (lowering/replay_plan.py): computes the words that can change between calls;
// with a non-null result it also builds the call's result from the tensors the plan learned (graphs/replay_plan.cpp).
using WordsFn = int32_t (*)(TridentSpecContext* ctx, PyObject* const* slots, int64_t* words, PyObject** result);

// A native Triton launch, prepared by triton_launch.cpp (everything cuLaunchKernel takes).
constexpr int kMaxLaunchParams = 130;
struct PreparedLaunch {
  void* function;
  unsigned grid[3];
  unsigned block_threads;
  unsigned shared_bytes;
  int32_t device;
  size_t n_params;
  uint64_t param_bits[kMaxLaunchParams];
  void* params[kMaxLaunchParams];
  void* stream;
};
// Recording: launches it on the capturing stream and keeps its graph node. Replay: patches the node where the
// parameters differ. `prepared` null: the launch has no native variant (Triton's launcher would run it), which a
// graph cannot hold.
int32_t triton_step(const void* identity, const char* name, PreparedLaunch* prepared, const int64_t* args,
                    int64_t nargs);

// The native launch of TritonLaunch `launch` for these operands (triton_launch.cpp), as the direct path would
// choose and pack it; tensors may be passed as their data addresses (TAG_INT). 1: prepared; 0: it needs Triton's
// launcher (no variant for this key, a launch hook set, a grid Triton rejects); -1: error set.
int32_t prepare_triton_launch(const void* launch, const int64_t* args, PreparedLaunch* prepared);
// What prepare_triton_launch checks before it looks at the operands: whether launches of `launch` may go native
// now (not disabled, a variant compiled, no launch hook set).
bool triton_launch_native(const void* launch);

// Work a graph cannot hold (an operator returning a Python scalar): refuses the recording, or diverges.
int32_t unsupported(const std::string& why);

// Replay: a result the host program returns that lives in the graph's memory is handed to the caller as a
// fresh tensor, filled after the graph ran (a later replay must not overwrite what the caller holds); results
// that share such memory get views of one fresh copy of the bytes they cover, so they still share it. Sets
// *replacement to the tensor to wrap (t itself when no copy is needed); false with a Python error set on failure.
// Recording: notes which bytes of graph memory the results cover.
bool result_for_caller(AtenTensorHandle t, AtenTensorHandle* replacement);

// The driver entry points graphs need, from libcuda (init_cuda calls it); false when one is missing.
bool resolve_driver(void* libcuda);
// The PTX modules of the recordings' own floating range kernels (graphs/range_kernels.cpp: for sm_70 on, and the
// bfloat16 ones for sm_80 on), for a test that assembles them where no GPU is.
std::vector<std::string> range_kernels_ptx();

// The Recording's Python type (graphs/recording.cpp; module.cpp adds it to the module) and the entry's replay
// (entry.cpp).
extern PyTypeObject RecordingType;
bool ready_recording_type();
enum class ReplayOutcome { kReplayed, kDirect, kNotHere, kError };
// Replays `recording` for one call whose run function is `run`: host program in replay mode, then the graph
// launch and the result copies. kDirect: the call is not the recorded one (nothing ran; run it directly);
// kNotHere: no graph may run here (another stream, the caller's own capture): run it directly.
// count_launches: each Triton node counts as a native launch of its site (a hit's replay; not the proof's).
ReplayOutcome replay(PyObject* recording, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
                     PyObject** result, bool count_launches);
// Whether the recording's last replay diverged on a launch that needs Triton's launcher (a variant Triton has not
// compiled yet: the direct run compiles it, and the graph's node takes it by a patch from then on).
bool diverged_for_launcher(PyObject* recording);
// Runs `run` once in recording mode (the caller set up stream capture).
int32_t record(PyObject* recording, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
               PyObject** result);

}  // namespace trident::graphs

#endif /* TRIDENT_GRAPH_REPLAY_H */
