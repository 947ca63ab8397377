"""Pass: func/arith/cf/llvm text -> a module in the LLVM dialect, ready for the ExecutionEngine."""
from __future__ import annotations

from torch_mlir import ir, passmanager

PIPELINE = (
    "builtin.module(func.func(convert-scf-to-cf),convert-arith-to-llvm,convert-index-to-llvm,"
    "convert-cf-to-llvm,convert-func-to-llvm,reconcile-unrealized-casts)"
)


def lower_to_llvm(text: str, context: ir.Context) -> ir.Module:
    """The module is verified as parsed and once lowered, not after each of the six passes: that took three
    quarters of this stage on a 28-layer model's 5 MB module. An invalid result still fails here, with the
    diagnostics."""
    with context:
        module = ir.Module.parse(text)
        passes = passmanager.PassManager.parse(PIPELINE)
        passes.enable_verifier(False)
        passes.run(module.operation)
        module.operation.verify()  # raises MLIRError, with the diagnostics, on an invalid result
    return module
