/*
 * graphs/replay_plan.cpp — replaying a recorded CUDA graph without running the host program (lowering/replay_plan.py
 * says what a plan is and when a program has one).
 *
 * A replay through the host program recomputes every step's arguments and compares them with the recording. Most
 * of them cannot change between calls the guards accept; the plan names the few that can (the call's ints and
 * what follows from them, argument addresses) as words a compiled function computes. The runtime takes the rest
 * from the recording and from the host program's own replays, in three states:
 *
 *  - learning: the next replay through the host program shows each step's arguments. A changing tensor's address
 *    minus its word is an offset (a view of the argument with constant parameters), a changing scalar must equal
 *    its word, and each Triton launch's operands are kept with tensors as addresses. The tensors the program hands
 *    the caller are kept as the plan's outputs.
 *  - proving: each of the next kProofs replays first computes every node from the plan and patches it, then runs
 *    the host program as before. The host program must find nothing left to patch, must not diverge, and must hand
 *    out tensors of the kept outputs' geometry; anything else switches the plan off for good.
 *  - on (every kReproveEvery-th replay proves it once more, as above): a replay calls the words function, which also
 *    builds the result, computes every Triton node as a direct launch would (the same variant table and packing, on
 *    the words instead of tensor handles), patches staged inputs and host scalars, checks that every other changing
 *    argument has its recorded value, and launches. A call it cannot vouch for (a new kernel variant, an argument
 *    that moved where it may not) replays through the host program instead, which then diverges or patches as it
 *    always did.
 */
#include "graphs/recording.h"

#include <cstring>
#include <string>
#include <vector>

