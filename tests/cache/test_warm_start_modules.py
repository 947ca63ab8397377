"""Warm start of trident.jit(module): module-state guards (training flags, which parameter each name holds) are
persisted with their owners as paths from the function's roots and found again in a new process, so a loaded
specialization follows a train()/eval() flip or a rebound parameter exactly as a compiled one does."""
from __future__ import annotations

from pathlib import Path

import pytest

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


HF_PROGRAM = """
import transformers

config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  max_position_embeddings=256)
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).eval()
jitted = trident.jit(model)
ids = torch.randint(1, 100, (1, 8), generator=torch.Generator().manual_seed(0))
kwargs = dict(max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=0, cache_implementation="static",
              disable_compile=True)
with torch.no_grad(), count_compiles() as compiles:
    tokens = jitted.generate(ids, **kwargs)
expected = model.generate(ids, **kwargs)
report(compiles(), same=bool(torch.equal(tokens, expected)), eager_calls=jitted._trident.eager_calls,
       explain=trident.explain(jitted))
"""


def test_a_hugging_face_model_loads_in_a_new_process(tmp_path: Path) -> None:
    """A Hugging Face causal LM through trident.jit persists its specializations (its ModelOutput results are
    built by class name, the generated dataclass __init__ that ran is found by its attribute path, and the
    GenerationConfig's per-process hash is left out of the state), and a new process generates with 0 compiles."""
    pytest.importorskip("transformers")
    program = write_program(tmp_path, HF_PROGRAM)
    cold = run(program, tmp_path / "cache")
    assert cold["same"] and cold["eager_calls"] == 0 and cold["compiles"] == 2, cold["log"]
    assert cold["stats"]["stores"] == 2, cold["explain"]
    warm = run(program, tmp_path / "cache")
    assert warm["same"] and warm["eager_calls"] == 0, warm["log"]
    assert warm["compiles"] == 0 and warm["stats"]["loads"] == 2, warm["log"]
