/*
 * buffer_pool.cpp — a specialization's intermediate buffers, kept from one call to the next.
 *
 * A decode step allocates the same ~100 intermediates on every call; through the caching allocator each costs
 * about 1 µs of host time (measured on the H200 host). A BufferPool (one per specialization, one of its
 * context constants) keeps the buffer each allocation site made last time and hands it out again when that
 * is exactly as safe as a fresh allocation from torch's caching allocator:
 *   - nothing else references its memory: the pool's tensor is the only reference to its TensorImpl and to
 *     its storage (a returned output, a view a caller kept, or the same site in another thread's call in
 *     flight all hold one), which is when the allocator would consider the block free;
 *   - on CUDA, the call runs on the stream the buffer was last handed out on, so the kernels that used it
 *     before are ordered before every new use — the allocator's own per-stream rule — and that stream is
 *     not capturing a CUDA graph (a graph keeps its pointers: a buffer used in one must not be handed out);
 *   - same sizes, strides, dtype and device as requested.
 * Otherwise the site allocates through ATen as before and keeps the new buffer (unless capturing, or the
 * pool is at its byte limit). Empty tensors are uninitialized either way, so a reused buffer's old contents
 * are not observable through any correct program.
 * A site of the other kind keeps the memory of a tensor the program stores into the caller's objects marked
 * static (keep, below): there the op runs as usual and its result moves into the kept memory when that is free.
 * Generated code calls these under the GIL (as every runtime entry), which makes the check-and-take atomic
 * with respect to other threads.
 */
#include "matmul_plan.h"
#include "runtime_internal.h"
#include "graphs/replay.h"
#include "typed_ops_support.h"

#include <vector>

#include <ATen/core/Tensor.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/mm.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/strides.h>

// ATen's CUDA kernels for mm.out and addmm.out, the functions the dispatcher ends at for CUDA tensors (declared
// in ATen/ops/{mm,addmm}_cuda_dispatch.h, defined in libtorch_cuda, which runtime/build.py links when torch has
// it). Weak: a CPU-only torch lacks them, and they are then null. Calling them directly skips the dispatcher's
// key computation and its autograd and ADInplaceOrView layers: 0.3-1.5 µs of a 12-17 µs decode-shaped cuBLAS
// matmul on an H200 host (benchmarks/matmul_host_cost.py). Those layers do nothing observable for a pooled
// result: no operand requires grad (such calls run eagerly), and the result's version counter, which
// ADInplaceOrView would bump, belongs to an intermediate no caller can see.
namespace at::cuda {
__attribute__((weak)) at::Tensor& mm_out(at::Tensor& out, const at::Tensor& self, const at::Tensor& mat2);
__attribute__((weak)) at::Tensor& addmm_out(at::Tensor& out, const at::Tensor& self, const at::Tensor& mat1,
                                            const at::Tensor& mat2, const at::Scalar& beta, const at::Scalar& alpha);
}  // namespace at::cuda

