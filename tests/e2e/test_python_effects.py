"""What the README says about Python inside a jitted function: reading a tensor's value in Python raises
UnsupportedConstruct naming the construct and the user's line; Python side effects (a print, appending to a
list) happen once per compile, not once per call, because hits run no Python."""
from __future__ import annotations

import pytest
import torch

import trident
from trident.exc import UnsupportedConstruct
from trident.testing import count_compiles


def hits(jitted: object) -> list[int]:
    return list(jitted._trident.entry.hits())  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("construct", "program"),
    [
        (".tolist()", lambda x: x * len(x.tolist())),
        (".item()", lambda x: x * x.max().item()),
        ("bool(tensor)", lambda x: x if x.sum() > 0 else -x),
    ],
)
def test_reading_a_tensor_value_raises_unsupported_construct(construct: str, program: object) -> None:
    jitted = trident.jit(program)  # type: ignore[arg-type]
    with torch.no_grad(), count_compiles() as compiles:
        with pytest.raises(UnsupportedConstruct) as info:
            jitted(torch.randn(4))
    message = str(info.value)
    assert construct in message, message
    assert "test_python_effects.py" in message, message  # the user's line, not torch's or Trident's
    assert compiles() == 0
    assert jitted._trident.eager_calls == 0  # type: ignore[attr-defined]  # raised, not run eagerly in silence


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
