/*
 * trident_runtime.h — the one C ABI that Trident's generated code calls.
 *
 * Generated code (LLVM, from MLIR) calls only the functions declared here and, later, libtorch's exported
 * C shim. It never sees a process address baked in at compile time: everything process-specific (resolved
 * operator handles, constant tensors, kernel handles) reaches it through the per-specialization context
 * table `TridentSpecContext`, so compiled objects can be cached on disk.
 *
 * Conventions
 *  - Only pointers, fixed-width integers and doubles cross this ABI.
 *  - Functions that can fail return int32_t: 0 (TRIDENT_OK) on success, non-zero on failure. The failure's
 *    message and exception kind go to a thread-local slot (trident_last_error); the entry object turns it
 *    into a Python exception. Functions returning PyObject* return NULL on failure with a Python error set.
 *  - No C++ exception ever crosses this ABI.
 *  - Every function here is called with the GIL held (generated code runs inside the entry's vectorcall).
 *  - An incompatible change adds `name_v2`; `name` keeps its meaning.
 *  - Every code of this ABI (statuses, tags, dtype and device codes, container kinds, ...) is a
 *    `#define TRIDENT_<NAME> <integer>` here and nowhere else: the Python side reads them from this file
 *    (trident/abi.py, as `<NAME>`), the C++ side includes it. Keep them in that one-line form.
 *
 * What does NOT go native (runs in Python, on a miss only): capture, compilation, guard explanations,
 * building non-tuple/list output containers, and anything the guards were not compiled for.
 */
#ifndef TRIDENT_RUNTIME_H
#define TRIDENT_RUNTIME_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _object PyObject;
/* The same handle libtorch's AOTI C shim uses: a pointer to an at::Tensor. */
typedef struct AtenTensorOpaque* AtenTensorHandle;

/* Status of a function that can fail. */
#define TRIDENT_OK 0
#define TRIDENT_ERROR 1

#if defined(_WIN32)
#define TRIDENT_API __declspec(dllexport)
#else
#define TRIDENT_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------------------------------------------
 * Per-specialization context. Built by the runtime's Python API (`trident.runtime.Context(ops, constants)`,
 * whose `address` is this struct; `ops[i]` is a heap c10::OperatorHandle*); generated code only loads from
 * it. Field order is ABI: generated code reads `ops` at offset 0 and `constants` at offset 8.
 */
typedef struct {
  void** ops;            /* resolved operator handles, indexed by the op id the compiler assigned */
  PyObject** constants;  /* borrowed-by-generated-code Python objects (tensors closed over, identity-guarded
                            objects); the context owns a reference to each */
  void** kernels;        /* unused (NULL): kernel handles live in the TritonLaunch objects among constants */
} TridentSpecContext;

/* Signatures of the two functions compiled per specialization.
 *  guard: TRIDENT_GUARD_MATCH if the bound arguments match everything the specialization was compiled for,
 *         else TRIDENT_GUARD_MISS. Never fails, never raises.
 *  run:   executes the host program; on success stores a new reference in *result and returns TRIDENT_OK. */
typedef int32_t (*trident_guard_fn)(TridentSpecContext* ctx, PyObject* const* slots);
typedef int32_t (*trident_run_fn)(TridentSpecContext* ctx, PyObject* const* slots, PyObject** result);

/* A guard's verdict (a predicate, not a status: 1 is the good case). */
#define TRIDENT_GUARD_MISS 0
#define TRIDENT_GUARD_MATCH 1

/* ---------------------------------------------------------------------------------------------------
 * Reading inputs (guards and run). `slots` are the bound arguments in parameter order, borrowed.
 */

/* Metadata of a tensor argument, as guards compare it. Every field is 8 bytes; order is ABI (generated code
 * loads field i at byte offset 8*i). */
