"""Typed (unboxed) entry points for the ATen operators compiled code calls most.

The dispatcher's boxed path (trident_op_call) packs every argument into an IValue stack; on small tensors
that costs more than the operator itself (measured on the CPU CI machine: at::mul 1.0 µs unboxed, 2.3 µs
boxed). libtorch's typed C shim (aoti_torch_cpu_*) covers only Inductor's fallback ops (mm_out, cat, ...),
not the pointwise ops, views and reductions of a typical host program. So, in the manner of that shim, the
runtime build generates one C function per operator of the list below, from the installed torch's schemas:

    int32_t trident_aten_<name>_<overload>(const int64_t* args, AtenTensorHandle* rets)

It takes the same (tag, value) argument pairs as trident_op_call, decodes each by its schema type at
compile time, and calls `at::_ops::<name>_<overload>::call` (the dispatcher's unboxed entry, so behaviour
is the dispatcher's). An operator of the list whose schema uses a type not handled here, or which this
torch lacks, is left out; compiled code then calls it through the boxed path.

This module is pure (torch's schemas in, text out) and shared by both sides of the ABI: the runtime build
compiles `generate_source()`, the lowering calls `typed_symbol` / `is_view_op`. It sits below both packages so
that neither imports the other.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Iterable

import torch

from trident.graphs.steps import makes_no_step

# Operators that typical inference host programs call (after make_fx's decompositions).
TYPED_OPS = (
    "add.Tensor", "add.Scalar", "add_.Tensor", "add_.Scalar", "sub.Tensor", "sub.Scalar", "rsub.Scalar",
    "mul.Tensor", "mul.Scalar", "mul_.Tensor", "mul_.Scalar", "div.Tensor", "div.Scalar", "div.Tensor_mode",
    "div_.Tensor", "neg", "exp", "log", "sqrt", "rsqrt", "relu", "tanh", "sigmoid", "silu", "gelu", "erf",
    "cos", "sin", "abs", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "reciprocal", "clamp", "maximum",
    "minimum", "where.self", "gt.Scalar", "gt.Tensor", "lt.Scalar", "lt.Tensor", "ge.Scalar", "le.Scalar",
    "eq.Scalar", "eq.Tensor", "ne.Scalar", "masked_fill.Scalar", "logical_not",
    "mm", "bmm", "addmm", "baddbmm", "matmul",
    "t", "transpose.int", "permute", "view", "reshape", "_unsafe_view", "unsqueeze", "squeeze.dim",
    "expand", "slice.Tensor", "select.int", "alias", "contiguous", "clone", "copy_", "detach",
    "index.Tensor", "index_select", "embedding", "cat", "stack",
    "sum", "sum.dim_IntList", "mean.dim", "amax", "amin", "max.dim", "argmax", "var.correction",
    "_softmax", "_log_softmax", "native_layer_norm", "_fused_rms_norm",
    "_to_copy", "to.dtype", "empty.memory_format", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "arange", "arange.start", "arange.start_step", "fill_.Scalar", "zero_",
    "_scaled_dot_product_flash_attention_for_cpu",
)  # fmt: skip

# The pure views among them: each also gets an entry that runs below the autograd and ADInplaceOrView layers
# (lowering/aliasing.py says when compiled code may call it: private views), which makes the view without the
# dispatcher (csrc/private_views.h): the function, and the argument types it is written for. A torch whose schema
# differs gets an entry through the dispatcher instead.
DIRECT_VIEWS = {
    "t": ("t", ("Tensor(a)",)),
    "transpose.int": ("transpose", ("Tensor(a)", "int", "int")),
    "permute": ("permute", ("Tensor(a)", "int[]")),
    "view": ("view", ("Tensor(a)", "SymInt[]")),
    "unsqueeze": ("unsqueeze", ("Tensor(a)", "int")),
    "squeeze.dim": ("squeeze_dim", ("Tensor(a)", "int")),
    "expand": ("expand", ("Tensor(a)", "SymInt[]", "bool")),
    "slice.Tensor": ("slice", ("Tensor(a)", "int", "SymInt?", "SymInt?", "SymInt")),
    "select.int": ("select", ("Tensor(a)", "int", "SymInt")),
    "alias": ("alias", ("Tensor(a)",)),
}  # fmt: skip
VIEW_OPS = tuple(DIRECT_VIEWS)
BELOW_AUTOGRAD = "_below_autograd"  # the suffix of those entries' symbols

_SCALARS = {"int": "int64_t", "float": "double", "bool": "bool", "ScalarType": "at::ScalarType",
            "Layout": "at::Layout", "MemoryFormat": "at::MemoryFormat"}  # fmt: skip


def symbol(name: str, overload: str) -> str:
    return f"trident_aten_{name}_{overload}" if overload else f"trident_aten_{name}"


def _ops_name(name: str, overload: str) -> str:
    return f"at::_ops::{name}_{overload}" if overload else f"at::_ops::{name}"


def _split_arguments(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for ch in text:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        parts.append(current.strip())
    return [p for p in parts if p != "*"]


def _decode(type_text: str, i: int) -> tuple[str, str] | None:
    """(declaration of local a<i> from args[2i], args[2i+1]; expression passed to the operator), or None."""
    t, v = f"args[{2 * i}]", f"args[{2 * i + 1}]"
    base = re.sub(r"\([a-z!|*]*\)", "", type_text)  # drop alias annotations: Tensor(a!) -> Tensor
    optional = base.endswith("?")
    core = base.rstrip("?")
    core = re.sub(r"\[\d+\]", "[]", core)  # int[1] -> int[]
    a = f"a{i}"
    if core == "Tensor":
        if optional:
            return f"auto {a} = opt_tensor({t}, {v});", a
        if "!" in type_text:  # mutated in place: the operator takes a non-const reference
            return f"at::Tensor& {a} = tensor({v});", a
        return f"const at::Tensor& {a} = tensor({v});", a
    if core == "SymInt":
        if optional:
            return f"auto {a} = is_none({t}) ? std::optional<c10::SymInt>() : std::optional<c10::SymInt>(c10::SymInt({v}));", a
        return f"c10::SymInt {a}({v});", a
    if core == "Scalar":
        if optional:
            return f"auto {a} = is_none({t}) ? std::optional<at::Scalar>() : std::optional<at::Scalar>(scalar({t}, {v}));", a
        return f"at::Scalar {a} = scalar({t}, {v});", a
    if core in ("int[]", "SymInt[]"):
        ref = f"ints({t}, {v})"
        if core == "SymInt[]":
            ref = f"c10::fromIntArrayRefSlow({ref})"
        if optional:
            kind = "at::OptionalSymIntArrayRef" if core == "SymInt[]" else "at::OptionalIntArrayRef"
            return f"{kind} {a} = is_none({t}) ? {kind}() : {kind}({ref});", a
        return f"auto {a} = {ref};", a
    if core == "Tensor[]" and not optional:
        return f"std::vector<at::Tensor> {a} = tensors({t}, {v});", f"at::TensorList({a})"
    if core == "Tensor?[]" and not optional:
        return f"c10::List<std::optional<at::Tensor>> {a} = optional_tensors({t}, {v});", a
    if core == "str":
        if optional:
            return f"auto {a} = is_none({t}) ? std::optional<c10::string_view>() : std::optional<c10::string_view>(c10::string_view(reinterpret_cast<const char*>({v})));", a
        return f"c10::string_view {a}(reinterpret_cast<const char*>({v}));", a
    if core == "Device" and optional:
        return f"auto {a} = is_none({t}) ? std::optional<at::Device>() : std::optional<at::Device>(device({v}));", a
    if core in _SCALARS:
        cpp = _SCALARS[core]
        value = {"float": f"as_double({v})", "bool": f"({v} != 0)"}.get(core, f"static_cast<{cpp}>({v})")
        if optional:
            return f"auto {a} = is_none({t}) ? std::optional<{cpp}>() : std::optional<{cpp}>({value});", a
        return f"{cpp} {a} = {value};", a
    return None


def _schema(qualified: str) -> tuple[str, str, str] | None:
    name, _, overload = qualified.partition(".")
    try:
        return name, overload, str(torch._C._get_schema(f"aten::{name}", overload))
    except RuntimeError:
        return None  # not in this torch


def _function(name: str, overload: str, schema: str, below_autograd: bool = False) -> str | None:
    arguments_text = schema[schema.index("(") + 1 : schema.rindex(") ->")]
    returns_text = schema[schema.rindex("->") + 2 :].strip()
    if returns_text.startswith("("):
        returns_text = returns_text[1:-1]
    returns = [r.strip() for r in _split_arguments(returns_text)]
    if not returns or any(not re.sub(r"\([a-z!|*]*\)", "", r).split()[0] == "Tensor" for r in returns):
        return None  # only Tensor returns are typed
    lines, passed = [], []
    for i, argument in enumerate(_split_arguments(arguments_text)):
        decoded = _decode(argument.split()[0], i)
        if decoded is None:
            return None
        lines.append("    " + decoded[0])
        passed.append(decoded[1])
    qualified = f"{name}.{overload}" if overload else name
    call = f"{_ops_name(name, overload)}::call({', '.join(passed)})"
    direct = DIRECT_VIEWS.get(qualified)
    types = tuple(a.split()[0] for a in _split_arguments(arguments_text))
    if below_autograd and direct is not None and direct[1] == types:
        call = f"trident::private_views::{direct[0]}({', '.join(passed)})"
    elif below_autograd:  # the view is made as its kernel makes it: no view or autograd metadata
        lines.append("    at::AutoDispatchBelowADInplaceOrView below_autograd;")
    elif is_factory(types):
        # A factory: torch's own (torch::zeros ..., variable_factories.h, what torch.zeros calls) runs ATen's below
        # the ADInplaceOrView layer, so the fill inside zeros, ones or full counts no write (eager's _version is 0).
        lines.append("    at::AutoDispatchBelowADInplaceOrView as_torch_factories;")
    if len(returns) == 1:
        lines.append(f"    rets[0] = own({call});")
    else:
        lines.append(f"    auto r = {call};")
        lines += [f"    rets[{k}] = own(std::get<{k}>(r));" for k in range(len(returns))]
    body = "\n".join(lines)
    entry = symbol(name, overload) + (BELOW_AUTOGRAD if below_autograd else "")
    if below_autograd or makes_no_step(torch._C._get_schema(f"aten::{name}", overload)):  # recordings run it as it is
        return (
            f"TRIDENT_API int32_t {entry}(const int64_t* args, AtenTensorHandle* rets) {{\n"
            f"  try {{\n{body}\n    return TRIDENT_OK;\n  }} catch (...) {{\n"
            f"    return trident::fail_with_current_exception();\n  }}\n}}\n"
        )
    # Device work: while a CUDA graph records or replays (graphs/replay.h), the operator is one opaque step.
    arguments = _split_arguments(arguments_text)
    written = sum(1 << i for i, a in enumerate(arguments) if "!" in a.split()[0] and i < 64)
    impl = f"run_{entry}"
    return (
        f"static int32_t {impl}(const void*, const int64_t* args, int64_t, AtenTensorHandle* rets, int64_t) {{\n"
        f"  try {{\n{body}\n    return TRIDENT_OK;\n  }} catch (...) {{\n"
        f"    return trident::fail_with_current_exception();\n  }}\n}}\n"
        f"TRIDENT_API int32_t {entry}(const int64_t* args, AtenTensorHandle* rets) {{\n"
        f"  if (trident::graphs::active != nullptr) {{\n"
        f"    return trident::graphs::opaque_step(reinterpret_cast<const void*>(&{impl}), \"aten::{qualified}\", args, "
        f"{len(arguments)}, {written}ULL, {impl}, nullptr, rets, {len(returns)});\n"
        f"  }}\n  return {impl}(nullptr, args, {len(arguments)}, rets, {len(returns)});\n}}\n"
    )


@functools.cache
def _generated() -> dict[tuple[str, str], tuple[str, int]]:
    """(aten name, overload) -> (C++ function text, number of schema arguments)."""
    functions = {}
    for qualified in TYPED_OPS:
        found = _schema(qualified)
        if found is None:
            continue
        name, overload, schema = found
        text = _function(name, overload, schema)
        if text is not None:
            if qualified in VIEW_OPS:
                text += "\n" + (_function(name, overload, schema, below_autograd=True) or "")
            n_args = len(torch._C._get_schema(f"aten::{name}", overload).arguments)
            functions[(f"aten::{name}", overload)] = (text, n_args)
    return functions


def typed_symbol(name: str, overload: str, n_args: int, below_autograd: bool = False) -> str | None:
    """The typed entry for operator `name` ("aten::add"), overload ("Tensor", "" for default) called with
    n_args arguments (defaults included), if there is one; with below_autograd, its below-autograd entry (views
    only)."""
    found = _generated().get((name, overload))
    if found is None or found[1] != n_args:
        return None
    if below_autograd and not is_view_op(name, overload):
        return None
    return symbol(name.removeprefix("aten::"), overload) + (BELOW_AUTOGRAD if below_autograd else "")


def is_factory(argument_types: Iterable[str]) -> bool:
    """Whether an operator with arguments of these schema types ("int[]", "Tensor?", "List[Tensor]") is a factory:
    none holds a tensor. Compiled code runs a factory as torch's own factories do (below ADInplaceOrView)."""
    return not any("Tensor" in t for t in argument_types)


def is_view_op(name: str, overload: str) -> bool:
    """Whether ("aten::slice", "Tensor") is one of VIEW_OPS."""
    qualified = name.removeprefix("aten::") + (f".{overload}" if overload else "")
    return qualified in VIEW_OPS


def generate_source() -> str:
    """C++ source of every typed entry this torch supports (compiled into the runtime)."""
    return (
        "// Generated by trident/typed_ops.py from the installed torch's schemas. Do not edit.\n"
        '#include "typed_ops_support.h"\n#include "graphs/replay.h"\n#include "private_views.h"\n\n#include <ATen/core/LegacyTypeDispatch.h>\n\nextern "C" {\n\n'
        + "\n".join(text for text, _ in _generated().values())
        + '\n}  // extern "C"\n'
    )
