"""torch.compile(..., backend="trident", options={...}) -> Trident's knobs (trident/dynamo.py)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from trident import dynamo, exc
from trident.knobs import Knobs


def test_every_knob_is_an_option_or_says_why_not() -> None:
    # A new knob must be decided on in dynamo.py: an option, or a reason it is not one.
    knobs = {f.name for f in dataclasses.fields(Knobs)}
    assert set(dynamo.OPTIONS) | set(dynamo.NOT_OPTIONS) == knobs
    assert not set(dynamo.OPTIONS) & set(dynamo.NOT_OPTIONS)


def test_values_convert_as_the_environment_spells_them() -> None:
    changes = dynamo.knob_overrides({
        "log": "recompiles, guards", "opaque_ops": ["mylib::gemv"], "dump_ir": "/tmp/ir", "buffer_pool_mb": 0,
        "max_specializations": 3, "see_through": False,
    })  # fmt: skip
    assert changes == {
        "log": frozenset({"recompiles", "guards"}), "opaque_ops": frozenset({"mylib::gemv"}), "dump_ir": Path("/tmp/ir"),
        "buffer_pool_mb": 0.0, "max_specializations": 3, "see_through": False,
    }  # fmt: skip
    assert dynamo.knob_overrides(None) == {}


@pytest.mark.parametrize(("options", "message"), [
    ({"max_specialisations": 4}, "unknown option 'max_specialisations'"),
    ({"max_specializations": True}, "option 'max_specializations' must be an int, got bool True"),
    ({"matmul_plans": 1}, "option 'matmul_plans' must be a bool, got int 1"),
    ({"opaque_ops": [1]}, "option 'opaque_ops' must be a comma-separated str or an iterable of str"),
    ({"cache_dir": "/tmp"}, "'cache_dir' is not an option of backend='trident': the native runtime is built"),
])  # fmt: skip
def test_invalid_options_are_named(options: dict[str, object], message: str) -> None:
    with pytest.raises(exc.InvalidOption, match="trident: ") as raised:
        dynamo.knob_overrides(options)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)
