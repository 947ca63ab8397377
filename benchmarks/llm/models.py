"""Two decoder-only models for the decode benchmark: a Llama-3.2-1B-shaped one and a GPT-2-medium-shaped one.

Why these two: they differ in every block the benchmark cares about. Llama: RMSNorm, rotary embedding, GQA
(32 q / 8 kv heads), SwiGLU, no biases. GPT-2: LayerNorm with bias, learned absolute positions (no rotary),
plain multi-head attention, GELU(tanh), biased projections, and 24 thinner layers: more launches per step
for less device time, so the host cost weighs more (a Qwen3-like model would mostly repeat Llama's kernels).

Weights are random (fixed seed, no downloads), stored as plain tensors on the objects: every system (eager,
torch.compile, CUDA graphs, Trident) reads the same tensors. The static KV cache is a list of per-layer
(k, v) tensors [batch, kv_heads, max_seq, head_dim] passed to every step and written in place at `pos`.

Each model runs one body (`_forward`) with an operation set (the norms, activations, residual add, RoPE, KV
write, attention and `linear`): `kernels` (Triton kernels launched by the model's Python, ATen matmuls),
`library` (the same kernels behind torch.library custom ops, and a Triton matmul behind one: library.py),
`aten` (kernels', with the residual add and GELU as ATen ops whose kernels aten_ops.py overrides by the same
Triton kernels while `aten_ops.overrides` is active) or `reference` (plain torch, for correctness). Entry points:
    decode_step(tokens, pos: int, caches) -> logits                  kernels; position as a Python int
    decode_step_tensor_pos(tokens, pos: Tensor, caches) -> logits    kernels; position as a 1-element int32
                                                                     device tensor
    library_step(tokens, pos, caches) -> logits                      library; int or tensor position
    aten_step(tokens, pos, caches) -> logits                         aten; int or tensor position
    reference_step(tokens, pos, caches) -> logits                    plain torch; int or tensor position
    step_for(op_set, pos_kind)                                       the benchmarked entry point of an op set
tokens: [batch] int64; logits: [batch, vocab] in the model dtype.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType

import torch
import torch.nn.functional as F

from . import aten_ops, kernels, library, reference

Caches = list[tuple[torch.Tensor, torch.Tensor]]
Position = int | torch.Tensor
OP_SETS = ("kernels", "library", "aten")  # the benchmarked operation sets (reference.py is the check)


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Llama-3.2-1B's shape (tied embeddings; rope_theta 500000 without Llama-3's frequency scaling, which
    changes only the values in the cos/sin tables)."""

    vocab: int = 128256
    hidden: int = 2048
    intermediate: int = 8192
    layers: int = 16
    q_heads: int = 32
    kv_heads: int = 8
    head_dim: int = 64
    rope_base: float = 500000.0
    eps: float = 1e-5
    max_seq: int = 512

    @classmethod
    def tiny(cls) -> LlamaConfig:
        return cls(vocab=96, hidden=64, intermediate=128, layers=2, q_heads=4, kv_heads=2, head_dim=16, max_seq=32)


@dataclasses.dataclass(frozen=True)
class GPT2Config:
    """GPT-2-medium's shape (tied embeddings, 1024 learned positions)."""

    vocab: int = 50257
    hidden: int = 1024
    intermediate: int = 4096
    layers: int = 24
    heads: int = 16
    eps: float = 1e-5
    max_positions: int = 1024
    max_seq: int = 512

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @classmethod
    def tiny(cls) -> GPT2Config:
        return cls(vocab=96, hidden=64, intermediate=256, layers=2, heads=4, max_positions=64, max_seq=32)


