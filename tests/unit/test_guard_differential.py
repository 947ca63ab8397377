"""Differential test of the two guard evaluators: the native guard and the Python `first_failure`.

A specialization's guards are evaluated twice: natively (each kind's `lower` in trident/guards/), which decides
every call, and in Python (each kind's `check`, through guards.guard_set.first_failure), which explains a miss and
lets warm start reject a record before loading its library. The two forms of each guard kind sit side by side,
but nothing but this test makes them agree: a Python side that accepts what the native side rejects makes explain
and warm start lie; a native side that accepts what the Python side rejects may run a specialization for inputs
it was not compiled for (a stale result).

Each program below is compiled for a few seed calls (some make sizes, ints and floats symbolic), then every
specialization is asked about FUZZ_INPUTS fuzzed calls: a seed call with zero to three random changes to its
arguments (a tensor's dtype, size, stride, storage offset, requires_grad, conj/neg bit, Parameter-ness; an int,
float, bool, None or string replaced, near or far; a tuple turned into a list, lengthened or shortened; a dict
copied), to the global state (grad, inference mode, default dtype, autocast, a default device mode, torch
functions disabled), or to the module the program reads (a `training` flag, an attribute, a parameter rebound,
a ModuleDict's or ModuleList's children added, removed or reordered). For every input and specialization:

    native verdict = the specialization's native guard (cache/native_library.guard_accepts) accepts the call
    python verdict = first_failure(guards, values, constants) is None

must be equal; and the entry (structural key, then the guards of each candidate) must hit exactly when some
specialization's Python verdict accepts. Every disagreement is reported with the input and both verdicts.
Each program must see accepted and rejected inputs, so the comparison cannot pass vacuously.

Seeded (the same inputs every run). TRIDENT_GUARD_FUZZ_INPUTS=N runs N inputs per program with a new seed.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import math
import os
import random
from collections.abc import Callable, Sequence

import pytest
import torch
from global_state import default_dtype
from torch import nn

import trident
from trident.cache.native_library import guard_accepts
from trident.guards.guard_set import first_failure

FUZZ_INPUTS = int(os.environ.get("TRIDENT_GUARD_FUZZ_INPUTS", "0") or 0) or 500
pytestmark = pytest.mark.filterwarnings("ignore:Casting complex values to real")  # a fuzzed dtype change
SEED = random.randrange(2**32) if os.environ.get("TRIDENT_GUARD_FUZZ_INPUTS") else 16

# --------------------------------------------------------------------------------------------------------
# Fuzzed changes of argument values


_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.bool,
           torch.complex64)  # fmt: skip
_SIZES = (0, 1, 2, 3, 4, 5, 6, 8)
_INTS = (0, 1, 2, 3, -1, 7, 2**31, 2**62, -(2**62), 2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 2**70)
_FLOATS = (0.0, -0.0, 1.0, 0.5, -2.5, 1e300, math.inf, -math.inf, math.nan)


class Subclass(torch.Tensor):
    """A tensor subclass: an OBJECT leaf, never read natively as a tensor."""


def _laid_out(sizes: Sequence[int], dtype: torch.dtype, *, offset: int = 0, step: int = 1) -> torch.Tensor:
    """A tensor of `sizes` whose last dim has stride `step` (>1: every step-th element) at storage offset `offset`."""
    sizes = list(sizes)
    numel = math.prod(sizes) * step + offset
    base = torch.zeros(max(numel, 1), dtype=dtype)[offset:]
    if not sizes:
        return base[0] if numel else torch.zeros((), dtype=dtype)
    strides, acc = [], step
    for s in reversed(sizes):
        strides.append(acc)
        acc *= max(s, 1)
    return base.as_strided(sizes, list(reversed(strides)))


def _change_tensor(t: torch.Tensor, rng: random.Random) -> object:
    if type(t) not in (torch.Tensor, nn.Parameter) or t.layout != torch.strided or t.is_meta:
        return torch.zeros(3)  # changed before into something no longer plain
    sizes = list(t.shape)
    change = rng.choice(
        ["dtype", "size", "size", "transpose", "step", "expand", "offset", "grad", "param", "conj", "neg",
         "subclass", "meta", "sparse", "not a tensor", "contiguous"]
    )  # fmt: skip
    if change == "dtype":
        return t.to(rng.choice(_DTYPES))
    if change == "size" and sizes:
        sizes[rng.randrange(len(sizes))] = rng.choice(_SIZES)
        return _laid_out(sizes, t.dtype)
    if change == "size":
        return torch.zeros(rng.choice(_SIZES), dtype=t.dtype)  # rank 0 -> 1
    if change == "transpose" and t.dim() >= 2:
        return t.transpose(0, 1).contiguous().transpose(0, 1)  # same sizes, column-major strides
    if change == "step":
        return _laid_out(sizes, t.dtype, step=rng.choice((2, 3)))
    if change == "expand" and sizes and sizes[-1] > 1:
        return _laid_out(sizes[:-1] + [1], t.dtype).expand(sizes)  # stride 0
    if change == "offset":
        return _laid_out(sizes, t.dtype, offset=rng.choice((1, 2, 4, 16)))
    if change == "grad" and t.dtype.is_floating_point:
        return t.detach().clone().requires_grad_()
    if change == "param":
        return nn.Parameter(t.detach().clone(), requires_grad=False)
    if change == "conj":
        return t.to(torch.complex64).conj()  # the conj bit set
    if change == "neg" and t.dtype is not torch.bool:  # bool has no negation
        return torch._neg_view(t.detach())  # the same layout with the neg bit set (a conj's imag has one)
    if change == "subclass":
        return t.as_subclass(Subclass)
    if change == "meta":
        return t.to("meta")
    if change == "sparse" and t.dim() >= 1:
        return t.detach().resolve_conj().resolve_neg().to_sparse()
    if change == "not a tensor":
        return rng.choice((None, 1, 1.0, (t,)))
    return t.clone()  # an equal tensor: accepted wherever the original is


def _change_scalar(value: object, rng: random.Random) -> object:
    choices: list[object] = [*_INTS, *_FLOATS, True, False, None, "s", torch.ones(1)]
    if type(value) is int:
        choices += [value + 1, value - 1, value * 2, value, -value]
    if type(value) is float:
        choices += [value, value * 2, -value, float(int(value)) if math.isfinite(value) else value]
    if type(value) is str:
        choices += ["".join(list(value)), value + "x"]  # an equal string, another object
    return rng.choice(choices)


def change_value(value: object, rng: random.Random) -> object:
    """`value` with one random change somewhere inside it."""
    if type(value) in (tuple, list):
        items = list(value)  # type: ignore[arg-type]
        what = rng.choice(["item", "item", "item", "kind", "longer", "shorter"]) if items else "longer"
        if what == "item":
            i = rng.randrange(len(items))
            items[i] = change_value(items[i], rng)
        elif what == "kind":
            return list(items) if type(value) is tuple else tuple(items)
        elif what == "longer":
            items.append(items[-1] if items else 0)
        else:
            items.pop()
        return tuple(items) if type(value) is tuple else items
    if type(value) is dict:
        return rng.choice((dict(value), value))  # a copy: another object (identity), or the same
    if isinstance(value, torch.Tensor):
        return _change_tensor(value, rng)
    return _change_scalar(value, rng)


# --------------------------------------------------------------------------------------------------------
# Fuzzed changes of the global state (each a context manager factory)


GLOBAL_STATES: list[tuple[str, Callable[[], contextlib.AbstractContextManager[object]]]] = [
    ("grad on", lambda: torch.enable_grad()),
    ("inference mode", lambda: torch.inference_mode()),
    ("default dtype float64", functools.partial(default_dtype, torch.float64)),
    ("default dtype bfloat16", functools.partial(default_dtype, torch.bfloat16)),
    ("cpu autocast bfloat16", lambda: torch.autocast("cpu", dtype=torch.bfloat16)),
    ("cpu autocast float16", lambda: torch.autocast("cpu", dtype=torch.float16)),
    ("with torch.device('cpu')", lambda: torch.device("cpu")),
    ("with torch.device('meta')", lambda: torch.device("meta")),
    ("torch function subclass disabled", lambda: torch._C.DisableTorchFunctionSubclass()),
    ("torch functions disabled", lambda: torch._C.DisableTorchFunction()),
]


# --------------------------------------------------------------------------------------------------------
# The programs


def tensor_flags(x, y):  # type: ignore[no-untyped-def]
    """Tensor type, dtype, device, rank, sizes, strides, offset, requires_grad and conj/neg bits."""
    return x * 2, y.sum()


def symbolic_sizes(x, y, n: int):  # type: ignore[no-untyped-def]
    """Relations among symbols: y broadcasts against x (equal sizes), a size compared in Python (a range), a
    view that needs an even element count (divisibility), an int argument bound to a symbol."""
    z = x + y
    if x.shape[0] > 3:
        z = z * 2
    return z.reshape(-1, 2), z[:n]


def scalars(x, i: int, f: float, b: bool, nothing, s: str, free: int, scale: float):  # type: ignore[no-untyped-def]
    """Static ints, floats (bitwise), bools, None and strings (identity); a symbolic int and a finite float."""
    y = x * i + f
    if b:
        y = y + 1
    if nothing is None and s == "add":
        y = y + 2
    return y[:free] * scale


def containers(pair, items, nested, options):  # type: ignore[no-untyped-def]
    """Tuples, lists, nested sequences, and a dict (guarded by identity)."""
    a, b = pair
    (c, k), (d,) = nested
    return a + b * items[0] + items[1], c * k + d, options["w"] * a


def int64_products(x, n: int, m: int):  # type: ignore[no-untyped-def]
    """Ints the program computes from its int arguments: each must fit in int64 (int64 range guards)."""
    return x * (n * m - n), x + (n + m)


def int_division(x, n: int, f: float):  # type: ignore[no-untyped-def]
    """Floor division and modulo by a symbolic int (a zero divisor), a float compared in Python."""
    k = x.shape[0] // n
    y = x[: k + x.shape[0] % n]
    return y * 2 if f > 1.0 else y - f


W = torch.ones(3, 4)


def closure_constants(x):  # type: ignore[no-untyped-def]
    """A tensor the function closes over (a context constant: its metadata is guarded, natively read from the
    context), compiled under a default device (a torch function mode, compared by device)."""
    return x @ W, torch.ones(2) + x.sum()


def truth_reads(x, mask):  # type: ignore[no-untyped-def]
    """Truths read from tensors (value programs the guard runs last): whether a mask has a True, and, when not,
    the sign of a sum. A fuzzed dtype or size can make a program fail (a complex sum compared): both forms miss."""
    if mask.any():
        return x * 2
    return x - 1 if x.sum() > 0 else x + 1


def _constant_changes() -> list[tuple[str, Callable[[], Callable[[], None]]]]:
    def t_() -> Callable[[], None]:
        W.t_()  # in place: sizes and strides of the same object
        return lambda: W.t_()

    def requires_grad() -> Callable[[], None]:
        W.requires_grad_()
        return lambda: W.requires_grad_(False)

    def retype(dtype: torch.dtype) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = W.data
            W.data = saved.to(dtype)
            return lambda: setattr(W, "data", saved)

        return change

    def offset() -> Callable[[], None]:
        saved = W.data
        W.data = torch.ones(16)[4:].view(3, 4)  # storage offset 4
        return lambda: setattr(W, "data", saved)

    return [("W.t_()", t_), ("W.requires_grad_()", requires_grad), ("W as float64", retype(torch.float64)),
            ("W as a Parameter's data", retype(torch.float32)), ("W at storage offset 4", offset)]  # fmt: skip


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc(x)) * self.scale


class Model(nn.Module):
    """Module attributes, Parameters rebound, `training` flags, a ModuleList and a ModuleDict iterated."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.heads = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
        self.register_buffer("shift", torch.ones(4))
        self.eps = 1e-5
        self.use_shift = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        for head in self.heads.values():
            x = head(x)
        if self.use_shift:
            x = x + self.shift
        return x + self.eps


