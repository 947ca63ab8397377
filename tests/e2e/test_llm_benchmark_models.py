"""The decode benchmark's models (benchmarks/llm) under trident.jit, against their pure-torch reference.

Tiny configs of both families (Llama-like: RMSNorm, RoPE, GQA, SwiGLU; GPT-2-like: LayerNorm, learned
positions, MHA, GELU), batch 2, fp32. Each step's Triton kernels (norm, RoPE, activation, residual add,
KV-cache write, decode attention) run through Triton's interpreter from the compiled program on CPU, and
natively on CUDA (marked `gpu`). Positions grow and jump across an attention block (64), so the kernel's
multi-block online softmax is exercised; they reach the step as a Python int and as a device tensor. Also a
short smoke run of benchmarks/llm/run.py."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers_native import assert_launches_native, assert_native

import trident
from trident.testing import count_compiles, triton_launch_sites

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # plain `pytest` (not `python -m pytest`) leaves the repository root off the path
    sys.path.insert(0, str(ROOT))

from benchmarks.llm import reference  # noqa: E402
from benchmarks.llm.models import build_model, rope_tables  # noqa: E402

POSITIONS = [0, 1, 2, 63, 64, 65]  # 0 and 1 are special to guards and Triton; 64 starts a 2nd block
KERNELS_PER_LAYER = {"llama": 8, "gpt2": 7}  # 2 norms, 2 adds, activation, KV write, attention (+ RoPE)
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
@pytest.mark.parametrize("model_name", ["llama", "gpt2"])
def test_jitted_decode_matches_reference(model_name: str, pos_kind: str, device: str) -> None:
    model = build_model(model_name, device, torch.float32, tiny=True, max_seq=128)
    step = trident.jit(model.decode_step_tensor_pos if pos_kind == "tensor" else model.decode_step)
    caches, ref_caches = model.new_caches(2), model.new_caches(2)
    compiles_per_step = []
    with torch.no_grad():
        for i, p in enumerate(POSITIONS):
            tokens = torch.randint(0, model.vocab, (2,), device=device)
            pos = torch.tensor([p], dtype=torch.int32, device=device) if pos_kind == "tensor" else p
            with count_compiles() as compiles:
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
    # Every kernel of the step is a launch of the compiled program (none baked in or run at capture only).
    launches = KERNELS_PER_LAYER[model_name] * model.n_layers + 1
    assert len(triton_launch_sites(step)) == launches * sum(compiles_per_step)


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
    """One short CPU run of the benchmark script writes a result file whose Trident cells match the reference."""
    from benchmarks.llm import report, run

    out = tmp_path / "llm.json"
    argv = ["--device", "cpu", "--tiny", "--models", "gpt2", "--batch", "1", "--systems", "eager,trident",
            "--warmup", "3", "--steps", "2", "--rounds", "1", "--out", str(out), "--no-plot"]
    assert run.main(argv) == 0
    data = json.loads(out.read_text())
    assert {"python", "torch", "triton"} <= set(data["runs"][0]["machine"])
    cells = {(c["pos_kind"], c["system"]): c for c in data["cells"]}
    assert {c["status"] for c in cells.values()} == {"ok"}, cells
    for kind, compiles in (("int", 2), ("tensor", 1)):
        trident_cell = cells[(kind, "trident")]
        assert trident_cell["check"]["ok"] and trident_cell["check"]["positions"] == [2, 3, 4]
        assert trident_cell["compiles"] == compiles and trident_cell["eager_calls"] == 0
        assert trident_cell["ms_per_token"] > 0
    assert "gpt2 (tiny), cpu, batch 1, position as int" in report.render_tables(data["cells"])
