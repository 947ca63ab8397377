"""FileCheck for golden-IR tests, through the `filecheck` package (no LLVM install needed)."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import textwrap


def filecheck(ir_text: str, checks: str) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".checks", delete=False) as f:
        f.write(textwrap.dedent(checks))
    result = subprocess.run(
        [sys.executable, "-m", "filecheck", f.name], input=ir_text, capture_output=True, text=True
    )
    assert result.returncode == 0, f"FileCheck failed:\n{result.stdout}\n{result.stderr}\n--- IR ---\n{ir_text}"
