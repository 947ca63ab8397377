"""Property-based fuzzing of guards: one jitted function per program, many inputs, always eager's answer.

Each program below is jitted ONCE, at module level. Every hypothesis example calls that same object, so
specializations accumulate over the run and each later call must be routed by the guards among everything
compiled before it: static and symbolic sizes, 0- and 1-sized dims, dtypes, strides (transposed, expanded,
sliced with a step), storage offsets (aligned and unaligned data pointers), grad / inference mode, inputs that
require grad (eager fallback), int and float arguments (arithmetic, slice bounds, dims, control flow), and
keyword calls in any order with or without defaults.

Every jitted call is compared with eager on an identical, freshly built copy of the inputs: same structure and
Python types, tensor dtypes, shapes, strides, storage offsets, requires_grad / inference flags and values
(bitwise, NaN == NaN), the same aliasing of inputs (an output that is an input, or shares its storage), and the
same input values afterwards (in-place updates) -- or, when eager raises, an exception of the same type and the
same input values afterwards (eager's in-place effects before the failing op).

Each example makes three jitted calls: the drawn call, the same call again on fresh inputs (the hit path) and
a replay of an earlier example of the same program (old inputs must still be routed correctly after newer,
more general specializations were added).

Native share
  An eager result always equals eager, so comparing values proves nothing about the compiler: each program's
  test also asserts that at least NATIVE_SHARE (95 %) of its calls ran natively. The calls run inside
  trident.testing.allow_fallback() (the suite is strict), and each is counted as one of
  - native: no eager fallback;
  - a fallback: ran eagerly although eager returns a result. These make the share; the failure message lists
    their reasons;
  - by design: ran eagerly for a reason docs/semantics.md documents (grad mode on with an input that requires grad;
    an int argument, or an int the program computes, outside int64). Not in the share, listed with -s;
  - eager raises: eager's own exception (an out-of-range index or dim, shapes that do not broadcast). Trident
    must raise the same type with the same effects on the inputs, natively or by running the call eagerly;
    either is correct, neither is "native" work. Not in the share, listed with -s.
  Each program must also have at least EXAMPLES calls in the share, so the drawn domain cannot drift into
  one where eager raises nearly always.

Budget
  CI default: EXAMPLES_PER_PROGRAM_CI examples per program (9 programs, about 3 * 9 * 40 jitted calls), run
  derandomized (the same examples every run).
  The larger, random run (not derandomized, a new sample each time): TRIDENT_FUZZ_EXAMPLES=N gives N
  hypothesis examples in total, split evenly over the programs, so about 3 * N jitted calls; e.g. 10,000+:
      TRIDENT_FUZZ_EXAMPLES=3500 PYTHONPATH=src python -m pytest tests/reliability/test_fuzz_guards.py -s
  With -s the module prints, per program, how many calls ran natively, by design eagerly and raising like
  eager, the reasons of every fallback, and the specializations of each program.

Drawn domain: ints are small, any int64, rarely beyond int64, or bools (an int subclass: `x[True]` is a mask
index); tensors are float32/64/16, int64 or bool. One known Trident bug stays out of it, reproduced by the
strict-xfail test in test_fuzz_reproductions.py: matmul and linear_mlp get no requires_grad under no_grad.
"""
from __future__ import annotations

import collections
import dataclasses
import inspect
import math
import os
from collections.abc import Callable

import pytest
import torch
import triton
import triton.language as tl
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

import trident
import trident.testing
from trident.knobs import override  # `trident.knobs` is the Knobs instance, not the module

from .eager_compare import assert_same_value, outcome

EXAMPLES_PER_PROGRAM_CI = 40
NATIVE_SHARE = 0.95  # of the calls eager returns from (module docstring)
_TOTAL = int(os.environ.get("TRIDENT_FUZZ_EXAMPLES", "0") or 0)

# --------------------------------------------------------------------------------------------------------
# The programs (ATen, and one launching a Triton kernel). Each is jitted once; every example of its test
# calls that one object.


