"""Public Triton kernel libraries under trident.jit: one decode step each, eager vs Trident (issue 15, point 6).

    python benchmarks/libraries.py RESULTS_DIR [--device cuda|cpu] [--steps 32] [--rounds 5] [--only liger,fla]

For each library: a small decode step, called the way the library's users call it, runs at growing positions
eagerly and under `trident.jit` (each with its own state). Reported per library: its version, what ran, whether
every step equalled eager (max abs difference), compiles, Triton launches per step by kind (native
`cuLaunchKernel` or through Triton's own launcher; on CPU all run through Triton's interpreter), and ms per
step eager vs Trident (median over rounds, after a warm-up round; a round is `--steps` steps at positions
0, 1, ...). On CUDA also the step's device time: the summed GPU time of eager's kernels over one round
(torch.profiler), which Trident's step (graph-replayed by default) is compared against, and the wall time of
eager's step captured by hand as one CUDA graph at one position and replayed (`hand_graph_ms`): the per-step floor
of any system that launches a graph per step from Python, which steps of a few µs of device time cannot go below.
Writes RESULTS_DIR/libraries.<device>.json.

Cases (bf16 on CUDA, fp32 on CPU; CPU sizes are tiny, for a smoke run):
    liger        liger-kernel functional rms_norm -> q/k/v projection -> rope (table rows at the position) ->
                 swiglu MLP
    liger-llama  Hugging Face LlamaForCausalLM with apply_liger_kernel_to_llama (RMSNorm, RoPE, SwiGLU),
                 StaticCache, the whole forward jitted (positions are tensors, Hugging Face's API)
    fla          fla-core attn_decoding_one_step over a KV cache written at the position
    conch        conch-triton-kernels reshape_and_cache through a block table, then paged_attention
    flag-gems    (CUDA) an HF Llama decode step inside flag_gems.use_gems(); also reports whether gems' eager
                 logits are finite and how far they are from plain eager's (flag-gems 5.0.2 gave non-finite
                 logits with torch 2.11 on the H200)
    flag-gems-enabled  (CUDA) the same step with use_gems() entered around the calls, as flag_gems.enable() at
                 start-up: Trident traces into gems' ATen overrides; reports which ops were traced into or kept
                 opaque and why
    qwen2-liger-fla  a Qwen2.5-1.5B-shaped step written as model code: liger's norms, RoPE and SwiGLU, fla's
                 decoding attention with `cu_seqlens = torch.arange(0, n + 1, n)`, n = pos + 1 (batch 1)
    hf-arange, hf-arange-b8  HF Qwen2ForCausalLM (Qwen2.5-1.5B shape) over a StaticCache with an int position,
                 `position_ids = torch.arange(pos, pos + 1)`, batch 1 and 8
    (The last three are the steps of the graph-replay issue's "HF-style step that builds positions with arange":
    the changing ints reach ATen's arange, not only Triton kernel arguments.)

On CPU, eager launches go through Triton's interpreter per launch (as TRITON_INTERPRET=1 would), and liger's
RMSNorm kernel gets an interpreter-runnable rsqrt (Triton 3.6's interpreter returns None for libdevice).

Wheels for a GPU machine without a package index (Python 3.12, torch + Triton already there), installed with
`pip install --no-deps`: liger-kernel==0.8.5 fla-core==0.6.0 einops==0.8.2 conch-triton-kernels==1.3
flag-gems==5.0.2 (or 5.0.0) and, if `import flag_gems` asks for them, sqlalchemy and greenlet; transformers
5.17.0 is on the H200 image (benchmarks/llm/liger_check.py lists its closure otherwise).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: trident from the tree, and `benchmarks.llm` from the repository root
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

os.environ.setdefault("TRIDENT_DISK_CACHE", "0")  # cold compiles, counted

import torch
import triton
import triton.language as tl

from benchmarks.machine_info import dist_version, machine

Step = Callable[..., Any]
# What a case's setup returns: how to build a step with its own state, and the step's inputs at a position.
Parts = tuple[Callable[[], Step], Callable[[int], tuple[Any, ...]]]


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    dist: str  # the distribution whose version is reported
    what: str
    setup: Callable[[str, torch.dtype, bool], Parts]
    cuda_only: bool = False
    around: Callable[[], Any] = contextlib.nullcontext  # entered around the whole case (eager and jitted calls)


def _randn(*shape: int, device: str, dtype: torch.dtype, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


# ---------------------------------------------------------------------------------------------------------
# Cases: setup(device, dtype, tiny) -> (build a step with its own state, inputs at a position)


def liger_functional(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    from liger_kernel.transformers import functional

    hidden, heads, kv_heads, head_dim, ffn, max_len = (64, 4, 2, 16, 128, 64) if tiny else (2048, 32, 8, 64, 8192, 4096)

    def build() -> Step:
        weight = 1 + 0.1 * _randn(hidden, device=device, dtype=dtype, seed=1)
        w_qkv = _randn((heads + 2 * kv_heads) * head_dim, hidden, device=device, dtype=dtype, seed=2) / hidden ** 0.5
        w_up = _randn(2 * ffn, hidden, device=device, dtype=dtype, seed=3) / hidden ** 0.5
        angles = torch.arange(max_len, device=device)[:, None] * (0.5 ** torch.arange(head_dim // 2, device=device))
        cos = torch.cat([angles.cos()] * 2, -1)[None].to(dtype)
        sin = torch.cat([angles.sin()] * 2, -1)[None].to(dtype)

        def step(x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
            h = functional.liger_rms_norm(x, weight, 1e-6)
            q, k, _ = (h @ w_qkv.t()).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
            q = q.view(1, 1, heads, head_dim).transpose(1, 2)
            k = k.view(1, 1, kv_heads, head_dim).transpose(1, 2)
            q, k = functional.liger_rope(q, k, cos[:, pos:pos + 1], sin[:, pos:pos + 1])
            gate, up = (h @ w_up.t()).chunk(2, -1)
            return q, k, functional.liger_swiglu(gate, up)

        return step

    return build, lambda pos: (_randn(1, 1, hidden, device=device, dtype=dtype, seed=10 + pos), pos)


def _llama_config(tiny: bool, max_len: int) -> Any:
    from transformers import LlamaConfig

    sizes = (dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16) if tiny else
             dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=64))
    config = LlamaConfig(**sizes, max_position_embeddings=max_len, tie_word_embeddings=True, rms_norm_eps=1e-5)
    config._attn_implementation = "sdpa"
    return config


def _model_and_static_cache(cls: type, config: Any, device: str, dtype: torch.dtype, max_len: int,
                            batch: int) -> tuple[Any, Any]:
    """An HF causal LM of `config` (seeded random weights, made on the device) and a StaticCache for it, allocated
    now: a cache the step closes over and allocates in its first call would run that call eagerly."""
    from transformers import StaticCache

    torch.manual_seed(0)
    with torch.device(device):
        model = cls(config).to(dtype=dtype).eval()
    cache = StaticCache(config=config, max_cache_len=max_len)
    cache.early_initialization(batch_size=batch, num_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               dtype=dtype, device=device)
    return model, cache


def _llama_step(config: Any, device: str, dtype: torch.dtype, max_len: int, wrap: Callable[[], Any]) -> Step:
    from transformers import LlamaForCausalLM

    model, cache = _model_and_static_cache(LlamaForCausalLM, config, device, dtype, max_len, batch=1)

    def step(tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        with wrap():
            return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache, use_cache=True).logits

    return step


def _llama_inputs(config: Any, device: str) -> Callable[[int], tuple[Any, ...]]:
    def inputs(pos: int) -> tuple[Any, ...]:
        token = torch.randint(0, config.vocab_size, (1, 1), generator=torch.Generator().manual_seed(pos))
        return token.to(device), torch.full((1, 1), pos, device=device)

    return inputs


def liger_llama(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    from liger_kernel.transformers import apply_liger_kernel_to_llama

    # Patches transformers' Llama classes for the rest of this process (the flag-gems case runs before it).
    apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                fused_linear_cross_entropy=False)
    max_len = 64 if tiny else 1024
    config = _llama_config(tiny, max_len)
    return (lambda: _llama_step(config, device, dtype, max_len, contextlib.nullcontext)), _llama_inputs(config, device)


def fla_decoding(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    from fla.ops.attn.decoding import attn_decoding_one_step

    heads, kv_heads, head_dim, max_len = (4, 2, 16, 64) if tiny else (32, 8, 64, 4096)

    def build() -> Step:
        k_cache = torch.zeros(1, max_len, kv_heads, head_dim, device=device, dtype=dtype)
        v_cache = torch.zeros(1, max_len, kv_heads, head_dim, device=device, dtype=dtype)

        def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: int) -> torch.Tensor:
            k_cache[:, pos] = k
            v_cache[:, pos] = v
            cu_seqlens = torch.tensor([0, pos + 1], device=q.device)
            return attn_decoding_one_step(q, k_cache[:, :pos + 1], v_cache[:, :pos + 1], cu_seqlens=cu_seqlens)

        return step

    def inputs(pos: int) -> tuple[Any, ...]:
        return (_randn(1, 1, heads, head_dim, device=device, dtype=dtype, seed=pos),
                _randn(1, kv_heads, head_dim, device=device, dtype=dtype, seed=100 + pos),
                _randn(1, kv_heads, head_dim, device=device, dtype=dtype, seed=200 + pos), pos)

    return build, inputs


def _qwen2_shape(tiny: bool) -> dict[str, Any]:
    """Qwen2.5-1.5B's config arguments (or hf_generate.py's tiny CPU size), as hf_generate.py builds its models."""
    from benchmarks.hf_generate import MODELS

    return {k: v for k, v in MODELS["tiny" if tiny else "qwen2-1.5b"].items() if k != "family"}


def _device_randn(*shape: int, device: str, dtype: torch.dtype, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Random weights made on the device (a 1.5B-parameter model drawn on the host takes minutes)."""
    generator = torch.Generator(device).manual_seed(seed)
    return (scale * torch.randn(*shape, generator=generator, device=device)).to(dtype)