def _model_changes(model: Model) -> list[tuple[str, Callable[[], Callable[[], None]]]]:
    """Each change of the model, as a function making it and returning its undo."""

    def set_attr(owner: nn.Module, name: str, value: object) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            had = name in owner.__dict__
            saved = owner.__dict__.get(name)
            owner.__dict__[name] = value
            return lambda: owner.__dict__.__setitem__(name, saved) if had else owner.__dict__.pop(name, None)

        return change

    def del_attr(owner: nn.Module, name: str) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = owner.__dict__.pop(name)
            return lambda: owner.__dict__.__setitem__(name, saved)

        return change

    def swap_item(store: dict[str, object], name: str, value: object) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = store[name]
            store[name] = value
            return lambda: store.__setitem__(name, saved)

        return change

    def reorder(store: dict[str, object]) -> Callable[[], None]:
        saved = dict(store)
        items = list(store.items())
        store.clear()
        store.update(reversed(items))
        return lambda: (store.clear(), store.update(saved))

    def add_item(store: dict[str, object], name: str, value: object) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            store[name] = value
            return lambda: store.pop(name)

        return change

    def drop_item(store: dict[str, object], name: str) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = dict(store)
            store.pop(name)
            return lambda: (store.clear(), store.update(saved))

        return change

    def retype(param: nn.Parameter, dtype: torch.dtype) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = param.data
            param.data = saved.to(dtype)
            return lambda: setattr(param, "data", saved)

        return change

    def repoint(param: nn.Parameter) -> Callable[[], Callable[[], None]]:
        def change() -> Callable[[], None]:
            saved = param.data
            param.data = saved.clone()  # the same layout in other memory: a view made at capture is stale
            return lambda: setattr(param, "data", saved)

        return change

    fc = model.blocks[0].fc
    return [
        ("train()", lambda: (model.train(), lambda: model.eval())[1]),
        ("blocks[1].drop.train()", lambda: (model.blocks[1].drop.train(), lambda: model.blocks[1].drop.eval())[1]),
        ("eps = 1e-6", set_attr(model, "eps", 1e-6)),
        ("eps = -0.0", set_attr(model, "eps", -0.0)),
        ("eps = 1e-5 (an equal float)", set_attr(model, "eps", float("1e-5"))),
        ("eps = 1 (an int)", set_attr(model, "eps", 1)),
        ("use_shift = False", set_attr(model, "use_shift", False)),
        ("use_shift = 1", set_attr(model, "use_shift", 1)),
        ("blocks[0].scale = None", set_attr(model.blocks[0], "scale", None)),
        ("blocks[0].scale deleted", del_attr(model.blocks[0], "scale")),
        ("blocks[0].fc.weight rebound", swap_item(fc._parameters, "weight", nn.Parameter(fc.weight.detach().clone()))),
        ("blocks[0].fc.weight as float64", retype(fc.weight, torch.float64)),
        ("blocks[0].fc.weight transposed", _relayout(fc.weight)),
        ("blocks[0].fc.weight.data replaced", repoint(fc.weight)),
        ("heads['a'].weight.data replaced", repoint(model.heads["a"].weight)),
        ("shift rebound", swap_item(model._buffers, "shift", torch.zeros(4))),
        ("heads reordered", lambda: reorder(model.heads._modules)),
        ("heads['c'] added", add_item(model.heads._modules, "c", nn.Linear(4, 4))),
        ("heads['b'] removed", drop_item(model.heads._modules, "b")),
        ("blocks[2] added", add_item(model.blocks._modules, "2", Block())),
        ("blocks[1] replaced", swap_item(model.blocks._modules, "1", Block())),
        ("blocks reordered", lambda: reorder(model.blocks._modules)),
    ]


