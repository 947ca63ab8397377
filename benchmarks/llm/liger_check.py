"""Off-the-shelf check (issue 4, item 5): a Hugging Face `transformers` Llama with liger-kernel's Triton kernels,
decode steps eager vs trident.jit, checked against eager.

    python -m benchmarks.llm.liger_check [--device cuda|cpu] [--size small|1b|tiny] [--steps 16] [--batch 1]
                                         [--level auto|model|layers|layer] [--liger rope,rms_norm,swiglu]
                                         [--json PATH]

What runs: `LlamaForCausalLM(LlamaConfig(...))` with random weights (seed 0, no downloads), its RMSNorm, RoPE
and SwiGLU MLP replaced by liger-kernel's (`apply_liger_kernel_to_llama(rope, rms_norm, swiglu)`, patched
before the model is built; no cross-entropy patches: decode computes no loss), bf16 on CUDA, fp32 on CPU. Each
decode step feeds one token per sequence with a transformers `StaticCache` (preallocated, written in place at
its own device-side length counter; a DynamicCache would rebind its tensors every step, which Trident's
capture-by-reference of captured tensors does not follow) and explicit position ids (a device tensor).

Levels, from the whole model down (`--level auto` tries them in this order and reports why each one failed):
    model   the full `model(input_ids, position_ids, past_key_values, use_cache=True).logits` forward
    layers  the decoder-layer stack (embedding, mask and rotary tables computed eagerly outside)
    layer   one decoder layer
Checked at every step: on CUDA, Trident's logits (or hidden states) against eager's, both running liger's
kernels (and both against the unpatched Hugging Face model, for information). On CPU, Trident runs liger's
kernels through Triton's interpreter and is checked against the unpatched model, since eager liger cannot run
there; and only RoPE and SwiGLU are patched, as liger's RMSNorm kernel calls libdevice.rsqrt, which Triton
3.6's interpreter does not implement (it returns None: "cannot convert None to tensor", with or without
Trident). Also reported: specializations compiled, Triton launches per step and their kind (`TritonLaunch`:
native cuLaunchKernel; `RecordedLaunch`: interpreter), first-call seconds, ms per step after warm-up.

Packages: transformers 5.x and liger-kernel, neither a test dependency of Trident. The H200 image already
holds transformers 5.17.0 and everything it imports (device KINDS.md, read 2026-11-17: huggingface_hub 1.33.0,
tokenizers 0.23.2, safetensors 0.8.0, regex, pyyaml, tqdm, packaging, httpx, rich, click, hf-xet, ...), so
liger-kernel is the one wheel to carry (0.9 MB, py3-none-any, requires only torch and triton; checked against
transformers 5.17.0 on CPU):

    ../shared/tools/device-prep.sh liger-kernel==0.8.5

The script prints the versions it found and stops with exit code 2 if either package is missing. For a machine
without transformers, the full closure over a torch install, every one checked to resolve as a cp312 manylinux
or py3 wheel with `pip download --no-deps --only-binary=:all: --python-version 3.12` (29.4 MB together; with
device-prep's 39 MB torch-mlir archive that exceeds the 64 MiB one device call may carry: the last four,
26.6 MB without them, are needed only by typer, which `import transformers` does not import):
    liger-kernel==0.8.5 transformers==5.17.0 huggingface-hub==1.33.0 tokenizers==0.23.3 safetensors==0.8.0
    regex==2026.11.19 pyyaml==6.0.4 tqdm==4.70.1 packaging==26.4 typer==0.29.2 click==8.5.1
    shellingham==1.5.4 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 annotated-doc==0.0.7
    httpx==0.29.0 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 idna==3.20 certifi==2026.10.19.post1
    hf-xet==1.8.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

os.environ.setdefault("TRIDENT_DISK_CACHE", "0")  # a cold first compile, as in run.py

import torch

from benchmarks.machine_info import dist_version, machine

SIZES = {  # LlamaConfig fields; 1b is Llama-3.2-1B's shape
    "tiny": dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=16),
    "small": dict(vocab_size=4096, hidden_size=512, intermediate_size=1536, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=2, head_dim=64),
    "1b": dict(vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, head_dim=64),
}
LEVELS = ("model", "layers", "layer")


def build_models(size: str, device: torch.device, dtype: torch.dtype, max_len: int,
                 patches: list[str]) -> tuple[Any, Any, Any]:
    """(plain HF model, liger-patched model with the same weights, config)."""
    from liger_kernel.transformers import apply_liger_kernel_to_llama
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama

    config = LlamaConfig(**SIZES[size], max_position_embeddings=max(max_len, 128), rms_norm_eps=1e-5,
                         rope_theta=500000.0, tie_word_embeddings=True, hidden_act="silu")
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with device:  # initialize on the device: a 1B model's random init on the host takes long
        plain = LlamaForCausalLM(config).to(dtype=dtype).eval()
    plain_rope = modeling_llama.apply_rotary_pos_emb
    apply_liger_kernel_to_llama(rope="rope" in patches, rms_norm="rms_norm" in patches, swiglu="swiglu" in patches,
                                cross_entropy=False, fused_linear_cross_entropy=False)
    with device:
        liger = LlamaForCausalLM(config).to(dtype=dtype).eval()
    liger.load_state_dict(plain.state_dict())
    liger_rope = modeling_llama.apply_rotary_pos_emb
    # The RoPE patch replaces a module global that both models call: switch it per model (`rope_of`).
    plain._rope, liger._rope = plain_rope, liger_rope
    return plain, liger, config


@contextlib.contextmanager
def rope_of(model: Any) -> Iterator[None]:
    """Make `model`'s RoPE (plain or liger's) the one modeling_llama calls, for the duration."""
    from transformers.models.llama import modeling_llama

    saved, modeling_llama.apply_rotary_pos_emb = modeling_llama.apply_rotary_pos_emb, model._rope
    try:
        yield
    finally:
        modeling_llama.apply_rotary_pos_emb = saved


def new_cache(config: Any, batch: int, max_len: int, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import StaticCache

    cache = StaticCache(config=config, max_cache_len=max_len)
    cache.early_initialization(batch_size=batch, num_heads=config.num_key_value_heads, head_dim=config.head_dim,
                               dtype=dtype, device=device)
    return cache


def make_step(model: Any, level: str, cache: Any) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The function of (tokens [batch, 1], position ids [batch, 1]) that a level jits; same code eagerly."""
    if level == "model":
        def step(tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
            return model(input_ids=tokens, position_ids=position_ids, past_key_values=cache, use_cache=True).logits

        return step
    layers = model.model.layers if level == "layers" else model.model.layers[:1]

    def stack(hidden: torch.Tensor, position_ids: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              mask: torch.Tensor | None) -> torch.Tensor:
        for layer in layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=position_ids, past_key_values=cache,
                           use_cache=True, position_embeddings=(cos, sin))
        return hidden

    return stack


