"""gemlite's int8-weight linears under trident.jit (issue 41, items 4 and 5), on CUDA only: gemlite needs a GPU
at import.

gemlite (a public quantization library) exposes its Triton GEMV / GEMM kernels as one custom op,
`gemlite::forward_functional(x, bias, tensor_args, meta_args)`, whose body picks a kernel by batch size and
launches an autotuned kernel whose configs its `early_config_prune` takes from a module-level table
(GEMLITE_TRITON_CONFIG_CACHE, filled by `gemlite.load_config`). These tests check that Trident traces into that op
(its launches join the compiled program and run natively) and that the result keeps eager's bits, call after
call, also when the step is replayed as a CUDA graph.

Why the configs are pinned: without a table entry the library's autotuner times its configs in the eager call,
and torch's capture of the launch times the pruned configs again on the first compiled call. Two timings may pick
two configs, and configs that reduce over K in other tiles give other bits. A table entry (what gemlite's
per-GPU config files are) leaves one config to both, so eager's bits are the reference. The entries below use
SPLIT_K=1, except the one test of a split-K config, whose pre_hook zeroes the output before the kernel adds
into it.

The CPU side of these patterns (a custom op around an autotuned, pruned kernel) is covered with an own library
in test_see_through.py; this file runs the real library.
"""
from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from helpers_native import assert_launches_native, assert_native, same_bits

import trident
from trident.graphs.recorder import RECORD_AT_HIT
from trident.testing import count_compiles, triton_launch_sites

gpu = pytest.mark.gpu
OP = "gemlite::forward_functional"
HIDDEN, INTERMEDIATE = 2048, 8192


def need_gemlite() -> Any:
    return pytest.importorskip(
        "gemlite", reason="gemlite is not installed (pip install gemlite; it needs CUDA when imported)"
    )


# gemlite's table key: str((M rounded up to its autotune buckets, N, K, group_size, elements_per_sample, type_id)).
# A16W8 quantizes per output channel: group_size is K; int8 weights are not packed: 1 element per sample;
# type_id is 100 * input dtype + weight bits, with bf16 counted as fp16 (1): 108 for both activation dtypes.
def table_key(m: int, n: int, k: int) -> str:
    return str((m, n, k, k, 1, 108))


# One tile per kernel: those gemlite's H100 file holds for int8 activations at these shapes, here for 16-bit ones.
GEMV_CONFIG = {"BLOCK_SIZE_M": 1, "BLOCK_SIZE_N": 2, "BLOCK_SIZE_K": 2048, "GROUP_SIZE_M": 8, "SPLIT_K": 1,
               "A_load_order": 0, "dot_prod_mode": 0, "num_warps": 4, "num_ctas": 1, "num_stages": 1}
GEMM_CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 256, "GROUP_SIZE_M": 8, "SPLIT_K": 1,
               "A_load_order": 2, "num_warps": 4, "num_ctas": 1, "num_stages": 5}
# Two K halves added atomically into an output a config pre_hook zeroes first: 0 + a + b is b + a's bits in
# either order, so eager itself is deterministic.
SPLIT_K_CONFIG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 256, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 8, "SPLIT_K": 2,
                  "A_load_order": 2, "num_warps": 4, "num_ctas": 1, "num_stages": 2}
SPLIT_K_N = 4096  # its own shape: no test shares its table entry or the autotuners' cache key

# (N, K) of every linear below; M=1 runs gemlite's GEMV_SPLITK kernel, M=8 its GEMM_SPLITK kernel.
SHAPES = [(HIDDEN, HIDDEN), (INTERMEDIATE, HIDDEN), (HIDDEN, INTERMEDIATE)]
PINNED = {
    "GEMV_SPLITK": {table_key(1, n, k): GEMV_CONFIG for n, k in SHAPES},
    "GEMM_SPLITK": {**{table_key(8, n, k): GEMM_CONFIG for n, k in SHAPES},
                    table_key(8, SPLIT_K_N, HIDDEN): SPLIT_K_CONFIG},
}


def _clear_autotuner_caches(gemlite: Any) -> None:
    """Forget the configs gemlite's autotuners chose in earlier tests: the next launch prunes from the table."""
    for kernels in gemlite.core.GEMLITE_TRITON_MAPPING.values():
        for kernel in kernels.kernel:
            kernel.cache.clear()