typedef struct {
  int64_t type_tag;        /* 0  TRIDENT_TYPE_TENSOR or TRIDENT_TYPE_PARAMETER */
  int64_t dtype;           /* 1  c10::ScalarType */
  int64_t device_type;     /* 2  c10::DeviceType */
  int64_t device_index;    /* 3  -1 for CPU */
  int64_t dim;             /* 4 */
  int64_t storage_offset;  /* 5  in elements */
  int64_t data_ptr;        /* 6  address of the first element */
  int64_t flags;           /* 7  TRIDENT_FLAG_* bits */
  const int64_t* sizes;    /* 8  `dim` entries, valid while the tensor lives */
  const int64_t* strides;  /* 9  `dim` entries */
  AtenTensorHandle handle; /* 10 borrowed handle to the tensor (no ownership) */
} TridentTensorMeta;

#define TRIDENT_TYPE_TENSOR 1    /* exactly torch.Tensor */
#define TRIDENT_TYPE_PARAMETER 2 /* exactly torch.nn.Parameter */

#define TRIDENT_FLAG_REQUIRES_GRAD 1
#define TRIDENT_FLAG_CONJ 2
#define TRIDENT_FLAG_NEG 4

/* TridentTensorMeta.dtype: c10::ScalarType values, named as torch names the dtype (torch.float32 ->
 * TRIDENT_DTYPE_FLOAT32). The runtime reports any ScalarType; these are the ones Python names.
 * tensor_access.cpp checks each against c10 at build time. */
#define TRIDENT_DTYPE_UINT8 0
#define TRIDENT_DTYPE_INT8 1
#define TRIDENT_DTYPE_INT16 2
#define TRIDENT_DTYPE_INT32 3
#define TRIDENT_DTYPE_INT64 4
#define TRIDENT_DTYPE_FLOAT16 5
#define TRIDENT_DTYPE_FLOAT32 6
#define TRIDENT_DTYPE_FLOAT64 7
#define TRIDENT_DTYPE_COMPLEX32 8
#define TRIDENT_DTYPE_COMPLEX64 9
#define TRIDENT_DTYPE_COMPLEX128 10
#define TRIDENT_DTYPE_BOOL 11
#define TRIDENT_DTYPE_BFLOAT16 15
#define TRIDENT_DTYPE_FLOAT8_E5M2 23
#define TRIDENT_DTYPE_FLOAT8_E4M3FN 24
#define TRIDENT_DTYPE_FLOAT8_E5M2FNUZ 25
#define TRIDENT_DTYPE_FLOAT8_E4M3FNUZ 26
#define TRIDENT_DTYPE_UINT16 27
#define TRIDENT_DTYPE_UINT32 28
#define TRIDENT_DTYPE_UINT64 29

/* TridentTensorMeta.device_type: c10::DeviceType values, named as torch.device names the type ("cuda" ->
 * TRIDENT_DEVICE_TYPE_CUDA); checked against c10 at build time like the dtypes. */
#define TRIDENT_DEVICE_TYPE_CPU 0
#define TRIDENT_DEVICE_TYPE_CUDA 1
#define TRIDENT_DEVICE_TYPE_XPU 12
#define TRIDENT_DEVICE_TYPE_MPS 13
#define TRIDENT_DEVICE_TYPE_META 14

/* c10::Layout values, named as torch names the layout (torch.sparse_csc -> TRIDENT_LAYOUT_SPARSE_CSC): compiled
 * code hands layout arguments to ATen as these; checked against c10 at build time like the dtypes. */
#define TRIDENT_LAYOUT_STRIDED 0
#define TRIDENT_LAYOUT_SPARSE_COO 1
#define TRIDENT_LAYOUT_SPARSE_CSR 2
#define TRIDENT_LAYOUT_SPARSE_CSC 4
#define TRIDENT_LAYOUT_SPARSE_BSR 5
#define TRIDENT_LAYOUT_SPARSE_BSC 6
#define TRIDENT_LAYOUT_JAGGED 7

/* Fills *out if obj is exactly a torch.Tensor or torch.nn.Parameter with strided layout, not a tensor
 * subclass, and not a functorch-wrapped, functionalization-wrapped, zero-tensor or Python-dispatch tensor;
 * returns 1 then, else 0 (out untouched). Also 0 when reading the metadata throws (e.g. a tensor without
 * storage data). Never raises. */