def qwen2_liger_fla(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    """A Qwen2.5-1.5B-shaped decode step written as model code is (batch 1, int position): liger's RMSNorm, RoPE
    and SwiGLU, fla's varlen decoding attention over a cache written at the position, whose sequence offsets are
    built with `torch.arange(0, n + 1, n)` from the length n = pos + 1, and ATen matmuls with Qwen2's q/k/v bias.
    At batch 8 the packed keys fla reads (`k_cache[:, :n].reshape(1, 8 * n, ...)`) are a copy whose size changes
    every step, which no graph can repeat; batch 8 is the `hf-arange-b8` case."""
    from fla.ops.attn.decoding import attn_decoding_one_step
    from liger_kernel.transformers import functional

    shape = _qwen2_shape(tiny)
    hidden, heads, kv_heads, head_dim = (shape[k] for k in ("hidden_size", "num_attention_heads",
                                                            "num_key_value_heads", "head_dim"))
    ffn, vocab, n_layers, max_len = shape["intermediate_size"], shape["vocab_size"], shape["num_hidden_layers"], 1024
    qkv_out = (heads + 2 * kv_heads) * head_dim

    def build() -> Step:
        def w(*dims: int, seed: int) -> torch.Tensor:
            return _device_randn(*dims, device=device, dtype=dtype, seed=seed, scale=dims[-1] ** -0.5)

        embed = _device_randn(vocab, hidden, device=device, dtype=dtype, seed=1)
        layers = [dict(norm1=1 + 0.1 * _device_randn(hidden, device=device, dtype=dtype, seed=100 * i + 2),
                       qkv=w(qkv_out, hidden, seed=100 * i + 3),
                       qkv_bias=0.1 * _device_randn(qkv_out, device=device, dtype=dtype, seed=100 * i + 4),
                       o=w(hidden, heads * head_dim, seed=100 * i + 5),
                       norm2=1 + 0.1 * _device_randn(hidden, device=device, dtype=dtype, seed=100 * i + 6),
                       gate_up=w(2 * ffn, hidden, seed=100 * i + 7), down=w(hidden, ffn, seed=100 * i + 8),
                       k_cache=torch.zeros(1, max_len, kv_heads, head_dim, device=device, dtype=dtype),
                       v_cache=torch.zeros(1, max_len, kv_heads, head_dim, device=device, dtype=dtype))
                  for i in range(n_layers)]
        final_norm = 1 + 0.1 * _device_randn(hidden, device=device, dtype=dtype, seed=3)
        inv_freq = 1.0 / (1e6 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
        angles = torch.arange(max_len, device=device).float()[:, None] * inv_freq
        cos = torch.cat([angles.cos()] * 2, -1)[None].to(dtype)
        sin = torch.cat([angles.sin()] * 2, -1)[None].to(dtype)

        def step(tokens: torch.Tensor, pos: int) -> torch.Tensor:
            n = pos + 1
            cu_seqlens = torch.arange(0, n + 1, n, device=tokens.device)  # [0, n]: one sequence of n keys
            h = torch.nn.functional.embedding(tokens, embed)  # (1, 1, hidden)
            for layer in layers:
                x = functional.liger_rms_norm(h, layer["norm1"], 1e-6)
                q, k, v = torch.nn.functional.linear(x, layer["qkv"], layer["qkv_bias"]).split(
                    [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
                q = q.view(1, 1, heads, head_dim).transpose(1, 2)
                k = k.view(1, 1, kv_heads, head_dim).transpose(1, 2)
                q, k = functional.liger_rope(q, k, cos[:, pos:pos + 1], sin[:, pos:pos + 1])
                layer["k_cache"][:, pos] = k[:, :, 0]
                layer["v_cache"][:, pos] = v.view(1, kv_heads, head_dim)
                o = attn_decoding_one_step(q.transpose(1, 2), layer["k_cache"][:, :n], layer["v_cache"][:, :n],
                                           cu_seqlens=cu_seqlens)
                h = h + torch.nn.functional.linear(o.reshape(1, 1, heads * head_dim), layer["o"])
                x = functional.liger_rms_norm(h, layer["norm2"], 1e-6)
                gate, up = torch.nn.functional.linear(x, layer["gate_up"]).chunk(2, -1)
                h = h + torch.nn.functional.linear(functional.liger_swiglu(gate, up), layer["down"])
            return torch.nn.functional.linear(functional.liger_rms_norm(h, final_norm, 1e-6), embed)

        return step

    def inputs(pos: int) -> tuple[Any, ...]:
        token = torch.randint(0, vocab, (1, 1), generator=torch.Generator().manual_seed(pos))
        return token.to(device), pos

    return build, inputs


def hf_arange(batch: int) -> Callable[[str, torch.dtype, bool], Parts]:
    """Hugging Face's Qwen2ForCausalLM (Qwen2.5-1.5B's shape, random weights) called one token at a time with an
    int position, its position ids built as `torch.arange(pos, pos + 1)` for every row of the batch, over a
    StaticCache: the step a user writes around an HF model for a decode loop of their own."""

    def setup(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(**_qwen2_shape(tiny))
        config._attn_implementation = "sdpa"

        def build() -> Step:
            model, cache = _model_and_static_cache(Qwen2ForCausalLM, config, device, dtype, 1024, batch)

            def step(tokens: torch.Tensor, pos: int) -> torch.Tensor:
                position_ids = torch.arange(pos, pos + 1, device=tokens.device).expand(batch, 1)
                return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache, use_cache=True).logits

            return step

        def inputs(pos: int) -> tuple[Any, ...]:
            tokens = torch.randint(0, config.vocab_size, (batch, 1), generator=torch.Generator().manual_seed(pos))
            return tokens.to(device), pos

        return build, inputs

    return setup


def conch_paged(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    from conch.ops.attention.paged_attention import paged_attention
    from conch.ops.vllm.reshape_and_cache import reshape_and_cache

    batch, heads, kv_heads, head_dim, block_size, blocks_per_seq = (2, 4, 2, 16, 4, 16) if tiny else (8, 32, 8, 64, 16, 64)

    def build() -> Step:
        n_blocks = batch * blocks_per_seq
        k_cache = torch.zeros(n_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype)
        v_cache = torch.zeros(n_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype)
        # Blocks handed out shuffled, as a paged allocator would: the table is what finds them.
        order = torch.randperm(n_blocks, generator=torch.Generator().manual_seed(0))
        block_table = order.view(batch, blocks_per_seq).to(device=device, dtype=torch.int32)

        def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: int) -> torch.Tensor:
            slots = block_table[:, pos // block_size].long() * block_size + pos % block_size
            reshape_and_cache(k, v, k_cache, v_cache, slots)
            seq_lens = torch.full((batch,), pos + 1, dtype=torch.int32, device=q.device)
            return paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=head_dim ** -0.5)

        return step

    def inputs(pos: int) -> tuple[Any, ...]:
        return (_randn(batch, heads, head_dim, device=device, dtype=dtype, seed=pos),
                _randn(batch, kv_heads, head_dim, device=device, dtype=dtype, seed=100 + pos),
                _randn(batch, kv_heads, head_dim, device=device, dtype=dtype, seed=200 + pos), pos)

    return build, inputs


def flag_gems_llama(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    import flag_gems

    max_len = 64 if tiny else 1024
    config = _llama_config(tiny, max_len)
    return (lambda: _llama_step(config, device, dtype, max_len, flag_gems.use_gems)), _llama_inputs(config, device)


def flag_gems_enabled_llama(device: str, dtype: torch.dtype, tiny: bool) -> Parts:
    """The same step with gems registered around the calls (as flag_gems.enable() at start-up): Trident traces
    into gems' ATen overrides (capture/python_kernels.py)."""
    max_len = 64 if tiny else 1024
    config = _llama_config(tiny, max_len)
    return (lambda: _llama_step(config, device, dtype, max_len, contextlib.nullcontext)), _llama_inputs(config, device)


def _use_gems() -> Any:
    import flag_gems

    return flag_gems.use_gems()


CASES = [
    Case("liger", "liger-kernel", "functional rms_norm, rope, swiglu + ATen matmuls", liger_functional),
    Case("fla", "fla-core", "attn_decoding_one_step over a KV cache written at the position", fla_decoding),
    Case("conch", "conch-triton-kernels", "reshape_and_cache via block table + paged_attention", conch_paged),
    Case("flag-gems", "flag-gems", "HF Llama decode step under flag_gems.use_gems()", flag_gems_llama, cuda_only=True),
    Case("flag-gems-enabled", "flag-gems", "HF Llama decode step, flag_gems.use_gems() around the calls (seen through)",
         flag_gems_enabled_llama, cuda_only=True, around=_use_gems),
    Case("liger-llama", "liger-kernel", "HF Llama + apply_liger_kernel_to_llama, StaticCache, whole forward",
         liger_llama),
    Case("qwen2-liger-fla", "fla-core", "Qwen2.5-1.5B-shaped step on liger + fla, cu_seqlens from arange, batch 1",
         qwen2_liger_fla),
    Case("hf-arange", "transformers", "HF Qwen2 (1.5B shape), position_ids = arange(pos, pos + 1), batch 1",
         hf_arange(1)),
    Case("hf-arange-b8", "transformers", "the same at batch 8", hf_arange(8)),
]


# ---------------------------------------------------------------------------------------------------------
# Running one case


def interpreted_launches(device: str) -> contextlib.AbstractContextManager[None]:
    """Eager Triton launches on CPU tensors through Triton's interpreter, exactly as Trident's own eager calls
    run them (trident/eager.py); no-op on CUDA."""
    from trident.capture.triton_launches import interpret_cpu_launches

    return interpret_cpu_launches() if device == "cpu" else contextlib.nullcontext()


@triton.jit
def _rsqrt(x):  # type: ignore[no-untyped-def]
    return 1.0 / tl.sqrt(x)


def patch_interpreter_gaps() -> None:
    """liger's RMSNorm kernel calls libdevice.rsqrt, which Triton 3.6's interpreter does not run (CPU only)."""
    try:
        from liger_kernel.ops import rms_norm
    except ImportError:
        return
    rms_norm.rsqrt = _rsqrt


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def max_abs_diff(a: Any, b: Any) -> float:
    if isinstance(a, (tuple, list)):
        return max(max_abs_diff(x, y) for x, y in zip(a, b))
    return (a.float() - b.float()).abs().max().item()


def all_finite(a: Any) -> bool:
    if isinstance(a, (tuple, list)):
        return all(all_finite(x) for x in a)
    return bool(torch.isfinite(a).all())


def launch_counts(jitted: Any) -> dict[str, int]:
    from trident.testing import triton_launch_sites

    counts = {"native": 0, "triton_launcher": 0, "interpreter": 0}
    for site in triton_launch_sites(jitted):
        if hasattr(site, "native_launches"):  # TritonLaunch: CUDA
            counts["native"] += site.native_launches
            counts["triton_launcher"] += site.fallback_launches
        else:  # RecordedLaunch: CPU, run through the interpreter (not counted per call: one per site and call)
            counts["interpreter"] += 1
    return counts


def time_round(fn: Step, inputs: list[tuple[Any, ...]], device: str) -> float:
    """ms per step over one round of positions."""
    sync(device)
    start = time.perf_counter()
    for args in inputs:
        fn(*args)
    sync(device)
    return 1e3 * (time.perf_counter() - start) / len(inputs)


def device_ms(fn: Step, inputs: list[tuple[Any, ...]]) -> float:
    """GPU kernel time per step (ms), summed over the kernels of one round, as torch's profiler sees them."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for args in inputs:
            fn(*args)
        sync("cuda")
    kernel_us = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type == DeviceType.CUDA)
    return kernel_us / 1e3 / len(inputs)


def hand_graph_ms(build: Callable[[], Step], args: tuple[Any, ...], steps: int, rounds: int) -> float | str:
    """Wall ms per step of eager's step captured by hand as one CUDA graph at one position and replayed: the least
    any system launching one graph per step from Python pays (the replays reuse the capture's inputs, so this is a
    floor, not a decode loop). The reason instead where the step cannot be captured (a host copy, a sync)."""
    from benchmarks.llm.hand_graph import capture_by_hand

    step = build()
    try:
        graph, _ = capture_by_hand(lambda: step(*args))
    except Exception as e:  # noqa: BLE001 - an uncapturable step is a finding, reported in its row
        sync("cuda")
        return f"not capturable: {type(e).__name__}: {e}"[:200]
    return statistics.median([time_round(graph.replay, [()] * steps, "cuda") for _ in range(rounds)])


def run_case(case: Case, device: str, dtype: torch.dtype, steps: int, rounds: int) -> dict[str, Any]:
    import trident

    build, make_inputs = case.setup(device, dtype, device == "cpu")
    inputs = [make_inputs(pos) for pos in range(steps)]
    eager, jitted = build(), trident.jit(build())
    diff, equal, finite = 0.0, True, True
    with torch.no_grad(), case.around():
        for args in inputs:  # correctness, and the warm-up round of both
            with interpreted_launches(device):
                expected = eager(*args)
            actual = jitted(*args)
            diff = max(diff, max_abs_diff(actual, expected))
            equal = equal and diff == 0.0
            finite = finite and all_finite(expected)
        before = launch_counts(jitted)
        eager_ms, trident_ms = [], []
        for _ in range(rounds):
            with interpreted_launches(device):
                eager_ms.append(time_round(eager, inputs, device))
            trident_ms.append(time_round(jitted, inputs, device))
        after = launch_counts(jitted)
        kernel_ms = device_ms(eager, inputs) if device == "cuda" else None
    state = jitted._trident  # type: ignore[attr-defined]
    per_step = {kind: (after[kind] - before[kind]) / (rounds * steps) for kind in ("native", "triton_launcher")}
    sites = len(state.specializations[-1].compiled.launch_sites) if state.specializations else 0
    result: dict[str, Any] = {
        "compiles": len(state.specializations), "eager_calls": state.eager_calls, "eager_reason": state.eager_reason,
        "launch_sites_per_step": sites, "native_launches_per_step": per_step["native"],
        "triton_launcher_launches_per_step": per_step["triton_launcher"],
        "equal_to_eager": equal, "max_abs_diff": diff, "eager_finite": finite,
        "ms_eager": statistics.median(eager_ms), "ms_trident": statistics.median(trident_ms), "ms_device": kernel_ms,
        "ms_eager_rounds": eager_ms, "ms_trident_rounds": trident_ms,
    }
    explained = trident.explain(jitted).splitlines()
    see_through = [line.strip() for line in explained if "traced into" in line or "opaque " in line]
    if see_through:
        result["see_through"] = see_through
    # replays (and the replay plan's state), or why not
    result["cuda_graphs"] = [line.strip() for line in explained if "CUDA graph" in line or "replay plan" in line]
    if case.name == "flag-gems":  # is gems' eager step right at all? Against plain Hugging Face eager
        plain = flag_gems_reference(device, dtype, inputs)
        result["gems_eager_vs_plain_eager_max_abs_diff"] = plain
    return result


def flag_gems_reference(device: str, dtype: torch.dtype, inputs: list[tuple[Any, ...]]) -> float:
    import flag_gems

    max_len = 1024
    config = _llama_config(False, max_len)
    gems = _llama_step(config, device, dtype, max_len, flag_gems.use_gems)
    plain = _llama_step(config, device, dtype, max_len, contextlib.nullcontext)
    with torch.no_grad():
        return max(max_abs_diff(gems(*args), plain(*args)) for args in inputs)


# ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results_dir", type=Path)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--steps", type=int, default=None, help="positions per round (default: 32 on cuda, 3 on cpu)")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default: 5 on cuda, 1 on cpu)")
    p.add_argument("--only", default=None, help="comma list of case names: " + ",".join(c.name for c in CASES))
    args = p.parse_args(argv)
    device = args.device
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    steps = args.steps or (32 if device == "cuda" else 3)
    rounds = args.rounds or (5 if device == "cuda" else 1)
    if device == "cpu":
        patch_interpreter_gaps()
    info = machine(device)
    print(f"versions: {json.dumps(info)}")
    selected = [c for c in CASES if args.only is None or c.name in args.only.split(",")]
    rows: list[dict[str, Any]] = []
    for case in selected:
        row: dict[str, Any] = {"library": case.name, "dist": case.dist, "version": dist_version(case.dist),
                               "what": case.what}
        if row["version"] is None:
            row["status"] = f"not installed ({case.dist})"
        elif case.cuda_only and device != "cuda":
            row["status"] = "needs CUDA"
        else:
            try:
                row.update(run_case(case, device, dtype, steps, rounds))
                ok = row["equal_to_eager"] and row["eager_calls"] == 0
                row["status"] = "ok" if ok else ("eager fallback" if row["eager_calls"] else "differs from eager")
            except Exception as e:  # noqa: BLE001 - the failure is the finding; the other cases still run
                row["status"] = f"error: {type(e).__name__}: {e}"[:500]
                row["traceback"] = traceback.format_exc()[-4000:]
        rows.append(row)
        print(f"{case.name}: {row['status']}", flush=True)

    # After every case: a capture torch.cuda.graph could not finish may leave the process's CUDA state capturing.
    for case, row in zip(selected, rows):
        if device == "cuda" and row["status"] == "ok":
            build, make_inputs = case.setup(device, dtype, False)
            try:
                with torch.no_grad(), case.around():
                    row["ms_hand_graph"] = hand_graph_ms(build, make_inputs(0), steps, rounds)
            except Exception as e:  # noqa: BLE001 - the floor is a side measurement; the row's result stands
                row["ms_hand_graph"] = f"error: {type(e).__name__}: {e}"[:200]

    print(f"\n{device}, {dtype}, {steps} positions per round, median of {rounds} round(s)")
    header = ["library", "version", "what ran", "status", "compiles", "native/step", "Triton launcher/step",
              "sites", "eager ms/step", "trident ms/step", "speedup", "device ms/step", "trident / device",
              "hand graph ms/step", "trident / hand graph"]
    print(" | ".join(header))
    for r in rows:
        if "ms_eager" in r:
            cells = [r["library"], r["version"], r["what"], r["status"], r["compiles"],
                     f"{r['native_launches_per_step']:.1f}", f"{r['triton_launcher_launches_per_step']:.1f}",
                     r["launch_sites_per_step"], f"{r['ms_eager']:.3f}", f"{r['ms_trident']:.3f}",
                     f"{r['ms_eager'] / r['ms_trident']:.2f}x"]
            kernel_ms = r.get("ms_device")
            cells += [f"{kernel_ms:.3f}", f"{r['ms_trident'] / kernel_ms:.2f}x"] if kernel_ms else ["-", "-"]
            graph_ms = r.get("ms_hand_graph")
            if isinstance(graph_ms, float):
                cells += [f"{graph_ms:.3f}", f"{r['ms_trident'] / graph_ms:.2f}x"]
            else:
                cells += [graph_ms or "-", "-"]
        else:
            cells = [r["library"], r["version"] or "-", r["what"], r["status"]] + ["-"] * 11
        print(" | ".join(str(c) for c in cells))
    args.results_dir.mkdir(parents=True, exist_ok=True)
    out = args.results_dir / f"libraries.{device}.json"
    out.write_text(json.dumps({"machine": info, "device": device, "dtype": str(dtype), "steps": steps,
                               "rounds": rounds, "results": rows}, indent=1, default=str))
    print(f"wrote {out}")
    return 0 if all(r["status"] in ("ok", "needs CUDA") or r["status"].startswith("not installed") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
