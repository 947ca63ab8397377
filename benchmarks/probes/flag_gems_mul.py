"""Does flag-gems compute HF Llama's decode step deterministically? (GPU; flag-gems installed.)

    python benchmarks/probes/flag_gems_mul.py            # one JSON line per check
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool initcheck python benchmarks/probes/flag_gems_mul.py eager

Checks, each without Trident:
  mul      gems' `mul` on same-rank operands of different shapes (RoPE's q * cos) and on a transposed operand,
           against ATen's: flag-gems 5.0.2's Hopper `mul` (runtime/backend/_nvidia/hopper/ops/mul.py) sends any
           two tensors of equal rank to a flat kernel over `numel()` of the first, ignoring broadcasting and
           strides, so it reads past the smaller operand.
  step     a one-layer HF Llama step under `use_gems(exclude=...)`, three fresh instances, the second after the
           caching allocator's free memory was filled with NaN: finite, and bitwise equal to the first?
  eager    two eager steps, for compute-sanitizer's initcheck (uninitialized reads, by kernel).
"""
from __future__ import annotations

import json
import sys

import torch


def out(**kw: object) -> None:
    print(json.dumps(kw, default=str), flush=True)


def poison_free_memory() -> None:
    """Fill the caching allocator's free blocks with NaN: a later torch.empty returns NaN-filled memory."""
    blocks = [torch.full((n,), float("nan"), device="cuda") for n in (1, 16, 256, 4096, 65536, 1 << 20, 1 << 23)
              for _ in range(8)]
    del blocks
    torch.cuda.synchronize()


def tiny_llama_step(flag_gems, exclude: list[str]):  # type: ignore[no-untyped-def]
    import transformers

    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=16, tie_word_embeddings=True)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).cuda().eval()
    cache = transformers.StaticCache(config=config, max_cache_len=16)
    cache.early_initialization(batch_size=1, num_heads=2, head_dim=16, dtype=torch.float32, device="cuda")

    def step(pos: int) -> torch.Tensor:
        with flag_gems.use_gems(exclude=exclude), torch.no_grad():
            return model(input_ids=torch.tensor([[pos]], device="cuda"), position_ids=torch.full((1, 1), pos, device="cuda"),
                         past_key_values=cache).logits
    return step


def check_mul(flag_gems) -> None:  # type: ignore[no-untyped-def]
    g = torch.Generator(device="cuda").manual_seed(0)
    cases = {"broadcast": (torch.randn(1, 4, 1, 16, device="cuda", generator=g), torch.randn(1, 1, 1, 16, device="cuda", generator=g)),
             "transposed": (torch.randn(1, 4, 16, device="cuda", generator=g), torch.randn(1, 16, 4, device="cuda", generator=g).transpose(1, 2))}
    for name, (a, b) in cases.items():
        with flag_gems.use_gems():
            gems = a * b
        out(check="mul", case=name, shapes=[list(a.shape), list(b.shape)], max_abs_diff_vs_aten=float((gems - a * b).abs().max()))


def check_step(flag_gems) -> None:  # type: ignore[no-untyped-def]
    for exclude in ([], ["mul"]):
        runs = []
        for poisoned in (False, True, False):
            step = tiny_llama_step(flag_gems, exclude)
            logits = []
            for pos in range(5):
                if poisoned:
                    poison_free_memory()
                logits.append(step(pos).clone())
            runs.append(logits)
        out(check="step", exclude=exclude, finite=[[bool(torch.isfinite(y).all()) for y in r] for r in runs],
            bitwise_equal_to_first=[[bool(torch.equal(y, y0)) for y, y0 in zip(r, runs[0])] for r in runs[1:]])


def check_eager(flag_gems) -> None:  # type: ignore[no-untyped-def]
    step = tiny_llama_step(flag_gems, [])
    out(check="eager", finite=[bool(torch.isfinite(step(pos)).all()) for pos in range(2)])


def main() -> None:
    import flag_gems
    import transformers

    out(torch=torch.__version__, gpu=torch.cuda.get_device_name(), flag_gems="5.0.2" if not hasattr(flag_gems, "__version__") else flag_gems.__version__,
        transformers=transformers.__version__)
    for name in sys.argv[1:] or ["mul", "step"]:
        {"mul": check_mul, "step": check_step, "eager": check_eager}[name](flag_gems)


if __name__ == "__main__":
    main()