TRIDENT_API int32_t trident_read_tensor(PyObject* obj, TridentTensorMeta* out);
/* 1 and *out = value if obj is exactly int (bool is not an int here) and fits in int64; else 0. */
TRIDENT_API int32_t trident_read_int(PyObject* obj, int64_t* out);
/* 1 and *out = value if obj is exactly float; else 0. */
TRIDENT_API int32_t trident_read_float(PyObject* obj, double* out);
/* 1 and *out = 0/1 if obj is True or False; else 0. */
TRIDENT_API int32_t trident_read_bool(PyObject* obj, int64_t* out);
/* 1 if obj is None. */
TRIDENT_API int32_t trident_is_none(PyObject* obj);
/* 1 if obj is exactly a tuple (kind TRIDENT_SEQ_TUPLE), list (TRIDENT_SEQ_LIST) or dict (TRIDENT_SEQ_DICT; its
 * keys are checked by trident_dict_keys_are) of exactly `length` items; else 0. */
TRIDENT_API int32_t trident_check_sequence(PyObject* obj, int64_t kind, int64_t length);
/* Borrowed item `index` of a tuple or list, the value at position `index` of a dict, or of a state object's
 * instance __dict__, already checked by trident_check_sequence or trident_check_object (NULL past the end). */
TRIDENT_API PyObject* trident_sequence_item(PyObject* obj, int64_t index);
/* 1 if obj's type is exactly `cls` and its instance __dict__ holds exactly `keys` (a tuple of str), in order: a
 * state object (TRIDENT_SEQ_OBJECT) walked like an argument dict; else 0. Never raises. */
TRIDENT_API int32_t trident_check_object(PyObject* obj, PyObject* cls, PyObject* keys);
/* Borrowed instance __dict__ of obj, or NULL when it has none. Never raises. */
TRIDENT_API PyObject* trident_instance_dict(PyObject* obj);
/* Sets entry `name` (a str) of a state object's instance __dict__ to `value` (a new reference of its own is
 * taken): an assignment the traced function made (`self.keys = torch.cat(...)`), made again after a run. 1, or 0
 * with a Python exception set. */
TRIDENT_API int32_t trident_state_write(PyObject* obj, PyObject* name, PyObject* value);
/* 1 if obj has exactly the type of `expected` and equals it (str, torch.device, torch.dtype: types whose equality
 * is C code); else 0. Never raises. */
TRIDENT_API int32_t trident_equals(PyObject* obj, PyObject* expected);

/* Borrowed value of `name` (a str) in obj's instance __dict__ (descriptors and __getattr__ are not consulted, so
 * no Python code runs), or NULL when obj has no __dict__ or no such entry. Module attribute guards read a module's
 * `training` flag and other plain attributes through it. Never raises. */
TRIDENT_API PyObject* trident_instance_attribute(PyObject* obj, PyObject* name);
/* Borrowed value of `key` in `dict` (a dict or dict subclass, read as a plain dict), or NULL when dict is not a
 * dict or has no such key. Never raises. */
TRIDENT_API PyObject* trident_dict_item(PyObject* dict, PyObject* key);
TRIDENT_API int32_t trident_dict_keys_are(PyObject* dict, PyObject* keys);

/* CUDA graph replay, shared by the entry (csrc/graphs/policy.h) and the graph recorder (graphs/recorder.py).
 * How the recorder's runner (Entry.runner) runs one call of a specialization: */
#define TRIDENT_RUN_DIRECT 0 /* its run function, as a hit without graphs */
#define TRIDENT_RUN_RECORD 1 /* recording into a GraphRecording, under the caller's stream capture */
#define TRIDENT_RUN_REPLAY 2 /* replaying a GraphRecording; RuntimeError when the call diverges from it */
/* The hit of a specialization that is recorded first: hits 1-2 settle pooled buffers and matmul plans. */
#define TRIDENT_GRAPH_RECORD_AT_HIT 3
/* Recordings kept per specialization (symbolic sizes, e.g. batch 1 and 8, each need their own). */
#define TRIDENT_GRAPH_MAX_RECORDINGS 4