def pointwise(x, y, alpha: float = 1.0, *, beta: int = 2):  # type: ignore[no-untyped-def]
    z = x * alpha + y
    return (z.abs() - y * beta).neg(), torch.where(x > y, x, y)


def reduction(x, dim: int, keepdim: bool = False):  # type: ignore[no-untyped-def]
    out = (x.sum(dim, keepdim=keepdim), x.double().mean(dim), x.cumsum(dim))
    if x.shape[dim] > 0:  # Python control flow on a size; amax has no identity for an empty dim
        out += (x.amax(dim, keepdim=keepdim),)
    return out


def matmul(a, b):  # type: ignore[no-untyped-def]
    c = a @ b
    return c, c.sum(-1) * 2


def views(x, start: int, stop: int, flat: bool = False):  # type: ignore[no-untyped-def]
    out = (x.transpose(0, -1), x[start:stop], x.reshape(-1), x.unsqueeze(0), x.flatten()[::2])
    if flat:
        out += (x.view(-1),)  # drawn only for strides view() can flatten (see views_calls)
    return out


def inplace(x, y, alpha: float):  # type: ignore[no-untyped-def]
    x.mul_(alpha)
    x.add_(y)
    return x, y.sum()


def scalars(x, n: int, s: float, lo: int = 0, hi: int | None = None):  # type: ignore[no-untyped-def]
    y = x[lo:hi] * n + s
    if n > 2:  # Python control flow on an int argument
        y = y - n
    return y, y.shape[0] * n + lo, s * 2.0


def setitem(x, k: int, v: float):  # type: ignore[no-untyped-def]
    x[k] = v
    return x.sum(0), x[k]


_generator = torch.Generator().manual_seed(0)
LINEAR_W1, LINEAR_B1 = torch.randn(6, 4, generator=_generator), torch.randn(6, generator=_generator)
LINEAR_W2 = torch.randn(3, 12, generator=_generator)


def linear_mlp(x, scale: float):  # type: ignore[no-untyped-def]
    # Closed-over weights: views of them made at capture (W2[:, ::2].t()); intermediates from the buffer
    # pool across calls (addmm into a pooled result, an empty_like filled in place); the returned mm is fresh.
    h = torch.nn.functional.linear(x, LINEAR_W1, LINEAR_B1)
    tmp = torch.empty_like(h)
    tmp.copy_(h.relu() * scale)
    return torch.nn.functional.linear(tmp, LINEAR_W2[:, ::2]), h.sum(0)


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha + tl.load(y_ptr + offs, mask=mask), mask=mask)


def triton_axpy(x, y, alpha: float, k: int = 0):  # type: ignore[no-untyped-def]
    # Flat views at a drawn element offset: pointers that are 16-byte aligned or not, sizes that are 0, 1,
    # multiples of 16 or not, all inside specializations made dynamic by earlier calls.
    # The kernel indexes memory linearly, so both inputs are made dense first (an expanded y has stride 0).
    xs, ys = x.reshape(-1).contiguous()[k:], y.reshape(-1).contiguous()[k:]
    out = torch.empty(xs.shape, dtype=xs.dtype)
    axpy_kernel[(triton.cdiv(xs.numel(), 16),)](xs, ys, out, xs.numel(), alpha, BLOCK=16)
    return out


def triton_axpy_reference(x, y, alpha: float, k: int = 0):  # type: ignore[no-untyped-def]
    """What axpy_kernel computes, in torch: eager cannot launch a Triton kernel on CPU tensors."""
    return x.reshape(-1)[k:] * alpha + y.reshape(-1)[k:]


PROGRAMS: dict[str, Callable[..., object]] = {
    f.__name__: f for f in (pointwise, reduction, matmul, views, inplace, scalars, setitem, linear_mlp, triton_axpy)
}
EAGER = {**PROGRAMS, "triton_axpy": triton_axpy_reference}
JITTED = {name: trident.jit(f) for name, f in PROGRAMS.items()}
HISTORY: dict[str, list[Call]] = {name: [] for name in PROGRAMS}
CALLS: dict[str, int] = {name: 0 for name in PROGRAMS}

