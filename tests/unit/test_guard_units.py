"""Guard kinds as units (trident/guards/): every kind of a GuardSet is visited by each of its three forms, and has
all three. A kind left out of NATIVE_ORDER would be explained and checked in Python but never decide a call."""
from __future__ import annotations

import dataclasses

import pytest

from trident.guards.base import Guard
from trident.guards.guard_set import _KINDS, GuardSet

_NOT_GUARDS = {"identity_objects", "constant_labels"}  # what the set holds for its guards


def test_every_field_of_a_guard_set_is_a_kind_each_form_visits() -> None:
    fields = {f.name for f in dataclasses.fields(GuardSet)} - _NOT_GUARDS
    assert set(_KINDS) == fields
    for order in (GuardSet.NATIVE_ORDER, GuardSet.CHECK_ORDER, GuardSet.EXPLAIN_ORDER):
        assert sorted(order) == sorted(fields)


@pytest.mark.parametrize("kind", sorted(set(_KINDS.values()), key=lambda k: k.__name__))
def test_every_kind_has_its_three_forms(kind: type[Guard]) -> None:
    for each, group in (("describe", "describe_all"), ("check", "check_all"), ("lower", "lower_all")):
        overrides = getattr(kind, each) is not getattr(Guard, each) or (
            getattr(kind, group).__func__ is not getattr(Guard, group).__func__
        )
        assert overrides, f"{kind.__name__} has no {each}"