class _RandomInit:
    """Seeded random weights made directly on the target device (no host round trip for 1B parameters)."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int) -> None:
        self.device, self.dtype = device, dtype
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def normal(self, *shape: int, std: float = 0.02, mean: float = 0.0) -> torch.Tensor:
        values = torch.randn(shape, generator=self.generator, device=self.device, dtype=torch.float32)
        return (values * std + mean).to(self.dtype)

    def norm_weight(self, n: int) -> torch.Tensor:
        return self.normal(n, std=0.1, mean=1.0)


class Decoder:
    """What both models share: caches, the three entry points, and the operation-set switch."""

    name: str
    kv_heads: int
    head_dim: int
    max_seq: int
    vocab: int
    device: torch.device
    dtype: torch.dtype

    def new_caches(self, batch: int) -> Caches:
        shape = (batch, self.kv_heads, self.max_seq, self.head_dim)
        def zeros() -> torch.Tensor:
            return torch.zeros(shape, dtype=self.dtype, device=self.device)

        return [(zeros(), zeros()) for _ in range(self.n_layers)]

    @property
    def n_layers(self) -> int:
        raise NotImplementedError

    def decode_step(self, tokens: torch.Tensor, pos: int, caches: Caches) -> torch.Tensor:
        return self._forward(kernels, tokens, pos, caches)

    def decode_step_tensor_pos(self, tokens: torch.Tensor, pos: torch.Tensor, caches: Caches) -> torch.Tensor:
        return self._forward(kernels, tokens, pos, caches)

    def library_step(self, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        return self._forward(library, tokens, pos, caches)

    def aten_step(self, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        return self._forward(aten_ops, tokens, pos, caches)

    def reference_step(self, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        return self._forward(reference, tokens, pos, caches)

    def step_for(self, op_set: str, pos_kind: str) -> Callable[[torch.Tensor, Position, Caches], torch.Tensor]:
        """The entry point benchmarked for `op_set` (one of OP_SETS) with positions of `pos_kind` ('int', 'tensor')."""
        if op_set == "kernels":
            return self.decode_step_tensor_pos if pos_kind == "tensor" else self.decode_step
        steps = {"library": self.library_step, "aten": self.aten_step}
        if op_set not in steps:
            raise ValueError(f"unknown op set {op_set!r}; choose from {list(OP_SETS)}")
        return steps[op_set]

    def _forward(self, ops: ModuleType, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------------------
# Llama


@dataclasses.dataclass
class LlamaLayer:
    attn_norm: torch.Tensor
    w_qkv: torch.Tensor  # [(q_heads + 2 kv_heads) * head_dim, hidden]: q, k, v projections fused
    w_o: torch.Tensor
    mlp_norm: torch.Tensor
    w_gate_up: torch.Tensor  # [2 * intermediate, hidden]: gate rows first, then up
    w_down: torch.Tensor


def rope_tables(max_seq: int, head_dim: int, base: float, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin [max_seq, head_dim // 2] in fp32 (HF's rotate-half convention repeats them per half)."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim)
    angles = torch.outer(torch.arange(max_seq, dtype=torch.float64, device=device), inv_freq)
    return angles.cos().float().contiguous(), angles.sin().float().contiguous()


class LlamaModel(Decoder):
    name = "llama"

    def __init__(self, config: LlamaConfig, device: str | torch.device = "cuda", dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0) -> None:
        c = self.config = config
        self.device, self.dtype = torch.device(device), dtype
        self.kv_heads, self.head_dim, self.max_seq, self.vocab = c.kv_heads, c.head_dim, c.max_seq, c.vocab
        init = _RandomInit(self.device, dtype, seed)
        qkv_rows = (c.q_heads + 2 * c.kv_heads) * c.head_dim
        self.embed = init.normal(c.vocab, c.hidden)  # also the LM head (tied, as in Llama-3.2-1B)
        self.layers = [
            LlamaLayer(
                attn_norm=init.norm_weight(c.hidden),
                w_qkv=init.normal(qkv_rows, c.hidden),
                w_o=init.normal(c.hidden, c.q_heads * c.head_dim),
                mlp_norm=init.norm_weight(c.hidden),
                w_gate_up=init.normal(2 * c.intermediate, c.hidden),
                w_down=init.normal(c.hidden, c.intermediate),
            )
            for _ in range(c.layers)
        ]
        self.final_norm = init.norm_weight(c.hidden)
        self.cos, self.sin = rope_tables(c.max_seq, c.head_dim, c.rope_base, self.device)

    @property
    def n_layers(self) -> int:
        return self.config.layers

    def _forward(self, ops: ModuleType, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        c = self.config
        batch, rotated = tokens.shape[0], c.q_heads + c.kv_heads
        x = F.embedding(tokens, self.embed)  # [batch, hidden]
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            h = ops.rms_norm(x, layer.attn_norm, c.eps)
            qkv = ops.linear(h, layer.w_qkv)
            qk = ops.rope(qkv, rotated, c.head_dim, self.cos, self.sin, pos)  # q and k heads, rotated
            v = qkv[:, rotated * c.head_dim :].view(batch, c.kv_heads, c.head_dim)
            ops.kv_write(qk[:, c.q_heads :], v, k_cache, v_cache, pos)
            attn = ops.decode_attention(qk[:, : c.q_heads], k_cache, v_cache, pos)
            x = ops.add(x, ops.linear(attn.view(batch, -1), layer.w_o))
            h = ops.rms_norm(x, layer.mlp_norm, c.eps)
            x = ops.add(x, ops.linear(ops.swiglu(ops.linear(h, layer.w_gate_up)), layer.w_down))
        return ops.linear(ops.rms_norm(x, self.final_norm, c.eps), self.embed)


# ---------------------------------------------------------------------------------------------------------
# GPT-2


@dataclasses.dataclass
class GPT2Layer:
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    w_qkv: torch.Tensor  # [3 * hidden, hidden]: q, k, v
    b_qkv: torch.Tensor
    w_proj: torch.Tensor
    b_proj: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    w_fc: torch.Tensor
    b_fc: torch.Tensor
    w_out: torch.Tensor
    b_out: torch.Tensor


def position_row(table: torch.Tensor, pos: Position) -> torch.Tensor:
    """table[pos] as [1, dim]: a view for an int, an embedding lookup (no host read) for a device tensor."""
    return F.embedding(pos, table) if isinstance(pos, torch.Tensor) else table[pos : pos + 1]


class GPT2Model(Decoder):
    name = "gpt2"

    def __init__(self, config: GPT2Config, device: str | torch.device = "cuda", dtype: torch.dtype = torch.bfloat16,
                 seed: int = 0) -> None:
        c = self.config = config
        self.device, self.dtype = torch.device(device), dtype
        self.kv_heads, self.head_dim, self.max_seq, self.vocab = c.heads, c.head_dim, c.max_seq, c.vocab
        init = _RandomInit(self.device, dtype, seed)
        h = c.hidden
        self.wte = init.normal(c.vocab, h)  # also the LM head (tied)
        self.wpe = init.normal(c.max_positions, h, std=0.01)
        self.layers = [
            GPT2Layer(
                ln1_w=init.norm_weight(h), ln1_b=init.normal(h),
                w_qkv=init.normal(3 * h, h), b_qkv=init.normal(3 * h),
                w_proj=init.normal(h, h), b_proj=init.normal(h),
                ln2_w=init.norm_weight(h), ln2_b=init.normal(h),
                w_fc=init.normal(c.intermediate, h), b_fc=init.normal(c.intermediate),
                w_out=init.normal(h, c.intermediate), b_out=init.normal(h),
            )
            for _ in range(c.layers)
        ]
        self.lnf_w, self.lnf_b = init.norm_weight(h), init.normal(h)

    @property
    def n_layers(self) -> int:
        return self.config.layers

    def _forward(self, ops: ModuleType, tokens: torch.Tensor, pos: Position, caches: Caches) -> torch.Tensor:
        c = self.config
        batch, h, d = tokens.shape[0], c.hidden, c.head_dim
        x = F.embedding(tokens, self.wte) + position_row(self.wpe, pos)  # [batch, hidden]
        for layer, (k_cache, v_cache) in zip(self.layers, caches):
            a = ops.layer_norm(x, layer.ln1_w, layer.ln1_b, c.eps)
            qkv = ops.linear(a, layer.w_qkv, layer.b_qkv)
            q, k, v = (qkv[:, i * h : (i + 1) * h].view(batch, c.heads, d) for i in range(3))
            ops.kv_write(k, v, k_cache, v_cache, pos)
            attn = ops.decode_attention(q, k_cache, v_cache, pos)
            x = ops.add(x, ops.linear(attn.view(batch, h), layer.w_proj, layer.b_proj))
            a = ops.layer_norm(x, layer.ln2_w, layer.ln2_b, c.eps)
            x = ops.add(x, ops.linear(ops.gelu_tanh(ops.linear(a, layer.w_fc, layer.b_fc)), layer.w_out, layer.b_out))
        return ops.linear(ops.layer_norm(x, self.lnf_w, self.lnf_b, c.eps), self.wte)


MODELS = {"llama": (LlamaModel, LlamaConfig), "gpt2": (GPT2Model, GPT2Config)}


def build_model(name: str, device: str | torch.device, dtype: torch.dtype, tiny: bool = False,
                max_seq: int | None = None, seed: int = 0) -> Decoder:
    """The model `name` ('llama' or 'gpt2') at full size or tiny, with caches for `max_seq` positions."""
    model_cls, config_cls = MODELS[name]
    config = config_cls.tiny() if tiny else config_cls()
    if max_seq is not None:
        config = dataclasses.replace(config, max_seq=max_seq)
    if isinstance(config, GPT2Config) and config.max_positions < config.max_seq:
        config = dataclasses.replace(config, max_positions=config.max_seq)  # tiny configs: learn enough positions
    return model_cls(config, device=device, dtype=dtype, seed=seed)  # type: ignore[arg-type]
