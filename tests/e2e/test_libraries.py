"""Public Triton kernel libraries under trident.jit, called the way their users call them.

Each test runs a decode loop at growing int positions (on CPU and, marked `gpu`, on CUDA), compares every
step with eager running the same library code, and counts compiles: the first call compiles, the second (a new
position) makes the position symbolic, the rest hit the native entry. On CPU the libraries' kernels run through
Triton's interpreter on both sides: eagerly through `interpreted_launches()` below (a CPU user would set
TRITON_INTERPRET=1 before importing the library; this does the same per launch), under Trident through its
own CPU launch path. On CUDA every launch after the first of each kernel variant must be native.

Libraries (installed by the `test` extra; each test skips naming the missing package):
liger-kernel (functional ops; Hugging Face Llama with `apply_liger_kernel_to_llama` and a StaticCache),
fla-core (`attn_decoding_one_step`), conch-triton-kernels (paged attention with cache writes through a block
table), flag-gems (CUDA only: its kernels replace ATen's on CUDA).
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from helpers_native import assert_launches_native, assert_native, jit_state, native_hits

import trident
from trident.testing import allow_fallback, count_compiles, expect_fallback, triton_launch_sites

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
POSITIONS = range(5)  # decode steps; the cache holds MAX_LEN positions
MAX_LEN = 16


def need(module: str) -> Any:
    return pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[test]' installs it)")


# ---------------------------------------------------------------------------------------------------------
# Eager on CPU: the libraries' launches through Triton's interpreter


def interpreted_launches(device: str) -> contextlib.AbstractContextManager[None]:
    """Eager Triton launches on CPU tensors through Triton's interpreter, exactly as Trident's own eager calls
    run them (trident/eager.py); no-op on CUDA."""
    from trident.capture.triton_launches import interpret_cpu_launches

    return interpret_cpu_launches() if device == "cpu" else contextlib.nullcontext()


@triton.jit
def _rsqrt(x):  # type: ignore[no-untyped-def]
    return 1.0 / tl.sqrt(x)


@pytest.fixture
def interpreter_gaps(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Triton 3.6's interpreter returns None for libdevice functions (TOOLCHAIN.md): on CPU, liger's RMSNorm
    kernel gets an rsqrt the interpreter runs."""
    if request.node.callspec.params.get("device") == "cpu":
        rms_norm = need("liger_kernel.ops.rms_norm")
        monkeypatch.setattr(rms_norm, "rsqrt", _rsqrt)


# ---------------------------------------------------------------------------------------------------------
# The decode loop every test runs


def decode_loop(build: Callable[[str], Callable[..., Any]], inputs: Callable[[int, str], tuple[Any, ...]],
                device: str, expected_compiles: int = 2, launches: bool = True) -> Any:
    """Run a decode step eagerly and under trident.jit (each on its own state, built by `build`) at every
    position; results must be equal at every step. Returns the jitted step."""
    eager_step, jitted = build(device), trident.jit(build(device))
    with torch.no_grad(), count_compiles() as compiles:
        for pos in POSITIONS:
            args = inputs(pos, device)
            with interpreted_launches(device):
                expected = eager_step(*args)
            actual = jitted(*args)
            torch.testing.assert_close(actual, expected, rtol=0, atol=0, msg=lambda m: f"position {pos}: {m}")
            if pos == 2:  # every kernel variant has been compiled and registered by now
                fallbacks = _fallback_launches(jitted)
    assert compiles() == expected_compiles, trident.explain(jitted)
    # Every call ran compiled code (a miss runs the specialization it just compiled); only compiles missed.
    assert_native(jitted, hits=len(POSITIONS), compiles=expected_compiles)
    sites = triton_launch_sites(jitted)
    assert bool(sites) == launches, trident.explain(jitted)
    if device == "cuda" and launches:  # after warm-up, every launch is native
        assert_launches_native(jitted)  # each site through Triton's launcher only to register a variant
        assert _fallback_launches(jitted) == fallbacks, trident.explain(jitted)  # none registered after pos 2
    return jitted


def _tiny_llama(transformers: Any, device: str) -> tuple[Any, Any]:
    """A one-layer Hugging Face Llama (seeded weights, eval) and its fp32 StaticCache of MAX_LEN positions."""
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=MAX_LEN, tie_word_embeddings=True)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to(device).eval()
    cache = transformers.StaticCache(config=config, max_cache_len=MAX_LEN)
    cache.early_initialization(batch_size=1, num_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               dtype=torch.float32, device=device)
    return model, cache


