"""The decode benchmark's models (benchmarks/llm) under trident.jit, against their pure-torch reference.

Tiny configs of both families (Llama-like: RMSNorm, RoPE, GQA, SwiGLU; GPT-2-like: LayerNorm, learned
positions, MHA, GELU), batch 2, fp32. Each step's Triton kernels (norm, RoPE, activation, residual add,
KV-cache write, decode attention) run through Triton's interpreter from the compiled program on CPU, and
natively on CUDA (marked `gpu`). Positions grow and jump across an attention block (64), so the kernel's
multi-block online softmax is exercised; they reach the step as a Python int and as a device tensor. Both
benchmarked op sets: `kernels` (the model launches the kernels) and `library` (the same kernels and a Triton
matmul behind torch.library custom ops, which Trident traces into). Also a short smoke run of
benchmarks/llm/run.py."""
from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers_native import assert_launches_native, assert_native

import trident
from trident.capture.triton_launches import interpret_cpu_launches
from trident.testing import count_compiles, triton_launch_sites

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # plain `pytest` (not `python -m pytest`) leaves the repository root off the path
    sys.path.insert(0, str(ROOT))

from benchmarks.llm import aten_ops, gemm, library, reference  # noqa: E402
from benchmarks.llm.models import build_model, rope_tables  # noqa: E402

POSITIONS = [0, 1, 2, 63, 64, 65]  # 0 and 1 are special to guards and Triton; 64 starts a 2nd block
KERNELS_PER_LAYER = {"llama": 8, "gpt2": 7}  # 2 norms, 2 adds, activation, KV write, attention (+ RoPE)
LINEARS_PER_LAYER = 4  # fused qkv, attention output, MLP up (or gate_up), MLP down; plus the LM head
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
# The library op set's custom ops each model's step calls per layer (+ the final norm and the LM head's linear).
LIBRARY_CALLS_PER_LAYER = {
    "llama": {"rms_norm": 2, "linear": 4, "rope": 1, "kv_write": 1, "decode_attention": 1, "add": 2, "swiglu": 1},
    "gpt2": {"layer_norm": 2, "linear": 4, "kv_write": 1, "decode_attention": 1, "add": 2, "gelu_tanh": 1},
}


def library_calls(model_name: str, layers: int, pos_kind: str) -> dict[str, int]:
    """'llm_bench::op' -> calls per step of the library op set (what explain lists as traced into)."""
    calls = {op: n * layers for op, n in LIBRARY_CALLS_PER_LAYER[model_name].items()}
    calls["linear"] += 1
    calls["rms_norm" if model_name == "llama" else "layer_norm"] += 1
    suffix = "_tensor_pos" if pos_kind == "tensor" else ""
    return {f"{library.NS}::{op}{suffix if op in ('rope', 'kv_write', 'decode_attention') else ''}": n
            for op, n in calls.items()}


def aten_calls(model_name: str, layers: int) -> dict[str, int]:
    """The aten op set's overridden ops per step: the residual adds (and GPT-2's embedding + position row,
    which broadcasts at batch 2: the override hands it to ATen's add.out) and GPT-2's GELU."""
    if model_name == "llama":
        return {"aten::add.Tensor": 2 * layers}
    return {"aten::add.Tensor": 2 * layers + 1, "aten::gelu": layers}


