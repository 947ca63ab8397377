"""Strict mode, the switch that makes an eager fallback a test failure (trident.testing, TRIDENT_STRICT).

The two fallbacks used here need no capture: an input that requires grad while grad mode is on, and any new
input past TRIDENT_MAX_SPECIALIZATIONS=0. The suite runs strict (tests/conftest.py), so these tests also check
that its switch is on, and undo the violations they cause on purpose (the `violations` fixture) so that the
conftest's check of swallowed violations sees only what they did not mean.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import warnings
from collections.abc import Iterator

import pytest
import torch

import trident
from trident import fallback
from trident.knobs import knobs, override
from trident.testing import (
    UnexpectedFallback, allow_fallback, expect_fallback, fallback_events, strict, unexpected_fallbacks,
)  # fmt: skip

GRAD = "argument 'x' requires grad while grad mode is on"
CAP = "reached TRIDENT_MAX_SPECIALIZATIONS=0"

ran: list[int] = []  # each eager run of `double` appends (strict mode raises before the eager call)


def double(x):  # type: ignore[no-untyped-def]
    ran.append(1)
    return x * 2


@pytest.fixture
def violations() -> Iterator[list[fallback.FallbackEvent]]:
    """The strict-mode violations a test causes on purpose; forgotten afterwards (before conftest checks)."""
    start = len(unexpected_fallbacks())
    seen: list[fallback.FallbackEvent] = []
    yield seen
    with fallback._lock:
        seen.extend(fallback._unexpected[start:])
        del fallback._unexpected[start:]


def trident_warnings(records: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in records if str(w.message).startswith("trident:")]


def test_the_suite_runs_strict() -> None:
    assert os.environ["TRIDENT_STRICT"] == "1" and knobs.strict


def test_strict_raises_naming_the_function_and_the_reason(violations: list[fallback.FallbackEvent]) -> None:
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    ran.clear()
    with pytest.raises(UnexpectedFallback) as raised:
        f(x)
    message = str(raised.value)
    assert message.startswith(f"trident strict mode: 'double' ran eagerly: {GRAD}"), message
    assert "trident.testing.expect_fallback()" in message  # says what a test that means it does
    assert isinstance(raised.value, AssertionError)  # a test failure, not a Trident diagnosis
    assert ran == []  # raised before the eager call: nothing of the function ran
    assert [(e.function, GRAD in e.reason) for e in unexpected_fallbacks()[-1:]] == [("double", True)]


def test_expect_fallback_passes_with_a_matching_fallback() -> None:
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    ran.clear()
    with warnings.catch_warnings(record=True) as records, expect_fallback(GRAD, function="double") as events:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.testing.assert_close(f(x), x * 2)
    assert [e.function for e in events] == ["double", "double"] and all(GRAD in e.reason for e in events)
    assert ran == [1, 1] and f._trident.eager_calls == 2  # type: ignore[attr-defined]
    assert len(trident_warnings(records)) == 1  # the warning is the same as without strict mode


def test_expect_fallback_fails_without_a_fallback() -> None:
    f = trident.jit(double)
    x = torch.randn(3)
    with torch.no_grad():
        with pytest.raises(AssertionError, match="no eager fallback at all"), expect_fallback(GRAD):
            torch.testing.assert_close(f(x), x * 2)  # compiled: no fallback
    assert sum(f._trident.entry.hits()) == 1  # type: ignore[attr-defined]


def test_expect_fallback_fails_on_another_reason_or_function() -> None:
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(AssertionError, match=f"expected an eager fallback whose reason contains '{CAP}'; got"):
            with expect_fallback(CAP):
                f(x)
        with pytest.raises(AssertionError, match="of 'other'; got 'double': "):
            with expect_fallback(GRAD, function="other"):
                f(x)


def test_expect_fallback_fails_on_a_second_kind_of_fallback_in_its_block() -> None:
    """Only the fallbacks it names: a block that expects one reason does not hide another."""
    f = trident.jit(double)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(AssertionError, match=f"expected only .*{CAP}.*; also got 'double': {GRAD}"):
            with expect_fallback(CAP):
                with override(max_specializations=0):
                    f(torch.randn(3))  # past the cap of 0
                f(torch.randn(3, requires_grad=True))  # requires grad: a fallback of another kind


def test_allow_fallback_allows_and_lists_without_asserting() -> None:
    f = trident.jit(double)
    with allow_fallback() as none:
        pass
    assert none == []
    with warnings.catch_warnings(), allow_fallback() as events:
        warnings.simplefilter("ignore")
        f(torch.randn(3, requires_grad=True))
        with override(max_specializations=0):
            f(torch.randn(3))
    assert [(GRAD in e.reason, CAP in e.reason) for e in events] == [(True, False), (False, True)]
    assert fallback_events()[-2:] == events


def test_a_swallowed_violation_is_still_recorded(violations: list[fallback.FallbackEvent]) -> None:
    """A harness that catches exceptions (comparing them with eager's) or a worker thread cannot hide one."""
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    try:
        f(x)
    except AssertionError:
        pass  # swallowed, as a harness comparing exceptions with eager's might

    def worker() -> None:
        try:
            f(x)
        except UnexpectedFallback:
            pass

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert [(e.function, GRAD in e.reason) for e in unexpected_fallbacks()[-2:]] == [("double", True)] * 2


def test_strict_off_is_one_warning_as_before() -> None:
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    before = len(unexpected_fallbacks())
    ran.clear()
    with strict(False), warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(f(x), x * 2)
    assert trident_warnings(records) == [f"trident: {GRAD}; Trident compiles inference only, so this call runs "
                                         "eagerly. Call it under torch.no_grad() or torch.inference_mode()"]
    assert ran == [1, 1, 1] and f._trident.eager_calls == 3  # type: ignore[attr-defined]
    assert len(unexpected_fallbacks()) == before  # not a violation
    assert [e.function for e in fallback_events()[-3:]] == ["double"] * 3  # still listed


def test_strict_turns_on_inside_a_non_strict_process(violations: list[fallback.FallbackEvent]) -> None:
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    with strict(False), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f(x)
        with strict(), pytest.raises(UnexpectedFallback):
            f(x)
        f(x)
    assert f._trident.eager_calls == 3  # type: ignore[attr-defined]  # counted, whether it ran or raised


CHILD = """
import json, warnings
import torch, trident
from trident.knobs import knobs
warnings.simplefilter("ignore")

def double(x):
    return x * 2

f = trident.jit(double)
try:
    f(torch.randn(3, requires_grad=True))
    outcome = "ran eagerly"
except trident.testing.UnexpectedFallback as e:
    outcome = "raised: " + str(e)
print(json.dumps({"strict": knobs.strict, "outcome": outcome}))
"""


@pytest.mark.parametrize("value, strict_on", [("1", True), (None, False)])
def test_trident_strict_is_read_from_the_environment(value: str | None, strict_on: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRIDENT_STRICT"}
    if value is not None:
        env["TRIDENT_STRICT"] = value
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["strict"] is strict_on, result
    if strict_on:
        assert result["outcome"].startswith(f"raised: trident strict mode: 'double' ran eagerly: {GRAD}"), result
    else:
        assert result["outcome"] == "ran eagerly", result


def test_fallback_events_stay_bounded_and_nested_blocks_each_see_them() -> None:
    """A process that runs eagerly for hours keeps only the most recent events; open blocks each collect theirs
    (an inner block that ends, equal in content to the outer one's list, must not end the outer one)."""
    f = trident.jit(double)
    x = torch.randn(3, requires_grad=True)
    with warnings.catch_warnings(), allow_fallback() as outer:
        warnings.simplefilter("ignore")
        with allow_fallback() as inner:
            pass
        for _ in range(fallback.RECENT_EVENTS + 5):
            f(x)
        with allow_fallback() as last:
            f(x)
    assert inner == [] and len(last) == 1 and len(outer) == fallback.RECENT_EVENTS + 6
    assert len(fallback_events()) == fallback.RECENT_EVENTS and fallback_events()[-1] is last[0]
