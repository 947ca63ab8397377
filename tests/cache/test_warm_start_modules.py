"""Warm start of trident.jit(module): module-state guards (training flags, which parameter each name holds) are
persisted with their owners as paths from the function's roots and found again in a new process, so a loaded
specialization follows a train()/eval() flip or a rebound parameter exactly as a compiled one does."""
from __future__ import annotations

from pathlib import Path

from .helpers import run, write_program

PROGRAM = """
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm, self.drop = nn.Linear(8, 8), nn.LayerNorm(8), nn.Dropout(0.5)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8))

    def forward(self, x):
        return x + self.drop(self.norm(self.lin(x))) * self.scale

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x

torch.manual_seed(0)
model = Model().eval()
wrapped = trident.jit(model)
x = torch.randn(3, 8)
same, outs = [], []
with torch.no_grad(), count_compiles() as compiles:
    for mode in ("eval", "submodule", "eval", "submodule"):
        model.eval()
        if mode == "submodule":
            wrapped.layers[1].train()
        torch.manual_seed(1); actual = wrapped(x)
        torch.manual_seed(1); expected = model(x)
        same.append(torch.equal(actual, expected))
        outs.append(actual)
    model.layers[0].lin.weight = nn.Parameter(torch.randn(8, 8))  # rebound: the loaded guard must see it
    model.eval()
    outs.append(wrapped(x))
    same.append(torch.equal(outs[-1], model(x)))
report(compiles(), same=same, digest=digest(*outs), hits=wrapped._trident.entry.hits(),
       explain=trident.explain(wrapped))
"""


def test_a_new_process_loads_module_specializations_with_their_guards(tmp_path: Path) -> None:
    program = write_program(tmp_path, PROGRAM)
    first = run(program, tmp_path / "cache")
    # eval and submodule-train compile; after the rebind, the eval record loads with the new weight (found by
    # its path, by reference) instead of compiling a third time
    assert all(first["same"]) and first["compiles"] == 2, first["log"]
    assert first["stats"]["stores"] == 2 and first["stats"]["loads"] == 1, first["log"]
    second = run(program, tmp_path / "cache")
    assert all(second["same"]), second["log"]
    assert second["compiles"] == 0 and second["stats"]["loads"] == 3, second["log"]
    assert second["hits"] == first["hits"] == [2, 2, 1]
    assert second["digest"] == first["digest"]  # the first process's results, bit for bit
    assert "layers.1.drop.training: bool == True" in second["explain"]
    assert "last miss: layers.0.lin.weight: rebound to another Parameter since capture" in second["explain"]