def assert_traced_into(step: object, expected: dict[str, int], kind: str, device: str) -> None:
    """Every specialization of `step` traced into exactly these ops, this many calls each (as explain says),
    kept none opaque, and calls none of the library's custom ops through the dispatcher."""
    text = trident.explain(step)
    assert "opaque" not in text, text
    for spec in step._trident.specializations:  # type: ignore[attr-defined]
        assert dict(spec.trace.see_through.traced) == expected, text
        assert not [call for call in spec.compiled.aten_calls if library.NS in call], text
    for op, n in expected.items():
        assert f"traced into {op} ({kind}, {device.upper()} kernel): {n} call(s)" in text, text


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
@pytest.mark.parametrize("ops", ["kernels", "library", "aten"])
def test_jitted_decode_matches_reference(ops: str, model_name: str, pos_kind: str, device: str) -> None:
    model = build_model(model_name, device, torch.float32, tiny=True, max_seq=128)
    step = trident.jit(model.step_for(ops, pos_kind))
    # The aten op set's overrides, registered anew around each call (as a library's context manager is): the
    # same functions again, so no recompile. The reference's adds run outside them.
    overrides = (lambda: aten_ops.overrides(torch.device(device))) if ops == "aten" else contextlib.nullcontext
    caches, ref_caches = model.new_caches(2), model.new_caches(2)
    compiles_per_step = []
    with torch.no_grad():
        for i, p in enumerate(POSITIONS):
            tokens = torch.randint(0, model.vocab, (2,), device=device)
            pos = torch.tensor([p], dtype=torch.int32, device=device) if pos_kind == "tensor" else p
            with count_compiles() as compiles, overrides():
                logits = step(tokens, pos, caches)
            compiles_per_step.append(compiles())
            expected = model.reference_step(tokens, p, ref_caches)
            assert logits.shape == (2, model.vocab) and logits.dtype == torch.float32
            torch.testing.assert_close(logits, expected, rtol=1e-4, atol=1e-5, msg=f"step {i}, position {p}")
    for (k, v), (ref_k, ref_v) in zip(caches, ref_caches):  # the in-place KV writes landed where eager's did
        torch.testing.assert_close(k, ref_k, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v, ref_v, rtol=1e-5, atol=1e-6)
        assert k[:, :, POSITIONS].abs().sum(-1).gt(0).all() and k[:, :, 3:63].eq(0).all()

    # An int position: one specialization with the position constant, then one with it symbolic for the rest
    # of the loop. A tensor position never recompiles: its value is not part of any guard.
    assert compiles_per_step == ([1, 1] if pos_kind == "int" else [1, 0]) + [0] * (len(POSITIONS) - 2)
    assert_native(step, hits=len(POSITIONS), compiles=sum(compiles_per_step))
    if device == "cuda":  # each site through Triton's launcher once per variant it registers, else native
        assert_launches_native(step)
    # Every kernel of the step is a launch of the compiled program (none baked in or run at capture only);
    # in the library op set also the matmuls, and the custom ops around them are gone (traced into).
    per_layer = KERNELS_PER_LAYER[model_name] + (LINEARS_PER_LAYER if ops == "library" else 0)
    launches = per_layer * model.n_layers + 1 + (1 if ops == "library" else 0)
    assert len(triton_launch_sites(step)) == launches * sum(compiles_per_step)
    if ops == "library":
        assert_traced_into(step, library_calls(model_name, model.n_layers, pos_kind), "custom op", device)
    elif ops == "aten":
        assert_traced_into(step, aten_calls(model_name, model.n_layers), "Python kernel", device)


