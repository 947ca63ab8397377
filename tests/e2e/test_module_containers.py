"""Containers a forward iterates (ModuleDict, ModuleList, Sequential): a child added, removed or moved after
capture changes what eager runs, so the specialization must miss. Each change is compared with eager, bit for
bit, with compile counts and native hits: a stale specialization cannot pass.

Found by hand on CPU: a ModuleDict child added under a new name after capture was not guarded (only numbered
children had an "absent" guard), so the compiled program kept running the old children (logits off by 0.9)."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

import trident
from trident.testing import count_compiles


class Named(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({"a": nn.Linear(4, 4), "b": nn.Linear(4, 4)})
        self.seq = nn.Sequential()
        self.seq.add_module("relu", nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks.values():
            x = block(x)
        return self.seq(x)


def _check(wrapped: nn.Module, model: nn.Module, x: torch.Tensor) -> None:
    torch.testing.assert_close(wrapped(x), model(x), rtol=0, atol=0)


def _changes(model: Named) -> list[tuple[str, Callable[[], None], int]]:
    """Each change, and the compiles after it (removing the added child hits the first specialization again)."""
    extra = nn.Linear(4, 4)
    a = model.blocks["a"]

    def move_a_last() -> None:
        del model.blocks["a"]
        model.blocks["a"] = a  # same children, same objects, another order

    return [
        ("a child added under a new name", lambda: model.blocks.update({"c": extra}), 2),
        ("that child removed again", lambda: model.blocks.pop("c"), 2),  # the first specialization hits again
        ("the same children in another order", move_a_last, 3),
        ("a Sequential child added with add_module", lambda: model.seq.add_module("tanh", nn.Tanh()), 4),
    ]


def test_children_added_removed_or_moved_miss() -> None:
    model = Named().eval()
    wrapped = trident.jit(model)
    x = torch.randn(2, 4)
    with torch.no_grad(), count_compiles() as compiles:
        _check(wrapped, model, x)
        assert compiles() == 1
        for what, change, expected_compiles in _changes(model):
            change()
            _check(wrapped, model, x)
            assert compiles() == expected_compiles, what
            assert wrapped._trident.eager_calls == 0  # type: ignore[attr-defined]
    assert wrapped._trident.entry.hits() == [2, 1, 1, 1]  # type: ignore[attr-defined]
    assert "blocks: keys ['b', 'a'] in this order" in trident.explain(wrapped)


def test_module_list_append_and_delete_miss() -> None:
    layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])

    def forward(x: torch.Tensor) -> torch.Tensor:
        for layer in layers:
            x = layer(x)
        return x

    jitted = trident.jit(forward)
    x = torch.randn(2, 4)
    with torch.no_grad(), count_compiles() as compiles:
        torch.testing.assert_close(jitted(x), forward(x), rtol=0, atol=0)
        layers.append(nn.Linear(4, 4))
        torch.testing.assert_close(jitted(x), forward(x), rtol=0, atol=0)
        del layers[0]
        torch.testing.assert_close(jitted(x), forward(x), rtol=0, atol=0)
        assert compiles() == 3 and jitted._trident.eager_calls == 0  # type: ignore[attr-defined]
