"""One short run of benchmarks/warm_start.py so it does not rot (no timing is asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_warm_start_benchmark_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    script = ROOT / "benchmarks" / "warm_start.py"
    command = [sys.executable, str(script), "--quick", "--only", "small", "--json", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "small" in result.stdout and "cold/warm" in result.stdout
    data = json.loads(out.read_text())
    assert data["machine"]["torch"] and data["results"]["small"]["warm_first_call_ms"] > 0