def _relayout(param: nn.Parameter) -> Callable[[], Callable[[], None]]:
    def change() -> Callable[[], None]:
        saved = param.data
        param.data = saved.t().contiguous().t()  # same sizes, other strides
        return lambda: setattr(param, "data", saved)

    return change


# --------------------------------------------------------------------------------------------------------
# The harness


@dataclasses.dataclass
class Program:
    name: str
    jitted: Callable[..., object]
    seeds: list[Callable[[], list[object]]]  # bound argument values (parameter order) of the compiling calls
    changes: list[tuple[str, Callable[[], Callable[[], None]]]] = dataclasses.field(default_factory=list)
    self_arg: object = None  # a module's wrapper: values[0], never changed
    # The state the seeds are compiled under, and most fuzzed calls are made under (a new object each time).
    under: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext


@dataclasses.dataclass
class Tally:
    accepted: int = 0
    rejected: int = 0
    accepted_by: collections.Counter[int] = dataclasses.field(default_factory=collections.Counter)  # spec -> inputs
    disagreements: list[str] = dataclasses.field(default_factory=list)


def _jit_state(jitted: object):  # type: ignore[no-untyped-def]
    return jitted._trident  # type: ignore[attr-defined]


def _call(jitted: object, values: list[object]) -> object:
    jit = _jit_state(jitted)
    positional, keywords = jit._call_args(values)
    return jit.entry(*positional, **keywords)


