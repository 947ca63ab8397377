"""The torch-function mode active while a function is traced (capture/trace.py runs it under make_fx): real
tensors the function reads become fakes before any op sees them, Python reads of tensor values are refused or
answered as truths to guard, symbolic int indices and `torch.tensor([pos])` stay symbolic, and fakes an earlier
capture left in a library's state are recomputed."""
from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.utils import _pytree as pytree
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing, get_proxy_mode, get_proxy_slot
from torch.overrides import TorchFunctionMode

from .. import exc
from ..frames import user_location
from .kept_fakes import recipe_of, replay
from .value_reads import TruthReads


# ---------------------------------------------------------------------------------------------------------
# Indexing with symbolic ints


def _has_symint(index: object) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.SymInt) for i in items)


def _basic_index(t: torch.Tensor, index: object) -> torch.Tensor:
    """t[index] for basic indexing (ints, SymInts, slices, None, Ellipsis) built from select/slice/unsqueeze.

    Tensor.__getitem__ in C++ turns a SymInt index into a plain int (a guard on its value), which would
    recompile a decode loop every step; select() keeps it symbolic."""
    items = index if isinstance(index, tuple) else (index,)
    consumed = sum(1 for i in items if i is not None and i is not Ellipsis)
    expanded: list[object] = []
    for i in items:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (t.dim() - consumed))
        else:
            expanded.append(i)
    out, dim = t, 0
    for i in expanded:
        if i is None:
            out, dim = out.unsqueeze(dim), dim + 1
        elif isinstance(i, slice):
            if i != slice(None):
                out = out[(slice(None),) * dim + (i,)]
            dim += 1
        else:
            out = out.select(dim, i)  # type: ignore[arg-type]
    return out


_VALUE_READS = {
    torch.Tensor.item: ".item()", torch.Tensor.tolist: ".tolist()", torch.Tensor.__bool__: "bool(tensor)",
    torch.Tensor.__int__: "int(tensor)", torch.Tensor.__float__: "float(tensor)",
    torch.Tensor.__index__: "using a tensor as an index", torch.Tensor.numpy: ".numpy()",
    torch.Tensor.__contains__: "`in` on a tensor",
}  # fmt: skip