def _fallback_launches(jitted: Any) -> int:
    return sum(getattr(site, "fallback_launches", 0) for site in triton_launch_sites(jitted))


def _randn(*shape: int, device: str, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


# ---------------------------------------------------------------------------------------------------------
# liger-kernel


@pytest.mark.parametrize("device", DEVICES)
def test_liger_functional_decode_step(device: str, interpreter_gaps: None) -> None:
    """RMSNorm, RoPE (cos/sin rows of a table at the position) and SwiGLU through liger's functional API."""
    functional = need("liger_kernel.transformers.functional")
    hidden, heads, kv_heads, head_dim = 64, 4, 2, 16

    def build(device: str) -> Callable[..., Any]:
        weight = 1 + 0.1 * _randn(hidden, device=device, seed=1)
        w_qkv = _randn((heads + 2 * kv_heads) * head_dim, hidden, device=device, seed=2) / 8
        w_up = _randn(2 * 128, hidden, device=device, seed=3) / 8
        angles = torch.arange(MAX_LEN, device=device)[:, None] * (0.5 ** torch.arange(head_dim // 2, device=device))
        cos, sin = torch.cat([angles.cos()] * 2, -1)[None], torch.cat([angles.sin()] * 2, -1)[None]

        def step(x: torch.Tensor, pos: int) -> tuple[torch.Tensor, ...]:
            h = functional.liger_rms_norm(x, weight, 1e-6)
            q, k, _ = (h @ w_qkv.t()).split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], -1)
            q = q.view(1, 1, heads, head_dim).transpose(1, 2)
            k = k.view(1, 1, kv_heads, head_dim).transpose(1, 2)
            q, k = functional.liger_rope(q, k, cos[:, pos:pos + 1], sin[:, pos:pos + 1])
            gate, up = (h @ w_up.t()).chunk(2, -1)
            return q, k, functional.liger_swiglu(gate, up)

        return step

    # 2: position 0 with pos a constant, then pos symbolic for positions 1-4
    decode_loop(build, lambda pos, device: (_randn(1, 1, hidden, device=device, seed=10 + pos), pos), device)


@pytest.mark.parametrize("device", DEVICES)
def test_liger_llama_static_cache(device: str, interpreter_gaps: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hugging Face LlamaForCausalLM with liger's RMSNorm, RoPE and SwiGLU MLP, its whole forward jitted,
    one token per step into a StaticCache."""
    need("liger_kernel")
    transformers = need("transformers")
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    for name in ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP"):  # undone after the test
        monkeypatch.setattr(modeling_llama, name, getattr(modeling_llama, name))
    apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                fused_linear_cross_entropy=False)

    def build(device: str) -> Callable[..., Any]:
        model, cache = _tiny_llama(transformers, device)

        def step(tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache, use_cache=True).logits

        return step

    def inputs(pos: int, device: str) -> tuple[torch.Tensor, ...]:
        token = torch.randint(0, 128, (1, 1), generator=torch.Generator().manual_seed(pos))
        return token.to(device), torch.full((1, 1), pos, device=device)

    # Positions are tensors here (Hugging Face's API): one specialization serves every step.
    jitted = decode_loop(build, inputs, device, expected_compiles=1)
    names = {getattr(site, "kernel_name", getattr(site, "name", "")) for site in triton_launch_sites(jitted)}
    assert {"_rms_norm_forward_kernel", "_triton_rope", "_swiglu_forward_kernel"} <= names, names


def test_liger_llama_generate_on_the_jitted_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """model.generate() on trident.jit(model) with liger's kernels applied (real Triton kernels inside an HF
    model) and one StaticCache of the user's: eager's greedy tokens, the decode steps native with liger's
    launches in them."""
    need("liger_kernel")
    transformers = need("transformers")
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers.models.llama import modeling_llama

    monkeypatch.setattr(need("liger_kernel.ops.rms_norm"), "rsqrt", _rsqrt)  # interpreter_gaps, on the CPU
    for name in ("apply_rotary_pos_emb", "LlamaRMSNorm", "LlamaMLP"):  # undone after the test
        monkeypatch.setattr(modeling_llama, name, getattr(modeling_llama, name))
    apply_liger_kernel_to_llama(rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                fused_linear_cross_entropy=False)
    model, _ = _tiny_llama(transformers, "cpu")
    jitted = trident.jit(model)
    cache = transformers.StaticCache(config=model.config, max_cache_len=MAX_LEN)
    ids = torch.tensor([[5, 77, 12]])
    kwargs: dict[str, Any] = {"max_new_tokens": 6, "min_new_tokens": 6, "do_sample": False, "pad_token_id": 0,
                              "disable_compile": True}
    with torch.no_grad(), warnings.catch_warnings(), allow_fallback() as fallbacks:
        warnings.simplefilter("ignore")
        for _ in range(2):
            with interpreted_launches("cpu"):
                expected = model.generate(ids, **kwargs)
            cache.reset()
            assert torch.equal(jitted.generate(ids, past_key_values=cache, **kwargs), expected)
    state = jit_state(jitted)
    assert state.eager_calls == len(fallbacks) <= 2 and native_hits(jitted) == 2 * 6 - state.eager_calls, trident.explain(jitted)
    names = {getattr(site, "kernel_name", getattr(site, "name", "")) for site in triton_launch_sites(jitted)}
    assert {"_rms_norm_forward_kernel", "_triton_rope", "_swiglu_forward_kernel"} <= names, names


# ---------------------------------------------------------------------------------------------------------
# fla-core


@pytest.mark.parametrize("device", DEVICES)
def test_fla_attn_decoding_one_step(device: str) -> None:
    """fla's decode attention over a KV cache the step writes at the position (GQA: 4 query heads, 2 kv)."""
    decoding = need("fla.ops.attn.decoding")
    heads, kv_heads, head_dim = 4, 2, 16

    def build(device: str) -> Callable[..., Any]:
        k_cache = torch.zeros(1, MAX_LEN, kv_heads, head_dim, device=device)
        v_cache = torch.zeros(1, MAX_LEN, kv_heads, head_dim, device=device)

        def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: int) -> torch.Tensor:
            k_cache[:, pos] = k
            v_cache[:, pos] = v
            cu_seqlens = torch.tensor([0, pos + 1], device=q.device)
            return decoding.attn_decoding_one_step(q, k_cache[:, :pos + 1], v_cache[:, :pos + 1],
                                                   cu_seqlens=cu_seqlens)

        return step

    def inputs(pos: int, device: str) -> tuple[Any, ...]:
        return (_randn(1, 1, heads, head_dim, device=device, seed=pos), _randn(1, kv_heads, head_dim, device=device,
                seed=100 + pos), _randn(1, kv_heads, head_dim, device=device, seed=200 + pos), pos)

    decode_loop(build, inputs, device)  # 2: position 0 with pos a constant, then pos symbolic