namespace {

struct PoolSite {
  at::Tensor buffer;
  int64_t stream = 0;
  int64_t bytes = 0;
  trident::SiteMatmulPlan matmul;  // a CUDA matmul site's cuBLASLt plan (matmul_plan.cpp)
};

struct BufferPoolObject {
  PyObject_HEAD
  std::vector<PoolSite>* sites;
  int64_t limit_bytes;  // kept across calls at most; past it sites allocate every call
  int64_t held_bytes;
  int64_t reuses;
  int64_t allocations;
  int64_t direct_matmuls;  // matmuls computed by calling ATen's CUDA kernel directly (reaches_cuda_kernel)
  int64_t planned_matmuls;  // matmuls computed by a site's verified cuBLASLt plan instead
  int64_t unkept;  // tensors stored into the caller's objects marked static whose memory the limit left unkept
  bool matmul_plans;  // whether sites may make plans (TRIDENT_MATMUL_PLANS)
  trident::PlanWorkspace* workspace;  // shared by the pool's plans
};

BufferPoolObject* as_pool(PyObject* obj) { return reinterpret_cast<BufferPoolObject*>(obj); }

// The stream a buffer on `device` would be used on now: 0 for CPU (synchronous), torch's current stream for
// CUDA; false when it cannot be known or is capturing a graph (then nothing is reused or kept).
bool usable_stream(const at::Device& device, int64_t* stream) {
  if (device.is_cpu()) {
    *stream = 0;
    return true;
  }
  void* handle = nullptr;
  bool capturing = true;
  if (!device.is_cuda() || device.index() < 0 || !trident::current_cuda_stream(device.index(), &handle, &capturing) ||
      capturing) {
    return false;
  }
  *stream = reinterpret_cast<int64_t>(handle);
  return true;
}

// Whether the TensorImpl's Python object (if any) is referenced only from C++. torch >= 2.13 counts a
// tensor's Python object as one C++ reference for as long as the object lives, and keeps the object alive
// while other C++ references exist; an older torch drops that reference once Python lets go (and has no
// has_unique_reference): there the overload below answers false and use_count alone decides.
template <typename Slot>
auto python_object_unreferenced(const Slot* slot, int) -> decltype(slot->has_unique_reference()) {
  return slot->has_unique_reference();
}
template <typename Slot>
bool python_object_unreferenced(const Slot*, long) {
  return false;
}

// Whether `references` C++ references mean that nothing but the pool holds an object (a TensorImpl or its
// StorageImpl): one, or two of which one is the object's own Python object, itself referenced only from C++.
template <typename Impl>
bool only_one_holder(const Impl* impl, size_t references) {
  return references == 1 || (references == 2 && python_object_unreferenced(impl->pyobj_slot(), 0));
}

// Nothing outside the pool references the buffer's TensorImpl or its memory: no result, view, kept input of a
// custom op, or call in flight in another thread.
bool only_the_pool_holds(const at::Tensor& t) {
  return only_one_holder(t.unsafeGetTensorImpl(), t.use_count()) &&
         only_one_holder(t.storage().unsafeGetStorageImpl(), t.storage().use_count());
}

bool fits(const at::Tensor& t, at::IntArrayRef sizes, at::IntArrayRef strides, at::ScalarType dtype,
          const at::Device& device) {
  return t.scalar_type() == dtype && t.device() == device && t.sizes() == sizes && t.strides() == strides &&
         t.storage_offset() == 0;
}

// Makes `buffer` (used on `stream`) the one the site keeps, in place of its last, unless that would take the pool past
// its byte limit; false then.
bool hold(BufferPoolObject* pool, PoolSite* site, const at::Tensor& buffer, int64_t stream) {
  const int64_t bytes = static_cast<int64_t>(buffer.storage().nbytes());
  if (pool->held_bytes - site->bytes + bytes > pool->limit_bytes) return false;
  pool->held_bytes += bytes - site->bytes;
  site->buffer = buffer;
  site->stream = stream;
  site->bytes = bytes;
  return true;
}

// A new tensor with `like`'s sizes, strides and options on `storage` (from its start): not a view of any tensor.
at::Tensor on_storage(const c10::Storage& storage, const at::Tensor& like) {
  return at::empty({0}, like.options()).set_(storage, 0, like.sizes(), like.strides());
}

// The site's kept buffer if it can be handed out again, else a fresh one (kept for next time when allowed).
// *usable_on (when given) is the stream the buffer will be used on, or -1 when none is usable.
at::Tensor take(BufferPoolObject* pool, int64_t site_index, at::IntArrayRef sizes, at::IntArrayRef strides,
                at::ScalarType dtype, const at::Device& device, int64_t* usable_on = nullptr) {
  int64_t stream = 0;
  const bool usable = usable_stream(device, &stream);
  if (usable_on != nullptr) *usable_on = usable ? stream : -1;
  PoolSite& site = (*pool->sites)[site_index];
  if (usable && site.buffer.defined() && site.stream == stream && only_the_pool_holds(site.buffer) &&
      fits(site.buffer, sizes, strides, dtype, device)) {
    ++pool->reuses;
    return site.buffer;
  }
  at::Tensor fresh = at::empty_strided(sizes, strides, at::TensorOptions().dtype(dtype).device(device));
  ++pool->allocations;
  if (usable) hold(pool, &site, fresh, stream);
  return fresh;
}

// The memory of a tensor stored into the caller's objects marked static, kept so that the next call's tensor of that
// site takes the same address (trident_pool_keep). A Hugging Face StaticCache allocates its keys and values at
// its first update, once per generate(); a CUDA graph recorded for the decode step reads them in place, so a new
// cache at new addresses costs a new recording. The caching allocator places each new cache by whatever else the
// caller holds at that moment; the site places it where the last one was once that one is gone. The site holds a
// TensorImpl of its own on the memory, never the caller's: a C++ reference to the caller's TensorImpl would keep
// its Python object (and what the caller set on it) alive after the caller dropped it (torch >= 2.13).
void keep(BufferPoolObject* pool, int64_t site_index, at::Tensor& t) {
  int64_t stream = 0;
  if (!t.defined() || !usable_stream(t.device(), &stream)) return;
  const c10::Storage& storage = t.storage();
  const int64_t bytes = static_cast<int64_t>(storage.nbytes());
  // Only a tensor that is the whole of its memory and its only user, as a factory or a copy makes it.
  if (t.storage_offset() != 0 || !t.is_non_overlapping_and_dense() || static_cast<int64_t>(t.nbytes()) != bytes ||
      t.use_count() != 1 || !only_one_holder(storage.unsafeGetStorageImpl(), storage.use_count())) {
    return;
  }
  PoolSite& site = (*pool->sites)[site_index];
  if (site.buffer.defined() && site.stream == stream && site.buffer.device() == t.device() &&
      static_cast<int64_t>(site.buffer.storage().nbytes()) == bytes && only_the_pool_holds(site.buffer)) {
    at::Tensor moved = on_storage(site.buffer.storage(), t);
    moved.copy_(t);
    // The op's version counter, as the op left it (copy_ counted one write of its own).
    moved.unsafeGetTensorImpl()->set_version_counter(t.unsafeGetTensorImpl()->version_counter());
    t = std::move(moved);
    ++pool->reuses;
    return;
  }
  ++pool->allocations;
  if (!hold(pool, &site, on_storage(storage, t), stream)) ++pool->unkept;  // explain names the knob that would keep it
}

// Whether the dispatcher would take these operands straight to the CUDA kernel (then calling it directly is
// the same computation): the key it would dispatch on — the operands' keys with the thread's included keys
// added and its excluded keys removed — is CUDA once the autograd and ADInplaceOrView layers are set aside.
// Autocast (enabled by un-excluding its key), a TorchDispatchMode (an included Python key), conjugate or
// negative views, zero tensors and subclasses all rank above CUDA and keep the dispatcher. (The same rule on
// CPU tensors gives: plain -> CPU, autocast on -> AutocastCPU, a _neg_view -> Negative, under a
// TorchDispatchMode -> PythonTLSSnapshot.)
bool reaches_cuda_kernel(const at::Tensor& result, const at::Tensor& x, const at::Tensor& w, const at::Tensor* c) {
  if (!result.is_cuda() || !trident::cuda_matmul_kernels_linked()) return false;
  const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  c10::DispatchKeySet keys = result.key_set() | x.key_set() | w.key_set() | local.included_;
  if (c != nullptr) keys = keys | c->key_set();
  // BackendSelect is always included and only has kernels for factory functions.
  keys = keys - local.excluded_ - c10::autograd_dispatch_keyset_with_ADInplaceOrView -
         c10::DispatchKeySet(c10::DispatchKey::BackendSelect);
  return keys.highestPriorityTypeId() == c10::DispatchKey::CUDA;
}

// --- The Python type -----------------------------------------------------------------------------------

PyObject* pool_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* kwlist[] = {"sites", "limit_bytes", "matmul_plans", nullptr};
  Py_ssize_t n_sites = 0;
  long long limit = 0;
  int matmul_plans = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nL|p:BufferPool", const_cast<char**>(kwlist), &n_sites, &limit,
                                   &matmul_plans)) {
    return nullptr;
  }
  if (n_sites < 0 || limit < 0) return PyErr_Format(PyExc_ValueError, "BufferPool: negative sites or limit");
  auto* self = reinterpret_cast<BufferPoolObject*>(type->tp_alloc(type, 0));
  if (self == nullptr) return nullptr;
  self->sites = new std::vector<PoolSite>(static_cast<size_t>(n_sites));
  self->limit_bytes = limit;
  self->held_bytes = self->reuses = self->allocations = self->direct_matmuls = self->planned_matmuls = 0;
  self->unkept = 0;
  self->matmul_plans = matmul_plans != 0;
  self->workspace = new trident::PlanWorkspace();
  return reinterpret_cast<PyObject*>(self);
}