namespace trident::graphs {

namespace {

constexpr int kProofs = 3;
constexpr int64_t kReproveEvery = 1024;  // replays from a plan between two more proofs of it

int64_t tag_of(int64_t tag_word) { return tag_word & TRIDENT_ARG_TAG_MASK; }

bool compute_words(Plan* plan, TridentSpecContext* ctx, PyObject* const* slots, PyObject** result) {
  const int32_t status = plan->words_fn(ctx, slots, plan->words.data(), result);
  if (status == TRIDENT_OK) return true;
  if (PyErr_Occurred()) PyErr_Clear();  // the host program's replay meets the same failure and reports it
  return false;
}

// The staged input of argument `argument` itself (`item` -1) or of that list's item `item`, or null.
StagedInput* staged_input(Step& step, int64_t argument, int64_t item) {
  if (item < 0 && (argument >= 64 || !(step.staged_arguments >> argument & 1))) return nullptr;
  for (StagedInput& staged : step.staged) {
    if (staged.argument == argument && staged.item == item) return &staged;
  }
  return nullptr;
}

// Whether argument `argument` itself (`item` -1) is a host scalar the step's memset nodes follow.
bool is_followed(const Step& step, int64_t argument, int64_t item) {
  return item < 0 && argument < 64 && (step.followed_arguments >> argument & 1);
}

// Computes and patches every node of the recording from the plan's words; a kernel node whose changing values are
// those it was last computed from is left as it is while the plan's nodes are current. false: the plan cannot vouch
// for this call (nodes patched so far stay patched to what this call needs; the host program's replay compares with
// them).
bool compute_nodes(Recording* rec) {
  Plan& plan = *rec->plan;
  std::vector<Step>& steps = *rec->steps;
  std::vector<int64_t>& operands = plan.operands;
  for (const FixedWord& fixed : plan.fixed) {
    if (plan.words[fixed.word] != fixed.value) return false;
  }
  for (const uint32_t i : plan.live) {  // set_plan checked that the plan has the recording's steps
    Step& step = steps[i];
    PlanStep& ps = plan.steps[i];
    if (ps.kernel) {
      if (step.kind == StepKind::kEmptyLaunch && ps.changing.empty()) continue;
      bool unchanged = plan.nodes_current && ps.applied.size() == ps.changing.size();
      for (size_t j = 0; unchanged && j < ps.changing.size(); ++j) {
        unchanged = ps.applied[j] == plan.words[ps.changing[j].second] + ps.offsets[j];
      }
      if (unchanged) {
        if (!triton_launch_native(step.identity)) return false;  // a launch hook: the direct path runs hooks
        continue;
      }
      operands = ps.operands;
      ps.applied.resize(ps.changing.size());
      for (size_t j = 0; j < ps.changing.size(); ++j) {
        ps.applied[j] = plan.words[ps.changing[j].second] + ps.offsets[j];
        operands[2 * ps.changing[j].first + 1] = ps.applied[j];
      }
      ++plan.nodes_computed;
      PreparedLaunch p;
      if (prepare_triton_launch(step.identity, operands.data(), &p) != 1) {
        if (PyErr_Occurred()) PyErr_Clear();
        return false;
      }
      const bool empty = p.grid[0] == 0 || p.grid[1] == 0 || p.grid[2] == 0;
      if (empty != (step.kind == StepKind::kEmptyLaunch)) return false;
      if (!empty && !patch_kernel(rec, &step, p)) return false;
      continue;
    }
    bool takes_scalars = false;
    for (size_t j = 0; j < ps.changing.size(); ++j) {
      const int64_t argument = ps.changing[j].first, item = ps.items[j];
      const int64_t value = plan.words[ps.changing[j].second] + ps.offsets[j];
      if (StagedInput* staged = staged_input(step, argument, item)) {
        if (!follow_staged(rec, staged, static_cast<uint64_t>(value))) return false;
      } else if (is_followed(step, argument, item)) {
        take_followed(&step, argument, ps.tags[j], value);
        takes_scalars = true;
      } else if (value != ps.recorded[j]) {
        return false;
      }
    }
    if (takes_scalars && !replay_followed_scalars(rec, &step)) return false;
  }
  return true;
}

// Whether changing argument j of opaque step `step` is patched (staged, or a followed scalar) rather than fixed.
bool patched_argument(Step& step, const PlanStep& ps, size_t j) {
  const int64_t argument = ps.changing[j].first, item = ps.items[j];
  return staged_input(step, argument, item) != nullptr || is_followed(step, argument, item);
}

// After learning: moves the fixed words of opaque steps into one deduplicated array, and the steps that have
// nothing else to compute out of `live`.
void gather_fixed_words(Recording* rec) {
  Plan& plan = *rec->plan;
  std::vector<Step>& steps = *rec->steps;
  std::vector<uint32_t> live;
  plan.fixed.clear();
  for (const uint32_t i : plan.live) {
    PlanStep& ps = plan.steps[i];
    bool patched = ps.kernel;
    for (size_t j = 0; !ps.kernel && j < ps.changing.size(); ++j) {
      if (patched_argument(steps[i], ps, j)) {
        patched = true;
        continue;
      }
      const FixedWord fixed{ps.changing[j].second, static_cast<int64_t>(static_cast<uint64_t>(ps.recorded[j]) -
                                                                        static_cast<uint64_t>(ps.offsets[j]))};
      bool known = false;  // once per plan: a linear search of a few hundred entries at most
      for (const FixedWord& f : plan.fixed) known = known || (f.word == fixed.word && f.value == fixed.value);
      if (!known) plan.fixed.push_back(fixed);
    }
    if (patched) live.push_back(i);  // its fixed words are checked twice: once here, once with its step
  }
  plan.live = std::move(live);
}

bool apply_plan(Recording* rec) {
  const bool applied = compute_nodes(rec);
  rec->plan->nodes_current = applied;  // a call it could not vouch for may have left a node computed half-way
  return applied;
}

}  // namespace

bool proof_due(const Plan* plan) { return plan->since_proof >= kReproveEvery; }

void plan_off(Plan* plan, const std::string& why) {
  if (plan->state == PlanState::kOff) return;
  plan->state = PlanState::kOff;
  plan->check = PlanCheck::kNone;  // the replay running now stops showing the plan anything
  plan->off_reason = why;
  plan->outputs.clear();
}

ReplayOutcome replay_from_plan(Recording* rec, TridentSpecContext* ctx, PyObject* const* slots, CUstream stream,
                               PyObject** result, bool count_launches) {
  Plan* plan = rec->plan;
  const int64_t started = rec->times != nullptr ? now_ns() : 0;
  PyObject* out = nullptr;
  active = rec;  // the result's tensors are fresh copies of graph memory (result_for_caller)
  const bool computed = compute_words(plan, ctx, slots, &out);
  active = nullptr;
  if (rec->times != nullptr) rec->times->words += now_ns() - started;
  if (!computed || out == nullptr || !apply_plan(rec)) {
    Py_XDECREF(out);
    ++plan->fallbacks;
    return ReplayOutcome::kDirect;
  }
  const int64_t ran = rec->times != nullptr ? now_ns() : 0;
  const ReplayOutcome outcome = launch_replay(rec, stream, out, result, count_launches, started, ran);
  if (outcome == ReplayOutcome::kReplayed) {
    ++plan->replays;
    ++plan->since_proof;
  }
  return outcome;
}

void before_program(Recording* rec, TridentSpecContext* ctx, PyObject* const* slots) {
  Plan* plan = rec->plan;
  plan->check = PlanCheck::kNone;
  plan->output_cursor = 0;
  const bool proving = plan->state == PlanState::kProving || (plan->state == PlanState::kOn && proof_due(plan));
  if (plan->state != PlanState::kLearning && !proving) return;
  if (!compute_words(plan, ctx, slots, nullptr)) return;  // this call shows nothing
  if (plan->state == PlanState::kLearning) {
    plan->outputs.clear();
    plan->check = PlanCheck::kLearn;
  } else if (apply_plan(rec)) {
    plan->check = PlanCheck::kProve;
  } else {
    plan->check = PlanCheck::kUnvouched;
  }
}

void after_program(Recording* rec, bool diverged, int64_t patched_before) {
  Plan* plan = rec->plan;
  const PlanCheck check = plan->check;
  plan->check = PlanCheck::kNone;
  if (check == PlanCheck::kNone || plan->state == PlanState::kOff) return;
  if (check == PlanCheck::kUnvouched) {
    // The host program replays what the plan would have run through it: a plan stricter than the recording that
    // keeps doing so only costs time.
    if (plan->state == PlanState::kProving && !diverged && ++plan->unvouched >= kProofs) {
      plan_off(plan, "it could not vouch for calls the graph replays");
    }
    return;
  }
  if (check == PlanCheck::kLearn) {
    if (diverged) return;  // a diverged replay's lessons are incomplete: learn again
    if (plan->outputs.size() != plan->n_outputs) {
      return plan_off(plan, "the host program handed out " + std::to_string(plan->outputs.size()) +
                                " tensor(s), the plan builds " + std::to_string(plan->n_outputs));
    }
    gather_fixed_words(rec);
    plan->state = PlanState::kProving;
    return;
  }
  if (diverged) {
    return plan_off(plan, "a call the plan vouched for diverged through the host program: " + *rec->failure);
  }
  if (rec->patched_nodes != patched_before) {
    return plan_off(plan, "the host program patched " + std::to_string(rec->patched_nodes - patched_before) +
                              " node(s) after the plan had computed them");
  }
  if (plan->output_cursor != plan->outputs.size()) {
    return plan_off(plan, "the host program handed out fewer tensors than the plan learned");
  }
  plan->since_proof = 0;
  if (++plan->proofs >= kProofs) plan->state = PlanState::kOn;
}

void learn_step(Recording* rec, const int64_t* args, int64_t nargs) {
  Plan* plan = rec->plan;
  const size_t index = rec->cursor;
  const Step& step = (*rec->steps)[index];
  PlanStep& ps = plan->steps[index];
  const std::string where = "step " + std::to_string(index) + " (" + step.name + ")";
  ps.offsets.assign(ps.changing.size(), 0);
  ps.tags.assign(ps.changing.size(), 0);
  ps.recorded.assign(ps.changing.size(), 0);
  for (size_t j = 0; j < ps.changing.size(); ++j) {
    const auto [argument, word] = ps.changing[j];
    const int64_t item = ps.items[j];
    if (argument >= nargs) return plan_off(plan, where + " has no argument " + std::to_string(argument));
    const int64_t tag = tag_of(args[2 * argument]), value = args[2 * argument + 1];
    const std::string which = item < 0 ? "argument " + std::to_string(argument)
                                       : "item " + std::to_string(item) + " of argument " + std::to_string(argument);
    int64_t actual = value;
    if (item >= 0 && ps.kernel) {
      return plan_off(plan, where + ": " + which + ", a list item of a Triton launch");
    } else if (tag == TRIDENT_TAG_TENSOR || item >= 0) {
      const at::Tensor* t = tensor_argument(args, nargs, {argument, item});
      if (t == nullptr) return plan_off(plan, where + ": " + which + " is no tensor (None, or not a list of tensors)");
      actual = static_cast<int64_t>(reinterpret_cast<uintptr_t>(t->const_data_ptr()));
      ps.offsets[j] = actual - plan->words[word];
    } else if (tag == TRIDENT_TAG_INT || tag == TRIDENT_TAG_BOOL || tag == TRIDENT_TAG_DOUBLE) {
      if (value != plan->words[word]) {
        return plan_off(plan, where + ": " + which + " is not the value the plan computes");
      }
    } else {
      return plan_off(plan, where + ": " + which + " is neither a tensor nor a scalar");
    }
    ps.tags[j] = args[2 * argument];
    ps.recorded[j] = actual;
  }
  if (!ps.kernel) return;
  ps.operands.assign(args, args + 2 * nargs);
  for (int64_t i = 0; i < nargs; ++i) {
    const int64_t tag = tag_of(args[2 * i]);
    if (tag == TRIDENT_TAG_TENSOR && args[2 * i + 1] != 0) {
      ps.operands[2 * i] = TRIDENT_TAG_INT;
      ps.operands[2 * i + 1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(tensor_at(args[2 * i + 1]).data_ptr()));
    } else if (tag != TRIDENT_TAG_INT && tag != TRIDENT_TAG_BOOL && tag != TRIDENT_TAG_DOUBLE) {
      ps.operands[2 * i + 1] = 0;  // a pointer into this call's memory (a list, a string): never a launch's value
    }
  }
}

void note_output(Recording* rec, const at::Tensor* t) {
  Plan* plan = rec->plan;
  const at::Tensor none;
  const at::Tensor& r = t != nullptr ? *t : none;
  if (r.defined() && rec->internal->count(storage_of(r)) == 0) {
    return plan_off(plan, "a result is not memory the graph made (an argument, or a tensor made on the host)");
  }
  if (plan->check == PlanCheck::kLearn) {
    plan->outputs.push_back(r);
    return;
  }
  const size_t k = plan->output_cursor++;
  const bool same = k < plan->outputs.size() && r.defined() == plan->outputs[k].defined() &&
                    (!r.defined() || (storage_of(r) == storage_of(plan->outputs[k]) &&
                                      r.storage_offset() == plan->outputs[k].storage_offset() &&
                                      r.sizes().equals(plan->outputs[k].sizes()) &&
                                      r.strides().equals(plan->outputs[k].strides()) &&
                                      r.dtype() == plan->outputs[k].dtype()));
  if (!same) plan_off(plan, "result " + std::to_string(k) + " is not the tensor the plan learned");
}

}  // namespace trident::graphs

extern "C" {

// The k-th tensor the host program hands the caller, as the plan learned it (borrowed; NULL for None).
TRIDENT_API AtenTensorHandle trident_graph_output(int64_t k) {
  using namespace trident::graphs;
  Recording* rec = active;
  if (rec == nullptr || rec->plan == nullptr || k < 0 || static_cast<size_t>(k) >= rec->plan->outputs.size()) {
    return nullptr;
  }
  at::Tensor& t = rec->plan->outputs[static_cast<size_t>(k)];
  return t.defined() ? reinterpret_cast<AtenTensorHandle>(&t) : nullptr;
}

}  // extern "C"
