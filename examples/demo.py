"""Trident demo: a small jitted function, checked against eager and timed against it (CPU)."""
from __future__ import annotations

import time

import torch

import trident


@trident.jit
def mlp_block(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, scale: float) -> torch.Tensor:
    h = torch.nn.functional.gelu(x @ w1)
    y = (h @ w2) * scale
    return torch.nn.functional.layer_norm(y + x, (x.shape[-1],))


def eager(x, w1, w2, scale):  # type: ignore[no-untyped-def]
    return mlp_block.__wrapped__(x, w1, w2, scale)  # type: ignore[attr-defined]


def per_call_us(fn, *args, repeat: int = 2000) -> float:  # type: ignore[no-untyped-def]
    for _ in range(50):
        fn(*args)
    start = time.perf_counter()
    for _ in range(repeat):
        fn(*args)
    return (time.perf_counter() - start) / repeat * 1e6


def main() -> None:
    torch.manual_seed(0)
    x, w1, w2 = torch.randn(4, 16), torch.randn(16, 32), torch.randn(32, 16)
    with torch.no_grad():
        start = time.perf_counter()
        out = mlp_block(x, w1, w2, 0.5)
        first = (time.perf_counter() - start) * 1e3
        expected = eager(x, w1, w2, 0.5)
        ok = torch.allclose(out, expected, atol=1e-5, rtol=1e-5)
        print(f"result matches eager: {ok} (max abs diff {(out - expected).abs().max().item():.2e})")
        print(f"first call (capture + compile): {first:.0f} ms")
        t_eager = per_call_us(eager, x, w1, w2, 0.5)
        t_trident = per_call_us(mlp_block, x, w1, w2, 0.5)
        print(f"eager   {t_eager:7.2f} us/call")
        print(f"trident {t_trident:7.2f} us/call  ({t_eager / t_trident:.2f}x faster than eager)")
        print()
        print(trident.explain(mlp_block))
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
