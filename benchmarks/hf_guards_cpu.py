"""What the guards of a Hugging Face model cost a decode call, on the CPU: every specialization of
`trident.jit(model)` after a prefill and decode steps on a StaticCache, its compiled guard timed on the slots of a
decode call (`runtime.time_guard`: the native guard alone, in a native loop), whether it accepts that call, and
its guards by kind. The prefill specialization is offered each decode call first (it was compiled first, and both
have one structural key): what it costs to reject the call is paid on every token.

    python benchmarks/hf_guards_cpu.py [--layers 16] [--out results.json]

Tiny widths (hidden 64): a guard's cost depends on how many tensors and module entries it reads, not their size.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.machine_info import machine  # noqa: E402


def measure(layers: int, repeat: int) -> list[dict[str, Any]]:
    import transformers

    import trident
    from trident import runtime
    from trident.guards.guard_set import first_failure

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=512)
    config._attn_implementation = "sdpa"
    model = transformers.LlamaForCausalLM(config).eval()
    jitted = trident.jit(model)
    cache = transformers.StaticCache(config=config, max_cache_len=64)
    ids = torch.randint(1, 100, (1, 8))
    with torch.no_grad():
        jitted(input_ids=ids, past_key_values=cache, cache_position=torch.arange(8), use_cache=True)
        for p in range(8, 12):
            call = dict(input_ids=ids[:, -1:], past_key_values=cache, cache_position=torch.arange(p, p + 1),
                        use_cache=True)
            jitted(**call)
    state = jitted._trident  # type: ignore[attr-defined]
    entry, specs = state.entry, state.specializations
    slots = _slots(entry, specs, call)
    rows = []
    with torch.no_grad():  # the guards check grad mode: time and check them under the mode the calls ran in
        decode = next(s for s in reversed(specs) if first_failure(s.guards, slots, s.trace_constants) is None)
        for spec in specs:
            context = runtime.Context(spec.compiled.ops, spec.compiled.constants)
            ns = min(runtime.time_guard(spec.compiled.guard_address, context, slots, repeat) for _ in range(5))
            why = first_failure(spec.guards, slots, spec.trace_constants)
            counts = {f.name: len(getattr(spec.guards, f.name)) for f in dataclasses.fields(spec.guards)
                      if isinstance(getattr(spec.guards, f.name), tuple) and f.name != "identity_objects"}
            rows.append({"specialization": spec.index, "decode": spec is decode, "guard_us": ns / 1e3,
                         "accepts": why is None, "rejects_because": why, "guards": counts})
    return rows


def _slots(entry: Any, specs: list[Any], call: dict[str, Any]) -> tuple[object, ...]:
    """The decode call's slots as the entry binds them: `self` is the object the guards hold, keywords by name,
    the rest their defaults."""
    self_object = specs[-1].guards.identity_objects[0]
    return tuple(self_object if name == "self" else call.get(name, entry.defaults.get(i))
                 for i, name in enumerate(entry.param_names))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--repeat", type=int, default=20000, help="guard calls per timing (best of 5)")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    rows = measure(args.layers, args.repeat)
    accepted = next(r["guard_us"] for r in rows if r["accepts"])
    print(f"LlamaForCausalLM, {args.layers} layers (tiny widths), StaticCache; a decode call's slots")
    print("| specialization | accepts | guard µs | / accepting guard | first mismatch |")
    print("|---|---|---|---|---|")
    for r in rows:
        why = (r["rejects_because"] or "-")[:70]
        print(f"| {r['specialization']}{' (decode)' if r['decode'] else ''} | {r['accepts']} | {r['guard_us']:.2f} "
              f"| {r['guard_us'] / accepted:.2f}x | {why} |")
    if args.out:
        args.out.write_text(json.dumps({"machine": machine(), "layers": args.layers,
                                        "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