void pool_dealloc(PyObject* self) {
  delete as_pool(self)->sites;
  delete as_pool(self)->workspace;
  Py_TYPE(self)->tp_free(self);
}

PyObject* pool_reserve(PyObject* self, PyObject* arg) {
  const Py_ssize_t n = PyLong_AsSsize_t(arg);
  if (n < 0) return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_ValueError, "BufferPool.reserve: negative");
  std::vector<PoolSite>& sites = *as_pool(self)->sites;
  if (static_cast<size_t>(n) > sites.size()) sites.resize(static_cast<size_t>(n));
  Py_RETURN_NONE;
}

// references(site) -> (TensorImpl references, storage references, whether only the pool holds it), or None
// when the site keeps no buffer: why a site does not reuse (tests, debugging).
PyObject* pool_references(PyObject* self, PyObject* arg) {
  const Py_ssize_t site = PyLong_AsSsize_t(arg);
  if (site < 0 || static_cast<size_t>(site) >= as_pool(self)->sites->size()) {
    return PyErr_Occurred() ? nullptr : PyErr_Format(PyExc_IndexError, "BufferPool.references: no site %zd", site);
  }
  const at::Tensor& t = (*as_pool(self)->sites)[site].buffer;
  if (!t.defined()) Py_RETURN_NONE;
  return Py_BuildValue("(nnO)", static_cast<Py_ssize_t>(t.use_count()), static_cast<Py_ssize_t>(t.storage().use_count()),
                       only_the_pool_holds(t) ? Py_True : Py_False);
}

