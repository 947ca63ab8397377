"""Pass: func/arith/cf/llvm text -> a module in the LLVM dialect, ready for the ExecutionEngine."""
from __future__ import annotations

from torch_mlir import ir, passmanager

PIPELINE = (
    "builtin.module(func.func(convert-scf-to-cf),convert-arith-to-llvm,convert-index-to-llvm,"
    "convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)"
)


def lower_to_llvm(text: str, context: ir.Context) -> ir.Module:
    with context:
        module = ir.Module.parse(text)
        passmanager.PassManager.parse(PIPELINE).run(module.operation)
    return module