def layer_inputs(model: Any, cache: Any, tokens: torch.Tensor, position_ids: torch.Tensor) -> tuple[Any, ...]:
    """What LlamaModel.forward computes before its layers: embeddings, rotary tables, the causal mask."""
    from transformers.masking_utils import create_causal_mask

    hidden = model.model.embed_tokens(tokens)
    mask = create_causal_mask(config=model.config, inputs_embeds=hidden, attention_mask=None,
                              past_key_values=cache, position_ids=position_ids)
    cos, sin = model.model.rotary_emb(hidden, position_ids=position_ids)
    return hidden, position_ids, cos, sin, mask


def decode(model: Any, level: str, steps: int, batch: int, max_len: int, jit: bool,
           device: torch.device, dtype: torch.dtype) -> dict[str, Any]:
    """`steps` decode steps of one level from an empty cache; outputs per step and per-step times."""
    cache = new_cache(model.config, batch, max_len, device, dtype)
    fn = make_step(model, level, cache)
    if jit:
        import trident

        fn = jitted = trident.jit(fn)
    generator = torch.Generator().manual_seed(1)
    outputs, times = [], []
    with rope_of(model), torch.no_grad():
        for pos in range(steps):
            tokens = torch.randint(0, model.config.vocab_size, (batch, 1), generator=generator).to(device)
            position_ids = torch.full((batch, 1), pos, dtype=torch.long, device=device)
            args = (tokens, position_ids) if level == "model" else layer_inputs(model, cache, tokens, position_ids)
            sync(device)
            start = time.perf_counter()
            out = fn(*args)
            sync(device)
            times.append(time.perf_counter() - start)
            outputs.append(out.float().clone())
    result: dict[str, Any] = {"outputs": outputs, "times": times}
    if jit:
        from trident.testing import triton_launch_sites

        state = jitted._trident  # type: ignore[attr-defined]
        result.update(compiles=len(state.specializations), eager_calls=state.eager_calls,
                      eager_reason=state.eager_reason, misses=state.misses,
                      triton_launches=[type(site).__name__ for site in triton_launch_sites(jitted)])
    return result


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def max_rel_diff(actual: list[torch.Tensor], expected: list[torch.Tensor]) -> float:
    return max(((a - e).abs().max() / e.abs().max().clamp_min(1e-6)).item() for a, e in zip(actual, expected))


