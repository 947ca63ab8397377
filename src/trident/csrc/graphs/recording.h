/*
 * graphs/recording.h — what a CUDA graph recording holds (internal): the driver entry points graphs use, the
 * recorded steps and the Recording object itself. Shared by the engine that records and replays steps
 * (graphs/replay.cpp) and the Recording's Python type (graphs/recording.cpp).
 */
#ifndef TRIDENT_GRAPH_RECORDING_H
#define TRIDENT_GRAPH_RECORDING_H

#include "graphs/replay.h"

#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/ATen.h>

namespace trident::graphs {

// --- The driver -------------------------------------------------------------------------------------------

using CUresult = int;
using CUgraphNode = void*;
using CUgraph = void*;
using CUgraphExec = void*;
using CUstream = void*;
using CUcontext = void*;

// CUDA_KERNEL_NODE_PARAMS (v1) and CUDA_MEMCPY3D, laid out as cuda.h declares them.
struct KernelNodeParams {
  void* func;
  unsigned grid_x, grid_y, grid_z;
  unsigned block_x, block_y, block_z;
  unsigned shared_bytes;
  void** kernel_params;
  void** extra;
};
struct Memcpy3D {
  size_t src_x_bytes, src_y, src_z, src_lod;
  int src_memory_type;
  const void* src_host;
  uint64_t src_device;
  void* src_array;
  void* reserved0;
  size_t src_pitch, src_height;
  size_t dst_x_bytes, dst_y, dst_z, dst_lod;
  int dst_memory_type;
  void* dst_host;
  uint64_t dst_device;
  void* dst_array;
  void* reserved1;
  size_t dst_pitch, dst_height;
  size_t width_bytes, height, depth;
};
constexpr int kMemoryTypeDevice = 2;  // CU_MEMORYTYPE_DEVICE
// CUDA_MEMSET_NODE_PARAMS
struct MemsetParams {
  uint64_t dst;
  size_t pitch;
  unsigned value;
  unsigned element_size;
  size_t width, height;
};
// CUDA_KERNEL_NODE_PARAMS_v2: v1's fields, then the CUkernel launched when func is null, and its context.
struct KernelNodeParamsV2 {
  KernelNodeParams v1;
  void* kernel;
  CUcontext context;
};

struct Driver {
  CUresult (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void**,
                     void**) = nullptr;
  CUresult (*capture_info)(CUstream, int*, unsigned long long*, CUgraph*, const CUgraphNode**, size_t*) = nullptr;
  CUresult (*set_kernel_params)(CUgraphExec, CUgraphNode, const KernelNodeParams*) = nullptr;
  CUresult (*set_memcpy_params)(CUgraphExec, CUgraphNode, const Memcpy3D*, CUcontext) = nullptr;
  CUresult (*memcpy_async)(uint64_t, uint64_t, size_t, CUstream) = nullptr;
  CUresult (*graph_launch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*begin_capture)(CUstream, int) = nullptr;
  CUresult (*end_capture)(CUstream, CUgraph*) = nullptr;
  CUresult (*instantiate)(CUgraphExec*, CUgraph, unsigned long long) = nullptr;
  CUresult (*destroy_exec)(CUgraphExec) = nullptr;
  CUresult (*destroy_graph)(CUgraph) = nullptr;
  // host scalars (graphs/scalars.cpp)
  CUresult (*memset_d8)(uint64_t, unsigned char, size_t, CUstream) = nullptr;
  CUresult (*memset_d16)(uint64_t, unsigned short, size_t, CUstream) = nullptr;
  CUresult (*memset_d32)(uint64_t, unsigned, size_t, CUstream) = nullptr;
  CUresult (*memset_d2d32)(uint64_t, size_t, unsigned, size_t, size_t, CUstream) = nullptr;
  CUresult (*get_memset_params)(CUgraphNode, MemsetParams*) = nullptr;
  CUresult (*set_memset_params)(CUgraphExec, CUgraphNode, const MemsetParams*, CUcontext) = nullptr;
  CUresult (*kernel_node_params)(CUgraphNode, KernelNodeParamsV2*) = nullptr;
  CUresult (*function_name)(const char**, void*) = nullptr;
  CUresult (*kernel_name)(const char**, void*) = nullptr;
  CUresult (*set_node_enabled)(CUgraphExec, CUgraphNode, unsigned) = nullptr;
  // optional: Trident's own range kernels (graphs/range_kernels.cpp)
  CUresult (*module_load_data)(void**, const void*) = nullptr;
  CUresult (*module_get_function)(void**, void*, const char*) = nullptr;
  // optional, for counts only: the nodes of a recorded graph by type
  CUresult (*graph_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*node_type)(CUgraphNode, int*) = nullptr;
  bool memsets = false;  // all of the host scalars' entry points resolved (CUDA 12.3 and later)
};
constexpr int kCaptureModeThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
constexpr int kNodeTypeMemcpy = 1;         // CU_GRAPH_NODE_TYPE_MEMCPY
constexpr int kNodeTypeMemset = 2;         // CU_GRAPH_NODE_TYPE_MEMSET
extern Driver driver;  // resolved by resolve_driver (graphs/replay.cpp)

// --- Steps ------------------------------------------------------------------------------------------------

enum class StepKind { kOpaque, kKernel, kEmptyLaunch };

// Where a tensor sits among an opaque step's arguments: argument `argument` itself (`item` -1), or item `item` of
// that argument, a Tensor[] or Tensor?[] list. A tensor inside a list is staged, signed and compared as a tensor
// argument is.
struct TensorArgument {
  int64_t argument = -1;
  int64_t item = -1;
};

// An argument tensor of an opaque step (a tensor argument or a list item) that lives outside the graph and may
// move: the step works on a buffer of the graph's, filled by a memcpy node before it (`in`) and, for a tensor
// written in place, copied back by one after it (`out`). Both follow the tensor's address by a patch. A read-only
// tensor an earlier step staged (the same view of the same storage, which no step wrote since) is read from that
// step's buffer instead, with no node of its own: a replay only checks that it is still the tensor the earlier
// step staged (`owner_step`).
struct StagedInput {
  int64_t argument;
  int64_t item;     // the list item staged, or -1: the argument itself
  CUgraphNode in;   // null: read from the owner's copy
  CUgraphNode out;  // null: the argument is only read
  uint64_t address;  // the argument's address the nodes use now
  uint64_t buffer;
  size_t bytes;
  int64_t owner_step = -1, owner_index = -1;  // the step and staged input whose copy this one reads, or -1
};

// Recording: a read-only staged copy later steps may read too, until a step may write its storage.
struct SharedCopy {
  const void* storage;
  int64_t offset;
  std::vector<int64_t> sizes, strides;
  at::ScalarType dtype;
  int64_t step, index;  // the owner's step and staged input
  at::Tensor copy;      // the buffer, with the argument's layout
};

// A host scalar argument that changes, followed by the recording instead of being part of the step's signature
// (graphs/scalars.cpp): a fill's value (aten::full at the position; memset nodes write the result after the
// operator, whose own fill kernel is disabled in the instantiated graph), the operand of arithmetic, an arange's
// start and step and a linspace's start and end (memset nodes write a 0-dim stand-in that the operators or the
// range kernel recorded in its place read), or an arange's end (no node: it decides the length, which must stay
// the recorded one).
struct FollowedScalar {
  int64_t argument = -1;
  int64_t tag_word = 0, value = 0;  // as the last call gave it
  at::ScalarType dtype = at::kByte;  // of the element its memsets write
  CUgraphNode nodes[2] = {nullptr, nullptr};  // one memset; two (low and high words) for 8-byte elements; none
  MemsetParams params[2] = {};  // as the instantiated graph has them now: what each node writes
  at::Tensor stand_in;  // the 0-dim operand the memsets write (arithmetic, arange)
};

// An arange whose start, end and step are followed (Step::followed holds them in that order; arange.start has no
// step: a step of 1): its result is start + step * i, made from the stand-ins, for the recorded length only. A
// followed linspace has none (its length is an int of its signature).
struct FollowedRange {
  int64_t length = -1;  // -1: the step is no arange
  at::ScalarType dtype = at::kLong;
};

struct Step {
  StepKind kind;
  const void* identity;
  std::string name;
  std::vector<int64_t> signature;  // opaque: inputs (staged inputs without their address)
  std::vector<at::Tensor> results;  // opaque: recorded results (undefined for None)
  std::vector<TensorArgument> result_arguments;  // per result: the argument tensor it is (in-place ops), or none
  uint64_t scalar_results = 0;  // bit k: result k is a scalar, whose recorded bits are scalar_bits[k]
  std::vector<int64_t> scalar_bits;
  std::vector<StagedInput> staged;
  uint64_t staged_arguments = 0;  // bit i: argument i is staged
  std::vector<TensorArgument> staged_items;  // the list items staged, in argument then item order
  std::vector<FollowedScalar> followed;
  uint64_t followed_arguments = 0;  // bit i: argument i is followed (left out of the signature but for its tag)
  FollowedRange range;
  // A host scalar the step has that the recording could have followed but did not, and why (graphs/scalars.cpp):
  // a replay whose value differs names it with the reason. Empty: none, or it is followed.
  std::string unfollowed;
  CUgraphNode superseded_fill = nullptr;  // a followed fill: the operator's fill kernel, disabled once instantiated
  // kernel: the node and the parameters it has now
  CUgraphNode node = nullptr;
  void* function = nullptr;
  unsigned grid[3] = {0, 0, 0};
  unsigned block_threads = 0, shared_bytes = 0;
  std::vector<uint64_t> param_bits;  // the launch's parameters as the node has them
};

enum class Mode { kRecord, kReplay };

// Host nanoseconds summed over the replays that launched, by phase: the host program in replay mode, the graph
// launch, and the launches that copy results into fresh tensors. Within the program, the opaque steps' signature
// checks and the Triton steps' compare-and-patch are summed apart (over every replay, diverged ones too); the rest
// is preparing launches, views, symbolic ints and results. For benchmarks/llm/host_profile.py; off by default.
struct ReplayTimes {
  int64_t replays = 0;
  int64_t program = 0, opaque_steps = 0, triton_steps = 0, launch = 0, result_copies = 0;
  int64_t words = 0;  // the replay plan's words function with the result it builds, part of `program` then
  // Every call of replay() for this recording (`tries`), replayed or not, and the ns spent in all of them and in those
  // that did not replay (a divergence, a stream it may not run on): the entry's time outside replay() is what is left.
  int64_t tries = 0, inside = 0, unreplayed = 0;
};

// The bytes of one storage the graph made that the program's results cover, from the recording: a storage two
// results share is handed out as one fresh copy of this span, so the results keep sharing memory as they do
// directly (a view and its base, q and k of one projection).
struct ReturnedSpan {
  int64_t results = 0;
  int64_t begin = 0, end = 0;  // bytes from the storage's start
};

// --- The replay plan (graphs/replay_plan.cpp) ----------------------------------------------------------------------

// One recorded step as the plan sees it: which of its arguments is which word (from the compiler), and what the
// first replay through the host program showed of the rest (learned).
struct PlanStep {
  bool kernel = false;
  std::vector<std::pair<int64_t, int64_t>> changing;  // (argument, word)
  std::vector<int64_t> items;     // per changing argument: the list item the word is the address of, or -1
  std::vector<int64_t> offsets;   // per changing argument: a tensor's address minus its word; 0 for a scalar
  std::vector<int64_t> tags;      // per changing argument: its tag word as the step got it
  std::vector<int64_t> recorded;  // opaque, per changing argument: its value (address or bits) in the recording
  std::vector<int64_t> operands;  // kernel: the launch's operands, tensors as their data addresses (TAG_INT)
  std::vector<int64_t> applied;   // kernel: the changing operands' values its node was last computed from
};

// Learning: the next replay of the host program shows each step's arguments; proving: the next kProofs replays
// compute every node from the plan first, then run the host program, which must find nothing to patch; on: a
// replay runs the words function instead of the host program.
enum class PlanState { kLearning, kProving, kOn, kOff };
// What the host program's replay running now does for the plan: nothing, learn, prove it, or show that the plan
// could not vouch for a call the graph replays.
enum class PlanCheck { kNone, kLearn, kProve, kUnvouched };

// A word a replay from the plan must find at the value it was learned with: an opaque step's changing argument
// that is neither staged nor followed (a cache's address, a word only because the cache is an argument).
struct FixedWord {
  int64_t word;
  int64_t value;  // what plan.words[word] must be: the recorded address or bits minus the learned offset
};

struct Plan {
  WordsFn words_fn = nullptr;
  std::vector<int64_t> words;
  std::vector<PlanStep> steps;  // one per recorded step
  // The steps a replay from the plan computes (kernels, and opaque steps with changing arguments), so that it does
  // not walk the hundreds of opaque steps of an HF model that have nothing to compute (each a cache miss or two).
  // Once learned, an opaque step whose changing arguments are all fixed words leaves it for `fixed`.
  std::vector<uint32_t> live;
  // Once learned: the fixed words of every opaque step, each (word, value) once, in one array a replay scans
  // before the steps (an HF decode step has ~100 such arguments; walking their steps' vectors cost ~20 us a
  // replay on an H100 host, cold after HF's loop).
  std::vector<FixedWord> fixed;
  PlanState state = PlanState::kLearning;
  PlanCheck check = PlanCheck::kNone;
  int proofs = 0, unvouched = 0;
  int64_t since_proof = 0;  // replays from the plan since its last proof
  std::string off_reason;
  size_t n_outputs = 0;  // tensors the words function hands the caller (trident_graph_output)
  std::vector<at::Tensor> outputs;  // the tensors the host program hands the caller, in order (learned)
  std::vector<int64_t> operands;  // scratch: one launch's operands with the words put in (no allocation per replay)
  // Each kernel node holds what its step's `applied` values give: the last replay from the plan computed every node
  // and nothing has patched one since (a replay through the host program may). Then a node whose values did not
  // change is not computed again: the same operands give the same variant and parameters.
  bool nodes_current = false;
  size_t output_cursor = 0;
  int64_t replays = 0, fallbacks = 0;
  int64_t nodes_computed = 0;  // kernel nodes the plan computed (prepared and compared), over all its replays
};

struct Recording {
  PyObject_HEAD
  Mode mode;
  int32_t device;
  std::vector<Step>* steps;
  size_t cursor;  // replay: the next step
  std::unordered_set<const void*>* internal;  // storages the graph's steps made (StorageImpl*)
  std::unordered_set<const void*>* external;  // storages the steps read from outside
  std::unordered_set<const void*>* constants;  // storages of the specialization's constant tensors
  std::unordered_map<const void*, ReturnedSpan>* returned;  // internal storages results live in (recording's)
  std::vector<at::Tensor>* written;             // recording: outside tensors steps may write (for verification)
  std::vector<SharedCopy>* shared_copies;       // recording: staged copies later steps may read
  // replay: (fresh result, graph memory), copied after the launch; a deque, since generated code holds
  // handles to its elements while the host program runs
  std::deque<std::pair<at::Tensor, at::Tensor>>* copies;  // (fresh, source); source undefined: no copy of its own
  std::unordered_map<const void*, at::Tensor>* fresh_spans;  // replay: storage -> the fresh copy of its span
  std::string* failure;    // recording: why this program cannot be a graph; replay: why the last replay diverged
  // the Triton launches a replay makes (their steps' identities, in order), counted per replay for explain without
  // walking every opaque step
  std::vector<const void*>* launches;
  CUgraph graph;         // owned, with its instantiation
  CUgraphExec exec;
  CUstream capture_stream;
  bool capturing;
  CUstream last_stream;  // of the last replay (the legacy default stream is NULL: hence the flag)
  bool replayed_before;
  PyObject* keepalive;    // whatever the graph's memory depends on (graphs/recorder.py: its memory pool)
  int64_t replays, divergences, patched_nodes;
  bool diverged_for_launcher;  // the last replay diverged on a launch Triton's launcher must make (a new variant)
  ReplayTimes* times;  // null unless asked for (time_replays): where the replays' host time went
  Plan* plan;          // null: replays run the host program
};

inline Recording* as_recording(PyObject* obj) { return reinterpret_cast<Recording*>(obj); }
inline const at::Tensor& tensor_at(int64_t value) { return *reinterpret_cast<const at::Tensor*>(value); }

// --- Signatures (graphs/signature.cpp) ------------------------------------------------------------------------

// What a signature leaves out of an opaque step's inputs but for their tags and layouts: bit i of `arguments`,
// argument i (a staged tensor's address, which its memcpy nodes follow; a followed scalar's value, which its
// memsets follow), and the addresses of the staged list items `items` (in argument then item order).
struct FreeInputs {
  uint64_t arguments = 0;
  const std::vector<TensorArgument>* items = nullptr;
};

// The signature of an operator's inputs (tag words, a list's length among them, then per argument, and per item of
// a list, what its work depends on besides memory contents); false when an argument is a tensor a graph cannot
// stand for (a CPU tensor with more than one element is read by the host when the operator runs).
bool signature(const int64_t* args, int64_t nargs, const FreeInputs& free, std::vector<int64_t>* out);
// Whether these inputs have the recorded signature (as signature() would build it, without building it).
bool same_signature(const std::vector<int64_t>& recorded, const int64_t* args, int64_t nargs, const FreeInputs& free);
// Why an opaque step's inputs differ from its recorded signature, for explain: the first argument (and list item)
// that differs, and how.
std::string difference(const Step& step, const int64_t* args, int64_t nargs, const FreeInputs& free);
// Calls f(argument index, list item or -1, tensor) for every tensor among the arguments, list items included.
void for_each_tensor(const int64_t* args, int64_t nargs,
                     const std::function<void(int64_t, int64_t, const at::Tensor&)>& f);
// The tensor at `where` among these arguments; null for None (a null handle or list entry) or a tag that holds no
// tensor there.
const at::Tensor* tensor_argument(const int64_t* args, int64_t nargs, TensorArgument where);
// The bytes of its storage tensor `t` can reach: [*begin, *end) from the storage's start.
void byte_span(const at::Tensor& t, int64_t* begin, int64_t* end);

// The node the last operation captured on `stream` added (its only dependency for the next one); false when
// the stream is not capturing or the next operation would depend on more or fewer nodes than one.
bool last_node(CUstream stream, CUgraphNode* node);

// --- Host scalars (graphs/scalars.cpp) -----------------------------------------------------------------------

// Which host scalar arguments of operator `name` a recording may follow, and how.
struct HostScalar {
  enum Kind { kNone, kFill, kOperand, kRange };
  Kind kind = kNone;
  uint64_t arguments = 0;  // bit i: argument i
};
HostScalar host_scalar(const char* name, const int64_t* args, int64_t nargs);
// Recording, right after the operator ran into the capture on `stream`: when `fill_kernel` (the last node the
// operator added, or null) is ATen's fill kernel and `result` can be written by memset nodes (a non-empty
// contiguous CUDA tensor of 1-, 2-, 4- or 8-byte elements of a dtype a fill converts to), adds them and follows
// the value; false otherwise, with the step left a plain opaque one.
bool record_fill(Step* step, CUstream stream, const at::Tensor& result, int64_t argument, int64_t tag_word,
                 int64_t value, CUgraphNode fill_kernel);
// Recording, instead of running the operator: when `name` is arithmetic or a comparison (kOperand) on a CUDA
// tensor whose operand promotes to an integral, bool, float32 or float64 dtype it fits (alpha 1 for a floating
// one), runs its Tensor overload on a 0-dim stand-in of that dtype written by memset nodes on `stream`, sets
// *result and follows the operand. false: run the operator as a plain opaque step.
bool record_operand(Step* step, CUstream stream, const char* name, const int64_t* args, int64_t nargs,
                    at::Tensor* result);
// Recording, instead of running the operator: when `name` is an arange or linspace (kRange) on the recording's
// device, of an integral dtype with int start, end and step (an arange), or of a floating dtype, makes its
// result from stand-ins of its bounds written by memset nodes (graphs/scalars.cpp), sets *result and follows them.
// false: run the operator as a plain step.
bool record_range(Step* step, CUstream stream, int32_t device, const char* name, const int64_t* args, int64_t nargs,
                  at::Tensor* result);
// Trident's own kernels for a followed float32, float64, half or bfloat16 range (graphs/range_kernels.cpp).
enum class RangeKernel {
  kArange,    // out[i] = first + second * i: an arange's start and step
  kLinspace,  // out has `steps` elements from first to second: a linspace's start and end
};
// The dtype of a range kernel's two operands for a result of `dtype`: float32 for a half or bfloat16 arange (ATen's
// accumulate type), the result's own otherwise.
at::ScalarType range_operand_dtype(RangeKernel kind, at::ScalarType dtype);
// Launches the kernel of `kind` on `stream`, writing the contiguous `out` from the 0-dim `first` and `second` (of
// range_operand_dtype) as ATen's kernel computes it; false when it cannot (another dtype, a driver without module
// loading, a module the driver refused).
bool launch_range_kernel(RangeKernel kind, const at::Tensor& out, const at::Tensor& first, const at::Tensor& second,
                         CUstream stream);
// Whether the kernel of `kind` for `dtype` is loaded on `device` (asked before anything is recorded for the range:
// a stand-in whose memset nodes are in the graph must stay alive with it).
bool range_kernel_ready(RangeKernel kind, at::ScalarType dtype, int32_t device);
// Loads the range kernels into the current context for `device` the first time (ignoring failure: the ranges are
// then not followed). Called before a capture begins.
void load_range_kernels(int32_t device);
// Replay: takes this call's value of followed argument `argument`.
void take_followed(Step* step, int64_t argument, int64_t tag_word, int64_t value);
// Replay, once every followed argument has this call's value: patches the memset nodes whose values convert to
// other bits. false when it cannot (a value does not convert, or gives an arange of another length or one the
// direct call refuses; the driver refused a patch): diverge.
bool replay_followed_scalars(Recording* rec, Step* step);
// After instantiation: disables the operators' own fill kernels, which the memset nodes overwrite.
void disable_superseded_fills(Recording* rec);
inline const void* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// --- Shared by replays with and without the host program (graphs/replay.cpp) ----------------------------------

// Points a staged input's memcpy nodes at the argument's address now (nothing to do when it did not move); false
// when the driver refused.
bool follow_staged(Recording* rec, StagedInput* staged, uint64_t address);
// Gives a kernel node these parameters, patching it where they differ from the ones it has; false when the driver
// refused.
bool patch_kernel(Recording* rec, Step* step, const PreparedLaunch& p);
// After the steps are ready: launches the graph on `stream`, copies results into the caller's fresh tensors.
ReplayOutcome launch_replay(Recording* rec, CUstream stream, PyObject* out, PyObject** result, bool count_launches,
                            int64_t started, int64_t ran);
int64_t now_ns();

// --- The replay plan (graphs/replay_plan.cpp) ----------------------------------------------------------------------

// Whether this replay of a recording whose plan is on goes through the host program to prove the plan once more.
bool proof_due(const Plan* plan);
// Replays a recording whose plan is on without running the host program. kDirect: the plan cannot vouch for this
// call (a new kernel variant, an argument that moved where it may not): replay it through the host program.
ReplayOutcome replay_from_plan(Recording* rec, TridentSpecContext* ctx, PyObject* const* slots, CUstream stream,
                               PyObject** result, bool count_launches);
// Before a replay through the host program: computes the words and, when proving, every node from the plan.
// Sets plan->check to what the replay must do for the plan.
void before_program(Recording* rec, TridentSpecContext* ctx, PyObject* const* slots);
// After it: what it showed (diverged: the program failed or stopped before its last recorded step).
void after_program(Recording* rec, bool diverged, int64_t patched_before);
// During it, for the step at rec->cursor that matched the recording (learning only).
void learn_step(Recording* rec, const int64_t* args, int64_t nargs);
// During it, for each tensor the host program hands the caller: learning keeps it; proving switches the plan off
// when it is not the learned one (storage, offset, sizes, strides, dtype).
void note_output(Recording* rec, const at::Tensor* t);
// Switches the plan off for good, with the reason explain gives.
void plan_off(Plan* plan, const std::string& why);

}  // namespace trident::graphs

#endif /* TRIDENT_GRAPH_RECORDING_H */
