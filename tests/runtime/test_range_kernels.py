"""Graph replay's own floating arange and linspace kernels (csrc/graphs/range_kernels.cpp) are PTX that the driver
compiles on the GPU. Where there is none, this assembles that PTX with the ptxas Triton ships and reads the machine
code back: each module must assemble for the architectures it targets, and an arange's element must be one fused
multiply-add (ATen's contracted `xstart + xstep * i`), not a multiply and an add, for every element type. A half or
bfloat16 linspace is the opposite: c10's arithmetic rounds every operation to the type, so nothing may fuse. What
the kernels compute against ATen's, bit for bit, is tests/e2e/test_cuda_graphs.py's (GPU)."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from trident.runtime import build

TYPES = ("f32", "f64", "f16", "bf16")
KERNELS = {f"trident_{kind}_{t}" for kind in ("arange", "linspace") for t in TYPES}
# The modules' kernels and the architectures each is assembled for here (cuobjdump reads sm_80 and later).
MODULES = ({k for k in KERNELS if not k.endswith("bf16")}, {k for k in KERNELS if k.endswith("bf16")})


def nvidia_tools() -> tuple[Path, Path]:
    triton = pytest.importorskip("triton")
    tools = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    ptxas, cuobjdump = tools / "ptxas", tools / "cuobjdump"
    if not (ptxas.exists() and cuobjdump.exists()):
        pytest.skip(f"this Triton ships no ptxas and cuobjdump in {tools}")
    return ptxas, cuobjdump


def modules() -> tuple[str, ...]:
    return build.load_runtime().range_kernels_ptx()


def kernels_of(text: str) -> dict[str, str]:
    return {re.match(r"\.visible \.entry (\w+)", k).group(1): k  # type: ignore[union-attr]
            for k in re.split(r"(?=\.visible \.entry )", text)[1:]}


def test_the_modules_hold_the_eight_kernels_and_round_as_ieee() -> None:
    texts = modules()
    assert [set(kernels_of(text)) for text in texts] == list(MODULES)
    assert [re.search(r"\.target (sm_\d+)", text).group(1) for text in texts] == ["sm_70", "sm_80"]  # type: ignore
    for text in texts:
        # No approximate or flushing arithmetic: ATen is built without fast math.
        assert ".approx" not in text and ".full" not in text and ".ftz" not in text
        for name, kernel in kernels_of(text).items():
            arithmetic = re.findall(r"^\s+((?:fma|mul|add|sub|div)\.rn\.f\d\d)", kernel, re.M)
            roundings = re.findall(r"^\s+(cvt\.rn\.b?f16\.f32)", kernel, re.M)
            reduced = name.endswith("f16")  # half or bfloat16
            if "arange" in name:  # one FMA (in float32 for half and bfloat16), rounded once at the store
                assert arithmetic == [f"fma.rn.{'f32' if reduced else name[-3:]}"], (name, arithmetic)
                assert len(roundings) == (1 if reduced else 0), (name, roundings)
            elif not reduced:  # the step as the host computes it (a subtraction, a division), an FMA in each half
                assert len(arithmetic) == 4 and arithmetic.count(f"fma.rn.{name[-3:]}") == 2, (name, arithmetic)
            else:  # c10's arithmetic: sub, div, then mul and sub (second half) or mul and add (first), no FMA;
                # each result rounded to the type, and each converted int (steps - 1, the index) too
                assert arithmetic == ["sub.rn.f32", "div.rn.f32", "mul.rn.f32", "sub.rn.f32", "mul.rn.f32",
                                      "add.rn.f32"], (name, arithmetic)
                assert len(roundings) == 8, (name, roundings)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_the_kernels_assemble_and_an_arange_element_is_one_fused_multiply_add(arch: str, tmp_path: Path) -> None:
    ptxas, cuobjdump = nvidia_tools()
    functions: dict[str, str] = {}
    for index, text in enumerate(modules()):
        source, cubin = tmp_path / f"ranges{index}.ptx", tmp_path / f"ranges{index}.cubin"
        source.write_text(text)
        assembled = subprocess.run([ptxas, f"-arch={arch}", source, "-o", cubin], capture_output=True, text=True)
        assert assembled.returncode == 0, assembled.stderr
        sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
        functions.update(re.findall(r"Function : (\w+)\n(.*?)(?=\n\s*Function : |\Z)", sass, re.S))
    assert set(functions) == KERNELS, sorted(functions)
    for t in TYPES:
        fma, others = ("DFMA", ("DMUL", "DADD")) if t == "f64" else ("FFMA", ("FMUL", "FADD"))
        opcodes = re.findall(r"\b([A-Z][A-Z0-9]+)(?:\.[A-Z0-9.]+)?\s", functions[f"trident_arange_{t}"])
        assert opcodes.count(fma) == 1 and not set(others) & set(opcodes), (t, opcodes)


def test_the_half_module_assembles_for_sm_70(tmp_path: Path) -> None:
    """The first module targets sm_70 (Volta): it must assemble there, without bfloat16 conversions."""
    ptxas, _ = nvidia_tools()
    source = tmp_path / "ranges.ptx"
    source.write_text(modules()[0])
    assembled = subprocess.run([ptxas, "-arch=sm_70", source, "-o", tmp_path / "ranges.cubin"], capture_output=True,
                               text=True)
    assert assembled.returncode == 0, assembled.stderr