@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_library_eager_matches_reference(model_name: str) -> None:
    """The library op set run eagerly (each op through the dispatcher into its custom-op body; Triton through
    the interpreter on CPU) computes what the reference does, and what the kernels op set does."""
    model = build_model(model_name, "cpu", torch.float32, tiny=True, max_seq=64)
    caches, kernel_caches, ref_caches = model.new_caches(2), model.new_caches(2), model.new_caches(2)
    with torch.no_grad(), interpret_cpu_launches():
        for p in (0, 1, 5):
            tokens = torch.randint(0, model.vocab, (2,))
            pos = torch.tensor([p], dtype=torch.int32) if p == 5 else p  # the tensor-position ops too
            logits = model.library_step(tokens, pos, caches)
            torch.testing.assert_close(logits, model.reference_step(tokens, p, ref_caches), rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(logits, model.decode_step(tokens, p, kernel_caches), rtol=1e-5, atol=1e-6)
    for (k, v), (ref_k, ref_v) in zip(caches, ref_caches):  # kv_write's declared mutation of the caches
        torch.testing.assert_close(k, ref_k, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(v, ref_v, rtol=1e-5, atol=1e-6)
        assert k[:, :, [0, 1, 5]].abs().sum(-1).gt(0).all() and k[:, :, 6:].eq(0).all()


@pytest.mark.parametrize("m", [1, 8, 20])
def test_library_matmul_matches_linear(m: int) -> None:
    """gemm.py's table picks the GEMV kernel for one row and tl.dot tiles for more; each, narrow and wide
    (past WIDE_N), with and without bias, with K not a multiple of the K block, is F.linear."""
    torch.manual_seed(0)
    for n, k in ((40, 24), (gemm.WIDE_N + 8, 20), (24, 600)):
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
        for bias in (None, b):
            with interpret_cpu_launches():
                out = library.linear(x, w, bias)
            torch.testing.assert_close(out, torch.nn.functional.linear(x, w, bias), rtol=1e-5, atol=1e-4,
                                       msg=f"[{m}, {k}] x [{k}, {n}], bias {bias is not None}")
    assert gemm.tile_for(m, 40, 24).block_m == (1 if m == 1 else 16 if m <= 16 else 64)
    with pytest.raises(ValueError, match="takes a 2-D input"):
        library.linear(torch.randn(2, m, 24), torch.randn(40, 24))


def test_reference_attention_and_rope_are_standard_math() -> None:
    """The reference the kernels are checked against agrees with torch's SDPA (GQA over the visible prefix)
    and with the rotate-half form of RoPE."""
    batch, q_heads, kv_heads, head_dim, max_seq, pos = 2, 4, 2, 16, 32, 9
    q = torch.randn(batch, q_heads, head_dim)
    k_cache, v_cache = torch.randn(batch, kv_heads, max_seq, head_dim), torch.randn(batch, kv_heads, max_seq, head_dim)
    expected = F.scaled_dot_product_attention(q[:, :, None], k_cache[:, :, : pos + 1], v_cache[:, :, : pos + 1],
                                              enable_gqa=True)[:, :, 0]
    for p in (pos, torch.tensor([pos], dtype=torch.int32)):
        torch.testing.assert_close(reference.decode_attention(q, k_cache, v_cache, p), expected, rtol=1e-5, atol=1e-5)

    # RoPE on the first 2 heads of a 3-head row, at row 5 of the tables, in HF's rotate-half form.
    qk = torch.randn(batch, 3 * head_dim)
    cos, sin = rope_tables(8, head_dim, 10000.0, torch.device("cpu"))
    angles = 5 * 10000.0 ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    torch.testing.assert_close(cos[5], angles.cos().float())
    x = qk[:, : 2 * head_dim].view(batch, 2, head_dim)
    rotate_half = torch.cat((-x[..., head_dim // 2 :], x[..., : head_dim // 2]), dim=-1)
    expected = x * cos[5].repeat(2) + rotate_half * sin[5].repeat(2)
    for p in (5, torch.tensor([5], dtype=torch.int32)):
        torch.testing.assert_close(reference.rope(qk, 2, head_dim, cos, sin, p), expected)


def test_benchmark_smoke_run(tmp_path: Path) -> None:
    """One short CPU run of the benchmark script over the op sets writes a result file whose Trident cells
    match the reference, each cell keyed and labelled by its op set."""
    from benchmarks.llm import report, run

    out = tmp_path / "llm.json"
    argv = ["--device", "cpu", "--tiny", "--models", "gpt2", "--batch", "1", "--systems", "eager,trident",
            "--ops", "kernels,library,aten", "--warmup", "3", "--steps", "2", "--rounds", "1", "--out", str(out),
            "--no-plot"]
    assert run.main(argv) == 0
    data = json.loads(out.read_text())
    assert {"python", "torch", "triton"} <= set(data["runs"][0]["machine"])
    cells = {(c["ops"], c["pos_kind"], c["system"]): c for c in data["cells"]}
    assert len(cells) == 12 and {c["status"] for c in cells.values()} == {"ok"}, cells
    # The aten op set at batch 1: GPT-2's embedding + position row is a same-shape add too.
    traced_per_op_set = {"kernels": lambda kind: {}, "library": lambda kind: library_calls("gpt2", 2, kind),
                         "aten": lambda kind: {"aten::add.Tensor": 5, "aten::gelu": 2}}
    for ops, traced_calls in traced_per_op_set.items():
        for kind, compiles in (("int", 2), ("tensor", 1)):
            trident_cell = cells[(ops, kind, "trident")]
            assert trident_cell["check"]["ok"] and trident_cell["check"]["positions"] == [2, 3, 4]
            assert trident_cell["compiles"] == compiles and trident_cell["eager_calls"] == 0
            assert trident_cell["ms_per_token"] > 0
            traced = [spec["traced_into"] for spec in trident_cell["specializations"]]
            assert traced == [traced_calls(kind)] * compiles, traced
            assert ("op(s) traced into" in trident_cell["notes"]) == (ops != "kernels")
    tables = report.render_tables(data["cells"])
    assert "gpt2 (tiny), cpu, batch 1, position as int, ops kernels" in tables
    assert "gpt2 (tiny), cpu, batch 1, position as int, ops library" in tables
    assert "| gpt2 (tiny) | 1 | int | library |" in report.render_markdown(data["cells"])
    # A result file written before op sets existed merges as the kernels op set's cells.
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"runs": [], "cells": [{k: v for k, v in c.items() if k != "ops"}
                                                     for c in data["cells"] if c["ops"] == "kernels"]}))
    merged = report.Results.merge([old, out], tmp_path / "merged.json")
    assert len(merged.data["cells"]) == 12  # the old cells share the kernels cells' keys