class TracingMode(TorchFunctionMode):
    """Active while tracing. It
    - turns real tensors the function reads (closures, module parameters and buffers) into fake tensors
      before any op sees them, so tracing never computes on or mutates live state (FakeTensorMode would
      constant-fold an op whose inputs are all real tensors, running `counter.add_(1)` for real);
      `real_of` maps each such fake back to its live tensor, which _lift_constants passes to compiled code;
    - rejects reads of tensor values in Python (data-dependent control flow);
    - keeps SymInt indices and torch.tensor([pos]) symbolic;
    - recomputes fakes of an earlier capture that the program kept (a library's cache, kept_fakes.py), and
      notes each op's results for the next capture to do the same."""

    def __init__(self, fake_mode: FakeTensorMode, truths: TruthReads, in_kernel_body: Callable[[], bool]) -> None:
        super().__init__()
        self.fake_mode = fake_mode
        self.truths = truths  # the reads of a tensor's truth it answered, for the guards
        self.in_kernel_body = in_kernel_body  # a Python kernel traced into is running: its reads stay refused
        self.real_of: dict[int, torch.Tensor] = {}  # id(live tensor's fake) -> live tensor
        self._fake_of: dict[int, torch.Tensor] = {}  # id(live tensor) -> fake
        self.produced: list[tuple[FakeTensor, torch.fx.Node]] = []  # each op's fake results, with their node
        self._replayed: dict[int, torch.Tensor] = {}  # kept_fakes.replay's memo

    def _fake(self, t: torch.Tensor) -> torch.Tensor:
        if isinstance(t, FakeTensor):
            return t if t.fake_mode is self.fake_mode else self._recompute(t)
        if type(t) not in (torch.Tensor, torch.nn.Parameter):
            return t
        fake = self._fake_of.get(id(t))
        if fake is None:
            # Outside make_fx's proxy mode: converting a view (`table[None]`) fakes its base first and makes the
            # view from it with as_strided, which the proxy mode would record, leaving the base's fake as a
            # constant no live tensor stands behind. Converted here, the view is one constant: the live view.
            with disable_proxy_modes_tracing():
                fake = self.fake_mode.from_tensor(t, static_shapes=True)
            self._fake_of[id(t)] = fake
            self.real_of[id(fake)] = t
        return fake

    def _recompute(self, kept: FakeTensor) -> torch.Tensor:
        """This trace's value of a fake an earlier capture made and the program kept (kept_fakes.py)."""
        recipe = recipe_of(kept)
        if recipe is None:
            where = user_location(traceback.extract_stack()[:-1])
            raise exc.KeptFromEarlierCapture(
                "the function reads a tensor that an earlier capture of it computed and something kept (a "
                "library's cache?); it was computed from the call's arguments or written in place, so it cannot "
                f"be recomputed from constants\n  at {where}\n  Keep such caches outside the jitted function, "
                "or disable them (e.g. FLA_DISABLE_TENSOR_CACHE=1 for fla)."
            )
        return replay(recipe, self._fake, self._replayed)

    def _truth(self, func: object, args: Sequence[object], where: str) -> bool | None:
        """The answer to a read of a tensor's truth (`bool(t)`, a bool tensor's `.item()`, `value in t`) that the
        guards can check, or None: the read is refused."""
        self.truths.refusal = ""
        tensor = args[0] if args else None
        if not isinstance(tensor, torch.Tensor) or self.in_kernel_body():
            return None
        if func is torch.Tensor.__contains__ and len(args) == 2:
            if not isinstance(args[1], (torch.Tensor, int, float, bool)):
                return None
            element = self._fake(args[1]) if isinstance(args[1], torch.Tensor) else args[1]
            tensor = (element == self._fake(tensor)).any()  # what Tensor.__contains__ reads
        elif func is not torch.Tensor.__bool__ and not (func is torch.Tensor.item and tensor.dtype is torch.bool):
            return None
        return self.truths.answer(self._fake(tensor), where)

    def _note_results(self, result: object) -> None:
        proxy_mode = get_proxy_mode()
        if proxy_mode is None:
            return
        for value in pytree.tree_leaves(result):
            if isinstance(value, FakeTensor) and value.fake_mode is self.fake_mode:
                slot = get_proxy_slot(value, proxy_mode.tracer, None)
                if slot is not None:
                    self.produced.append((value, slot.proxy.node))

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _VALUE_READS:
            where = user_location(traceback.extract_stack()[:-1])
            truth = self._truth(func, args, where)
            if truth is not None:
                return truth
            why = f" (a truth, but {self.truths.refusal})" if self.truths.refusal else ""
            raise exc.UnsupportedConstruct(
                f"{_VALUE_READS[func]} reads a tensor's value in Python{why}: data-dependent control flow or "
                f"values cannot be compiled\n  at {where}\n  Keep the computation in tensors (torch.where, "
                "masking) or move it out of the jitted function."
            )
        if func is torch.Tensor.data_ptr:
            # A traced tensor has no address, and one read at capture is not the address of a later call's
            # tensor: code that computes with it (a TMA descriptor built on the host, a cache keyed by pointer,
            # as kernel libraries do) would bake in a stale or fake address. flag-gems' kernels traced into this
            # way made illegal memory accesses on the H200. So it is refused like a value read (an op's body
            # doing it stays opaque: capture/python_kernels.py).
            where = user_location(traceback.extract_stack()[:-1])
            raise exc.UnsupportedConstruct(
                f".data_ptr() reads a tensor's address in Python, which compiled code cannot reproduce for later "
                f"calls\n  at {where}"
            )
        args, kwargs = pytree.tree_map_only(torch.Tensor, self._fake, (args, kwargs))
        if func is torch.tensor and _symint_data(args[0] if args else kwargs.get("data")):
            return _symbolic_tensor(args[0] if args else kwargs.pop("data"), **kwargs)
        if func in (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__) and _same_batch(args[0], args[1]):
            return _batched_matmul(args[0], args[1])
        if func is torch.Tensor.__getitem__ and _basic_only(args[1]) and _has_symint(args[1]):
            return _basic_index(args[0], args[1])
        if func is torch.Tensor.__setitem__ and _basic_only(args[1]) and _has_symint(args[1]):
            view = _basic_index(args[0], args[1])
            value = args[2]
            if not isinstance(value, torch.Tensor) and _EAGER_SETITEM_FILLS:
                view.fill_(value)  # as eager's __setitem__ in torch >= 2.15: fill_.Scalar (raises on overflow)
                return None
            if not isinstance(value, torch.Tensor):
                # As eager's __setitem__ before: the scalar becomes a tensor of the destination's dtype first (1e30
                # into float16 is inf, not fill_'s overflow error; inf into int64 raises here, before any indexing).
                value = torch.tensor(value, dtype=view.dtype, device=view.device)
            view.copy_(value)
            return None
        result = func(*args, **kwargs)
        self._note_results(result)
        return result


