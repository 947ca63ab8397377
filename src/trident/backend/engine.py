"""Native code from an LLVM-dialect module: torch-mlir's ExecutionEngine (LLVM ORC JIT).

`ExecutionEngine.raw_lookup` returns MLIR's packed `void(void**)` wrapper, not the C function; the plain
symbol comes from `mlirExecutionEngineLookup` in the CAPI library, called here through ctypes."""
from __future__ import annotations

import ctypes
import os
from functools import cache

from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine

from .. import exc


class _EngineRef(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p)]


class _StringRef(ctypes.Structure):
    _fields_ = [("data", ctypes.c_char_p), ("length", ctypes.c_size_t)]


@cache
def _capi() -> ctypes.CDLL:
    lib = ctypes.CDLL(os.path.join(os.path.dirname(ir.__file__), "_mlir_libs", "libTorchMLIRAggregateCAPI.so"))
    lib.mlirExecutionEngineLookup.restype = ctypes.c_void_p
    lib.mlirExecutionEngineLookup.argtypes = [_EngineRef, _StringRef]
    ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ctypes.pythonapi.PyCapsule_GetName.restype = ctypes.c_char_p
    ctypes.pythonapi.PyCapsule_GetName.argtypes = [ctypes.py_object]
    return lib


class NativeModule:
    """A JIT-compiled module; keeps the engine (and so the code) alive while referenced."""

    def __init__(self, module: ir.Module, shared_libs: list[str], keep_object: bool = False) -> None:
        # keep_object: LLVM keeps the object file it generates, so write_object can persist the code (trident.cache).
        # opt_level=0: host programs are straight-line calls into the runtime, so LLVM's optimizations buy no
        # measurable speed (benchmarks/host_overhead_cpu.py: same µs at 0 and 2) but cost most of the compile
        # time (a 16-layer decode step: 26 s of code generation at 2, about 1 s at 0).
        self.engine = ExecutionEngine(
            module, opt_level=0, shared_libs=shared_libs, enable_pic=True, enable_object_dump=keep_object
        )
        self.keeps_object = keep_object
        _capi()  # declares the ctypes signatures used below
        capsule = self.engine._CAPIPtr
        name = ctypes.pythonapi.PyCapsule_GetName(capsule)
        self._handle = _EngineRef(ctypes.pythonapi.PyCapsule_GetPointer(capsule, name))

    def address(self, symbol: str) -> int:
        data = symbol.encode()
        # The first lookup triggers LLVM code generation; ctypes releases the GIL meanwhile.
        address = _capi().mlirExecutionEngineLookup(self._handle, _StringRef(data, len(data)))
        if not address:
            raise exc.LoweringError(f"symbol {symbol} was not found in the compiled module (see stderr for JIT errors)")
        return int(address)

    def write_object(self, path: str) -> None:
        """Write the generated object file (position-independent, external symbols unresolved) to `path`.

        Only for modules created with keep_object=True, after code generation (the first `address` call)."""
        if not self.keeps_object:
            raise exc.LoweringError("write_object needs a NativeModule created with keep_object=True")
        self.engine.dump_to_object_file(path)
