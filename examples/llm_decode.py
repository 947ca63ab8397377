"""Greedy decoding of a tiny Llama-like model with trident.jit: RMSNorm and SwiGLU are Triton kernels, the rest
is torch (matmuls, RoPE, a static KV cache written in place, attention over the cache prefix).

The position is a plain Python int that grows every step. Trident compiles the step twice (position constant,
then symbolic) and every later step runs in its native entry. On CUDA the kernels launch natively; on CPU
they run through Triton's interpreter (slow, but the same program), and the check is against the same step
written in plain torch.

    python examples/llm_decode.py [--steps 32] [--device cuda|cpu]
The full benchmark with two real-sized models is `python -m benchmarks.llm.run`.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import trident

VOCAB, DIM, HEADS, KV_HEADS, HEAD_DIM, HIDDEN, LAYERS, MAX_SEQ = 256, 256, 8, 2, 32, 512, 2, 128


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, out_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps) * w
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def swiglu_kernel(gate_ptr, up_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    gate = tl.load(gate_ptr + offs, mask=mask).to(tl.float32)
    up = tl.load(up_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (gate * tl.sigmoid(gate) * up).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    rms_norm_kernel[(x.shape[0],)](x, w, out, x.shape[1], 1e-5, BLOCK=triton.next_power_of_2(x.shape[1]))
    return out


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(gate)
    swiglu_kernel[(triton.cdiv(gate.numel(), 1024),)](gate, up, out, gate.numel(), BLOCK=1024)
    return out


def rms_norm_torch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-5) * w.float()).to(x.dtype)


def swiglu_torch(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return (F.silu(gate.float()) * up.float()).to(gate.dtype)


class TinyLlama:
    """Random weights from a fixed seed; `use_triton=False` gives the same model with plain-torch norm and SwiGLU."""

    def __init__(self, device: torch.device, dtype: torch.dtype, use_triton: bool = True) -> None:
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape: int, std: float = 0.05) -> torch.Tensor:
            return (torch.randn(shape, generator=g, device=device) * std).to(dtype)

        self.embed = w(VOCAB, DIM, std=1.0)
        self.layers = [dict(norm1=1 + w(DIM), wqkv=w((HEADS + 2 * KV_HEADS) * HEAD_DIM, DIM), wo=w(DIM, DIM),
                            norm2=1 + w(DIM), w_gate=w(HIDDEN, DIM), w_up=w(HIDDEN, DIM), w_down=w(DIM, HIDDEN))
                       for _ in range(LAYERS)]
        self.final_norm, self.lm_head = 1 + w(DIM), w(VOCAB, DIM)
        angles = torch.outer(torch.arange(MAX_SEQ, device=device).float(),
                             10000.0 ** (-torch.arange(0, HEAD_DIM, 2, device=device).float() / HEAD_DIM))
        self.cos, self.sin = angles.cos().repeat(1, 2).to(dtype), angles.sin().repeat(1, 2).to(dtype)
        self.norm, self.act = (rms_norm, swiglu) if use_triton else (rms_norm_torch, swiglu_torch)

    def new_cache(self, batch: int) -> list[torch.Tensor]:
        shape = (batch, KV_HEADS, MAX_SEQ, HEAD_DIM)
        return [torch.zeros(shape, dtype=self.embed.dtype, device=self.embed.device) for _ in range(2 * LAYERS)]

    def rope(self, x: torch.Tensor, pos: int) -> torch.Tensor:  # x [batch, heads, head_dim]
        x1, x2 = x.chunk(2, dim=-1)
        return x * self.cos[pos] + torch.cat((-x2, x1), dim=-1) * self.sin[pos]

    def step(self, tokens: torch.Tensor, pos: int, cache: list[torch.Tensor]) -> torch.Tensor:
        """One decode step: tokens [batch] at position `pos` -> logits [batch, VOCAB]; writes the KV cache."""
        batch = tokens.shape[0]
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            q, k, v = F.linear(self.norm(x, layer["norm1"]), layer["wqkv"]).split(
                [HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1)
            q = self.rope(q.view(batch, HEADS, HEAD_DIM), pos)
            k_cache, v_cache = cache[2 * i], cache[2 * i + 1]
            k_cache[:, :, pos] = self.rope(k.view(batch, KV_HEADS, HEAD_DIM), pos)
            v_cache[:, :, pos] = v.view(batch, KV_HEADS, HEAD_DIM)
            keys = k_cache[:, :, : pos + 1].repeat_interleave(HEADS // KV_HEADS, dim=1)  # GQA
            values = v_cache[:, :, : pos + 1].repeat_interleave(HEADS // KV_HEADS, dim=1)
            scores = torch.einsum("bhd,bhsd->bhs", q, keys) * HEAD_DIM**-0.5
            attn = torch.einsum("bhs,bhsd->bhd", scores.softmax(-1), values)
            x = x + F.linear(attn.reshape(batch, DIM), layer["wo"])
            h = self.norm(x, layer["norm2"])
            x = x + F.linear(self.act(F.linear(h, layer["w_gate"]), F.linear(h, layer["w_up"])), layer["w_down"])
        return F.linear(self.norm(x, self.final_norm), self.lm_head)


def generate(step, first, cache, steps, sync):  # type: ignore[no-untyped-def]
    """Greedy decoding from token `first`; returns tokens, logits per step and the first call's seconds."""
    tokens, all_logits, token = [], [], first
    for pos in range(steps):
        start = time.perf_counter()
        logits = step(token, pos, cache)
        if pos == 0:
            sync()
            first_s = time.perf_counter() - start
        token = logits.argmax(-1)
        tokens.append(token)
        all_logits.append(logits)
    return tokens, all_logits, first_s


