"""Hugging Face `generate` through `torch.compile(model.forward, backend="trident")`, against eager generate.

Greedy decoding with a DynamicCache gives Dynamo graphs whose sizes grow with the cache: their lengths are sums
Dynamo writes as `torch.sym_sum([...])` (ir/fx_import.py imports it as a chain of aten.add.int), and a graph
Trident cannot compile must be decided once, not captured, failed and warned about at every new length
(dynamo.py). Each test counts what ran natively through the graphs' own counters: an eager fallback always
equals eager (and strict mode, which the suite sets, would raise on one).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from helpers_native import assert_native
from ir.filecheck import filecheck

import trident
import trident.dynamo
from trident.testing import expect_fallback

transformers = pytest.importorskip("transformers")

PROMPT = [[1, 5, 9, 3]]
NEW_TOKENS = 8


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def tiny_llama() -> torch.nn.Module:
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=64)  # fmt: skip
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def new_graphs(before: set[int]) -> list[trident.driver.JitFunction]:
    return [g for g in trident.dynamo.compiled_graphs() if id(g) not in before]


def trident_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if str(w.message).startswith("trident:")]


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_greedy_generate_through_the_backend_equals_eager_and_runs_natively(cache: str) -> None:
    kwargs = {} if cache == "dynamic" else {"cache_implementation": "static"}
    prompt = torch.tensor(PROMPT)
    with torch.no_grad():
        expected = tiny_llama().generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, **kwargs)
    model = tiny_llama()
    model.forward = torch.compile(model.forward, backend=trident.dynamo.backend)
    before = {id(g) for g in trident.dynamo.compiled_graphs()}
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        tokens = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False, **kwargs)
    assert torch.equal(tokens, expected)
    assert tokens.shape[1] == len(PROMPT[0]) + NEW_TOKENS  # greedy ran every step (no early end of sequence)
    assert trident_warnings(caught) == []
    graphs = new_graphs(before)
    assert graphs
    for graph in graphs:  # no call ran eagerly; each graph's misses only compiled its specializations
        assert graph.eager_calls == 0 and graph.misses == len(graph.specializations) >= 1, trident.explain(graph.entry)
    # One forward per new token, each through a graph's native entry.
    assert sum(sum(g.entry.hits()) for g in graphs) == NEW_TOKENS
    if cache == "dynamic":
        # The decode graph over the growing cache: its lengths are sym_sums, one specialization for every length.
        decode = max(graphs, key=lambda g: sum(g.entry.hits()))
        assert "torch.sym_sum(" in decode.fn.__self__.code
        assert_native(decode.entry, hits=sum(decode.entry.hits()), compiles=1)
        assert sum(decode.entry.hits()) >= NEW_TOKENS - 2


def concat_lengths(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    n = torch.sym_sum([x.shape[0], y.shape[0], 1])
    return torch.zeros(n) + x.sum() + y.sum()


def test_a_graph_with_sym_sum_imports_it_as_int_adds_and_runs_natively(tmp_path: Path) -> None:
    compiled = torch.compile(concat_lengths, backend=trident.dynamo.backend, dynamic=True, options={"dump_ir": str(tmp_path)})
    before = {id(g) for g in trident.dynamo.compiled_graphs()}
    with torch.no_grad():
        for a, b in ((3, 4), (5, 7), (9, 2)):
            x, y = torch.randn(a), torch.randn(b)
            assert torch.equal(compiled(x, y), concat_lengths(x, y))
    (graph,) = new_graphs(before)
    assert "torch.sym_sum(" in graph.fn.__self__.code
    assert_native(graph.entry, hits=3, compiles=1)  # one specialization: the sum stays symbolic
    (imported,) = tmp_path.glob("*.torch.mlir")
    filecheck(
        imported.read_text(),
        """
        CHECK: func.func @main(%[[A:arg0]]: !torch.int, %{{.*}}: !torch.vtensor<[?],f32>, %[[B:arg2]]: !torch.int
        CHECK: %[[ONE:.*]] = torch.constant.int 1
        CHECK-NEXT: %[[AB:.*]] = torch.aten.add.int %[[A]], %[[B]] : !torch.int, !torch.int -> !torch.int
        CHECK-NEXT: %[[SUM:.*]] = torch.aten.add.int %[[AB]], %[[ONE]] : !torch.int, !torch.int -> !torch.int
        CHECK-NEXT: torch.prim.ListConstruct %[[SUM]]
        """,
    )


SCALE = 1  # read by scale_by_sum: Dynamo guards its value, so changing it recompiles the same graph code


def scale_by_sum(x: torch.Tensor) -> torch.Tensor:
    if SCALE > 0:
        return x * x.sum().item()
    return x


def test_a_graph_that_cannot_compile_is_decided_once_across_sizes_and_recompiles() -> None:
    """Trident's capture refuses `.item()` (kept in the graph by capture_scalar_outputs). With symbolic sizes every
    call of a new size used to capture, fail and warn again; now the first failure decides the graph, and a Dynamo
    recompile handing over the same code runs eagerly at once."""
    global SCALE
    compiled = torch.compile(scale_by_sum, backend=trident.dynamo.backend, dynamic=True)
    before = {id(g) for g in trident.dynamo.compiled_graphs()}
    with warnings.catch_warnings(record=True) as caught, torch._dynamo.config.patch(capture_scalar_outputs=True), \
            torch.no_grad(), expect_fallback(".item()"):  # fmt: skip
        warnings.simplefilter("always")
        for n in (3, 4, 5, 6):
            x = torch.randn(n)
            assert torch.equal(compiled(x), scale_by_sum(x))
        SCALE = 2
        try:
            for n in (3, 7):
                x = torch.randn(n)
                assert torch.equal(compiled(x), scale_by_sum(x))
        finally:
            SCALE = 1
    first, recompiled = new_graphs(before)
    assert first.fn.__self__.code == recompiled.fn.__self__.code
    assert (first.eager_calls, len(first.fallbacks), len(first.specializations)) == (4, 1, 0)  # one capture
    assert (recompiled.eager_calls, len(recompiled.fallbacks), len(recompiled.specializations)) == (2, 0, 0)  # none
    (warning,) = trident_warnings(caught)
    assert re.search(r"capturing 'scale_by_sum \(torch.compile graph 0/0\)' raised UnsupportedConstruct.*\.item\(\)",
                     warning)  # fmt: skip
    assert "every miss of this graph runs eagerly, without capturing again" in trident.explain(recompiled.entry)