#define TRIDENT_SEQ_TUPLE 1
#define TRIDENT_SEQ_LIST 2
#define TRIDENT_SEQ_DICT 3 /* an argument dict with str keys: its keys, in order, are guarded like a length */
#define TRIDENT_SEQ_OBJECT 4 /* a state object: its class and its instance __dict__'s keys, in order */

/* Process-wide state a specialization depends on, packed into the TRIDENT_STATE_* fields below (-1 if it
 * cannot be read, which matches no compiled state). */
TRIDENT_API int64_t trident_global_state(void);

#define TRIDENT_STATE_GRAD_ENABLED 0x1     /* torch.is_grad_enabled() */
#define TRIDENT_STATE_AUTOCAST_ENABLED 0x2 /* autocast enabled on any device type */
#define TRIDENT_STATE_INFERENCE_MODE 0x4   /* torch.is_inference_mode_enabled() */
#define TRIDENT_STATE_TORCH_FUNCTION_SHIFT 3 /* 2 bits (TRIDENT_STATE_TORCH_FUNCTION_MASK): TRIDENT_TORCH_FUNCTION_* */
#define TRIDENT_STATE_TORCH_FUNCTION_MASK 0x3
#define TRIDENT_STATE_DEFAULT_DTYPE_SHIFT 8  /* 8 bits (TRIDENT_STATE_DTYPE_MASK): torch.get_default_dtype() */
#define TRIDENT_STATE_AUTOCAST_CPU_SHIFT 16  /* 8 bits: 0 if CPU autocast is off, else 1 + the dtype it casts to */
#define TRIDENT_STATE_AUTOCAST_CUDA_SHIFT 24 /* 8 bits: the same for CUDA autocast */
#define TRIDENT_STATE_DTYPE_MASK 0xff

/* ATen's TorchFunctionDisabledState (torch._C.DisableTorchFunctionSubclass / DisableTorchFunction). */
#define TRIDENT_TORCH_FUNCTION_ENABLED 0
#define TRIDENT_TORCH_FUNCTION_SUBCLASSES_DISABLED 1
#define TRIDENT_TORCH_FUNCTION_ALL_DISABLED 2

/* The torch function mode stack (torch.set_default_device, `with torch.device(...)`, user TorchFunctionModes).
 * A specialization bakes in what the modes did while it was captured (a factory's device), so guards compare
 * the stack with the one at capture: the count, then each mode. trident_function_mode_matches(index, expected,
 * device) is 1 when the mode at `index` is `expected`, or, with `device` non-NULL (a default-device mode, whose
 * only state is its device), when it has expected's exact type and a `device` attribute equal to `device`;
 * 0 otherwise (an error while comparing counts as 0, with the Python error cleared). */
TRIDENT_API int64_t trident_function_mode_count(void);
TRIDENT_API int32_t trident_function_mode_matches(int64_t index, PyObject* expected, PyObject* device);

/* Borrowed handle of a tensor argument already checked by a guard (no type check here). The accessors below
 * take 0 <= dim < tensor dim (no negative wrapping, no bounds check). */
TRIDENT_API AtenTensorHandle trident_tensor_handle(PyObject* obj);
TRIDENT_API int64_t trident_tensor_size(AtenTensorHandle t, int64_t dim);
TRIDENT_API int64_t trident_tensor_stride(AtenTensorHandle t, int64_t dim);
TRIDENT_API int64_t trident_tensor_storage_offset(AtenTensorHandle t);
/* The address of its first element (0 without storage), as a kernel gets it. */
TRIDENT_API int64_t trident_tensor_data_address(AtenTensorHandle t);
/* The truth of what a value program returned (a tensor the traced function read in Python, guards/values.py
 * ValueGuard): 1 or 0; -1 when the program failed (`status` is not TRIDENT_OK) or `result` is not a one-element
 * tensor. Takes over the reference `result` holds (NULL allowed). Never raises: the program's error, if any, is
 * cleared, since a failure is a miss and the call that misses runs eagerly and meets it there. */