@pytest.mark.parametrize("device", DEVICES)
def test_fla_tensor_cache_across_captures(device: str) -> None:
    """fla memoizes `prepare_lens(cu_seqlens)` by the identity of its argument. With a closed-over cu_seqlens,
    the first capture leaves its fake result in fla's cache and the second capture (position now symbolic) gets
    it back: Trident recomputes it in the new graph instead of failing ("closes over a FakeTensor")."""
    index = need("fla.ops.utils.index")

    def build(device: str) -> Callable[..., Any]:
        cu_seqlens = torch.tensor([0, 3, 7], device=device)

        def step(x: torch.Tensor, pos: int) -> torch.Tensor:
            return x[pos] * index.prepare_lens(cu_seqlens)

        return step

    # 2: pos a constant, then symbolic (the second capture is the one that gets fla's kept fake back)
    decode_loop(build, lambda pos, device: (_randn(8, 2, device=device, seed=pos), pos), device, launches=False)


# ---------------------------------------------------------------------------------------------------------
# conch-triton-kernels


@pytest.mark.parametrize("device", DEVICES)
def test_conch_paged_attention(device: str) -> None:
    """vLLM-style decode: reshape_and_cache writes the new key/value at the slot the block table gives for the
    position, then paged_attention reads the sequence through the block table."""
    attention = need("conch.ops.attention.paged_attention")
    cache_ops = need("conch.ops.vllm.reshape_and_cache")
    batch, heads, kv_heads, head_dim, block_size, blocks = 2, 4, 2, 16, 16, 8
    # block_size 16: on CUDA, conch's kernels put block_size in a tl.dot dimension, which must be at least 16.

    def build(device: str) -> Callable[..., Any]:
        k_cache = torch.zeros(blocks, block_size, kv_heads, head_dim, device=device)
        v_cache = torch.zeros(blocks, block_size, kv_heads, head_dim, device=device)
        # Sequence 0 owns blocks 5, 2, 7, 0; sequence 1 owns 1, 6, 3, 4: not in order, so the table matters.
        block_table = torch.tensor([[5, 2, 7, 0], [1, 6, 3, 4]], dtype=torch.int32, device=device)

        def step(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: int) -> torch.Tensor:
            slots = block_table[:, pos // block_size].long() * block_size + pos % block_size
            cache_ops.reshape_and_cache(k, v, k_cache, v_cache, slots)
            seq_lens = torch.full((batch,), pos + 1, dtype=torch.int32, device=device)
            return attention.paged_attention(q, k_cache, v_cache, block_table, seq_lens, scale=head_dim ** -0.5)

        return step

    def inputs(pos: int, device: str) -> tuple[Any, ...]:
        return (_randn(batch, heads, head_dim, device=device, seed=pos),
                _randn(batch, kv_heads, head_dim, device=device, seed=100 + pos),
                _randn(batch, kv_heads, head_dim, device=device, seed=200 + pos), pos)

    decode_loop(build, inputs, device)  # 2: position 0 with pos a constant, then pos symbolic


# ---------------------------------------------------------------------------------------------------------
# flag-gems (CUDA only: it registers its Triton kernels as ATen's CUDA implementations)


# flag-gems 5.0.2's `mul` for Hopper (runtime/backend/_nvidia/hopper/ops/mul.py) sends two tensors of the same
# rank to a flat kernel that reads `numel()` elements of each, ignoring broadcasting and strides: RoPE's
# `q * cos` (shapes [1, 4, 1, 16] and [1, 1, 1, 16]) reads past `cos` into memory nothing wrote. Eager's logits then
# depend on what the caching allocator left there: all NaN in one process, finite in another, different after
# any other allocation (compute-sanitizer's initcheck on gems' eager step alone: 2736 uninitialized reads, in
# that kernel and the `neg` reading its results; benchmarks/README.md, flag-gems). The tests keep gems' other
# kernels and leave this one to ATen, so eager is deterministic and the comparison exact.
GEMS_UNINITIALIZED_READS = ["mul"]


@pytest.mark.gpu
@pytest.mark.flag_gems
def test_flag_gems_llama_decode_step() -> None:
    flag_gems = need("flag_gems")
    transformers = need("transformers")

    def build(device: str) -> Callable[..., Any]:
        model, cache = _tiny_llama(transformers, device)

        def step(tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            with flag_gems.use_gems(exclude=GEMS_UNINITIALIZED_READS):
                return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache).logits

        return step

    def inputs(pos: int, device: str) -> tuple[torch.Tensor, ...]:
        return torch.tensor([[pos % 128]], device=device), torch.full((1, 1), pos, device=device)

    # use_gems() registers gems' kernels as ATen's CUDA implementations for the length of the step. The capture
    # traces into them (python_kernels.CaptureRegistrations); the step compiles only if no op they affect stays
    # opaque (gems' bodies that read addresses do), else it runs eagerly, warned once and remembered, with the
    # opaque op named. Either way the result must equal eager's, bit for bit: two eager instances must agree
    # exactly first (they do once gems' mul is left out), and whatever the refused capture did must not change
    # the jitted step's model or cache (tests/reliability/test_refused_captures.py asserts that on the CPU).
    eager_step, eager_again, jitted = build("cuda"), build("cuda"), trident.jit(build("cuda"))
    state = jitted._trident  # type: ignore[attr-defined]
    with torch.no_grad(), count_compiles() as compiles, warnings.catch_warnings(), allow_fallback() as fallbacks:
        warnings.simplefilter("ignore")
        for pos in POSITIONS:
            expected, again = eager_step(*inputs(pos, "cuda")), eager_again(*inputs(pos, "cuda"))
            actual = jitted(*inputs(pos, "cuda"))
            assert torch.isfinite(expected).all() and torch.equal(expected, again), f"position {pos}: eager runs differ"
            torch.testing.assert_close(actual, expected, rtol=0, atol=0,
                                       msg=lambda m: f"position {pos} ({state.eager_calls} eager call(s) of the "
                                                     f"jitted step, {len(state.specializations)} compiled): {m}")
    if state.eager_calls == 0:  # compiled: gems' kernels traced into, the calls after the first native
        assert_native(jitted, hits=len(POSITIONS), compiles=compiles())
        assert "traced into aten::" in trident.explain(jitted)
    else:  # one refused capture, remembered: every call eager, for the reason the warning gives
        assert compiles() == 0 and state.eager_calls == len(POSITIONS)
        assert {e.reason.split(";")[0] for e in fallbacks} == {fallbacks[0].reason.split(";")[0]}
        assert "registers operator kernels while it runs" in fallbacks[0].reason and "stays opaque" in fallbacks[0].reason


# ---------------------------------------------------------------------------------------------------------
# What the library tests found, without a library


def test_closed_over_view_is_one_live_constant() -> None:
    """A closed-over view (`cos_table[None]`, as a RoPE table passed to liger_rope): capture used to record its
    conversion to a fake (base, then as_strided), leaving a fake base behind ("closes over a FakeTensor that is
    not a plain strided tensor"). It is one constant, read by reference: updates of its base are seen."""
    table = torch.randn(4, 8)
    view = table[None]
    jitted = trident.jit(lambda x: x + view)
    with torch.no_grad():
        torch.testing.assert_close(jitted(torch.ones(1, 4, 8)), 1 + view, rtol=0, atol=0)
        table.add_(1)
        torch.testing.assert_close(jitted(torch.ones(1, 4, 8)), 1 + view, rtol=0, atol=0)
    assert_native(jitted, hits=2, compiles=1)  # the base's in-place update is no reason to recompile



def _memoized(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A library-style cache by argument identity (fla's @tensor_cache, functools.cache over a device...)."""
    kept: dict[tuple[int, ...], tuple[tuple[object, ...], torch.Tensor]] = {}

    @functools.wraps(fn)
    def wrapper(*args: object) -> torch.Tensor:
        key = tuple(id(a) for a in args)
        if key not in kept:
            kept[key] = (args, fn(*args))
        return kept[key][1]

    return wrapper


def test_kept_tensor_computed_from_constants_is_recomputed() -> None:
    table = torch.arange(6.0)

    @_memoized
    def scaled(t: torch.Tensor, scale: int) -> torch.Tensor:
        return (t * scale).view(2, 3).t()  # a computation and a view of it

    @_memoized
    def ramp(n: int) -> torch.Tensor:  # a lazily created constant: factories only
        return torch.linspace(0, 1, n)

    def step(x: torch.Tensor, pos: int) -> torch.Tensor:
        return x * pos + scaled(table, 2).sum(1) + ramp(3)

    jitted = trident.jit(step)
    with torch.no_grad(), count_compiles() as compiles:
        for pos in range(4):
            torch.testing.assert_close(jitted(torch.ones(3), pos), torch.ones(3) * pos + (table * 2).view(2, 3).t().sum(1)
                                       + torch.linspace(0, 1, 3), rtol=0, atol=0)
        table.mul_(10)  # the graph recomputes from the live tensor, as the first specialization does
        torch.testing.assert_close(jitted(torch.ones(3), 5), 5 + (table * 2).view(2, 3).t().sum(1)
                                   + torch.linspace(0, 1, 3), rtol=0, atol=0)
    assert compiles() == 2  # pos 0 a constant, then pos symbolic (the capture that recomputes the kept fakes)
    assert_native(jitted, hits=5, compiles=2)


def test_kept_tensor_computed_from_arguments_is_made_for_real() -> None:
    """A program that keeps a value of its first call's arguments in an object it reaches (a cache filled on
    first use): the capture's fake is never left there (capture/user_state.py). That call runs eagerly, keeping
    the real value, as eager does; later calls compile against it and run natively."""
    first: list[torch.Tensor] = []

    def step(x: torch.Tensor, pos: int) -> torch.Tensor:
        if not first:
            first.append(x * 2)  # kept from the first call: a value of that call's argument
        return first[0] + pos

    jitted = trident.jit(step)
    with torch.no_grad(), expect_fallback("assigned traced values into Python objects it reaches (first)"):
        assert torch.equal(jitted(torch.ones(3), 0), torch.full((3,), 2.0))
    assert len(first) == 1 and type(first[0]) is torch.Tensor and torch.equal(first[0], torch.full((3,), 2.0))
    with torch.no_grad():
        for pos in (1, 2, 3):
            assert torch.equal(jitted(torch.zeros(3), pos), torch.full((3,), 2.0 + pos))
    state = jit_state(jitted)
    assert state.eager_calls == 1 and native_hits(jitted) == 3, trident.explain(jitted)
