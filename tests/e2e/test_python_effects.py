"""What docs/semantics.md says about Python inside a jitted function: reading a tensor's value in Python runs the call
eagerly with one warning naming the construct and the user's line (unless it is a truth the guards can compute again:
tests/e2e/test_value_reads.py); Python side effects (a print, appending to a list) happen once per compile, not once
per call, because hits run no Python."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.testing import count_compiles, expect_fallback


def hits(jitted: object) -> list[int]:
    return list(jitted._trident.entry.hits())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("construct", "program"),
    [
        (".tolist()", lambda x: x * len(x.tolist())),
        (".item()", lambda x: x * x.max().item()),
        # A truth of random values: a guard could not compute it again as the trace did.
        ("bool(tensor)", lambda x: x if torch.rand_like(x).sum() > 0 else -x),
    ],
)
def test_reading_a_tensor_value_runs_eagerly_naming_the_construct(construct: str, program: object) -> None:
    """Eager runs such a program, so Trident does: eagerly, with one warning naming the construct and the user's
    line, remembered for the guard set (the second call does not capture again)."""
    jitted = trident.jit(program)  # type: ignore[arg-type]
    x = torch.randn(4)
    with torch.no_grad(), count_compiles() as compiles, expect_fallback(construct) as events:
        for _ in range(2):
            torch.testing.assert_close(jitted(x), program(x), rtol=0, atol=0)  # type: ignore[operator]
    reason = events[0].reason
    assert "UnsupportedConstruct" in reason and "test_python_effects.py" in reason, reason  # the user's line
    assert compiles() == 0 and jitted._trident.eager_calls == 2 and jitted._trident.misses == 2  # type: ignore[attr-defined]
    assert "runs eagerly (2 call(s))" in trident.explain(jitted)


def test_print_happens_once_per_compile(capsys: pytest.CaptureFixture[str]) -> None:
    def program(x):  # type: ignore[no-untyped-def]
        print("tracing program", x.dtype)
        return x * 2

    jitted = trident.jit(program)
    x = torch.randn(4)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(3):
            torch.testing.assert_close(jitted(x), x * 2)
        assert capsys.readouterr().out.count("tracing program") == 1
        for _ in range(3):  # a new dtype: one more compile, one more print
            torch.testing.assert_close(jitted(x.double()), x.double() * 2)
        assert capsys.readouterr().out.count("tracing program") == 1
        jitted(x)  # back to the first specialization: a hit prints nothing
        assert capsys.readouterr().out.count("tracing program") == 0
    assert compiles() == 2 and hits(jitted) == [4, 3]


SEEN: list[str] = []


def test_list_append_happens_once_per_compile() -> None:
    def program(x):  # type: ignore[no-untyped-def]
        SEEN.append(str(x.dtype))  # a Python side effect: runs while capturing only
        return x + 1

    SEEN.clear()
    jitted = trident.jit(program)
    x = torch.randn(4)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(4):
            torch.testing.assert_close(jitted(x), x + 1)
        assert SEEN == ["torch.float32"]
        for _ in range(2):
            torch.testing.assert_close(jitted(x.double()), x.double() + 1)
        assert SEEN == ["torch.float32", "torch.float64"]
    assert compiles() == 2 and hits(jitted) == [4, 2]