TRIDENT_API int32_t trident_value_truth(int32_t status, PyObject* result);

/* ---------------------------------------------------------------------------------------------------
 * Calling ATen operators through the dispatcher (boxed).
 *
 * Arguments are `nargs` pairs of int64 (tag, value), in schema order. Tags:
 *   NONE            value ignored
 *   TENSOR          value = AtenTensorHandle (borrowed)
 *   INT             value = int64 (also ScalarType, Layout, MemoryFormat arguments)
 *   DOUBLE          value = the double's bit pattern
 *   BOOL            value = 0/1
 *   INT_LIST        value = pointer to int64[len];             len = tag >> TRIDENT_ARG_LENGTH_SHIFT
 *   TENSOR_LIST     value = pointer to AtenTensorHandle[len];  len as for INT_LIST
 *   OPT_TENSOR_LIST value = pointer to AtenTensorHandle[len], NULL entries are None; len as for INT_LIST
 *   STRING          value = pointer to a NUL-terminated string
 *   DEVICE          value = a device code: (device_type << TRIDENT_DEVICE_CODE_TYPE_SHIFT) | index, the index
 *                   TRIDENT_DEVICE_CODE_NO_INDEX for none
 * The tag itself is tag_word & TRIDENT_ARG_TAG_MASK. An INT, DOUBLE or BOOL argument that is a constant of the
 * program (the same value on every call) carries TRIDENT_ARG_CONSTANT in its tag word: a CUDA graph recording
 * keeps it in the step's signature instead of following it (graphs/scalars.cpp).
 * `nargs` must equal the schema's argument count (defaults included, kwarg-only ones in schema order), or the
 * call fails. A NULL TENSOR handle passes None (for Tensor? arguments); a NULL TENSOR_LIST entry passes an
 * undefined tensor.
 * Returns are flattened into `rets`: each returned Tensor is one new owned handle; each returned Tensor[]
 * contributes its elements in order; a returned None or undefined tensor is a NULL handle. Other return
 * types (int, float, ...) fail. The count must equal `nrets`, or the call fails (and no handle is returned).
 * Failure sets the thread-local error with the operator's message and Python exception kind. If the operator
 * ran Python that raised (a Python kernel), that Python exception is also left set, and the entry raises it.
 * Called with the GIL held, which stays held while the operator runs.
 */
#define TRIDENT_TAG_NONE 0
#define TRIDENT_TAG_TENSOR 1
#define TRIDENT_TAG_INT 2
#define TRIDENT_TAG_DOUBLE 3
#define TRIDENT_TAG_BOOL 4
#define TRIDENT_TAG_INT_LIST 5
#define TRIDENT_TAG_TENSOR_LIST 6
#define TRIDENT_TAG_OPT_TENSOR_LIST 7
#define TRIDENT_TAG_STRING 8
#define TRIDENT_TAG_DEVICE 9

#define TRIDENT_ARG_TAG_MASK 0xff
#define TRIDENT_ARG_LENGTH_SHIFT 8
#define TRIDENT_ARG_CONSTANT 256
#define TRIDENT_DEVICE_CODE_TYPE_SHIFT 16
#define TRIDENT_DEVICE_CODE_INDEX_MASK 0xffff
#define TRIDENT_DEVICE_CODE_NO_INDEX 0xffff

TRIDENT_API int32_t trident_op_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                    int64_t nrets);
/* trident_op_call for a factory (no tensor argument): run below the ADInplaceOrView layer, as torch's own
 * factories run it, so a fill inside it counts no write. */
TRIDENT_API int32_t trident_factory_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                         int64_t nrets);
/* trident_op_call for an operator that makes no step of a CUDA graph recording (it only makes views; the
 * compiler decides which: graphs/steps.py): it runs as it is while a graph records or replays. */
TRIDENT_API int32_t trident_view_call(void* op, const int64_t* args, int64_t nargs, AtenTensorHandle* rets,
                                      int64_t nrets);