def _describe(values: Sequence[object], what: Sequence[str]) -> str:
    def short(v: object) -> str:
        if isinstance(v, torch.Tensor) and not v.is_sparse and v.device.type != "meta" and type(v) in (torch.Tensor, nn.Parameter):
            flags = "".join(
                f" {n}" for n, on in (("requires_grad", v.requires_grad), ("conj", v.is_conj()), ("neg", v.is_neg())) if on
            )
            return (
                f"{type(v).__name__}({str(v.dtype).removeprefix('torch.')}, sizes {tuple(v.shape)}, "
                f"strides {v.stride()}, offset {v.storage_offset()}{flags})"
            )
        if isinstance(v, torch.Tensor):
            return f"{type(v).__name__}(layout {v.layout}, device {v.device})"
        if type(v) in (tuple, list):
            inner = ", ".join(short(x) for x in v)  # type: ignore[union-attr]
            return f"({inner},)" if type(v) is tuple else f"[{inner}]"
        if isinstance(v, nn.Module):
            return f"<{type(v).__name__}>"
        return repr(v)

    return f"[{'; '.join(what) or 'no change'}] " + ", ".join(short(v) for v in values)


def _verdicts(jit, contexts: Sequence[object], values: list[object]) -> list[tuple[bool, object]]:  # type: ignore[no-untyped-def]
    """(native verdict, Python verdict: None or the failure text, or the exception first_failure raised) per
    specialization."""
    out = []
    for spec, context in zip(jit.specializations, contexts):
        native = guard_accepts(spec.compiled.guard_address, context.address, values)  # type: ignore[attr-defined]
        try:
            python: object = first_failure(spec.guards, values, spec.trace.constants)
        except Exception as e:  # noqa: BLE001 -- a crash of the Python evaluator is a disagreement too
            python = e
        out.append((native, python))
    return out