if _TOTAL:
    EXAMPLES = max(1, _TOTAL // len(PROGRAMS))
    FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=list(HealthCheck))
else:
    EXAMPLES = EXAMPLES_PER_PROGRAM_CI
    FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                    suppress_health_check=list(HealthCheck))


# --------------------------------------------------------------------------------------------------------
# Inputs: recipes, so eager and the jitted function get identical but separate tensors.

DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.bool)
LAYOUTS = ("contiguous", "transposed", "expanded", "stepped", "stepped_last", "offset", "offset_aligned")
MODES = ("no_grad", "enable_grad", "inference_mode")


@dataclasses.dataclass(frozen=True)
class TensorRecipe:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str
    seed: int
    requires_grad: bool = False

    def make(self) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed)

        def values(shape: tuple[int, ...]) -> torch.Tensor:
            if self.dtype.is_floating_point:
                return torch.randn(shape, generator=g, dtype=torch.float64).to(self.dtype)
            if self.dtype == torch.bool:
                return torch.randint(0, 2, shape, generator=g).bool()
            return torch.randint(-4, 5, shape, generator=g, dtype=self.dtype)

        shape, rank = self.shape, len(self.shape)
        if self.layout == "transposed" and rank >= 2:
            t = values(shape[:-2] + (shape[-1], shape[-2])).transpose(-1, -2)
        elif self.layout == "expanded" and rank >= 1:
            t = values((1,) + shape[1:]).expand(shape)
        elif self.layout == "stepped" and rank >= 1:
            t = values((2 * shape[0],) + shape[1:])[::2]
        elif self.layout == "stepped_last" and rank >= 1:
            t = values(shape[:-1] + (2 * shape[-1],))[..., ::2]
        elif self.layout in ("offset", "offset_aligned"):
            # a view into a bigger tensor: offset 3 elements (unaligned) or 16 bytes (aligned, not 0)
            offset = 3 if self.layout == "offset" else 16 // self.dtype.itemsize
            t = values((math.prod(shape) + offset,))[offset:].view(shape)
        else:
            t = values(shape)
        assert t.shape == shape
        if self.requires_grad:
            t.requires_grad_(True)
        return t


@dataclasses.dataclass(frozen=True)
class SameAs:
    """This argument is the very tensor object passed for parameter `name` (aliasing inputs)."""

    name: str


@dataclasses.dataclass
class Call:
    """One drawn call: argument values (recipes for tensors) and how they are passed."""

    program: str
    values: dict[str, object]  # parameter -> value, TensorRecipe or SameAs
    n_positional: int  # the first n parameters are passed positionally
    keyword_order: tuple[str, ...]  # the others by keyword, in this order (omitted ones are left out)
    mode: str

    def materialize(self) -> tuple[list[object], dict[str, object], list[torch.Tensor]]:
        built: dict[str, object] = {}
        for name, v in self.values.items():
            built[name] = v.make() if isinstance(v, TensorRecipe) else v
        for name, v in self.values.items():
            if isinstance(v, SameAs):
                built[name] = built[v.name]
        names = list(inspect.signature(PROGRAMS[self.program]).parameters)
        args = [built[n] for n in names[: self.n_positional]]
        kwargs = {n: built[n] for n in self.keyword_order}
        inputs = [built[n] for n in names if isinstance(built.get(n), torch.Tensor)]
        return args, kwargs, inputs

    def mode_context(self):  # type: ignore[no-untyped-def]
        return {"no_grad": torch.no_grad, "enable_grad": torch.enable_grad,
                "inference_mode": torch.inference_mode}[self.mode]()


sizes = st.sampled_from([0, 1, 2, 2, 3, 3, 4, 5, 7])
seeds = st.integers(0, 2**16)
floats = st.sampled_from([1.0, 0.5, -2.5, 3.0, 0.0, -0.0, 1e-30, 1e30, math.inf, -math.inf, math.nan])
small_ints = st.integers(-8, 8)


