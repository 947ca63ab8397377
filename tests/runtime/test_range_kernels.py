"""Graph replay's own float arange and linspace kernels (csrc/graphs/range_kernels.cpp) are PTX that the driver
compiles on the GPU. Where there is none, this assembles that PTX with the ptxas Triton ships and reads the machine
code back: it must assemble for every architecture the module targets, and an arange's element must be one fused
multiply-add (ATen's contracted `xstart + xstep * i`), not a multiply and an add. What the kernels compute against
ATen's, bit for bit, is tests/e2e/test_cuda_graphs.py's (GPU)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from trident.runtime import build

KERNELS = {"trident_arange_f32", "trident_arange_f64", "trident_linspace_f32", "trident_linspace_f64"}


def nvidia_tools() -> tuple[Path, Path]:
    triton = pytest.importorskip("triton")
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    ptxas, cuobjdump = tools / "ptxas", tools / "cuobjdump"
    if not (ptxas.exists() and cuobjdump.exists()):
        pytest.skip(f"this Triton ships no ptxas and cuobjdump in {tools}")
    return ptxas, cuobjdump


def ptx() -> str:
    return build.load_runtime().range_kernels_ptx()


def test_the_module_holds_the_four_kernels_and_rounds_as_ieee() -> None:
    text = ptx()
    assert set(re.findall(r"\.visible \.entry (\w+)\(", text)) == KERNELS
    # No approximate or flushing arithmetic: ATen is built without fast math.
    assert ".approx" not in text and ".full" not in text and ".ftz" not in text
    for kernel in re.split(r"(?=\.visible \.entry )", text)[1:]:
        name = re.match(r"\.visible \.entry (\w+)", kernel).group(1)  # type: ignore[union-attr]
        arithmetic = re.findall(r"^\s+((?:fma|mul|add|sub|div)\.rn\.f\d\d)", kernel, re.M)
        # arange: one FMA; linspace: the step as the host computes it (one subtraction, one division), then one FMA
        # in each half
        assert len(arithmetic) == (1 if "arange" in name else 4), (name, arithmetic)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_kernels_assemble_and_an_arange_element_is_one_fused_multiply_add(arch: str, tmp_path: Path) -> None:
    ptxas, cuobjdump = nvidia_tools()
    source, cubin = tmp_path / "ranges.ptx", tmp_path / "ranges.cubin"
    source.write_text(ptx())
    assembled = subprocess.run([ptxas, f"-arch={arch}", source, "-o", cubin], capture_output=True, text=True)
    assert assembled.returncode == 0, assembled.stderr
    sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
    functions = dict(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    assert set(functions) == KERNELS, sorted(functions)
    for name, fma, others in (("trident_arange_f32", "FFMA", ("FMUL", "FADD")),
                              ("trident_arange_f64", "DFMA", ("DMUL", "DADD"))):
        opcodes = re.findall(r"\b([A-Z][A-Z0-9]+)(?:\.[A-Z0-9.]+)?\s", functions[name])
        assert opcodes.count(fma) == 1 and not set(others) & set(opcodes), (name, opcodes)