def fuzz_program(program: Program, rng: random.Random, n_inputs: int) -> Tally:
    jit = _jit_state(program.jitted)
    with torch.no_grad(), program.under():
        for seed in program.seeds:
            _call(program.jitted, seed())
    assert jit.eager_calls == 0 and jit.specializations, trident.explain(program.jitted)
    # Each specialization's own context, the one its entry calls the guard with (instantiate made it).
    contexts = [spec.compiled.context for spec in jit.specializations]
    tally = Tally()
    first = 0 if program.self_arg is None else 1
    for _ in range(n_inputs):
        values = rng.choice(program.seeds)()
        what: list[str] = []
        for _ in range(rng.choice((0, 0, 1, 1, 1, 2, 3))):
            i = rng.randrange(first, len(values))
            values[i] = change_value(values[i], rng)
            what.append(f"'{jit.param_names[i]}' changed")
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.no_grad())
            if program.changes and rng.random() < 0.4:  # made before entering modes that change factories
                name, change = rng.choice(program.changes)
                stack.callback(change())  # undone when the input is done
                what.append(name)
            if rng.random() < 0.8:
                stack.enter_context(program.under())
            elif program.under is not contextlib.nullcontext:
                what.append("outside the state it was compiled under")
            if rng.random() < 0.25:
                name, state = rng.choice(GLOBAL_STATES)
                stack.enter_context(state())
                what.append(name)
            _compare(jit, contexts, values, what, tally)
    return tally


def _compare(jit, contexts: Sequence[object], values: list[object], what: list[str], tally: Tally) -> None:  # type: ignore[no-untyped-def]
    verdicts = _verdicts(jit, contexts, values)
    for index, (native, python) in enumerate(verdicts):
        if isinstance(python, Exception) or native != (python is None):
            tally.disagreements.append(
                f"specialization {index}: native {'accepts' if native else 'rejects'}, Python "
                f"{'accepts' if python is None else f'rejects ({python!r})'}: {_describe(values, what)}"
            )
    tally.accepted_by.update(i for i, (_, python) in enumerate(verdicts) if python is None)
    accepted = any(python is None for _, python in verdicts)
    tally.accepted += accepted
    tally.rejected += not accepted
    # The entry as calls reach it: the structural key selects candidates, their guards decide.
    positional, keywords = jit._call_args(values)
    hit, _ = jit.entry.try_call(*positional, **keywords)
    if hit != accepted:
        tally.disagreements.append(
            f"the entry {'hits' if hit else 'misses'} but the Python guards {'accept' if accepted else 'reject'}: "
            f"{_describe(values, what)}"
        )


# --------------------------------------------------------------------------------------------------------
# The tests