@st.composite
def int_values(draw) -> int:  # type: ignore[no-untyped-def]
    """Mostly small ints, then any int64, bools (an int subclass), rarely an int beyond int64 (such a call runs
    eagerly by design)."""
    kind = draw(st.integers(0, 15))
    if kind < 9:
        return draw(small_ints)
    if kind < 13:
        return draw(st.integers(-(2**63), 2**63 - 1))
    if kind < 15:
        return draw(st.booleans())
    return draw(st.sampled_from([2**63, -(2**63) - 1, 2**64 + 5, -(2**70)]))


ints = int_values()


def shapes(min_rank: int = 0, max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(sizes, min_size=min_rank, max_size=max_rank).map(tuple)


@st.composite
def tensors(draw, shape=None, dtypes=DTYPES, min_rank=0, max_rank=3):  # type: ignore[no-untyped-def]
    shape = draw(shapes(min_rank, max_rank)) if shape is None else shape
    dtype = draw(st.sampled_from(dtypes))
    requires_grad = dtype.is_floating_point and draw(st.integers(0, 9)) == 0  # rarely: eager fallback
    return TensorRecipe(shape, dtype, draw(st.sampled_from(LAYOUTS)), draw(seeds), requires_grad)


@st.composite
def broadcast_partner(draw, shape):  # type: ignore[no-untyped-def]
    """A shape that usually broadcasts with `shape` (same, trailing dims, ones) and sometimes does not."""
    kind = draw(st.sampled_from(["same", "same", "trailing", "ones", "any"]))
    if kind == "same":
        return shape
    if kind == "trailing":
        return shape[draw(st.integers(0, len(shape))):]
    if kind == "ones":
        return tuple(1 if draw(st.booleans()) else s for s in shape)
    return draw(shapes())


@st.composite
def call_of(draw, program: str, values: dict[str, object]) -> Call:  # type: ignore[no-untyped-def]
    """How to pass `values`: a drawn number of leading positional arguments, the rest by keyword in a drawn
    order; parameters whose value is their default may be left out."""
    params = list(inspect.signature(PROGRAMS[program]).parameters.values())
    positional = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
    n = draw(st.integers(0, len(positional)))
    # Python cannot pass a later parameter positionally after leaving out an earlier one: n covers a prefix.
    rest = [p for p in params[n:]]
    omitted = {
        p.name for p in rest
        if p.default is not p.empty and type(values[p.name]) is type(p.default) and values[p.name] == p.default
        and draw(st.booleans())
    }
    order = draw(st.permutations([p.name for p in rest if p.name not in omitted]))
    return Call(program, values, n, tuple(order), draw(st.sampled_from(MODES)))


# --------------------------------------------------------------------------------------------------------
# Comparison with eager


# Why a fallback is not a Trident gap: what docs/semantics.md documents as running eagerly.
BY_DESIGN = ("requires grad while grad mode is on", "is an int outside int64", "which leaves int64")


@dataclasses.dataclass
class Tally:
    """How the jitted calls of one program ran (see "Native share" in the module docstring)."""

    native: int = 0
    fallbacks: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    by_design: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    eager_raises: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    first_call: dict[str, Call] = dataclasses.field(default_factory=dict)  # of each fallback reason

    @property
    def counted(self) -> int:
        return self.native + sum(self.fallbacks.values())

    def summary(self) -> str:
        share = self.native / self.counted if self.counted else 1.0
        return (f"{self.native}/{self.counted} native ({share:.1%}); by design eager: {sum(self.by_design.values())}; "
                f"eager raises: {dict(self.eager_raises)}")


TALLY: dict[str, Tally] = {name: Tally() for name in PROGRAMS}


def record(call: Call, events: list[trident.testing.FallbackEvent], eager_raised: Exception | None) -> None:
    tally = TALLY[call.program]
    reasons = [e.reason for e in events]
    if eager_raised is not None:
        tally.eager_raises[f"{type(eager_raised).__name__} {'eagerly' if reasons else 'natively'}"] += 1
    elif not reasons:
        tally.native += 1
    elif all(any(d in r for d in BY_DESIGN) for r in reasons):
        tally.by_design[reasons[0]] += 1
    else:
        tally.fallbacks[reasons[0]] += 1
        tally.first_call.setdefault(reasons[0], call)


def check_call(call: Call) -> None:
    jitted = JITTED[call.program]
    eager_args, eager_kwargs, eager_inputs = call.materialize()
    jit_args, jit_kwargs, jit_inputs = call.materialize()
    with call.mode_context():
        expected = outcome(EAGER[call.program], eager_args, eager_kwargs)
    with call.mode_context(), trident.testing.allow_fallback() as events:
        actual = outcome(jitted, jit_args, jit_kwargs)
    CALLS[call.program] += 1
    record(call, events, expected[1] if expected[0] == "raised" else None)  # type: ignore[arg-type]
    context = f"{call}\n--- explain ---\n{trident.explain(jitted)}"
    try:
        if expected[0] == "raised" or actual[0] == "raised":
            assert (actual[0], type(actual[1])) == (expected[0], type(expected[1])), (
                f"jitted {actual[0]} {actual[1]!r}, eager {expected[0]} {expected[1]!r}"
            )
        else:
            assert_same_value(actual[1], expected[1], jit_inputs, eager_inputs, "result")
        # in-place effects, also those eager made before raising
        for i, (a, e) in enumerate(zip(jit_inputs, eager_inputs)):
            assert_same_value(a, e, jit_inputs, eager_inputs, f"input {i} after the call")
    except AssertionError as e:
        raise AssertionError(f"{e}\n{context}") from None


def fuzz(call: Call, replay: int) -> None:
    note(repr(call))
    history = HISTORY[call.program]
    check_call(call)
    check_call(call)  # again on fresh inputs: now a hit
    if history:
        old = history[replay % len(history)]
        note(f"replay: {old!r}")
        check_call(old)
    history.append(call)


replays = st.integers(0, 2**20)


def fuzz_test(program: str, calls: st.SearchStrategy[Call]) -> Callable[[], None]:
    """The test of one program: the hypothesis examples, then its native share (module docstring)."""

    @FUZZ
    @given(calls, replays)
    def examples(call: Call, replay: int) -> None:
        fuzz(call, replay)

    def test() -> None:
        examples()
        assert_native_share(program)

    test.__name__ = f"test_fuzz_{program}"
    return test


def assert_native_share(program: str) -> None:
    tally = TALLY[program]
    assert tally.counted >= EXAMPLES, f"{program}: only {tally.counted} calls eager did not raise on: {tally.summary()}"
    gaps = "".join(f"\n  {n} x {reason}\n    first: {tally.first_call[reason]}" for reason, n in tally.fallbacks.most_common())
    assert tally.native >= NATIVE_SHARE * tally.counted, (
        f"{program}: {tally.summary()}, below {NATIVE_SHARE:.0%}; calls that ran eagerly:{gaps}"
    )


@pytest.fixture(scope="module", autouse=True)
def _room_for_many_specializations():  # type: ignore[no-untyped-def]
    # Keep compiling past the default cap so fuzzing keeps exercising compiled code (the cap itself is
    # tested in test_max_specializations.py), then report what the run did.
    with override(max_specializations=100_000):
        yield
    specs = {name: len(f._trident.specializations) for name, f in JITTED.items()}
    print(f"\nfuzzed {sum(CALLS.values())} jitted calls ({CALLS}); specializations: {specs}")
    for name, tally in TALLY.items():
        print(f"{name}: {tally.summary()}")
        for reason, n in tally.fallbacks.most_common():
            print(f"    {n} x {reason[:300]}\n      first: {tally.first_call[reason]}")
        for reason, n in tally.by_design.most_common():
            print(f"    by design {n} x {reason[:150]}")


# --------------------------------------------------------------------------------------------------------
# One property per program


@st.composite
def pointwise_calls(draw):  # type: ignore[no-untyped-def]
    x = draw(tensors())
    y = draw(tensors(shape=draw(broadcast_partner(x.shape))))
    beta = draw(st.one_of(st.just(2), small_ints))
    return draw(call_of("pointwise", {"x": x, "y": y, "alpha": draw(st.one_of(st.just(1.0), floats)), "beta": beta}))


test_fuzz_pointwise = fuzz_test("pointwise", pointwise_calls())


@st.composite
def reduction_calls(draw):  # type: ignore[no-untyped-def]
    x = draw(tensors(min_rank=draw(st.sampled_from([0, 1, 1, 1]))))  # a 0-dim x has no x.shape[dim]
    rank = len(x.shape)
    # mostly a dim of x; sometimes one out of range (IndexError as eager; a 0-dim x has no x.shape[dim])
    valid = rank > 0 and draw(st.integers(0, 5)) > 0
    dim = draw(st.integers(-rank, rank - 1) if valid else st.integers(-rank - 1, max(rank, 1)))
    return draw(call_of("reduction", {"x": x, "dim": dim, "keepdim": draw(st.sampled_from([False, False, True]))}))


test_fuzz_reduction = fuzz_test("reduction", reduction_calls())


@st.composite
def matmul_calls(draw):  # type: ignore[no-untyped-def]
    dtype = draw(st.sampled_from(DTYPES))
    b_dtype = dtype if draw(st.integers(0, 7)) else draw(st.sampled_from(DTYPES))  # mostly matching dtypes
    n, k, m, batch = draw(sizes), draw(sizes), draw(sizes), draw(sizes)
    a_rank, b_rank = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    a_shape = {1: (k,), 2: (n, k), 3: (batch, n, k)}[a_rank]
    b_k = k if draw(st.integers(0, 7)) else draw(sizes)  # mostly matching inner dims
    b_shape = {1: (b_k,), 2: (b_k, m), 3: (batch, b_k, m)}[b_rank]
    a = draw(tensors(shape=a_shape, dtypes=(dtype,)))
    b = draw(tensors(shape=b_shape, dtypes=(b_dtype,)))
    call = draw(call_of("matmul", {"a": a, "b": b}))
    if call.mode != "enable_grad":  # requires_grad under no_grad: a known bug (xfail test below)
        call.values = {name: dataclasses.replace(v, requires_grad=False) for name, v in call.values.items()}  # type: ignore[type-var]
    return call


test_fuzz_matmul = fuzz_test("matmul", matmul_calls())


@st.composite
def views_calls(draw):  # type: ignore[no-untyped-def]
    # 0-dim x and view(-1) of strides it cannot flatten fail during capture: those calls run eagerly.
    x = draw(tensors(min_rank=draw(st.sampled_from([0, 1, 1, 1]))))  # mostly sliceable (not 0-dim)
    return draw(call_of("views", {"x": x, "start": draw(ints), "stop": draw(ints), "flat": draw(st.booleans())}))


test_fuzz_views = fuzz_test("views", views_calls())


@st.composite
def inplace_calls(draw):  # type: ignore[no-untyped-def]
    x = draw(tensors())
    y: object = SameAs("x") if draw(st.integers(0, 7)) == 0 else draw(tensors(shape=draw(broadcast_partner(x.shape))))
    return draw(call_of("inplace", {"x": x, "y": y, "alpha": draw(floats)}))


test_fuzz_inplace = fuzz_test("inplace", inplace_calls())


@st.composite
def scalars_calls(draw):  # type: ignore[no-untyped-def]
    x = draw(tensors(min_rank=1))
    n = draw(ints)  # not a bool: see the xfail tests
    lo = draw(st.one_of(st.just(0), ints))
    hi = draw(st.one_of(st.none(), ints))
    return draw(call_of("scalars", {"x": x, "n": n, "s": draw(floats), "lo": lo, "hi": hi}))


test_fuzz_scalars = fuzz_test("scalars", scalars_calls())


@st.composite
def linear_mlp_calls(draw):  # type: ignore[no-untyped-def]
    features = 4 if draw(st.integers(0, 7)) else draw(sizes)  # mostly what the weights take
    dtype = torch.float32 if draw(st.integers(0, 5)) else draw(st.sampled_from(DTYPES))  # mostly the weights'
    shape = (draw(sizes), features) if draw(st.integers(0, 3)) else (draw(sizes), draw(sizes), features)
    x = draw(tensors(shape=shape, dtypes=(dtype,)))
    call = draw(call_of("linear_mlp", {"x": x, "scale": draw(floats)}))
    if call.mode != "enable_grad":  # requires_grad under no_grad: a known bug (xfail test below)
        call.values = {name: dataclasses.replace(v, requires_grad=False) if isinstance(v, TensorRecipe) else v
                       for name, v in call.values.items()}  # type: ignore[type-var]
    return call


test_fuzz_linear_mlp = fuzz_test("linear_mlp", linear_mlp_calls())


@st.composite
def setitem_calls(draw):  # type: ignore[no-untyped-def]
    x = draw(tensors(min_rank=draw(st.sampled_from([0, 1, 1, 1]))))
    rows = x.shape[0] if x.shape else 0
    # mostly a row of x; otherwise any int (out of range: IndexError as eager; a bool: a mask index)
    k = draw(st.integers(-rows, rows - 1)) if rows and draw(st.integers(0, 3)) else draw(ints)
    # values beyond the dtype's range included: inf into float16, an exception into int64, as eager
    return draw(call_of("setitem", {"x": x, "k": k, "v": draw(floats)}))


test_fuzz_setitem = fuzz_test("setitem", setitem_calls())


@st.composite
def triton_axpy_calls(draw):  # type: ignore[no-untyped-def]
    # No requires_grad: such a call runs eagerly, and eagerly Triton cannot launch on CPU tensors (it raises,
    # as plain eager does), while the reference here computes the result with torch.
    x = dataclasses.replace(draw(tensors(dtypes=(torch.float32,))), requires_grad=False)
    y = dataclasses.replace(draw(tensors(shape=x.shape, dtypes=(torch.float32,))), requires_grad=False)
    k = draw(st.integers(0, max(1, math.prod(x.shape))))
    return draw(call_of("triton_axpy", {"x": x, "y": y, "alpha": draw(floats), "k": k}))


test_fuzz_triton_axpy = fuzz_test("triton_axpy", triton_axpy_calls())


# --------------------------------------------------------------------------------------------------------
# Bounded specializations for a stream of growing sizes


def test_specializations_stay_bounded_for_growing_sizes() -> None:
    def step(x, y, n: int):  # type: ignore[no-untyped-def]
        return (x * n + y).sum(-1), x[:n]

    f = trident.jit(step)
    with torch.no_grad():
        for size in range(2, 200, 3):
            for dtype in (torch.float32, torch.float64):
                x, y = torch.randn(size, size + 1, dtype=dtype), torch.randn(size + 1, dtype=dtype)
                n = size // 2
                a, e = f(x, y, n), step(x, y, n)
                for actual, expected in zip(a, e):
                    assert actual.stride() == expected.stride()
                    torch.testing.assert_close(actual, expected)
    specs = f._trident.specializations
    text = trident.explain(f)
    # per dtype: the first sizes as constants, then one symbolic specialization for every later size
    assert len(specs) <= 4, text
    assert text.count("\nspecialization ") == len(specs)
    assert sum(f._trident.entry.hits()) >= 2 * len(range(2, 200, 3)) - len(specs), text


# --------------------------------------------------------------------------------------------------------
# The fuzz's recipes outside it


# Under torch.inference_mode() make_fx's Python dispatcher would decompose matmul with torch's Python
# decomposition ((5,) @ (7, 5, 5) as transpose + clone + mv, last-bit differences); capture runs with
# inference mode off and records eager's expand + bmm.
def test_inference_mode_traces_eagers_matmul() -> None:
    a = TensorRecipe((5,), torch.float32, "contiguous", seed=30340).make()
    b = TensorRecipe((7, 5, 5), torch.float32, "contiguous", seed=30340).make()
    f = trident.jit(matmul)
    with torch.inference_mode():
        expected, actual = matmul(a, b), f(a, b)
    assert_same_value(actual, expected, [a, b], [a, b], "result")