PyObject* pool_clear(PyObject* self, PyObject*) {
  BufferPoolObject* pool = as_pool(self);
  for (PoolSite& site : *pool->sites) {
    site.buffer = at::Tensor();
    site.bytes = 0;  // the matmul plans stay: they hold no memory of the program's
  }
  pool->held_bytes = 0;
  *pool->workspace = trident::PlanWorkspace();
  Py_RETURN_NONE;
}

PyObject* pool_sites(PyObject* self, void*) { return PyLong_FromSize_t(as_pool(self)->sites->size()); }
PyObject* pool_held_bytes(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->held_bytes); }
PyObject* pool_limit_bytes(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->limit_bytes); }
PyObject* pool_reuses(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->reuses); }
PyObject* pool_allocations(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->allocations); }
PyObject* pool_direct_matmuls(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->direct_matmuls); }
PyObject* pool_planned_matmuls(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->planned_matmuls); }
PyObject* pool_unkept(PyObject* self, void*) { return PyLong_FromLongLong(as_pool(self)->unkept); }

// matmul_plans -> {site: None (planned) or why not}, for the sites that tried to make a plan.
PyObject* pool_matmul_plans(PyObject* self, void*) {
  PyObject* out = PyDict_New();
  const std::vector<PoolSite>& sites = *as_pool(self)->sites;
  for (size_t i = 0; out != nullptr && i < sites.size(); ++i) {
    const trident::SiteMatmulPlan& slot = sites[i].matmul;
    if (slot.untried()) continue;
    PyObject* key = PyLong_FromSize_t(i);
    PyObject* value = slot.plan ? Py_NewRef(Py_None) : PyUnicode_FromString(slot.refusal.c_str());
    if (key == nullptr || value == nullptr || PyDict_SetItem(out, key, value) != 0) Py_CLEAR(out);
    Py_XDECREF(key);
    Py_XDECREF(value);
  }
  return out;
}