def _eager_setitem_fills() -> bool:
    """Whether eager's `x[i] = scalar` fills with the scalar itself, as torch 2.15 does (fill_.Scalar: 1e30 into
    a float16 row raises an overflow error), rather than converting it to a tensor of x's dtype first, as torch
    2.13 does (inf). Asked of eager itself, once at import, outside any trace (a row of 2: fill_ of a single
    element does not check for overflow)."""
    probe = torch.zeros(2, 2, dtype=torch.float16)
    try:
        probe[0] = 1e30
    except RuntimeError:
        return True
    return False


_EAGER_SETITEM_FILLS = _eager_setitem_fills()


def _same_batch(a: object, b: object) -> bool:
    """Both operands at least 3-D with the same batch dims and a symbolic size among them."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.dim() < 3 or a.dim() != b.dim():
        return False
    sizes = [*a.shape, *b.shape]
    if not any(isinstance(d, torch.SymInt) for d in sizes):
        return False
    return all(
        x is y or (not isinstance(x, torch.SymInt) and not isinstance(y, torch.SymInt) and x == y)
        for x, y in zip(a.shape[:-2], b.shape[:-2])
    )


def _batched_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b as one bmm over the flattened batch: what matmul does for equal batch dims. torch 2.11's matmul
    decomposition guards on the value of a symbolic contraction size (Eq(pos + 1, N) in attention over a
    growing KV cache), which would recompile a decode loop every step."""
    batch = a.shape[:-2]
    n = 1
    for d in batch:  # an explicit product: reshape(-1, ...) would add divisibility guards
        n = n * d
    out = torch.bmm(a.reshape(n, a.shape[-2], a.shape[-1]), b.reshape(n, b.shape[-2], b.shape[-1]))
    return out.view(*batch, a.shape[-2], b.shape[-1])


def _symint_data(data: object) -> bool:
    items = data if isinstance(data, (list, tuple)) else [data]
    return any(isinstance(i, torch.SymInt) for i in items) and all(isinstance(i, (int, torch.SymInt)) for i in items)


def _symbolic_tensor(data: object, dtype: torch.dtype | None = None, device: object = None, **_: object) -> torch.Tensor:
    """torch.tensor of ints some of which are SymInts, built from torch.full so the values stay symbolic
    (torch.tensor itself guards on each value: a decode loop would recompile every step)."""
    dtype = dtype or torch.int64
    if not isinstance(data, (list, tuple)):
        return torch.full((), data, dtype=dtype, device=device)  # type: ignore[arg-type]
    return torch.cat([torch.full((1,), v, dtype=dtype, device=device) for v in data])  # type: ignore[arg-type]


def _basic_only(index: object) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return all(i is None or i is Ellipsis or isinstance(i, (int, slice, torch.SymInt)) for i in items)
