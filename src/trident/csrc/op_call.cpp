/*
 * op_call.cpp — calling ATen operators through the dispatcher, boxed.
 *
 * Generated code passes an operator's arguments as (tag, value) pairs of int64 (trident_runtime.h); this
 * file turns them into a torch::jit::Stack, calls the operator handle a Context resolved once, and flattens
 * the returned tensors into owned handles. Every C++ exception is caught here and reported through the
 * thread-local error slot with the Python exception kind eager PyTorch would have raised.
 */
#include "runtime_internal.h"
#include "graphs/replay.h"

#include <cstring>
#include <string>

#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/Exceptions.h>

namespace {

using c10::IValue;

const at::Tensor* tensor_ptr(int64_t value) { return reinterpret_cast<const at::Tensor*>(value); }

// One argument; the list length rides in the tag word's upper bits.
IValue to_ivalue(int64_t tag_word, int64_t value) {
  const int64_t tag = tag_word & TRIDENT_ARG_TAG_MASK;
  const int64_t length = tag_word >> TRIDENT_ARG_LENGTH_SHIFT;
  switch (tag) {
    case TRIDENT_TAG_NONE:
      return IValue();
    case TRIDENT_TAG_TENSOR:
      // A NULL handle is an absent optional tensor.
      return value == 0 ? IValue() : IValue(*tensor_ptr(value));
    case TRIDENT_TAG_INT:
      return IValue(value);
    case TRIDENT_TAG_DOUBLE:
      return IValue(trident::as_double(value));
    case TRIDENT_TAG_BOOL:
      return IValue(value != 0);
    case TRIDENT_TAG_INT_LIST: {
      // The boxed kernels of SymInt[] arguments accept a plain int list.
      const auto* items = reinterpret_cast<const int64_t*>(value);
      c10::List<int64_t> list;
      list.reserve(length);
      for (int64_t i = 0; i < length; ++i) list.push_back(items[i]);
      return IValue(std::move(list));
    }
    case TRIDENT_TAG_TENSOR_LIST: {
      const auto* items = reinterpret_cast<const int64_t*>(value);
      c10::List<at::Tensor> list;
      list.reserve(length);
      for (int64_t i = 0; i < length; ++i) list.push_back(items[i] == 0 ? at::Tensor() : *tensor_ptr(items[i]));
      return IValue(std::move(list));
    }
    case TRIDENT_TAG_OPT_TENSOR_LIST: {
      // aten::index.Tensor and friends: NULL entries are None (a full slice).
      const auto* items = reinterpret_cast<const int64_t*>(value);
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(length);
      for (int64_t i = 0; i < length; ++i) {
        list.push_back(items[i] == 0 ? std::optional<at::Tensor>() : std::optional<at::Tensor>(*tensor_ptr(items[i])));
      }
      return IValue(std::move(list));
    }
    case TRIDENT_TAG_STRING:
      return IValue(std::string(reinterpret_cast<const char*>(value)));
    case TRIDENT_TAG_DEVICE: {
      const int64_t index = value & TRIDENT_DEVICE_CODE_INDEX_MASK;
      return IValue(c10::Device(static_cast<c10::DeviceType>(value >> TRIDENT_DEVICE_CODE_TYPE_SHIFT),
                                static_cast<c10::DeviceIndex>(index == TRIDENT_DEVICE_CODE_NO_INDEX ? -1 : index)));
    }
    default:
      TORCH_CHECK(false, "trident_op_call: unknown argument tag ", tag);
  }
}

// Tensor returns become owned handles; undefined tensors and None become NULL (None in Python).
AtenTensorHandle own(at::Tensor t) {
  if (!t.defined()) return nullptr;
  return reinterpret_cast<AtenTensorHandle>(new at::Tensor(std::move(t)));
}

// How many slots a return value flattens into; throws for returns compiled code cannot take.
int64_t handle_count(const IValue& v, const c10::OperatorHandle& op) {
  if (v.isTensor() || v.isNone() || v.isInt() || v.isDouble() || v.isBool()) return 1;
  if (v.isTensorList()) return static_cast<int64_t>(v.toTensorList().size());
  TORCH_CHECK(false, "trident_op_call: ", op.operator_name(), " returned a ", v.tagKind(),
              "; only Tensor, Tensor[], int, float, bool and None returns can be called from compiled code");
}

// A scalar return travels in its slot as 64 bits (an int, a double's bit pattern, a bool as 0/1); the
// compiled code knows the result's type from the schema and reads the slot accordingly.
AtenTensorHandle scalar_slot(const IValue& v) {
  int64_t bits = 0;
  if (v.isInt()) {
    bits = v.toInt();
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    std::memcpy(&bits, &d, sizeof bits);
  } else {
    bits = v.toBool() ? 1 : 0;
  }
  return reinterpret_cast<AtenTensorHandle>(static_cast<intptr_t>(bits));
}

int32_t fail(int32_t kind, const char* message) {
  trident_set_error(kind, message);
  return TRIDENT_ERROR;
}

}  // namespace

