"""Trident demo: a greedy decode loop whose step mixes torch ops with Triton kernels, jitted and checked against eager.

The step (a two-layer toy transformer, batch 1) is plain PyTorch plus three small Triton kernels:
RMSNorm and SwiGLU (from examples/llm_decode.py) and a write of the new key/value row into a preallocated KV
cache at the position.
The position is a Python int that changes every call; Trident compiles the step twice (position constant, then
symbolic) and runs every later step in its native entry. On a GPU the kernels launch natively; on CPU tensors
they run through Triton's interpreter on both sides, so the same program runs and is checked without a GPU.

    python examples/demo.py          # ./dev demo; CUDA when available, else CPU
The larger example with timings per token is examples/llm_decode.py; the benchmarks are in benchmarks/.
"""
from __future__ import annotations

import collections
import contextlib
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import trident
from trident.testing import count_compiles

# RMSNorm and SwiGLU (silu(gate) * up) are the Triton kernels of the fuller decode example beside this file.
from llm_decode import rms_norm, swiglu as silu_mul  # noqa: E402 -- examples/ is on sys.path when run as a script

VOCAB, DIM, HEADS, HIDDEN, LAYERS, MAX_LEN = 128, 64, 4, 128, 2, 32
HEAD_DIM = DIM // HEADS
STEPS, TIMING_ROUNDS = 16, 3
# trident.explain lists every guard, most of them on the weights the step closes over; the demo shows each
# specialization's summary, its guard on the position, its Triton launch sites and its CUDA graph state.
EXPLAIN_KEEP = ("trident.jit", "specialization", "last miss", "pos:", "Triton kernel", "CUDA graph")
EXPLAIN_LINES = 20


# -- the step's own Triton kernels ------------------------------------------------------------------------------
@triton.jit
def kv_write_kernel(k_ptr, v_ptr, k_cache_ptr, v_cache_ptr, pos, n_cols, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    tl.store(k_cache_ptr + pos * n_cols + cols, tl.load(k_ptr + cols, mask=mask), mask=mask)
    tl.store(v_cache_ptr + pos * n_cols + cols, tl.load(v_ptr + cols, mask=mask), mask=mask)


def write_kv(k: torch.Tensor, v: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: int) -> None:
    """k, v: [1, DIM] rows; the caches: [MAX_LEN, DIM], written in place at row `pos`."""
    kv_write_kernel[(1,)](k, v, k_cache, v_cache, pos, k.shape[-1], BLOCK=triton.next_power_of_2(k.shape[-1]))


# -- the decode step in plain PyTorch --------------------------------------------------------------------------
Step = Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]  # (token, pos) -> (next token, logits)