@pytest.fixture
def gemlite(tmp_path: Path) -> Iterator[Any]:
    """gemlite with PINNED loaded into its config table (as `gemlite.load_config` loads a user's file); the table
    and the autotuners' caches are as before afterwards."""
    module = need_gemlite()
    saved = copy.deepcopy(module.core.GEMLITE_TRITON_CONFIG_CACHE)
    path = tmp_path / "gemlite_configs.json"
    path.write_text(json.dumps(PINNED))
    _clear_autotuner_caches(module)
    assert module.load_config(str(path)), f"gemlite did not load {path}"
    yield module
    module.core.GEMLITE_TRITON_CONFIG_CACHE = saved
    _clear_autotuner_caches(module)


def int8_linear(gemlite: Any, in_features: int, out_features: int, dtype: torch.dtype, seed: int) -> Any:
    """An nn.Linear (seeded init) quantized by gemlite's A16W8: int8 weights, one scale per output channel,
    activations in `dtype`. A GemLiteLinearTriton module; its forward calls gemlite::forward_functional."""
    torch.manual_seed(seed)
    linear = torch.nn.Linear(in_features, out_features, bias=False, dtype=dtype, device="cuda")
    return gemlite.helper.A16W8(device="cuda").from_linear(linear)


def assert_traced_into(f: Any, calls_per_step: int, kernel: str) -> None:
    """Every specialization of `f` traced into gemlite's op `calls_per_step` times and kept nothing opaque; the
    op is no dispatcher call of the compiled program; each launch site launches `kernel`, natively."""
    text = trident.explain(f)
    assert f"traced into {OP} (custom op, " in text and "opaque" not in text, text
    for spec in f._trident.specializations:
        report = spec.trace.see_through
        assert dict(report.traced) == {OP: calls_per_step} and not report.opaque, text
        assert not [call for call in spec.compiled.aten_calls if "gemlite" in call], text
    sites = triton_launch_sites(f)
    assert len(sites) == calls_per_step * len(f._trident.specializations), text
    assert all(kernel in site.name for site in sites), text  # type: ignore[attr-defined]
    assert_launches_native(f)


# ---------------------------------------------------------------------------------------------------------
# One linear


@gpu
@pytest.mark.parametrize("batch,dtype,form", [
    (1, torch.bfloat16, "function"), (1, torch.float16, "function"),
    (8, torch.bfloat16, "function"),  # gemm_splitK_INT_kernel: its autotune config names keys it has no parameter for
    (1, torch.bfloat16, "module"),
], ids=["gemv-bf16", "gemv-fp16", "gemm8-bf16", "gemv-bf16-module"])
def test_an_int8_weight_linear_is_traced_into_with_eager_bits(gemlite: Any, batch: int, dtype: torch.dtype,
                                                               form: str) -> None:
    """x [batch, 2048] @ an int8 2048x2048 weight: the custom op's launch becomes a launch of the compiled
    program (no dispatcher call), every call after the first is a native hit with a native launch, and each
    result has eager's bits. `module` jits the GemLiteLinearTriton itself (its forward is an instance attribute,
    set by gemlite's constructor)."""
    layer = int8_linear(gemlite, HIDDEN, HIDDEN, dtype, seed=1)

    def linear(x: torch.Tensor) -> torch.Tensor:
        return layer(x)

    f = trident.jit(layer if form == "module" else linear)
    inputs = [torch.randn(batch, HIDDEN, device="cuda", dtype=dtype) for _ in range(4)]  # a new tensor per call
    with torch.no_grad(), count_compiles() as compiles:
        for i, x in enumerate(inputs):
            expected = layer(x)
            actual = f(x)
            assert same_bits(actual, expected), f"call {i}: max difference {(actual - expected).abs().max()}"
    assert compiles() == 1, trident.explain(f)
    assert_native(f, hits=len(inputs), compiles=1)
    assert_traced_into(f, 1, "gemv_INT_splitK_kernel" if batch == 1 else "gemm_splitK_INT_kernel")


