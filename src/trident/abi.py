"""The codes of the native runtime's ABI, read from csrc/trident_runtime.h, where each is defined once.

Every `#define TRIDENT_<NAME> <integer>` of the header is an attribute `<NAME>` here: `abi.TAG_TENSOR`,
`abi.SEQ_TUPLE`, `abi.DTYPE_FLOAT32`, `abi.EXC_OVERFLOW`. Python code uses these names instead of retyping the
numbers, so the header is the only place a code can change; the C++ side includes the header itself.
`family("DTYPE_")` gives a family as a table (name without the prefix -> code) and `struct_fields` the field
order of a struct the generated code indexes.

This module is at the bottom of the import graph (it imports nothing from trident, nor torch) and reads the
header once, at import: 0.5-0.7 ms on the 2-core CI machine, most of it compiling the regular expression
(tests/unit/test_abi.py checks it stays light).
"""
from __future__ import annotations

import re
from pathlib import Path

HEADER = Path(__file__).resolve().parent / "csrc" / "trident_runtime.h"

# `#define TRIDENT_NAME 12`, `0x1f` or `(-1)`, optionally followed by a comment; other defines (TRIDENT_API,
# the include guard) have no integer value and are not codes.
_DEFINE = re.compile(r"^#define TRIDENT_(\w+)[ \t]+\(?(-?(?:0[xX][0-9a-fA-F]+|\d+))\)?[ \t]*(?:/\*.*)?$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _read_codes(text: str) -> dict[str, int]:
    codes: dict[str, int] = {}
    for match in _DEFINE.finditer(text):
        name, value = match[1], int(match[2], 0)
        if name in codes:
            raise ImportError(f"{HEADER}: TRIDENT_{name} is defined twice")
        codes[name] = value
    return codes


_TEXT = HEADER.read_text()
CODES: dict[str, int] = _read_codes(_TEXT)
globals().update(CODES)


def __getattr__(name: str) -> int:
    """Only reached for a name the header does not define (the defined ones are module attributes)."""
    raise AttributeError(f"trident_runtime.h defines no TRIDENT_{name} (trident.abi has no {name!r})")


def family(prefix: str) -> dict[str, int]:
    """The codes whose names start with `prefix`, keyed by the rest of the name: family("DEVICE_TYPE_") ->
    {"CPU": 0, "CUDA": 1, ...}."""
    table = {name.removeprefix(prefix): code for name, code in CODES.items() if name.startswith(prefix)}
    if not table:
        raise KeyError(f"trident_runtime.h defines no TRIDENT_{prefix}* codes")
    return table


def struct_fields(name: str) -> tuple[str, ...]:
    """The field names of `typedef struct { ... } name;` in declaration order (generated code indexes the
    runtime's structs by field number: every field is 8 bytes)."""
    match = re.search(r"typedef struct \{([^}]*)\}\s*" + re.escape(name) + r"\s*;", _TEXT)
    if match is None:
        raise KeyError(f"trident_runtime.h declares no struct {name}")
    body = _COMMENT.sub("", match[1])
    return tuple(re.findall(r"(\w+)\s*;", body))