def build_step(device: torch.device, dtype: torch.dtype) -> Step:
    """Seeded weights and an empty KV cache of its own, and the step that reads and writes them. Called twice: one
    step runs eagerly, the other under trident.jit, each on its own cache."""
    gen = torch.Generator().manual_seed(0)  # on the CPU, so CPU and CUDA get the same weights

    def w(*shape: int, std: float = 0.1) -> torch.Tensor:
        return (torch.randn(shape, generator=gen) * std).to(device, dtype)

    embed, final_norm, lm_head = w(VOCAB, DIM, std=1.0), 1 + w(DIM), w(VOCAB, DIM)
    layers = [dict(norm1=1 + w(DIM), wqkv=w(3 * DIM, DIM), wo=w(DIM, DIM), norm2=1 + w(DIM),
                   w_gate=w(HIDDEN, DIM), w_up=w(HIDDEN, DIM), w_down=w(DIM, HIDDEN)) for _ in range(LAYERS)]
    caches = [(torch.zeros(MAX_LEN, DIM, device=device, dtype=dtype),
               torch.zeros(MAX_LEN, DIM, device=device, dtype=dtype)) for _ in range(LAYERS)]

    def step(token: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """token [1] at position `pos` -> (next token [1] greedily, logits [1, VOCAB]); writes row `pos` of the
        caches."""
        x = F.embedding(token, embed)  # [1, DIM]
        for layer, (k_cache, v_cache) in zip(layers, caches):
            q, k, v = F.linear(rms_norm(x, layer["norm1"]), layer["wqkv"]).split(DIM, dim=-1)
            write_kv(k, v, k_cache, v_cache, pos)
            keys = k_cache[: pos + 1].view(pos + 1, HEADS, HEAD_DIM).transpose(0, 1)  # [HEADS, pos + 1, HEAD_DIM]
            values = v_cache[: pos + 1].view(pos + 1, HEADS, HEAD_DIM).transpose(0, 1)
            scores = q.view(HEADS, 1, HEAD_DIM) @ keys.transpose(1, 2) * HEAD_DIM**-0.5
            attn = scores.softmax(-1) @ values  # [HEADS, 1, HEAD_DIM]
            x = x + F.linear(attn.reshape(1, DIM), layer["wo"])
            h = rms_norm(x, layer["norm2"])
            x = x + F.linear(silu_mul(F.linear(h, layer["w_gate"]), F.linear(h, layer["w_up"])), layer["w_down"])
        logits = F.linear(rms_norm(x, final_norm), lm_head)
        return logits.argmax(-1), logits

    return step


def eager_launches(device: torch.device) -> contextlib.AbstractContextManager[None]:
    """Where the eager step's Triton launches run. On CUDA: Triton's own launcher. On CPU tensors eager Triton
    has no driver ("0 active drivers"); this reroutes each launch of the block through Triton's interpreter with
    the same patches Trident's compiled CPU code uses, as the test suite does (tests/e2e/test_libraries.py). Not
    TRITON_INTERPRET=1: set before importing Triton, it would interpret the kernels on a GPU too, where they
    should launch natively."""
    if device.type != "cpu":
        return contextlib.nullcontext()
    from trident.capture.triton_launches import interpret_cpu_launches

    return interpret_cpu_launches()


def run_step(step: Step, token: torch.Tensor, pos: int, device: torch.device,
             eager: bool, sync: Callable[[], None]) -> tuple[torch.Tensor, torch.Tensor, float]:
    """One step: the next token, the logits and the seconds it took (to the device's end of it)."""
    start = time.perf_counter()
    with eager_launches(device) if eager else contextlib.nullcontext():
        token, logits = step(token, pos)
    sync()
    return token, logits, time.perf_counter() - start


def decode(step: Step, device: torch.device, eager: bool,
           sync: Callable[[], None]) -> tuple[list[torch.Tensor], list[torch.Tensor], list[float]]:
    """STEPS greedy steps from token 1 at positions 0, 1, ...: tokens, logits and seconds of each step."""
    token, tokens, logits, seconds = torch.tensor([1], device=device), [], [], []
    for pos in range(STEPS):
        token, step_logits, step_seconds = run_step(step, token, pos, device, eager, sync)
        tokens.append(token)
        logits.append(step_logits)
        seconds.append(step_seconds)
    return tokens, logits, seconds


def time_steps(eager_step: Step, jitted_step: Step, device: torch.device,
               sync: Callable[[], None]) -> dict[str, list[float]]:
    """Seconds per step of each system over TIMING_ROUNDS decodes from the start (each overwrites its cache row by
    row). The two take turns at every position, so that a load change on a shared machine affects both alike."""
    samples: dict[str, list[float]] = {"eager": [], "trident": []}
    for _ in range(TIMING_ROUNDS):
        tokens = dict.fromkeys(samples, torch.tensor([1], device=device))
        for pos in range(STEPS):
            for name, step in (("eager", eager_step), ("trident", jitted_step)):
                tokens[name], _, seconds = run_step(step, tokens[name], pos, device, name == "eager", sync)
                samples[name].append(seconds)
    return samples


def main() -> None:
    device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
    # fp32 on CPU: the Triton 3.6 interpreter computes bf16 wrongly. Half precision on a GPU, as decode runs there.
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    # One torch thread on CPU: on tensors this small OpenMP's wake-ups on a shared machine only add noise (both
    # sides call the same ATen kernels, so this is fair).
    torch.set_num_threads(1)
    eager_step, jitted_step = build_step(device, dtype), trident.jit(build_step(device, dtype))
    if not hasattr(jitted_step, "_trident"):
        raise SystemExit("TRIDENT_DISABLE=1 is set: trident.jit returned the step unchanged, nothing to compare")

    with torch.no_grad():
        from trident.runtime import build

        with count_compiles() as compiles:
            tokens, logits, trident_s = decode(jitted_step, device, eager=False, sync=sync)
        compiled = compiles()
        expected_tokens, expected_logits, _ = decode(eager_step, device, eager=True, sync=sync)
        state = jitted_step._trident  # type: ignore[attr-defined]  # the counters trident.explain prints
        native_hits, eager_calls = sum(state.entry.hits()), state.eager_calls
        specializations = len(state.specializations)

        same_tokens = all(torch.equal(a, e) for a, e in zip(tokens, expected_tokens))
        same_logits = all(torch.equal(a, e) for a, e in zip(logits, expected_logits))
        max_diff = max((a.float() - e.float()).abs().max().item() for a, e in zip(logits, expected_logits))
        # Bit for bit on CPU (the same ATen kernels, the same interpreted Triton kernels). On a GPU a compiled
        # bf16 matmul may pick another cuBLAS algorithm than eager's: there the tokens must agree and the
        # logits stay within bf16 rounding.
        equal = (same_tokens and same_logits) if device.type == "cpu" else (same_tokens and max_diff <= 5e-2)

        where = torch.cuda.get_device_name() if device.type == "cuda" else "Triton kernels through Triton's interpreter"
        print(f"device: {device} ({where}), {dtype}, {LAYERS} layers, {STEPS} greedy steps, position a Python int")
        print(f"tokens:  {[int(t) for t in tokens]}")
        print(f"results: tokens equal {same_tokens}, logits equal (torch.equal) {same_logits}, "
              f"max abs diff {max_diff:.1e}")
        first = trident_s[0] - (build.last_build_seconds or 0.0)
        if build.last_build_seconds is not None:  # once per torch version, then cached
            print(f"first call built the native runtime in {build.last_build_seconds:.0f} s (cached from now on)")
        # each specialization was "compiled" or "loaded from the disk cache" (a later run of the demo)
        origins = collections.Counter(spec.origin for spec in state.specializations)
        print(f"first call: {first * 1e3:.0f} ms, second (position now symbolic): {trident_s[1] * 1e3:.0f} ms; "
              f"specializations: {', '.join(f'{n} {origin}' for origin, n in origins.items()) or 'none'}")

        samples = time_steps(eager_step, jitted_step, device, sync)  # after warm-up: both ran every position
        eager_ms, trident_ms = (statistics.median(samples[name]) * 1e3 for name in ("eager", "trident"))
        ratios = [e / t for e, t in zip(samples["eager"], samples["trident"])]
        print(f"per step (median of {len(ratios)}): eager {eager_ms:.2f} ms, trident {trident_ms:.2f} ms; "
              f"trident vs eager {statistics.median(ratios):.2f}x (median of the step-by-step ratios)")
        if device.type == "cpu":
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
            print(f"  (on CPU both sides spend most of a step in Triton's interpreter, so about 1x is expected; "
                  f"Trident's gains are on GPU launches, README. Load average {load:.1f} on {os.cpu_count()} cores.)")
        # One line for tests/unit/test_demo.py, counted over the checked decode (before the timing rounds).
        print(f"check: equal={equal} compiled={compiled} specializations={specializations} "
              f"native_hits={native_hits} eager_calls={eager_calls}")
        print()
        explained = trident.explain(jitted_step).splitlines()
        shown = [line for line in explained if line.startswith(EXPLAIN_KEEP) or line.strip().startswith(EXPLAIN_KEEP)]
        print(f"trident.explain(step), abbreviated ({len(explained) - min(len(shown), EXPLAIN_LINES)} more lines, "
              "mostly guards on the weights, in the whole text):")
        print("\n".join(shown[:EXPLAIN_LINES]))
    if not (equal and eager_calls == 0):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
