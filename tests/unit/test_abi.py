"""trident.abi: the runtime header is the one definition of every ABI code, and Python reads it from there."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from trident import abi

CSRC = abi.HEADER.parent
SRC = CSRC.parent


def test_every_integer_define_of_the_header_is_a_code_with_its_value() -> None:
    # A second, independent reading: every `#define TRIDENT_X <value>` line, whatever follows the value.
    defines = {}
    for name, value in re.findall(r"^#define TRIDENT_(\w+)[ \t]+(\S+)", abi.HEADER.read_text(), re.M):
        if value.strip("()").lstrip("-").isalnum():  # skip TRIDENT_API's __attribute__ / __declspec
            defines[name] = int(value.strip("()"), 0)
    assert defines == abi.CODES
    assert abi.TAG_TENSOR == 1 and abi.SEQ_LIST == 2 and abi.DTYPE_BFLOAT16 == 15 and abi.POOL_LIKE_INPUT == -1
    assert abi.family("DEVICE_TYPE_") == {"CPU": 0, "CUDA": 1, "XPU": 12, "MPS": 13, "META": 14}


def test_a_name_the_header_does_not_define_is_an_error_that_says_so() -> None:
    with pytest.raises(AttributeError, match="trident_runtime.h defines no TRIDENT_TAG_TENSR"):
        abi.TAG_TENSR  # noqa: B018
    with pytest.raises(KeyError, match="no TRIDENT_NOPE_"):
        abi.family("NOPE_")
    with pytest.raises(KeyError, match="no struct Missing"):
        abi.struct_fields("Missing")


def test_the_cpp_side_uses_only_codes_the_header_defines() -> None:
    """No other C++ file defines a TRIDENT_* code of its own: every TRIDENT_ name they use is the header's, an
    include guard, or the build-time check macro of tensor_access.cpp."""
    allowed = set(abi.CODES) | {"API", "SAME_CODE"}
    for path in sorted(CSRC.glob("*.cpp")) + sorted(CSRC.glob("*.h")):
        # Comments and string literals name knobs (TRIDENT_MATMUL_PLANS), not codes.
        text = re.sub(r'/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"', "", path.read_text(), flags=re.S)
        guard = re.search(r"#ifndef TRIDENT_(\w+_H)\b", text)
        used = set(re.findall(r"\bTRIDENT_(\w+)", text)) - ({guard[1]} if guard else set())
        assert used <= allowed, (path.name, sorted(used - allowed))
        if path != abi.HEADER:
            assert not re.search(r"^\s*#define TRIDENT_\w+\s+\(?-?\d", text, re.M), path.name
            assert not re.search(r"\benum\b[^{;]*\{[^}]*\b(KEY|PARAM|TAG|SEQ|EXC|DTYPE)_", text), path.name


def test_python_does_not_retype_the_codes() -> None:
    """The modules that used to carry copies of the codes name them from trident.abi instead."""
    retyped = {
        "capture/inputs.py": r"SEQ_TUPLE\s*,\s*SEQ_LIST\s*=|TYPE_TENSOR\s*,\s*TYPE_PARAMETER\s*=",
        "guards/global_state.py": r"<< 8\b",
        "guards/values.py": r"== 1 else \"list\"",
        "torch_codes.py": r"torch\.float32:\s*6|\"cuda\":\s*1",
        "lowering/runtime_abi.py": r"^(TAG|FLAG|EXC)_\w+\s*=\s*\d",
        "runtime/triton_native.py": r"=\s*range\(5\)",
    }
    for relative, pattern in retyped.items():
        assert not re.search(pattern, (SRC / relative).read_text(), re.M), relative


def test_abi_sits_at_the_bottom_of_the_import_graph_and_reads_the_header_quickly() -> None:
    """Loaded on its own (not through the trident package), it imports neither trident nor torch, and reading
    the header is cheap: 0.5-2 ms on the CI CPU; the bound here is loose because that machine is shared (26 ms
    seen under load), and is there to catch something heavy creeping in, not to time it."""
    script = f"""
import importlib.util, sys, time
spec = importlib.util.spec_from_file_location("abi_alone", {str(SRC / "abi.py")!r})
module = importlib.util.module_from_spec(spec)
start = time.perf_counter()
spec.loader.exec_module(module)
elapsed = time.perf_counter() - start
assert module.TAG_TENSOR == 1, module.TAG_TENSOR
loaded = sorted(m for m in sys.modules if m == "torch" or m.startswith(("torch.", "trident")))
print(elapsed, loaded)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split(" ", 1)
    assert out[1].strip() == "[]"
    assert float(out[0]) < 0.25


def _prototypes() -> dict[str, tuple[str | None, tuple[str, ...]]]:
    """name -> (MLIR result type, MLIR parameter types) of every TRIDENT_API function of the header."""
    def mlir_type(c_type: str) -> str | None:
        c_type = re.sub(r"\bconst\b", "", c_type).strip()
        if c_type.endswith("*") or c_type in ("AtenTensorHandle", "PyObject"):
            return "!llvm.ptr"
        return {"int32_t": "i32", "int64_t": "i64", "double": "f64", "void": None}[c_type]

    text = re.sub(r"/\*.*?\*/", "", abi.HEADER.read_text(), flags=re.S)
    prototypes = {}
    for result, name, params in re.findall(r"TRIDENT_API\s+([\w\s*]+?)\s*\b(trident_\w+)\(([^)]*)\);", text):
        types = [re.sub(r"\w+$", "", p.strip()) for p in params.split(",") if p.strip() not in ("", "void")]
        prototypes[name] = (mlir_type(result), tuple(mlir_type(t) for t in types))
    return prototypes


def test_the_externs_generated_code_declares_have_the_header_signatures() -> None:
    """A wrong parameter or result type in an Extern would link (symbols have no types) and misbehave at run time."""
    from trident.ir.mlir_text import Extern
    from trident.lowering import pooled_allocations, runtime_abi

    prototypes = _prototypes()
    assert len(prototypes) > 30 and prototypes["trident_op_call"] == ("i32", ("!llvm.ptr", "!llvm.ptr", "i64", "!llvm.ptr", "i64"))
    externs = [v for m in (runtime_abi, pooled_allocations) for v in vars(m).values() if isinstance(v, Extern)]
    assert len(externs) > 25
    for extern in externs:
        assert prototypes[extern.name] == (extern.result, extern.params), extern.name
