"""State objects as arguments (capture/inputs.py): instances of plain Python classes are walked like argument
dicts, so their tensors are inputs read at each call and what the function assigns into them is assigned again by
compiled code. A new object of the same layout runs the same specialization; a changed attribute misses."""
from __future__ import annotations

import dataclasses

import torch
from helpers_native import LazyCache, assert_native, jit_state

import trident
from trident.testing import count_compiles, expect_fallback


class Accumulator:
    """A cache-like object: a buffer written in place, a running sum reassigned, a step count, a mode string."""

    def __init__(self, n: int, mode: str = "sum") -> None:
        self.buffer = torch.zeros(4, n)
        self.total = torch.zeros(n)
        self.steps = 0
        self.mode = mode

    def update(self, row: int, x: torch.Tensor) -> torch.Tensor:
        self.buffer[row].copy_(x)
        self.total = self.total + x if self.mode == "sum" else torch.maximum(self.total, x)
        self.steps = self.steps + 1
        return self.total


def step(acc: Accumulator, row: int, x: torch.Tensor) -> tuple[torch.Tensor, Accumulator]:
    return acc.update(row, x) * 2, acc


def _twins(n: int = 3, mode: str = "sum") -> tuple[Accumulator, Accumulator]:
    return Accumulator(n, "".join(mode)), Accumulator(n, "".join(mode))  # equal strings, not the same objects


def _assert_same_state(got: Accumulator, want: Accumulator) -> None:
    assert list(vars(got)) == list(vars(want))
    for name, value in vars(want).items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(getattr(got, name), value), name
        else:
            assert getattr(got, name) == value, name


def test_new_objects_of_one_layout_share_a_specialization_and_assignments_are_made_natively() -> None:
    jitted = trident.jit(step)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):  # a new object per "generate"
            acc, twin = _twins()
            for row in range(3):
                x = torch.randn(3)
                result, returned = jitted(acc, row, x)
                expected, _ = step(twin, row, x)
                assert torch.equal(result, expected) and returned is acc
                _assert_same_state(acc, twin)
                assert type(acc.total) is torch.Tensor and type(acc.steps) is int  # no traced value left
    # steps 0, 1 (a constant each), then symbolic; rows too: new objects add no compile.
    assert compiles() <= 3, trident.explain(jitted)
    assert_native(jitted, hits=9, compiles=compiles())
    assert "acc: Accumulator object with attributes ['buffer', 'total', 'steps', 'mode']" in trident.explain(jitted)


def test_an_attribute_value_or_class_that_differs_misses() -> None:
    jitted = trident.jit(step)
    with torch.no_grad():
        acc, twin = _twins()
        x = torch.randn(3)
        jitted(acc, 0, x)
        step(twin, 0, x)
        wider = Accumulator(5)
        jitted(wider, 0, torch.randn(5))
        assert "buffer': size mismatch" in jit_state(jitted).last_miss_reason
        other, other_twin = _twins(mode="max")  # what the program did depends on the mode string
        result, _ = jitted(other, 0, -x)
        assert torch.equal(result, step(other_twin, 0, -x)[0])
        assert "mode': value mismatch: expected 'sum', got 'max'" in jit_state(jitted).last_miss_reason

        class Derived(Accumulator):
            pass

        derived, derived_twin = Derived(3), Derived(3)
        assert torch.equal(jitted(derived, 0, x)[0], step(derived_twin, 0, x)[0])
        assert "expected a Accumulator, got" in jit_state(jitted).last_miss_reason
        _assert_same_state(derived, derived_twin)
    assert_native(jitted, hits=4, compiles=4)


def test_an_attribute_reassigned_between_calls_is_read_again() -> None:
    """The tensors of a state object are read at each call: reassigning one (not only writing into it) counts."""

    @dataclasses.dataclass
    class Weights:
        w: torch.Tensor
        scale: float

    jitted = trident.jit(lambda p, x: x @ p.w * p.scale)
    params = Weights(torch.randn(3, 3), 0.5)
    x = torch.randn(2, 3)
    with torch.no_grad():
        assert torch.equal(jitted(params, x), x @ params.w * 0.5)
        params.w = torch.randn(3, 3)
        assert torch.equal(jitted(params, x), x @ params.w * 0.5)
        params.scale = 2.0
        assert torch.equal(jitted(params, x), x @ params.w * 2.0)
    assert_native(jitted, hits=3, compiles=2)