/* A 0-dim "wrapped number" tensor holding a Python scalar (tag INT, DOUBLE or BOOL), as eager's argument
 * parser makes for `x * 2`. New owned handle in *out. */
TRIDENT_API int32_t trident_scalar_tensor(int64_t tag, int64_t value, AtenTensorHandle* out);
/* Releases an owned handle. NULL is allowed. */
TRIDENT_API void trident_tensor_delete(AtenTensorHandle t);

/* ---------------------------------------------------------------------------------------------------
 * Building results (new references; NULL with a Python error set on failure).
 */
/* The Python tensor for `t` (the same object if the tensor already has one, as for in-place results).
 * Does not take ownership of the handle. A NULL handle gives None. */
TRIDENT_API PyObject* trident_wrap_tensor(AtenTensorHandle t);
/* While a replay plan builds a CUDA graph replay's result (csrc/graphs/replay_plan.cpp): the k-th tensor the host
 * program hands the caller, as the plan learned it (borrowed; NULL for None or outside such a build). */
TRIDENT_API AtenTensorHandle trident_graph_output(int64_t k);
TRIDENT_API PyObject* trident_new_ref(PyObject* obj);
TRIDENT_API PyObject* trident_box_int(int64_t v);
TRIDENT_API PyObject* trident_box_float(double v);
TRIDENT_API PyObject* trident_box_bool(int64_t v);
/* A new tuple (kind TRIDENT_SEQ_TUPLE) or list (TRIDENT_SEQ_LIST) of `length` empty items. */
TRIDENT_API PyObject* trident_sequence_new(int64_t kind, int64_t length);
/* Stores `item` at `index` of a sequence made by trident_sequence_new, stealing the reference. */
TRIDENT_API void trident_sequence_set(PyObject* seq, int64_t index, PyObject* item);
/* Py_XDECREF. */
TRIDENT_API void trident_decref(PyObject* obj);

/* Calls a Python callable (borrowed, from the context's constants) with `nargs` arguments encoded as for
 * trident_op_call (TENSOR, INT, DOUBLE, BOOL only; tensors become their Python objects) and discards its
 * result. For work that has no native implementation: Triton launches on CPU tensors, which run through
 * Triton's interpreter; it runs Python bytecode. On failure the callable's exception stays set. */
TRIDENT_API int32_t trident_python_call(PyObject* callable, const int64_t* args, int64_t nargs);

/* Launches one Triton kernel launch site: `launch` is its TritonLaunch object (borrowed, from the context's
 * constants), the operands are encoded as for trident_op_call (TENSOR, INT, DOUBLE, BOOL). A compiled
 * variant matching the operands' specialization key is launched natively on torch's current CUDA stream;
 * otherwise the launch object's Python fallback (Triton's launcher) runs it. On failure a launch error
 * names the kernel and the CUDA error, or the fallback's exception stays set. */
TRIDENT_API int32_t trident_triton_launch(PyObject* launch, const int64_t* args, int64_t nargs);

/* An uninitialized tensor for allocation site `site` of a BufferPool (borrowed, from the context's constants):
 * the buffer the site made in an earlier call when nothing else references it and it fits (buffer_pool.cpp
 * says when exactly), else a new one from ATen. New owned handle in *out.
 * trident_pool_empty: `ndim` sizes, and strides (NULL: contiguous), dtype a c10::ScalarType, device a code as
 * TRIDENT_TAG_DEVICE values. trident_pool_empty_like: as at::empty_like(like) in preserve format; dtype and
 * device TRIDENT_POOL_LIKE_INPUT take like's. */
#define TRIDENT_POOL_LIKE_INPUT (-1)
/* While a CUDA graph records or replays, each of these calls is one step whose arguments are its site, then
 * (empty_like) the input, or (matmul) bias, a and b at these positions (the replay plan patches them there). */