def ms_per_token(step, first, cache, steps, sync):  # type: ignore[no-untyped-def]
    generate(step, first, cache, 2, sync)  # warm-up: Triton's and Trident's compiles happen here
    start = time.perf_counter()
    generate(step, first, cache, steps, sync)
    sync()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=32)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    model = TinyLlama(device, dtype)
    # On CPU the eager step cannot launch Triton kernels (no interpreter outside Trident), so eager means the
    # same step with plain-torch norm and activation; on CUDA it is the very function Trident compiles.
    eager_step = model.step if device.type == "cuda" else TinyLlama(device, dtype, use_triton=False).step
    decode = trident.jit(model.step)
    first = torch.tensor([1], device=device)

    with torch.no_grad():
        tokens, logits, first_s = generate(decode, first, model.new_cache(1), args.steps, sync)
        ref_tokens, ref_logits, _ = generate(eager_step, first, model.new_cache(1), args.steps, sync)
        tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
        worst = max(((a.float() - e.float()).abs().max() / e.float().abs().max()).item()
                    for a, e in zip(logits, ref_logits))
        same = all(torch.equal(a, e) for a, e in zip(tokens, ref_tokens))
        print(f"device {device}, {args.steps} greedy steps, position as a Python int")
        print(f"tokens: {[int(t) for t in tokens[:16]]}{' ...' if args.steps > 16 else ''}")
        print(f"matches eager: {same and worst <= tolerance} "
              f"(same tokens: {same}, max relative logit diff {worst:.1e})")
        print(f"first call (capture + compile): {first_s * 1e3:.0f} ms")
        t_eager = ms_per_token(eager_step, first, model.new_cache(1), args.steps, sync)
        t_trident = ms_per_token(decode, first, model.new_cache(1), args.steps, sync)
        eager_name = "eager" if device.type == "cuda" else "eager (plain torch)"
        print(f"{eager_name:<20} {t_eager:8.3f} ms/token")
        print(f"{'trident':<20} {t_trident:8.3f} ms/token  ({t_eager / t_trident:.2f}x)")
        if device.type == "cpu":
            print("(on CPU the Triton kernels run through Triton's interpreter: these times say nothing about GPUs)")
        summary = [line for line in trident.explain(decode).splitlines() if line.startswith(("trident.jit", "spec"))]
        print("\n".join(summary))  # trident.explain(decode) also lists each specialization's guards and launches
    if not (same and worst <= tolerance):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
