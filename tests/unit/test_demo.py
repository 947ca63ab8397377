"""`./dev demo` (examples/demo.py) on CPU: its decode loop equals eager bit for bit and ran natively.

The demo prints one parseable line for this, counted over its checked decode of 16 positions:
    check: equal=True compiled=2 specializations=2 native_hits=16 eager_calls=0
An eager fallback would equal eager too, so the counters are what this test is about."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = re.compile(r"^check: equal=(\w+) compiled=(\d+) specializations=(\d+) native_hits=(\d+) eager_calls=(\d+)$",
                   re.MULTILINE)


def run_demo(**env: str) -> subprocess.CompletedProcess[str]:
    # CPU even on a GPU machine; no disk cache, so that both specializations are compiled here rather than
    # loaded; strict, so that a call running eagerly fails the demo outright.
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRIDENT_DISK_CACHE": "0", "TRIDENT_STRICT": "1", **env}
    return subprocess.run([sys.executable, str(ROOT / "examples" / "demo.py")], capture_output=True, text=True,
                          env=environ, timeout=600)


def test_demo_decode_matches_eager_natively() -> None:
    result = run_demo()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "device: cpu" in result.stdout, output
    assert "tokens equal True, logits equal (torch.equal) True" in result.stdout, output
    match = CHECK.search(result.stdout)
    assert match is not None, output
    equal, compiled, specializations, hits, eager_calls = match.groups()
    assert equal == "True", output
    # position 0 as a constant, then the position symbolic: two compiles serve all 16 steps, each a native hit
    assert (int(compiled), int(specializations)) == (2, 2), output
    assert int(hits) == 16 and int(eager_calls) == 0, output
    assert "Triton kernel 'kv_write_kernel'" in result.stdout, output  # the step's own launches were captured
    assert re.search(r"per step \(median of \d+\): eager [\d.]+ ms, trident [\d.]+ ms", result.stdout), output


def test_demo_refuses_to_compare_without_trident() -> None:
    """With trident.jit disabled both sides are eager: the demo must not report that as a result."""
    result = run_demo(TRIDENT_DISABLE="1")
    assert result.returncode != 0
    assert "TRIDENT_DISABLE=1" in result.stderr and "check:" not in result.stdout