#define TRIDENT_POOL_STEP_SITE 0
#define TRIDENT_POOL_STEP_LIKE 1
#define TRIDENT_POOL_STEP_BIAS 1
#define TRIDENT_POOL_STEP_A 2
#define TRIDENT_POOL_STEP_B 3
TRIDENT_API int32_t trident_pool_empty(PyObject* pool, int64_t site, const int64_t* sizes, const int64_t* strides,
                                       int64_t ndim, int64_t dtype, int64_t device, AtenTensorHandle* out);
TRIDENT_API int32_t trident_pool_empty_like(PyObject* pool, int64_t site, AtenTensorHandle like, int64_t dtype,
                                            int64_t device, AtenTensorHandle* out);
/* at::mm(a, b), or at::addmm(bias, a, b) when bias is not NULL, computed into a pooled result (same bits as the
 * functional op; its errors where ATen would reject the operands). */
TRIDENT_API int32_t trident_pool_matmul(PyObject* pool, int64_t site, AtenTensorHandle bias, AtenTensorHandle a,
                                        AtenTensorHandle b, AtenTensorHandle* out);
/* A tensor the program just made and will store into the caller's objects marked static (a Hugging Face
 * StaticCache's keys and values at its first update): when the memory site `site` kept from an earlier call is
 * free again (the tensor stored then died) and fits, the tensor's contents move there and *t becomes a new tensor
 * on that memory; otherwise the site keeps this tensor's memory for next time (within the pool's limit). Either way
 * *t holds the op's bits with the op's layout. Nothing happens while a CUDA graph records or replays. */
TRIDENT_API int32_t trident_pool_keep(PyObject* pool, int64_t site, AtenTensorHandle t);

/* ---------------------------------------------------------------------------------------------------
 * Codes of the TritonLaunch type's constructor (runtime/triton_native.py builds its arguments; generated code
 * never sees them). key_spec: (operand, TRIDENT_KEY_*) pairs, what a launch's variants are keyed on, as Triton
 * specializes a kernel; params: (TRIDENT_PARAM_*, source) per non-constexpr kernel parameter.
 */
#define TRIDENT_KEY_ALIGN 0        /* pointer: 1 if 16-byte aligned */
#define TRIDENT_KEY_INT 1          /* int: 1 if ==1, else 2 + 2*(beyond int32) + (divisible by 16) */
#define TRIDENT_KEY_INT_NO_ALIGN 2 /* int with do_not_specialize_on_alignment: ==1 or the width, no divisibility */
#define TRIDENT_KEY_INT_WIDTH 3    /* int with do_not_specialize: the width only */
#define TRIDENT_KEY_VALUE 4        /* the exact value (autotune keys, heuristics inputs) */

#define TRIDENT_PARAM_POINTER 0 /* operand tensor: its data address */
#define TRIDENT_PARAM_INT 1     /* operand int (stored as int64; narrower types read the low bytes) */
#define TRIDENT_PARAM_FP32 2    /* operand float or int, converted to fp32 bits */
#define TRIDENT_PARAM_FP64 3    /* operand float or int, as fp64 bits */
#define TRIDENT_PARAM_LITERAL 4 /* 8 bytes packed by Python (constants of the launch); source = the bits */

/* ---------------------------------------------------------------------------------------------------
 * Errors.
 */
#define TRIDENT_EXC_RUNTIME 0
#define TRIDENT_EXC_INDEX 1
#define TRIDENT_EXC_VALUE 2
#define TRIDENT_EXC_TYPE 3
#define TRIDENT_EXC_NOT_IMPLEMENTED 4
#define TRIDENT_EXC_KERNEL_LAUNCH 5 /* trident.exc.KernelLaunchError */
#define TRIDENT_EXC_ZERO_DIVISION 6 /* integer // or % by zero in the host program, as Python raises */
#define TRIDENT_EXC_OVERFLOW 7      /* host-program int arithmetic beyond int64 (Python ints would grow) */
/* The message of this thread's last failure (valid until the next failure on this thread). */
TRIDENT_API const char* trident_last_error(void);
TRIDENT_API int32_t trident_last_error_kind(void);
TRIDENT_API void trident_set_error(int32_t kind, const char* message);

#ifdef __cplusplus
}
#endif
#endif /* TRIDENT_RUNTIME_H */