def test_an_object_reached_twice_or_deleting_an_attribute_is_not_walked_or_runs_eagerly() -> None:
    class Node:
        def __init__(self) -> None:
            self.t = torch.ones(2)
            self.me = self  # a cycle: the object is guarded by identity, as a whole

    node = Node()
    f = trident.jit(lambda n, x: n.t + x)
    with torch.no_grad():
        assert torch.equal(f(node, torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(f(node, torch.ones(2)), torch.full((2,), 2.0))
    assert "n: the same Node object as at capture" in trident.explain(f)
    assert_native(f, hits=2, compiles=1)

    class Holder:
        def __init__(self) -> None:
            self.t, self.scratch = torch.ones(2), torch.zeros(2)

    def drop(h: Holder, x: torch.Tensor) -> torch.Tensor:
        del h.scratch
        return h.t + x

    g = trident.jit(drop)
    h, twin = Holder(), Holder()
    with torch.no_grad(), expect_fallback("deletes attribute 'scratch' of 'h'"):
        assert torch.equal(g(h, torch.ones(2)), drop(twin, torch.ones(2)))
    assert list(vars(h)) == list(vars(twin)) == ["t"]  # eager's deletion, made once


def test_strings_are_compared_by_value() -> None:
    f = trident.jit(lambda x, how: x * 2 if how == "double" else x)
    with torch.no_grad():
        for _ in range(3):
            assert torch.equal(f(torch.ones(2), "".join(["dou", "ble"])), torch.full((2,), 2.0))
    assert_native(f, hits=3, compiles=1)
    assert "how: value == 'double'" in trident.explain(f)


def test_an_object_with_slots_is_guarded_by_identity() -> None:
    """State kept in __slots__ is not in the instance dict the walk reads: such an object is guarded as a whole."""

    class Slotted:
        __slots__ = ("t", "__dict__")

        def __init__(self) -> None:
            self.t = torch.ones(2)

    f = trident.jit(lambda o, x: o.t + x)
    first, second = Slotted(), Slotted()
    second.t = torch.full((2,), 5.0)
    with torch.no_grad():
        assert torch.equal(f(first, torch.ones(2)), torch.full((2,), 2.0))
        assert torch.equal(f(second, torch.ones(2)), torch.full((2,), 6.0))  # its own slot, not the first's
    assert "o: the same Slotted object as at capture" in trident.explain(f)
    assert_native(f, hits=2, compiles=2)


SHARED_ACCUMULATOR = Accumulator(3)  # an object that exists before any call


def test_an_object_the_call_makes_is_returned_as_a_new_one_each_call_and_one_that_existed_runs_eagerly() -> None:
    """A plain object the function creates and fills with results comes back as a new object of its class per
    call, with the attributes the traced call left (its __init__ is not what makes them). An object that existed
    before the call is not copied: returning it runs eagerly, as before."""

    def make(x: torch.Tensor) -> Accumulator:
        acc = Accumulator(3)
        acc.update(1, x)
        acc.kind = Accumulator  # a class attribute value comes back as the same class
        return acc

    f = trident.jit(make)
    made = []
    for _ in range(3):
        x = torch.randn(3)
        got, want = f(x), make(x)
        assert type(got) is Accumulator and got is not want
        _assert_same_state(got, want)
        made.append(got)
    assert made[0] is not made[1] and made[0].buffer.data_ptr() != made[1].buffer.data_ptr()
    assert_native(f, hits=3, compiles=1)

    def give_shared(x: torch.Tensor) -> Accumulator:
        SHARED_ACCUMULATOR.steps += 1
        return SHARED_ACCUMULATOR

    g = trident.jit(give_shared)
    with expect_fallback("returns a Accumulator"):
        assert g(torch.randn(3)) is SHARED_ACCUMULATOR


def test_tensors_the_function_marks_static_are_marked_as_eager_marks_them() -> None:
    """What compiled code makes in place of a tensor the traced function marked with
    torch._dynamo.mark_static_address carries the mark too: the one assigned into the call's object, the one
    returned, and an argument the function marked and returned."""

    def first_update(layer: LazyCache, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        fresh = x * 2
        torch._dynamo.mark_static_address(fresh)
        torch._dynamo.mark_static_address(y)
        return layer.update(x), fresh, y

    jitted = trident.jit(first_update)
    for _ in range(2):  # compiled, then a hit
        layer, x, y = LazyCache(), torch.randn(3), torch.randn(3)
        _, fresh, returned = jitted(layer, x, y)
        assert returned is y
        marks = [getattr(t, "_dynamo_static_input_type", None) for t in (layer.buffer, fresh, y)]
        assert marks == ["unguarded"] * 3
    assert_native(jitted, hits=2, compiles=1)