PyMethodDef pool_methods[] = {
    {"reserve", pool_reserve, METH_O, "reserve(n): at least n allocation sites (the lowering numbers them)"},
    {"references", pool_references, METH_O, "references(site): (tensor refs, storage refs, only the pool holds it)"},
    {"clear", pool_clear, METH_NOARGS, "clear(): drop every kept buffer (they return to torch's allocator)"},
    {nullptr, nullptr, 0, nullptr},
};

PyGetSetDef pool_getset[] = {
    {"sites", pool_sites, nullptr, "allocation sites of the specialization", nullptr},
    {"held_bytes", pool_held_bytes, nullptr, "bytes of buffers kept between calls", nullptr},
    {"limit_bytes", pool_limit_bytes, nullptr, "at most this many bytes are kept", nullptr},
    {"reuses", pool_reuses, nullptr, "allocations served by a kept buffer", nullptr},
    {"allocations", pool_allocations, nullptr, "allocations made through ATen", nullptr},
    {"direct_matmuls", pool_direct_matmuls, nullptr, "matmuls run by calling ATen's CUDA kernel directly", nullptr},
    {"planned_matmuls", pool_planned_matmuls, nullptr, "matmuls run by a site's verified cuBLASLt plan", nullptr},
    {"matmul_plans", pool_matmul_plans, nullptr, "{site: None if planned, else why not} for sites that tried", nullptr},
    {"unkept", pool_unkept, nullptr, "static-marked state tensors whose memory the limit left unkept", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

bool valid_site(PyObject* pool, int64_t site) {
  if (site >= 0 && static_cast<size_t>(site) < as_pool(pool)->sites->size()) return true;
  trident_set_error(TRIDENT_EXC_RUNTIME, "internal: buffer pool site out of range");
  return false;
}

}  // namespace

bool trident::cuda_matmul_kernels_linked() {
  return &at::cuda::mm_out != nullptr && &at::cuda::addmm_out != nullptr;
}

PyTypeObject trident::BufferPoolType = {PyVarObject_HEAD_INIT(nullptr, 0)};

bool trident::ready_buffer_pool_type() {
  PyTypeObject& t = BufferPoolType;
  t.tp_name = "trident.runtime.BufferPool";
  t.tp_doc = "BufferPool(sites, limit_bytes): intermediate buffers of one specialization, kept between calls.";
  t.tp_basicsize = sizeof(BufferPoolObject);
  t.tp_flags = Py_TPFLAGS_DEFAULT;
  t.tp_new = pool_new;
  t.tp_dealloc = pool_dealloc;
  t.tp_methods = pool_methods;
  t.tp_getset = pool_getset;
  return PyType_Ready(&t) == 0;
}

extern "C" {

static int32_t pool_empty(PyObject* pool, int64_t site, const int64_t* sizes, const int64_t* strides,
                                       int64_t ndim, int64_t dtype, int64_t device, AtenTensorHandle* out) {
  if (!valid_site(pool, site)) return TRIDENT_ERROR;
  try {
    const at::IntArrayRef size_ref(sizes, static_cast<size_t>(ndim));
    const c10::DimVector contiguous = strides == nullptr ? c10::contiguous_strides(size_ref) : c10::DimVector();
    const at::IntArrayRef stride_ref = strides == nullptr ? at::IntArrayRef(contiguous)
                                                          : at::IntArrayRef(strides, static_cast<size_t>(ndim));
    *out = own(take(as_pool(pool), site, size_ref, stride_ref, static_cast<at::ScalarType>(dtype), ::device(device)));
    return TRIDENT_OK;
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

static int32_t pool_empty_like(PyObject* pool, int64_t site, AtenTensorHandle like, int64_t dtype,
                                            int64_t device, AtenTensorHandle* out) {
  if (!valid_site(pool, site)) return TRIDENT_ERROR;
  try {
    const at::Tensor& x = tensor(reinterpret_cast<int64_t>(like));
    const at::ScalarType scalar_type =
        dtype == TRIDENT_POOL_LIKE_INPUT ? x.scalar_type() : static_cast<at::ScalarType>(dtype);
    const at::Device target = device == TRIDENT_POOL_LIKE_INPUT ? x.device() : ::device(device);
    if (!x.is_non_overlapping_and_dense()) {  // empty_like picks a memory format then: let ATen decide, as eager
      *out = own(at::empty_like(x, at::TensorOptions().dtype(scalar_type).device(target)));
      return TRIDENT_OK;
    }
    *out = own(take(as_pool(pool), site, x.sizes(), x.strides(), scalar_type, target));
    return TRIDENT_OK;
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

// mm(a, b) / addmm(bias, a, b) into a pooled result: ATen's structured mm and addmm compute into a fresh
// contiguous [a.size(0), b.size(1)] tensor of a's dtype, and their out= variants run the same kernels on an
// out tensor of exactly that layout, so the result is the same bits without the allocation. Operands ATen
// would reject (other ranks, dtypes, devices) take the functional op, for eager's error.
static int32_t pool_matmul(PyObject* pool, int64_t site, AtenTensorHandle bias, AtenTensorHandle a,
                                        AtenTensorHandle b, AtenTensorHandle* out) {
  if (!valid_site(pool, site)) return TRIDENT_ERROR;
  try {
    const at::Tensor& x = tensor(reinterpret_cast<int64_t>(a));
    const at::Tensor& w = tensor(reinterpret_cast<int64_t>(b));
    const at::Tensor* c = bias == nullptr ? nullptr : &tensor(reinterpret_cast<int64_t>(bias));
    if (x.dim() != 2 || w.dim() != 2 || x.scalar_type() != w.scalar_type() || x.device() != w.device() ||
        x.size(1) != w.size(0) || (c != nullptr && (c->scalar_type() != x.scalar_type() || c->device() != x.device()))) {
      *out = own(c == nullptr ? at::mm(x, w) : at::addmm(*c, x, w));
      return TRIDENT_OK;
    }
    BufferPoolObject* self = as_pool(pool);
    const int64_t sizes[2] = {x.size(0), w.size(1)};
    const c10::DimVector strides = c10::contiguous_strides(sizes);
    int64_t stream = -1;
    at::Tensor result = take(self, site, sizes, strides, x.scalar_type(), x.device(), &stream);
    if (reaches_cuda_kernel(result, x, w, c)) {
      trident::SiteMatmulPlan& plan = (*self->sites)[site].matmul;
      const bool plans = self->matmul_plans && stream != -1;  // never while capturing a graph
      if (plans && trident::run_matmul_plan(plan, *self->workspace, result, x, w, c, stream)) {
        ++self->planned_matmuls;
      } else {
        ++self->direct_matmuls;
        if (c == nullptr) {
          at::cuda::mm_out(result, x, w);
        } else {
          at::cuda::addmm_out(result, *c, x, w, 1, 1);
        }
        if (plans && plan.untried()) trident::try_matmul_plan(plan, *self->workspace, result, x, w, c, stream);
      }
    } else if (c == nullptr) {
      at::mm_out(result, x, w);
    } else {
      at::addmm_out(result, *c, x, w);
    }
    *out = own(std::move(result));
    return TRIDENT_OK;
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

// While a CUDA graph records or replays (graphs/replay.h), each pooled allocation or matmul is one opaque step:
// its arguments as (tag, value) pairs, and a runner that decodes them back.

int32_t run_pool_empty(const void* pool, const int64_t* a, int64_t, AtenTensorHandle* rets, int64_t) {
  const bool strided = (a[4] & TRIDENT_ARG_TAG_MASK) == TRIDENT_TAG_INT_LIST;
  return pool_empty(const_cast<PyObject*>(static_cast<const PyObject*>(pool)), a[1],
                    reinterpret_cast<const int64_t*>(a[3]), strided ? reinterpret_cast<const int64_t*>(a[5]) : nullptr,
                    a[2] >> TRIDENT_ARG_LENGTH_SHIFT, a[7], a[9], rets);
}

int32_t run_pool_empty_like(const void* pool, const int64_t* a, int64_t, AtenTensorHandle* rets, int64_t) {
  return pool_empty_like(const_cast<PyObject*>(static_cast<const PyObject*>(pool)), a[1],
                         reinterpret_cast<AtenTensorHandle>(a[3]), a[5], a[7], rets);
}

int32_t run_pool_matmul(const void* pool, const int64_t* a, int64_t, AtenTensorHandle* rets, int64_t) {
  return pool_matmul(const_cast<PyObject*>(static_cast<const PyObject*>(pool)), a[1],
                     reinterpret_cast<AtenTensorHandle>(a[3]), reinterpret_cast<AtenTensorHandle>(a[5]),
                     reinterpret_cast<AtenTensorHandle>(a[7]), rets);
}

TRIDENT_API int32_t trident_pool_empty(PyObject* pool, int64_t site, const int64_t* sizes, const int64_t* strides,
                                       int64_t ndim, int64_t dtype, int64_t device, AtenTensorHandle* out) {
  if (trident::graphs::active == nullptr) return pool_empty(pool, site, sizes, strides, ndim, dtype, device, out);
  const int64_t list = TRIDENT_TAG_INT_LIST | ndim << TRIDENT_ARG_LENGTH_SHIFT;
  const int64_t args[10] = {TRIDENT_TAG_INT, site, list, reinterpret_cast<int64_t>(sizes),
                            strides == nullptr ? TRIDENT_TAG_NONE : list, reinterpret_cast<int64_t>(strides),
                            TRIDENT_TAG_INT, dtype, TRIDENT_TAG_INT, device};
  return trident::graphs::opaque_step(pool, "trident pool: empty", args, 5, 0, run_pool_empty, pool, out, 1);
}

TRIDENT_API int32_t trident_pool_empty_like(PyObject* pool, int64_t site, AtenTensorHandle like, int64_t dtype,
                                            int64_t device, AtenTensorHandle* out) {
  if (trident::graphs::active == nullptr) return pool_empty_like(pool, site, like, dtype, device, out);
  static_assert(TRIDENT_POOL_STEP_SITE == 0 && TRIDENT_POOL_STEP_LIKE == 1, "the step's argument order");
  const int64_t args[8] = {TRIDENT_TAG_INT, site, TRIDENT_TAG_TENSOR, reinterpret_cast<int64_t>(like),
                           TRIDENT_TAG_INT, dtype, TRIDENT_TAG_INT, device};
  return trident::graphs::opaque_step(pool, "trident pool: empty_like", args, 4, 0, run_pool_empty_like, pool, out, 1);
}

TRIDENT_API int32_t trident_pool_matmul(PyObject* pool, int64_t site, AtenTensorHandle bias, AtenTensorHandle a,
                                        AtenTensorHandle b, AtenTensorHandle* out) {
  if (trident::graphs::active == nullptr) return pool_matmul(pool, site, bias, a, b, out);
  static_assert(TRIDENT_POOL_STEP_SITE == 0 && TRIDENT_POOL_STEP_BIAS == 1 && TRIDENT_POOL_STEP_A == 2 &&
                    TRIDENT_POOL_STEP_B == 3,
                "the step's argument order");
  const int64_t args[8] = {TRIDENT_TAG_INT, site, TRIDENT_TAG_TENSOR, reinterpret_cast<int64_t>(bias),
                           TRIDENT_TAG_TENSOR, reinterpret_cast<int64_t>(a), TRIDENT_TAG_TENSOR,
                           reinterpret_cast<int64_t>(b)};
  return trident::graphs::opaque_step(pool, "trident pool: matmul", args, 4, 0, run_pool_matmul, pool, out, 1);
}

TRIDENT_API int32_t trident_pool_keep(PyObject* pool, int64_t site, AtenTensorHandle t) {
  // A recording never repeats a state write (graphs/recorder.py refuses such programs): nothing to keep then.
  if (trident::graphs::active != nullptr) return TRIDENT_OK;
  if (!valid_site(pool, site)) return TRIDENT_ERROR;
  try {
    keep(as_pool(pool), site, tensor(reinterpret_cast<int64_t>(t)));
    return TRIDENT_OK;
  } catch (...) {
    return trident::fail_with_current_exception();
  }
}

}  // extern "C"