@gpu
def test_a_split_k_config_keeps_its_output_zeroing(gemlite: Any) -> None:
    """A split-K config adds two partial products atomically into an output its pre_hook zeroes first. Traced
    into, a launch without that zeroing would add into whatever the allocator hands out; kept opaque, the op
    runs gemlite's own launch. Either way the bits are eager's on every call: before each call a block of the
    output's size filled with NaN is freed, so the output likely gets it. explain says which way, and why where
    the op stays opaque."""
    layer = int8_linear(gemlite, HIDDEN, SPLIT_K_N, torch.bfloat16, seed=2)

    def linear(x: torch.Tensor) -> torch.Tensor:
        return layer(x)

    f = trident.jit(linear)
    with torch.no_grad():
        for i in range(4):
            x = torch.randn(8, HIDDEN, device="cuda", dtype=torch.bfloat16)
            expected = layer(x)
            garbage = torch.full((8, SPLIT_K_N), float("nan"), device="cuda", dtype=torch.bfloat16)
            del garbage
            actual = f(x)
            assert same_bits(actual, expected), f"call {i}: {actual.isnan().sum()} NaN(s)\n{trident.explain(f)}"
    text = trident.explain(f)
    assert f._trident.eager_calls == 0, text
    if f"traced into {OP}" not in text:
        assert f"opaque {OP}" in text and "pre_hook" in text, text


# ---------------------------------------------------------------------------------------------------------
# A decode step, replayed as a CUDA graph


class DecodeBlock:
    """An MLP block of a decoder at one position: the hidden state plus a row of a position table (a view at
    the position), an RMSNorm in torch ops, an int8 attention-output-like projection, gate and up projections
    with SiLU, a down projection and the residual: four gemlite ops per step, three shapes."""

    def __init__(self, gemlite: Any, dtype: torch.dtype, positions: int) -> None:
        self.rows = torch.randn(positions, HIDDEN, device="cuda", dtype=dtype) / 4
        self.norm = 1 + torch.randn(HIDDEN, device="cuda", dtype=dtype) / 10
        self.proj = int8_linear(gemlite, HIDDEN, HIDDEN, dtype, seed=3)
        self.gate = int8_linear(gemlite, HIDDEN, INTERMEDIATE, dtype, seed=4)
        self.up = int8_linear(gemlite, HIDDEN, INTERMEDIATE, dtype, seed=5)
        self.down = int8_linear(gemlite, INTERMEDIATE, HIDDEN, dtype, seed=6)

    def step(self, x: torch.Tensor, pos: int | torch.Tensor) -> torch.Tensor:
        row = self.rows.index_select(0, pos) if isinstance(pos, torch.Tensor) else self.rows[pos : pos + 1]
        h = x + row
        variance = h.float().pow(2).mean(-1, keepdim=True)
        normed = (h.float() * torch.rsqrt(variance + 1e-5)).to(h.dtype) * self.norm
        h = h + self.proj(normed)
        return h + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


@gpu
@pytest.mark.parametrize("pos_kind", ["int", "tensor"])
def test_a_decode_step_of_int8_linears_replays_as_a_cuda_graph_with_eager_bits(gemlite: Any, pos_kind: str) -> None:
    """20 steps at growing positions, a new input tensor each: every result (and every result still held after
    later replays) has eager's bits; the graph recorded at the specialization's RECORD_AT_HIT-th hit replays
    every later hit, without a divergence; every launch is native and no call ran eagerly. An int position
    compiles twice (constant, then symbolic), a device tensor once."""
    steps = 20
    block = DecodeBlock(gemlite, torch.bfloat16, positions=steps)
    f = trident.jit(block.step)
    f._trident.use_cuda_graphs(True)
    held = []
    with torch.no_grad(), count_compiles() as compiles:
        for p in range(steps):
            x = torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16)
            pos = torch.tensor([p], device="cuda") if pos_kind == "tensor" else p
            expected = block.step(x, pos)
            actual = f(x, pos)
            assert same_bits(actual, expected), f"position {p}: max difference {(actual - expected).abs().max()}"
            held.append((actual, expected))
    for p, (actual, expected) in enumerate(held):  # no later replay wrote over a result the caller holds
        assert same_bits(actual, expected), f"held result of position {p}"
    text = trident.explain(f)
    specs = len(f._trident.specializations)
    assert compiles() == specs == (2 if pos_kind == "int" else 1), text
    assert_native(f, hits=steps, compiles=specs)
    assert_traced_into(f, 4, "gemv_INT_splitK_kernel")
    last = specs - 1
    graphs = f._trident.entry.graphs(last)
    hits = f._trident.entry.hits()[last]
    assert graphs.recordings, f"no CUDA graph ({graphs.refusal})\n{text}"
    counts = graphs.recordings[0].counts
    assert counts["divergences"] == 0 and graphs.misses == 0, text
    assert graphs.replays == hits - RECORD_AT_HIT > 0, text
    assert counts["kernel_nodes"] >= 4, text  # gemlite's launches are nodes of the graph, patched as launches
    assert "CUDA graph:" in text and "replay(s)" in text, text