def _programs() -> list[Program]:
    model = Model().eval()
    wrapped = trident.jit(model)
    return [
        Program("tensor_flags", trident.jit(tensor_flags), [
            lambda: [torch.zeros(2, 3), torch.zeros(4)],
            lambda: [torch.zeros(3, 2).t(), torch.zeros(5)],  # non-contiguous strides
            lambda: [torch.zeros(2, 3, dtype=torch.complex64).conj(), torch.zeros(4, dtype=torch.float64)],
            lambda: [nn.Parameter(torch.zeros(2, 3), requires_grad=False), torch.zeros(8)[2:6]],
            lambda: [torch.zeros(2, 3, requires_grad=True), torch.zeros(4)],
            lambda: [torch._neg_view(torch.zeros(2, 3)), torch.zeros(4)],  # the neg bit set
        ]),
        Program("symbolic_sizes", trident.jit(symbolic_sizes), [
            lambda: [torch.zeros(4, 6), torch.zeros(4, 1), 2],
            lambda: [torch.zeros(6, 6), torch.zeros(6, 1), 3],  # sizes and n become symbols
            lambda: [torch.zeros(2, 5), torch.zeros(2, 5), 1],
        ]),
        Program("scalars", trident.jit(scalars), [
            lambda: [torch.zeros(5), 2, 0.5, True, None, "add", 3, 1.5],
            lambda: [torch.zeros(5), 2, 0.5, True, None, "add", 4, 2.5],  # free and scale become symbols
            lambda: [torch.zeros(5), 3, -0.0, False, 1, "sub", 2, 1.0],
        ]),
        Program("containers", trident.jit(containers), [
            lambda: [(torch.zeros(3), torch.ones(3)), [2, 3], ((torch.zeros(3), 2), [torch.ones(3)]), OPTIONS],
            lambda: [(torch.zeros(3), torch.ones(3)), [2, 3, 4], ((torch.zeros(3), 2.0), (torch.ones(3),)), OPTIONS],
        ]),
        Program("int64_products", trident.jit(int64_products), [
            lambda: [torch.zeros(2), 3, 4],
            lambda: [torch.zeros(2), 5, 7],  # n and m become symbols: n * m - n and n + m must fit in int64
        ]),
        Program("int_division", trident.jit(int_division), [
            lambda: [torch.zeros(6), 2, 1.5],
            lambda: [torch.zeros(7), 3, 2.5],  # sizes, n and f become symbols
        ]),
        Program("closure_constants", trident.jit(closure_constants), [
            lambda: [torch.ones(2, 3)],
            lambda: [torch.ones(5, 3)],
        ], _constant_changes(), under=lambda: torch.device("cpu")),
        Program("truth_reads", trident.jit(truth_reads), [
            lambda: [torch.ones(4), torch.tensor([True, False, True, False])],
            lambda: [torch.ones(4), torch.zeros(4, dtype=torch.bool)],  # the second read: a positive sum
            lambda: [-torch.ones(4), torch.zeros(4, dtype=torch.bool)],  # and a negative one
        ]),
        Program("module", wrapped, [lambda: [wrapped, torch.zeros(2, 4)], lambda: [wrapped, torch.zeros(3, 4)]],
                _model_changes(model), self_arg=wrapped),
    ]  # fmt: skip


OPTIONS = {"w": 2.0}


def test_native_and_python_guards_agree_on_fuzzed_calls() -> None:
    rng = random.Random(SEED)
    failures, summary = [], []
    for program in _programs():
        tally = fuzz_program(program, rng, FUZZ_INPUTS)
        summary.append(
            f"{program.name}: {len(_jit_state(program.jitted).specializations)} specialization(s), "
            f"{tally.accepted} accepted (by specialization: {dict(sorted(tally.accepted_by.items()))}), "
            f"{tally.rejected} rejected, {len(tally.disagreements)} disagreement(s)"
        )
        failures += [f"{program.name}: {d}" for d in tally.disagreements]
        if not (tally.accepted and tally.rejected):  # else the comparison proved nothing for this program
            failures.append(f"{program.name}: {tally.accepted} accepted and {tally.rejected} rejected inputs")
        n_specs = len(_jit_state(program.jitted).specializations)
        unexercised = [i for i in range(n_specs) if not tally.accepted_by[i]]
        if unexercised:  # a specialization no input matched: its guards were compared on rejections alone
            failures.append(f"{program.name}: no input accepted by specialization(s) {unexercised}")
    print(f"seed {SEED}, {FUZZ_INPUTS} inputs per program\n" + "\n".join(summary))
    assert not failures, f"seed {SEED}\n" + "\n".join(summary) + "\n" + "\n".join(failures[:40]) + (
        f"\n... {len(failures) - 40} more" if len(failures) > 40 else ""
    )
