"""Guard kinds as units (trident/guards/): every kind of a GuardSet is visited by each of its three forms, and has
all three. A kind left out of NATIVE_ORDER would be explained and checked in Python but never decide a call."""
from __future__ import annotations

import dataclasses

import pytest

from trident.guards.base import Guard
from trident.guards.guard_set import _KINDS, SPLITS, GuardSet

_NOT_GUARDS = {"identity_objects", "constant_labels"}  # what the set holds for its guards


def test_every_field_of_a_guard_set_is_a_kind_each_form_visits() -> None:
    fields = {f.name for f in dataclasses.fields(GuardSet)} - _NOT_GUARDS
    assert set(_KINDS) == fields
    for order in (GuardSet.CHECK_ORDER, GuardSet.EXPLAIN_ORDER):
        assert sorted(order) == sorted(fields)
    # Natively, a field is visited whole or in the parts SPLITS names, each part once.
    native = [SPLITS.get(name, name) for name in GuardSet.NATIVE_ORDER]
    assert set(native) == fields and len(GuardSet.NATIVE_ORDER) == len(set(GuardSet.NATIVE_ORDER))
    for field in fields:
        parts = [name for name in GuardSet.NATIVE_ORDER if SPLITS.get(name, name) == field]
        assert parts == [field] or field not in parts, (field, parts)


@pytest.mark.parametrize("kind", sorted(set(_KINDS.values()), key=lambda k: k.__name__))
def test_every_kind_has_its_three_forms(kind: type[Guard]) -> None:
    for each, group in (("describe", "describe_all"), ("check", "check_all"), ("lower", "lower_all")):
        overrides = getattr(kind, each) is not getattr(Guard, each) or (
            getattr(kind, group).__func__ is not getattr(Guard, group).__func__
        )
        assert overrides, f"{kind.__name__} has no {each}"


def test_the_native_parts_of_a_field_are_its_guards_once_each() -> None:
    """A specialization with an argument of symbolic and constant sizes and a closed-over weight: the tensors split
    into the call's and the constants', the properties into the call's constant layout and the rest."""
    import torch

    import trident

    weight = torch.randn(4, 8)

    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ weight.t()

    jitted = trident.jit(f)
    with torch.no_grad():
        for rows in (2, 3):
            jitted(torch.randn(rows, 8))
    guards = jitted._trident.specializations[-1].guards  # type: ignore[attr-defined]
    assert sorted(map(id, guards.argument_tensors + guards.constant_tensors)) == sorted(map(id, guards.tensors))
    assert len(guards.argument_tensors) == 1 and len(guards.constant_tensors) == 1
    layouts, others = guards.argument_constant_layouts, guards.other_properties
    assert sorted(map(id, layouts + others)) == sorted(map(id, guards.properties))
    assert layouts and all(not p.path.is_constant for p in layouts)  # x's 8 columns and unit stride
    assert any(p.path.is_constant for p in others)  # the weight's layout, after the module state
