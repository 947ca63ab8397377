/*
 * graphs/replay.cpp — a specialization's host program as one CUDA graph, replayed with patched parameters.
 *
 * Recording. graphs/recorder.py routes the thread's allocations to a private memory pool of torch's caching
 * allocator, starts stream capture (begin_capture) and runs the host program once through record(). Each runtime
 * function that does device work becomes a step, in program order:
 *  - a native Triton launch is launched into the capture; its node is kept with the parameters it got;
 *  - an opaque operator (ATen, cuBLAS, a custom op, a pooled allocation or matmul) runs into the capture; its
 *    results are kept (their memory belongs to the graph from then on) with a signature of its inputs: tensor
 *    addresses, layouts and dtypes, scalars, 0-dim CPU tensors by value. A small argument from outside the graph
 *    that is not a whole constant (a token tensor, a row of a position table, a column of a block table, the row of
 *    a cache written at a position; a tensor inside a list operand too, item by item) is staged: a memcpy node
 *    copies its bytes into graph memory, the operator works on the copy, and a second memcpy node copies it back
 *    when the operator writes it (contiguous ones only); both follow the argument when it moves. An in-place
 *    operator's result that is such an argument is the argument itself. A host scalar that changes (a fill's value,
 *    the integer operand of arithmetic) is written by memset nodes a replay patches (graphs/scalars.cpp).
 * Views make no device work and run as usual in both modes.
 *
 * Replay. replay() runs the host program again with `active` set: every Triton step computes its launch as
 * a direct launch would (variant, grid, parameters from this call's sizes, ints and pointers) and patches its
 * node where they differ; every opaque step compares its inputs' signature with the recorded one and hands
 * out the recorded results, patching the source of its staged inputs. Anything else — a different input, a
 * launch that needs Triton's launcher, a different step order — diverges: the host program stops, nothing
 * has been launched, and the entry runs the call directly. Only then is the graph launched on torch's
 * current stream, and results that live in graph memory are copied into fresh tensors for the caller. A recording
 * with a replay plan that has proven itself replays without the host program (graphs/replay_plan.cpp).
 *
 * The Recording (graphs/recording.h; its Python type: graphs/recording.cpp) owns what a graph holds for good: the
 * graph and its instantiation, node parameters, its results and staging buffers (their memory is the pool's,
 * which its Python keepalive releases after them). Input signatures: graphs/signature.cpp; host scalars followed
 * by memset nodes: graphs/scalars.cpp.
 */
#include "graphs/recording.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>