def check_level(plain: Any, liger: Any, level: str, args: argparse.Namespace, device: torch.device,
                dtype: torch.dtype) -> dict[str, Any]:
    """Decode with Trident (liger model), eagerly with the plain HF model and, on CUDA, eagerly with liger's.
    status: ok, mismatch (traced, wrong numbers), or eager-fallback (Trident ran the calls eagerly)."""
    run = dict(steps=args.steps, batch=args.batch, max_len=args.max_len, device=device, dtype=dtype)
    reference = decode(plain, level, jit=False, **run)
    jitted = decode(liger, level, jit=True, **run)
    warm = slice(min(4, args.steps - 1), None)  # steps after the compiles

    def ms(times: list[float]) -> float:
        return 1e3 * sum(times[warm]) / len(times[warm])

    report: dict[str, Any] = {
        "level": level, "compiles": jitted["compiles"], "eager_calls": jitted["eager_calls"],
        "eager_reason": jitted["eager_reason"],
        "triton_launches_per_step": len(jitted["triton_launches"]) // max(jitted["compiles"], 1),
        "launch_kinds": sorted(set(jitted["triton_launches"])),
        "trident_first_call_s": jitted["times"][0], "trident_ms_per_step": ms(jitted["times"]),
        "hf_plain_eager_ms_per_step": ms(reference["times"]),
        "trident_vs_hf_plain": max_rel_diff(jitted["outputs"], reference["outputs"]),
    }
    if device.type == "cuda":  # liger eagerly: the system Trident must match (same kernels, same ATen calls)
        tolerance = 2e-2
        eager = decode(liger, level, jit=False, **run)
        report.update(liger_eager_ms_per_step=ms(eager["times"]),
                      trident_vs_liger_eager=max_rel_diff(jitted["outputs"], eager["outputs"]),
                      liger_eager_vs_hf_plain=max_rel_diff(eager["outputs"], reference["outputs"]),
                      speedup_over_liger_eager=ms(eager["times"]) / ms(jitted["times"]))
        matches = report["trident_vs_liger_eager"] <= tolerance
    else:  # fp32; liger's kernels cannot run eagerly on CPU: the plain model is the reference
        tolerance = 1e-4
        matches = report["trident_vs_hf_plain"] <= tolerance
    report["tolerance"] = tolerance
    report["status"] = "eager-fallback" if jitted["eager_calls"] else "ok" if matches else "mismatch"
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--size", choices=tuple(SIZES), default=None, help="default: small on cuda, tiny on cpu")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--max-len", type=int, default=128, help="StaticCache length")
    p.add_argument("--level", choices=("auto", *LEVELS), default="auto")
    p.add_argument("--liger", default=None, help="liger patches, comma list of rope,rms_norm,swiglu (default: all; "
                   "on cpu rope,swiglu: liger's RMSNorm calls libdevice.rsqrt, which Triton's interpreter lacks)")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    args.size = args.size or ("small" if device.type == "cuda" else "tiny")
    args.liger = (args.liger or ("rope,rms_norm,swiglu" if device.type == "cuda" else "rope,swiglu")).split(",")
    try:
        import liger_kernel  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        print(f"missing package: {e}; carry the wheels listed in this script's docstring", file=sys.stderr)
        return 2
    info = {**machine(device), "liger-kernel": dist_version("liger-kernel")}
    print(f"versions: {json.dumps(info)}")
    plain, liger, config = build_models(args.size, device, dtype, args.max_len, args.liger)
    print(f"model: LlamaForCausalLM {args.size} ({sum(t.numel() for t in plain.parameters()) / 1e6:.1f} M "
          f"parameters), {dtype}, {device}, batch {args.batch}, {args.steps} decode steps; liger modules: "
          f"{sorted({type(m).__name__ for m in liger.modules() if type(m).__module__.startswith('liger')})}"
          f"{', liger RoPE' if 'rope' in args.liger else ''}")

    reports = []
    for level in (LEVELS if args.level == "auto" else (args.level,)):
        try:
            report = check_level(plain, liger, level, args, device, dtype)
        except Exception as e:  # noqa: BLE001 - the failure is the finding; try the next level down
            report = {"level": level, "status": "error", "error": f"{type(e).__name__}: {e}"[:3000],
                      "traceback": traceback.format_exc()[-3000:]}
        reports.append(report)
        print(f"\nlevel '{level}': {report['status'].upper()}")
        for key, value in report.items():
            if key not in ("level", "status", "traceback"):
                print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
        if report["status"] in ("ok", "mismatch"):  # it traced: a lower level would say nothing new
            break
        print(f"  -> level '{level}' could not be jitted; trying the next level down", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"versions": info, "args": {k: str(v) for k, v in vars(args).items()},
                                         "levels": reports}, indent=1, default=str))
    return 0 if reports[-1]["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