void* trident::resolve_operator(const char* name, const char* overload) {
  try {
    return new c10::OperatorHandle(c10::Dispatcher::singleton().findSchemaOrThrow(name, overload));
  } catch (const std::exception&) {
    const std::string full = overload[0] != '\0' ? std::string(name) + "." + overload : std::string(name);
    PyErr_Format(PyExc_ValueError, "unknown operator '%s': no schema of that name and overload is registered",
                 full.c_str());
    return nullptr;
  }
}

void trident::free_operator(void* op) { delete static_cast<c10::OperatorHandle*>(op); }

int32_t trident::fail_with_current_exception() {
  try {
    throw;
  } catch (const c10::IndexError& e) {
    return fail(TRIDENT_EXC_INDEX, e.what_without_backtrace());
  } catch (const c10::ValueError& e) {
    return fail(TRIDENT_EXC_VALUE, e.what_without_backtrace());
  } catch (const c10::TypeError& e) {
    return fail(TRIDENT_EXC_TYPE, e.what_without_backtrace());
  } catch (const c10::NotImplementedError& e) {
    return fail(TRIDENT_EXC_NOT_IMPLEMENTED, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    return fail(TRIDENT_EXC_RUNTIME, e.what_without_backtrace());
  } catch (python_error& e) {
    // A Python-implemented kernel raised: put that exact exception back; the entry propagates it as is
    // (eager does the same in CATCH_CORE_ERRORS). pybind11 carries such errors too (custom ops).
    fail(TRIDENT_EXC_RUNTIME, e.what());
    e.restore();
    return TRIDENT_ERROR;
  } catch (pybind11::error_already_set& e) {
    fail(TRIDENT_EXC_RUNTIME, e.what());
    e.restore();
    return TRIDENT_ERROR;
  } catch (const std::exception& e) {
    return fail(TRIDENT_EXC_RUNTIME, e.what());
  } catch (...) {
    return fail(TRIDENT_EXC_RUNTIME, "unknown C++ exception in an ATen operator");
  }
}

namespace {

// Which returns a graph step can hand out: tensors, optional tensors and tensor lists, and int, float and bool
// scalars (bit k of *scalars: return k is one; each then fills slot k, so not beside a tensor list, which fills
// one slot per item). false: a return of another type.
bool graph_returns(const c10::FunctionSchema& schema, uint64_t* scalars) {
  *scalars = 0;
  bool lists = false;
  for (size_t k = 0; k < schema.returns().size(); ++k) {
    const c10::TypePtr& type = schema.returns()[k].type();
    const c10::TypeKind kind = type->kind();
    if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType || kind == c10::TypeKind::FloatType ||
        kind == c10::TypeKind::BoolType) {
      if (k >= 64) return false;
      *scalars |= uint64_t{1} << k;
    } else if (type->isSubtypeOf(*c10::ListType::ofTensors())) {
      lists = true;
    } else if (!type->isSubtypeOf(*c10::TensorType::get()) && !type->isSubtypeOf(*c10::OptionalType::ofTensor())) {
      return false;
    }
  }
  return !(lists && *scalars != 0);
}

int32_t call_boxed(const void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets, int64_t nrets);

// While a CUDA graph records or replays (graphs/replay.h): one opaque step, which `run` runs. Operators that make no
// step come through trident_view_call instead (the compiler decides which, graphs/steps.py).
int32_t graph_step(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets, int64_t nrets,
                   trident::graphs::OpRunner run) {
  try {
    const auto& handle = *static_cast<const c10::OperatorHandle*>(op);
    const c10::FunctionSchema& schema = handle.schema();
    const std::string name = c10::toString(handle.operator_name());
    uint64_t scalars = 0;
    if (!graph_returns(schema, &scalars)) {
      std::string types;
      for (const c10::Argument& r : schema.returns()) types += (types.empty() ? "" : ", ") + r.type()->str();
      return trident::graphs::unsupported(name + " returns a value a graph step cannot hand out (" + types + ")");
    }
    uint64_t written = 0;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
      if (alias != nullptr && alias->isWrite()) written |= i < 64 ? uint64_t{1} << i : ~uint64_t{0};
    }
    return trident::graphs::opaque_step(op, name.c_str(), args, nargs, written, run, op, rets, nrets, scalars);
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

int32_t call_boxed(const void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets, int64_t nrets) {
  try {
    const auto& handle = *static_cast<const c10::OperatorHandle*>(op);
    // A boxed kernel pops exactly its schema's argument count: a short stack would be read out of bounds.
    const size_t expected = handle.schema().arguments().size();
    TORCH_CHECK(static_cast<size_t>(nargs) == expected, "trident_op_call: ", handle.operator_name(), " takes ",
                expected, " arguments (defaults included), got ", nargs);
    torch::jit::Stack stack;
    stack.reserve(nargs);
    for (int64_t i = 0; i < nargs; ++i) stack.push_back(to_ivalue(args[2 * i], args[2 * i + 1]));

    handle.callBoxed(stack);

    // Count first so that a mismatch fails before any handle is handed out.
    int64_t count = 0;
    for (const IValue& v : stack) count += handle_count(v, handle);
    TORCH_CHECK(count == nrets, "trident_op_call: ", handle.operator_name(), " returned ", count,
                " tensors, compiled code expects ", nrets);
    int64_t k = 0;
    for (IValue& v : stack) {
      if (v.isTensorList()) {
        const c10::List<at::Tensor> list = v.toTensorList();
        for (size_t i = 0; i < list.size(); ++i) rets[k++] = own(list.get(i));
      } else if (v.isInt() || v.isDouble() || v.isBool()) {
        rets[k++] = scalar_slot(v);
      } else {
        rets[k++] = v.isNone() ? nullptr : own(std::move(v).toTensor());
      }
    }
    return TRIDENT_OK;
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

// A factory (an operator without tensor arguments: eye, linspace, randn) as torch's own factories run it (torch::eye
// ..., variable_factories.h, what torch.eye calls): below the ADInplaceOrView layer, so a fill inside it counts no
// write and the new tensor's _version is eager's 0.
int32_t call_factory(const void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets, int64_t nrets) {
  at::AutoDispatchBelowADInplaceOrView as_torch_factories;
  return call_boxed(op, args, nargs, rets, nrets);
}

}  // namespace

extern "C" {

TRIDENT_API int32_t trident_op_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                    int64_t nrets) {
  if (trident::graphs::active != nullptr) return graph_step(op, args, nargs, rets, nrets, call_boxed);
  return call_boxed(op, args, nargs, rets, nrets);
}

TRIDENT_API int32_t trident_factory_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                         int64_t nrets) {
  if (trident::graphs::active != nullptr) return graph_step(op, args, nargs, rets, nrets, call_factory);
  return call_factory(op, args, nargs, rets, nrets);
}

TRIDENT_API int32_t trident_view_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                      int64_t nrets) {
  return call_boxed(op, args, nargs, rets, nrets);
}

TRIDENT_API int32_t trident_scalar_tensor(int64_t tag, int64_t value, AtenTensorHandle* out) {
  try {
    c10::Scalar scalar;
    switch (tag) {
      case TRIDENT_TAG_INT: scalar = c10::Scalar(value); break;
      case TRIDENT_TAG_DOUBLE: scalar = c10::Scalar(trident::as_double(value)); break;
      case TRIDENT_TAG_BOOL: scalar = c10::Scalar(value != 0); break;
      default: return fail(TRIDENT_EXC_RUNTIME, "trident_scalar_tensor: tag must be INT, DOUBLE or BOOL");
    }
    at::Tensor t = at::scalar_to_tensor(scalar);
    // Wrapped numbers take part in type promotion as Python scalars do (int32 tensor + 1.5 -> float32).
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
    *out = own(std::move(t));
    return TRIDENT_OK;
  } catch (const c10::Error& e) {
    return fail(TRIDENT_EXC_RUNTIME, e.what_without_backtrace());
  } catch (const std::exception& e) {
    return fail(TRIDENT_EXC_RUNTIME, e.what());
  }
}

TRIDENT_API void trident_tensor_delete(AtenTensorHandle t) { delete reinterpret_cast<at::Tensor*>(t); }

}  // extern "C"