namespace trident::graphs {

thread_local Recording* active = nullptr;
Driver driver;

bool last_node(CUstream stream, CUgraphNode* node) {
  int status = 0;
  unsigned long long id = 0;
  CUgraph graph = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t n = 0;
  if (driver.capture_info(stream, &status, &id, &graph, &deps, &n) != 0 || status != 1 || n != 1) return false;
  *node = deps[0];
  return true;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

int32_t diverge(Recording* rec, const std::string& why) {
  *rec->failure = why;
  trident_set_error(TRIDENT_EXC_RUNTIME, ("trident: CUDA graph replay diverged: " + why).c_str());
  return TRIDENT_ERROR;
}

// Points a memcpy node of the instantiated graph at new addresses.
bool patch_copy(Recording* rec, CUgraphNode node, uint64_t source, uint64_t destination, size_t bytes) {
  Memcpy3D p{};
  p.src_memory_type = kMemoryTypeDevice;
  p.src_device = source;
  p.dst_memory_type = kMemoryTypeDevice;
  p.dst_device = destination;
  p.width_bytes = bytes;
  p.height = 1;
  p.depth = 1;
  CUcontext context = nullptr;
  if (!trident::current_cuda_context(&context) || driver.set_memcpy_params(rec->exec, node, &p, context) != 0) {
    return false;
  }
  ++rec->patched_nodes;
  return true;
}

bool same_parameters(const Step& step, const PreparedLaunch& p) {
  return step.function == p.function && std::memcmp(step.grid, p.grid, sizeof step.grid) == 0 &&
         step.block_threads == p.block_threads && step.shared_bytes == p.shared_bytes &&
         step.param_bits.size() == p.n_params &&
         std::memcmp(step.param_bits.data(), p.param_bits, p.n_params * sizeof(uint64_t)) == 0;
}

void snapshot_parameters(Step* step, const PreparedLaunch& p) {
  step->function = p.function;
  std::memcpy(step->grid, p.grid, sizeof step->grid);
  step->block_threads = p.block_threads;
  step->shared_bytes = p.shared_bytes;
  step->param_bits.assign(p.param_bits, p.param_bits + p.n_params);
}

}  // namespace

bool follow_staged(Recording* rec, StagedInput* staged, uint64_t address) {
  if (address == staged->address) return true;
  if (staged->owner_step >= 0) {  // no node of its own: it must still be the tensor its owner staged this call
    const StagedInput& owner = (*rec->steps)[staged->owner_step].staged[staged->owner_index];
    if (address != owner.address) return false;
    staged->address = address;
    return true;
  }
  if (!patch_copy(rec, staged->in, address, staged->buffer, staged->bytes) ||
      (staged->out != nullptr && !patch_copy(rec, staged->out, staged->buffer, address, staged->bytes))) {
    return false;
  }
  staged->address = address;
  return true;
}

bool patch_kernel(Recording* rec, Step* step, const PreparedLaunch& p) {
  if (same_parameters(*step, p)) return true;
  KernelNodeParams params{p.function, p.grid[0], p.grid[1], p.grid[2], p.block_threads, 1, 1,
                          p.shared_bytes, const_cast<void**>(p.params), nullptr};
  if (driver.set_kernel_params(rec->exec, step->node, &params) != 0) return false;
  snapshot_parameters(step, p);
  ++rec->patched_nodes;
  return true;
}

namespace {

// Runs one step of a replay, adding its host time to `phase` when the recording is timed (time_replays).
template <typename Run>
int32_t timed(Recording* rec, int64_t ReplayTimes::*phase, Run run) {
  if (rec->times == nullptr) return run();
  const int64_t start = now_ns();
  const int32_t status = run();
  rec->times->*phase += now_ns() - start;
  return status;
}

int32_t refuse(Recording* rec, const std::string& why) {
  if (rec->failure->empty()) *rec->failure = why;
  trident_set_error(TRIDENT_EXC_RUNTIME, ("trident: not recordable as a CUDA graph: " + why).c_str());
  return TRIDENT_ERROR;
}

// Recording: notes a tensor a step gets from outside the graph (memory no step made), and keeps it for the proof
// when the step may write it.
void note_outside(Recording* rec, const at::Tensor& t, bool written) {
  const void* storage = storage_of(t);
  if (rec->internal->count(storage) != 0) return;
  rec->external->insert(storage);
  if (!written) return;
  rec->written->push_back(t);
  // Later steps read the storage as this step leaves it: not from a copy made before.
  std::vector<SharedCopy>& shared = *rec->shared_copies;
  shared.erase(std::remove_if(shared.begin(), shared.end(), [&](const SharedCopy& c) { return c.storage == storage; }),
               shared.end());
}

// Recording: the staged copy of an earlier step that holds read-only argument `t` as it is now, or null.
const SharedCopy* shared_copy(const Recording* rec, const at::Tensor& t) {
  for (const SharedCopy& c : *rec->shared_copies) {
    if (c.storage == storage_of(t) && c.offset == t.storage_offset() && c.dtype == t.scalar_type() &&
        t.sizes().equals(c.sizes) && t.strides().equals(c.strides)) {
      return &c;
    }
  }
  return nullptr;
}

bool capturing_stream(int32_t device, CUstream* stream) {
  bool capturing = false;
  return trident::current_cuda_stream(device, stream, &capturing) && capturing;
}

constexpr int64_t kMaxStagedBytes = 64 * 1024;

// Recording: whether argument tensor `t` of an opaque step (at `where`: an argument, or an item of a list) is read
// from outside the graph, may move between calls and is cheap to copy in (see the file comment). The copy is of
// the bytes from its first element to its last, so a strided view (a column of a block table) stages as it is. A
// tensor the operator writes is staged only when contiguous, and no tensor is staged whose storage another tensor
// of the step shares (another argument, or another item of the same list): its copy would stop sharing memory
// with the other.
bool stageable(const Recording* rec, const at::Tensor& t, TensorArgument where, bool written, const int64_t* args,
               int64_t nargs) {
  if (!t.is_cuda() || t.numel() == 0 || (written && !t.is_contiguous())) return false;
  int64_t begin = 0, end = 0;
  byte_span(t, &begin, &end);
  if (end - begin > kMaxStagedBytes) return false;
  const void* storage = storage_of(t);
  if (rec->internal->count(storage) != 0) return false;
  const bool whole_constant = rec->constants->count(storage) != 0 && t.storage_offset() == 0 &&
                              static_cast<size_t>(t.nbytes()) == t.storage().nbytes();
  if (whole_constant) return false;
  bool shared = false;
  for_each_tensor(args, nargs, [&](int64_t i, int64_t k, const at::Tensor& other) {
    shared = shared || ((i != where.argument || k != where.item) && storage_of(other) == storage);
  });
  return !shared;
}

// Recording: stages argument tensor `where` of the step being recorded when it is stageable (a memcpy node into a
// buffer of the graph's, or an earlier step's read-only copy), pointing `*slot`, its handle in the operator's copy
// of the arguments, at the buffer. false: the driver refused the copy.
bool stage(Recording* rec, Step* step, TensorArgument where, bool writes, const int64_t* args, int64_t nargs,
           CUstream stream, std::deque<at::Tensor>* buffers, int64_t* slot) {
  const at::Tensor& t = *tensor_argument(args, nargs, where);
  if (!stageable(rec, t, where, writes, args, nargs)) return true;
  const uint64_t address = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  if (where.item < 0) {
    step->staged_arguments |= uint64_t{1} << where.argument;
  } else {
    step->staged_items.push_back(where);
  }
  if (const SharedCopy* prior = writes ? nullptr : shared_copy(rec, t)) {
    const StagedInput& owner = (*rec->steps)[prior->step].staged[prior->index];
    step->staged.push_back({where.argument, where.item, nullptr, nullptr, address, owner.buffer, owner.bytes,
                            prior->step, prior->index});
    *slot = reinterpret_cast<int64_t>(&buffers->emplace_back(prior->copy));
    return true;
  }
  // The copy has the argument's strides, over a buffer of the bytes from its first element to its last.
  int64_t begin = 0, end = 0;
  byte_span(t, &begin, &end);
  const size_t bytes = static_cast<size_t>(end - begin);
  const at::Tensor span = at::empty({end - begin}, t.options().dtype(at::kByte));
  at::Tensor copy = at::empty({0}, t.options()).set_(span.storage(), 0, t.sizes(), t.strides());
  const uint64_t buffer = reinterpret_cast<uintptr_t>(copy.data_ptr());
  CUgraphNode in = nullptr;
  if (driver.memcpy_async(buffer, address, bytes, stream) != 0 || !last_node(stream, &in)) return false;
  step->staged.push_back({where.argument, where.item, in, nullptr, address, buffer, bytes});
  if (!writes) {
    rec->shared_copies->push_back({storage_of(t), t.storage_offset(), t.sizes().vec(), t.strides().vec(),
                                   t.scalar_type(), static_cast<int64_t>(rec->steps->size()),
                                   static_cast<int64_t>(step->staged.size() - 1), copy});
  }
  rec->internal->insert(storage_of(copy));
  *slot = reinterpret_cast<int64_t>(&buffers->emplace_back(std::move(copy)));
  return true;
}

int32_t record_opaque(Recording* rec, const void* identity, const char* name, const int64_t* args, int64_t nargs,
                      uint64_t written, OpRunner run, const void* closure, AtenTensorHandle* rets, int64_t nrets,
                      uint64_t scalar_results) {
  Step step{StepKind::kOpaque, identity, name};
  step.scalar_results = scalar_results;
  CUstream stream = nullptr;
  if (!capturing_stream(rec->device, &stream)) return refuse(rec, std::string(name) + " ran outside the capture");
  // Stage the tensors that may move, list items included: a copy of the argument array (and of each list of
  // tensors) pointing at the staging buffers. Deques: the operator gets handles to their elements.
  std::vector<int64_t> patched(args, args + 2 * nargs);
  std::deque<at::Tensor> buffers;
  std::deque<std::vector<int64_t>> lists;
  for (int64_t i = 0; i < nargs && i < 64; ++i) {
    const int64_t tag_word = args[2 * i], value = args[2 * i + 1];
    const int64_t tag = tag_word & TRIDENT_ARG_TAG_MASK;
    const bool writes = (written >> i & 1) != 0;
    if (tag == TRIDENT_TAG_TENSOR && value != 0) {
      if (!stage(rec, &step, {i, -1}, writes, args, nargs, stream, &buffers, &patched[2 * i + 1])) {
        return refuse(rec, std::string("staging an input of ") + name + " into the graph failed");
      }
    } else if ((tag == TRIDENT_TAG_TENSOR_LIST || tag == TRIDENT_TAG_OPT_TENSOR_LIST) && value != 0) {
      const auto* items = reinterpret_cast<const int64_t*>(value);
      std::vector<int64_t>& list = lists.emplace_back(items, items + (tag_word >> TRIDENT_ARG_LENGTH_SHIFT));
      patched[2 * i + 1] = reinterpret_cast<int64_t>(list.data());
      for (int64_t k = 0; k < static_cast<int64_t>(list.size()); ++k) {
        if (list[k] != 0 && !stage(rec, &step, {i, k}, writes, args, nargs, stream, &buffers, &list[k])) {
          return refuse(rec, std::string("staging an input of ") + name + " into the graph failed");
        }
      }
    }
  }
  if (!signature(args, nargs, {step.staged_arguments, &step.staged_items}, &step.signature)) {
    return refuse(rec, std::string(name) + " reads a CPU tensor (the host reads it when the operator runs)");
  }
  // A host scalar memset nodes can follow (graphs/scalars.cpp) is left out of the signature.
  const HostScalar scalar = host_scalar(name, args, nargs);
  std::vector<int64_t> scalar_signature;
  CUgraphNode before = nullptr;
  if (scalar.kind != HostScalar::kNone) {
    signature(args, nargs, {step.staged_arguments | scalar.arguments, &step.staged_items}, &scalar_signature);
    if (!last_node(stream, &before)) before = nullptr;
  }
  for_each_tensor(args, nargs, [&](int64_t i, int64_t, const at::Tensor& t) {
    note_outside(rec, t, i >= 64 || (written >> i & 1));
  });
  // The operator itself runs with no recording active: Python it calls (a custom op's kernel, a nested jitted
  // function) runs as it would outside, into the same capture.
  active = nullptr;
  int32_t status = TRIDENT_OK;
  at::Tensor operand_result;
  if (nrets == 1 && ((scalar.kind == HostScalar::kOperand &&
                      record_operand(&step, stream, name, patched.data(), nargs, &operand_result)) ||
                     (scalar.kind == HostScalar::kRange &&
                      record_range(&step, stream, rec->device, name, patched.data(), nargs, &operand_result)))) {
    rets[0] = reinterpret_cast<AtenTensorHandle>(new at::Tensor(std::move(operand_result)));
  } else {
    status = run(closure, patched.data(), nargs, rets, nrets);
  }
  active = rec;
  if (status != TRIDENT_OK) return status;
  if (scalar.kind == HostScalar::kFill && nrets == 1 && rets[0] != nullptr) {
    CUgraphNode fill_kernel = nullptr;
    if (!last_node(stream, &fill_kernel) || fill_kernel == before) fill_kernel = nullptr;
    const at::Tensor& result = tensor_at(reinterpret_cast<int64_t>(rets[0]));
    const int64_t a = __builtin_ctzll(scalar.arguments);
    record_fill(&step, stream, result, a, args[2 * a], args[2 * a + 1], fill_kernel);
  }
  if (!step.followed.empty()) step.signature = std::move(scalar_signature);
  // Written staged arguments go back where they live, after the operator.
  for (StagedInput& staged : step.staged) {
    if (!(written >> staged.argument & 1)) continue;
    if (driver.memcpy_async(staged.address, staged.buffer, staged.bytes, stream) != 0 || !last_node(stream, &staged.out)) {
      return refuse(rec, std::string("copying a staged argument of ") + name + " back failed");
    }
  }
  step.scalar_bits.assign(nrets, 0);
  for (int64_t k = 0; k < nrets; ++k) {
    step.result_arguments.emplace_back();
    if (k < 64 && (scalar_results >> k & 1)) {
      step.scalar_bits[k] = reinterpret_cast<intptr_t>(rets[k]);
      step.results.emplace_back();
      continue;
    }
    if (rets[k] == nullptr) {
      step.results.emplace_back();
      continue;
    }
    const at::Tensor& r = tensor_at(reinterpret_cast<int64_t>(rets[k]));
    if (!r.is_cuda()) return refuse(rec, std::string(name) + " made a CPU tensor");
    // An in-place operator returns its (staged) argument: the caller gets the argument itself, as directly.
    for (const StagedInput& staged : step.staged) {
      const TensorArgument where{staged.argument, staged.item};
      if (staged.out == nullptr || !r.is_same(*tensor_argument(patched.data(), nargs, where))) continue;
      step.result_arguments.back() = where;
      trident_tensor_delete(rets[k]);
      rets[k] = reinterpret_cast<AtenTensorHandle>(new at::Tensor(*tensor_argument(args, nargs, where)));
      break;
    }
    // An in-place operator on an argument read in place (a static KV cache): the step keeps the argument's index,
    // not the tensor. Holding it would keep the caller's memory alive after the caller let go of it, so a new
    // cache of the same shapes could never take the freed addresses and every generate() would record again.
    if (step.result_arguments.back().argument < 0) {
      for_each_tensor(args, nargs, [&](int64_t i, int64_t item, const at::Tensor& t) {
        if (step.result_arguments.back().argument < 0 && i < 64 && r.is_same(t) &&
            r.is_same(*tensor_argument(patched.data(), nargs, {i, item}))) {  // not staged: read in place
          step.result_arguments.back() = {i, item};
        }
      });
    }
    if (step.result_arguments.back().argument >= 0) {
      step.results.emplace_back();
      continue;
    }
    for (const StagedInput& staged : step.staged) {
      // A result sharing a read-only staged copy (an operator that returned its input) would take later writes
      // that directly land in the argument itself.
      const at::Tensor& copy = *tensor_argument(patched.data(), nargs, {staged.argument, staged.item});
      if (staged.out == nullptr && storage_of(r) == storage_of(copy)) {
        return refuse(rec, std::string(name) + " returned memory of an argument it only reads");
      }
    }
    step.results.push_back(r);
    if (rec->external->count(storage_of(r)) == 0) rec->internal->insert(storage_of(r));
  }
  step.results.insert(step.results.end(), buffers.begin(), buffers.end());  // staging buffers live with the step
  rec->steps->push_back(std::move(step));
  return TRIDENT_OK;
}

int32_t replay_opaque(Recording* rec, const void* identity, const char* name, const int64_t* args, int64_t nargs,
                      AtenTensorHandle* rets, int64_t nrets) {
  if (rec->cursor >= rec->steps->size()) return diverge(rec, std::string(name) + " was not recorded");
  Step& step = (*rec->steps)[rec->cursor];
  if (step.kind != StepKind::kOpaque || step.identity != identity) {
    return diverge(rec, std::string(name) + " where the recording has " + step.name);
  }
  const FreeInputs free{step.staged_arguments | step.followed_arguments, &step.staged_items};
  if (!same_signature(step.signature, args, nargs, free)) {
    return diverge(rec, "the inputs differ from the recorded ones: " + difference(step, args, nargs, free) +
                            (step.unfollowed.empty() ? "" : " (a host scalar not followed: " + step.unfollowed + ")"));
  }
  if (!step.followed.empty()) {
    for (FollowedScalar& f : step.followed) {
      f.tag_word = args[2 * f.argument];
      f.value = args[2 * f.argument + 1];
    }
    if (!replay_followed_scalars(rec, &step)) {
      return diverge(rec, "the host scalars of " + step.name + " that the recording follows " +
                              (step.range.length >= 0 ? "give another length than the recorded " +
                                                            std::to_string(step.range.length) + ", or "
                                                      : std::string()) +
                              "do not convert to their dtype, or the patch failed");
    }
  }
  for (StagedInput& staged : step.staged) {
    // The signature matched: the staged tensor is there, with its recorded layout.
    const at::Tensor& t = *tensor_argument(args, nargs, {staged.argument, staged.item});
    const uint64_t address = reinterpret_cast<uintptr_t>(t.const_data_ptr());
    if (!follow_staged(rec, &staged, address)) {
      return diverge(rec, "a staged argument of " + step.name + " could not be patched");
    }
  }
  if (rec->plan != nullptr && rec->plan->check == PlanCheck::kLearn) learn_step(rec, args, nargs);
  ++rec->cursor;
  for (int64_t k = 0; k < nrets; ++k) {
    if (k < 64 && (step.scalar_results >> k & 1)) {
      rets[k] = reinterpret_cast<AtenTensorHandle>(static_cast<intptr_t>(step.scalar_bits[k]));
      continue;
    }
    const TensorArgument argument = step.result_arguments[k];
    const at::Tensor& r = argument.argument >= 0 ? *tensor_argument(args, nargs, argument) : step.results[k];
    rets[k] = r.defined() ? reinterpret_cast<AtenTensorHandle>(new at::Tensor(r)) : nullptr;
  }
  return TRIDENT_OK;
}

// Replay: checks that this launch is the recorded step's and patches its node where the parameters differ.
int32_t replay_triton(Recording* rec, const void* identity, const char* name, PreparedLaunch& p, bool empty,
                      const int64_t* args, int64_t nargs) {
  if (rec->cursor >= rec->steps->size()) return diverge(rec, std::string(name) + " was not recorded");
  Step& step = (*rec->steps)[rec->cursor];
  if (step.identity != identity || (step.kind == StepKind::kEmptyLaunch) != empty) {
    return diverge(rec, std::string("Triton kernel '") + name + "' where the recording has " + step.name +
                            (empty ? " (this launch has an empty grid)" : ""));
  }
  if (rec->plan != nullptr && rec->plan->check == PlanCheck::kLearn) learn_step(rec, args, nargs);
  ++rec->cursor;
  if (!empty && !patch_kernel(rec, &step, p)) {
    return diverge(rec, std::string("Triton kernel '") + name + "': its graph node could not be patched");
  }
  return TRIDENT_OK;
}

}  // namespace


bool resolve_driver(void* libcuda) {
  Driver d;
  const bool found = trident::resolve(libcuda, "cuLaunchKernel", &d.launch) &&
                     trident::resolve(libcuda, "cuStreamGetCaptureInfo_v2", &d.capture_info) &&
                     trident::resolve(libcuda, "cuGraphExecKernelNodeSetParams", &d.set_kernel_params) &&
                     trident::resolve(libcuda, "cuGraphExecMemcpyNodeSetParams", &d.set_memcpy_params) &&
                     trident::resolve(libcuda, "cuMemcpyDtoDAsync_v2", &d.memcpy_async) &&
                     trident::resolve(libcuda, "cuGraphLaunch", &d.graph_launch) &&
                     trident::resolve(libcuda, "cuStreamBeginCapture_v2", &d.begin_capture) &&
                     trident::resolve(libcuda, "cuStreamEndCapture", &d.end_capture) &&
                     trident::resolve(libcuda, "cuGraphInstantiateWithFlags", &d.instantiate) &&
                     trident::resolve(libcuda, "cuGraphExecDestroy", &d.destroy_exec) &&
                     trident::resolve(libcuda, "cuGraphDestroy", &d.destroy_graph);
  // Optional: without them a host scalar that changes (a fill, an integer operand) diverges, as any opaque
  // step whose inputs differ (graphs/scalars.cpp).
  d.memsets = trident::resolve(libcuda, "cuMemsetD8Async", &d.memset_d8) &&
            trident::resolve(libcuda, "cuMemsetD16Async", &d.memset_d16) &&
            trident::resolve(libcuda, "cuMemsetD32Async", &d.memset_d32) &&
            trident::resolve(libcuda, "cuMemsetD2D32Async", &d.memset_d2d32) &&
            trident::resolve(libcuda, "cuGraphMemsetNodeGetParams", &d.get_memset_params) &&
            trident::resolve(libcuda, "cuGraphExecMemsetNodeSetParams", &d.set_memset_params) &&
            trident::resolve(libcuda, "cuGraphKernelNodeGetParams_v2", &d.kernel_node_params) &&
            trident::resolve(libcuda, "cuFuncGetName", &d.function_name) &&
            trident::resolve(libcuda, "cuKernelGetName", &d.kernel_name) &&
            trident::resolve(libcuda, "cuGraphNodeSetEnabled", &d.set_node_enabled);
  if (!trident::resolve(libcuda, "cuModuleLoadData", &d.module_load_data) ||
      !trident::resolve(libcuda, "cuModuleGetFunction", &d.module_get_function)) {
    d.module_load_data = nullptr;  // a floating range whose bounds change then diverges (graphs/scalars.cpp)
  }
  if (!trident::resolve(libcuda, "cuGraphGetNodes", &d.graph_nodes) ||
      !trident::resolve(libcuda, "cuGraphNodeGetType", &d.node_type)) {
    d.graph_nodes = nullptr;
  }
  if (found) driver = d;
  return found;
}

int32_t opaque_step(const void* identity, const char* name, const int64_t* args, int64_t nargs, uint64_t written,
                    OpRunner run, const void* closure, AtenTensorHandle* rets, int64_t nrets, uint64_t scalar_results) {
  Recording* rec = active;
  try {
    if (rec->mode == Mode::kRecord) {
      return record_opaque(rec, identity, name, args, nargs, written, run, closure, rets, nrets, scalar_results);
    }
    return timed(rec, &ReplayTimes::opaque_steps,
                 [&] { return replay_opaque(rec, identity, name, args, nargs, rets, nrets); });
  } catch (...) {
    active = rec;
    return trident::fail_with_current_exception();
  }
}

int32_t triton_step(const void* identity, const char* name, PreparedLaunch* p, const int64_t* args, int64_t nargs) {
  Recording* rec = active;
  if (p == nullptr) {
    const std::string why = std::string("Triton kernel '") + name + "' needs Triton's launcher for this launch";
    if (rec->mode == Mode::kRecord) return refuse(rec, why);
    rec->diverged_for_launcher = true;
    return diverge(rec, why);
  }
  const bool empty = p->grid[0] == 0 || p->grid[1] == 0 || p->grid[2] == 0;
  if (rec->mode == Mode::kRecord) {
    Step step{empty ? StepKind::kEmptyLaunch : StepKind::kKernel, identity, name};
    if (!empty) {
      CUstream stream = nullptr;
      if (!capturing_stream(p->device, &stream)) return refuse(rec, std::string(name) + " launched outside the capture");
      if (driver.launch(p->function, p->grid[0], p->grid[1], p->grid[2], p->block_threads, 1, 1, p->shared_bytes,
                        stream, p->params, nullptr) != 0 ||
          !last_node(stream, &step.node)) {
        return refuse(rec, std::string("Triton kernel '") + name + "' could not be captured");
      }
      snapshot_parameters(&step, *p);
      // Without an analysis of the kernel, any tensor it gets may be written.
      for_each_tensor(args, nargs, [&](int64_t, int64_t, const at::Tensor& t) { note_outside(rec, t, true); });
    }
    rec->steps->push_back(std::move(step));
    return TRIDENT_OK;
  }
  return timed(rec, &ReplayTimes::triton_steps,
               [&] { return replay_triton(rec, identity, name, *p, empty, args, nargs); });
}

int32_t unsupported(const std::string& why) {
  Recording* rec = active;
  return rec->mode == Mode::kRecord ? refuse(rec, why) : diverge(rec, why);
}

namespace {

// Replay: result `r`, which shares its storage with another result, as a view of one fresh copy of the storage's
// recorded span (made for the first of them, copied after the launch). Undefined when `r` lies outside the span
// (a view at this call's position): the call then runs directly.
at::Tensor shared_result(Recording* rec, const at::Tensor& r, const ReturnedSpan& span) {
  int64_t begin = 0, end = 0;
  byte_span(r, &begin, &end);
  const int64_t start = span.begin / 16 * 16;  // 16-byte aligned, so every element offset stays whole and aligned
  if (begin < span.begin || end > span.end) return at::Tensor();
  auto [found, made] = rec->fresh_spans->try_emplace(storage_of(r));
  if (made) {
    const at::TensorOptions bytes = r.options().dtype(at::kByte);
    found->second = at::empty({span.end - start}, bytes);
    at::Tensor source = at::empty({0}, bytes).set_(r.storage(), start, {span.end - start}, {1});
    rec->copies->emplace_back(found->second, source);
  }
  const int64_t item = static_cast<int64_t>(r.element_size());
  return at::empty({0}, r.options()).set_(found->second.storage(), (begin - start) / item, r.sizes(), r.strides());
}

}  // namespace

bool result_for_caller(AtenTensorHandle t, AtenTensorHandle* replacement) {
  Recording* rec = active;
  *replacement = t;
  if (rec->plan != nullptr && rec->plan->check != PlanCheck::kNone) {
    note_output(rec, reinterpret_cast<const at::Tensor*>(t));
  }
  if (t == nullptr) return true;
  const at::Tensor& r = tensor_at(reinterpret_cast<int64_t>(t));
  if (!r.defined() || rec->internal->count(storage_of(r)) == 0) return true;
  try {
    if (rec->mode == Mode::kRecord) {
      ReturnedSpan& span = (*rec->returned)[storage_of(r)];
      int64_t begin = 0, end = 0;
      byte_span(r, &begin, &end);
      span.begin = span.results == 0 ? begin : std::min(span.begin, begin);
      span.end = span.results == 0 ? end : std::max(span.end, end);
      ++span.results;
      return true;
    }
    const auto shared = rec->returned->find(storage_of(r));
    if (shared != rec->returned->end() && shared->second.results > 1) {
      at::Tensor view = shared_result(rec, r, shared->second);
      if (!view.defined()) {
        diverge(rec, "a result shares memory the graph made with another, outside the recorded bytes");
        PyErr_SetString(PyExc_RuntimeError, trident_last_error());
        return false;
      }
      rec->copies->emplace_back(view, at::Tensor());
    } else {
      rec->copies->emplace_back(at::empty_strided(r.sizes(), r.strides(), r.options()), r);
    }
    *replacement = reinterpret_cast<AtenTensorHandle>(&rec->copies->back().first);
    return true;
  } catch (...) {
    trident::fail_with_current_exception();
    PyErr_SetString(PyExc_RuntimeError, trident_last_error());
    return false;
  }
}

bool diverged_for_launcher(PyObject* recording) { return as_recording(recording)->diverged_for_launcher; }

int32_t record(PyObject* recording, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
               PyObject** result) {
  Recording* rec = as_recording(recording);
  rec->steps->clear();
  rec->failure->clear();
  Recording* outer = active;
  active = rec;
  const int32_t status = run(ctx, slots, result);
  active = outer;
  return status;
}

namespace {

void drop_copies(Recording* rec) {
  rec->copies->clear();
  rec->fresh_spans->clear();
}

}  // namespace

ReplayOutcome launch_replay(Recording* rec, CUstream stream, PyObject* out, PyObject** result, bool count_launches,
                            int64_t started, int64_t ran) {
  ReplayTimes* times = rec->times;
  const CUresult launched = driver.graph_launch(rec->exec, stream);
  const int64_t launched_at = times != nullptr ? now_ns() : 0;
  if (launched != 0) {
    Py_XDECREF(out);
    PyErr_Format(trident::kernel_launch_error_type(), "trident: launching a recorded CUDA graph failed (CUresult %d)",
                 launched);
    return ReplayOutcome::kError;
  }
  // Each fresh tensor was made with its source's sizes and strides (or is the byte copy of a shared span), so the
  // bytes its source spans, copied to the fresh storage's start, put every element where it belongs: one
  // driver copy on the launch's stream, without ATen's copy_ (its dispatch and checks cost more than the copy).
  for (auto& [fresh, source] : *rec->copies) {
    if (!source.defined()) continue;
    int64_t begin = 0, end = 0;
    byte_span(source, &begin, &end);
    if (end == begin) continue;
    const uint64_t from = reinterpret_cast<uintptr_t>(source.storage().data()) + static_cast<uint64_t>(begin);
    const uint64_t to = reinterpret_cast<uintptr_t>(fresh.storage().data());
    const CUresult copied = driver.memcpy_async(to, from, static_cast<size_t>(end - begin), stream);
    if (copied != 0) {
      Py_XDECREF(out);
      PyErr_Format(PyExc_RuntimeError, "trident: copying a graph's result for the caller failed (CUresult %d)", copied);
      return ReplayOutcome::kError;
    }
  }
  if (times != nullptr) {
    ++times->replays;
    times->program += ran - started;
    times->launch += launched_at - ran;
    times->result_copies += now_ns() - launched_at;
  }
  if (count_launches) {
    for (const void* launch : *rec->launches) trident::count_native_launch(launch);
  }
  rec->last_stream = stream;
  rec->replayed_before = true;
  ++rec->replays;
  *result = out;
  return ReplayOutcome::kReplayed;
}

namespace {

ReplayOutcome replay_once(Recording* rec, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
                          PyObject** result, bool count_launches) {
  CUstream stream = nullptr;
  bool capturing = true;
  // The caller's own capture (the call is part of a graph they record) or another stream: run directly.
  if (active != nullptr || !trident::current_cuda_stream(rec->device, &stream, &capturing) || capturing ||
      (rec->replayed_before && stream != rec->last_stream)) {
    return ReplayOutcome::kNotHere;
  }
  // This call's fresh results and span copies are dropped however it ends (the caller holds its own references).
  struct DropCopies {
    Recording* rec;
    ~DropCopies() { drop_copies(rec); }
  } dropped_at_return{rec};
  if (rec->plan != nullptr && rec->plan->state == PlanState::kOn && !proof_due(rec->plan)) {
    const ReplayOutcome outcome = replay_from_plan(rec, ctx, slots, stream, result, count_launches);
    if (outcome != ReplayOutcome::kDirect) return outcome;
    drop_copies(rec);  // those the plan's result made: the host program makes its own
  }
  rec->cursor = 0;
  rec->diverged_for_launcher = false;
  if (rec->plan != nullptr) before_program(rec, ctx, slots);
  const int64_t patched_before = rec->patched_nodes;
  const int64_t started = rec->times != nullptr ? now_ns() : 0;
  if (rec->plan != nullptr) rec->plan->nodes_current = false;  // the host program patches nodes to this call's
  active = rec;
  PyObject* out = nullptr;
  const int32_t status = run(ctx, slots, &out);
  active = nullptr;
  const int64_t ran = rec->times != nullptr ? now_ns() : 0;
  const bool diverged = status != TRIDENT_OK || rec->cursor != rec->steps->size();
  if (rec->plan != nullptr) after_program(rec, diverged, patched_before);
  if (diverged) {
    Py_XDECREF(out);
    if (PyErr_Occurred()) PyErr_Clear();
    if (status == TRIDENT_OK) *rec->failure = "the program ended before its recorded steps did";
    ++rec->divergences;
    return ReplayOutcome::kDirect;
  }
  return launch_replay(rec, stream, out, result, count_launches, started, ran);
}

}  // namespace

ReplayOutcome replay(PyObject* recording, trident_run_fn run, TridentSpecContext* ctx, PyObject* const* slots,
                     PyObject** result, bool count_launches) {
  Recording* rec = as_recording(recording);
  if (rec->times == nullptr) return replay_once(rec, run, ctx, slots, result, count_launches);
  const int64_t entered = now_ns();
  const ReplayOutcome outcome = replay_once(rec, run, ctx, slots, result, count_launches);
  if (rec->times != nullptr) {
    const int64_t spent = now_ns() - entered;
    ++rec->times->tries;
    rec->times->inside += spent;
    if (outcome != ReplayOutcome::kReplayed) rec->times->unreplayed += spent;
  }
  return outcome;
}

}  // namespace trident::graphs
