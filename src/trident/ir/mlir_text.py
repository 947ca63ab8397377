"""A small builder for the func/arith/cf/llvm MLIR that Trident's lowering passes emit as text.

Passes build straight-line code with early exits: `check(cond)` branches to the function's failure block
when cond is false. Values are SSA names (strings); the builder keeps constants and allocas in the entry
block so they dominate every use.
"""
from __future__ import annotations

import dataclasses

from ..native_numbers import float_bits

PTR = "!llvm.ptr"
I64 = "i64"
I32 = "i32"
I1 = "i1"
F64 = "f64"


@dataclasses.dataclass(frozen=True)
class Extern:
    """A runtime or shim function generated code calls."""

    name: str
    params: tuple[str, ...]
    result: str | None

    def declaration(self) -> str:
        results = f" -> {self.result}" if self.result else ""
        return f"  func.func private @{self.name}({', '.join(self.params)}){results}"


class ModuleBuilder:
    """Collects functions, the externs they call and string constants into one module's text."""

    def __init__(self) -> None:
        self.externs: dict[str, Extern] = {}
        self.strings: dict[str, str] = {}
        self.functions: list[str] = []

    def string(self, text: str) -> str:
        """Symbol of a NUL-terminated global holding `text`."""
        if text not in self.strings:
            self.strings[text] = f"trident_str_{len(self.strings)}"
        return self.strings[text]

    def text(self) -> str:
        lines = ["module {"]
        # A function of this module called through an Extern (a guard calling a value program) is defined here.
        defined = {f.partition("@")[2].partition("(")[0] for f in self.functions}
        externs = [e for e in self.externs.values() if e.name not in defined]
        lines += [e.declaration() for e in sorted(externs, key=lambda e: e.name)]
        for value, symbol in self.strings.items():
            data = value.encode() + b"\0"
            escaped = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
            lines.append(
                f'  llvm.mlir.global internal constant @{symbol}("{escaped}") {{addr_space = 0 : i32}}'
                f" : !llvm.array<{len(data)} x i8>"
            )
        lines += self.functions
        lines.append("}")
        return "\n".join(lines) + "\n"


class FunctionBuilder:
    def __init__(
        self, module: ModuleBuilder, name: str, params: list[tuple[str, str]], result: str, fail_value: int
    ) -> None:
        self.module = module
        self.name = name
        self.params = params
        self.result = result
        self.fail_value = fail_value
        self._prologue: list[str] = []
        self._body: list[str] = []
        self._fail: list[str] = []
        self._counter = 0
        self._constants: dict[tuple[str, object], str] = {}
        self._scratch_used = 0  # 8-byte slots of the scratch region taken since the last reset_scratch()
        self._scratch_size = 0  # the most taken at once: the region's size

    # -- naming ---------------------------------------------------------------------------------------------
    def fresh(self, hint: str = "v") -> str:
        self._counter += 1
        return f"%{hint}{self._counter}"

    def label(self, hint: str = "bb") -> str:
        self._counter += 1
        return f"^{hint}{self._counter}"

    # -- emission -------------------------------------------------------------------------------------------
    def emit(self, line: str) -> None:
        self._body.append("    " + line)

    def emit_fail(self, line: str) -> None:
        """A line of the failure block (cleanup before returning fail_value)."""
        self._fail.append("    " + line)

    def const(self, value: int | float | bool, type_: str = I64) -> str:
        key = (type_, value)
        if key not in self._constants:
            name = self.fresh("c")
            if type_ == F64:
                # The bit pattern as a hex literal: exact, and valid for inf/nan too.
                bits = float_bits(float(value)) & 0xFFFF_FFFF_FFFF_FFFF
                self._prologue.append(f"    {name} = arith.constant 0x{bits:016X} : f64")
            elif type_ == I1:
                self._prologue.append(f"    {name} = arith.constant {'true' if value else 'false'}")
            else:
                self._prologue.append(f"    {name} = arith.constant {int(value)} : {type_}")
            self._constants[key] = name
        return self._constants[key]

    def null(self) -> str:
        key = (PTR, None)
        if key not in self._constants:
            name = self.fresh("null")
            self._prologue.append(f"    {name} = llvm.mlir.zero : !llvm.ptr")
            self._constants[key] = name
        return self._constants[key]

    def alloca(self, count: int, elem: str = I64, hint: str = "buf") -> str:
        """Stack memory for `count` elements, allocated once in the entry block."""
        n = self.const(max(count, 1))
        name = self.fresh(hint)
        self._prologue.append(f"    {name} = llvm.alloca {n} x {elem} : (i64) -> !llvm.ptr")
        return name

    def scratch(self, count: int) -> str:
        """Stack memory for `count` 8-byte elements (i64, f64, pointers) that lives until the next reset_scratch():
        an operator call's argument and result arrays. The arrays of every call share one region, sized for the
        largest call, so the stack frame does not grow with the number of calls (an entry-block alloca each made
        a 28-layer model's host program take 138 KiB of stack, with no lifetime for LLVM to share them by)."""
        offset = self._scratch_used
        self._scratch_used += max(count, 1)
        self._scratch_size = max(self._scratch_size, self._scratch_used)
        return self.gep("%scratch", offset)

    def reset_scratch(self) -> None:
        """What scratch() handed out before is dead from here on: its memory is handed out again."""
        self._scratch_used = 0

    def prologue(self, line: str) -> None:
        """A line of the entry block (runs once, before the body)."""
        self._prologue.append("    " + line)

    def string_ptr(self, text: str) -> str:
        symbol = self.module.string(text)
        name = self.fresh("str")
        self._prologue.append(f"    {name} = llvm.mlir.addressof @{symbol} : !llvm.ptr")
        return name

    def call(self, extern: Extern, args: list[str]) -> str | None:
        self.module.externs[extern.name] = extern
        arg_types = ", ".join(extern.params)
        result_type = extern.result or "()"
        if extern.result is None:
            self.emit(f"func.call @{extern.name}({', '.join(args)}) : ({arg_types}) -> ()")
            return None
        name = self.fresh()
        self.emit(f"{name} = func.call @{extern.name}({', '.join(args)}) : ({arg_types}) -> {result_type}")
        return name

    def gep(self, base: str, index: int | str, elem: str = I64) -> str:
        name = self.fresh("p")
        if isinstance(index, int):
            self.emit(f"{name} = llvm.getelementptr {base}[{index}] : (!llvm.ptr) -> !llvm.ptr, {elem}")
        else:
            self.emit(f"{name} = llvm.getelementptr {base}[{index}] : (!llvm.ptr, i64) -> !llvm.ptr, {elem}")
        return name

    def load(self, ptr: str, type_: str = I64) -> str:
        name = self.fresh()
        self.emit(f"{name} = llvm.load {ptr} : !llvm.ptr -> {type_}")
        return name

    def store(self, value: str, type_: str, ptr: str) -> None:
        self.emit(f"llvm.store {value}, {ptr} : {type_}, !llvm.ptr")

    def binary(self, op: str, a: str, b: str, type_: str = I64) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.{op} {a}, {b} : {type_}")
        return name

    def not_(self, condition: str) -> str:
        """The negation of an i1 value."""
        return self.binary("xori", condition, self.const(True, I1), I1)

    def with_overflow(self, op: str, a: str, b: str) -> tuple[str, str]:
        """i64 `op` (sadd, ssub, smul) and whether it overflowed (i1), through LLVM's overflow intrinsics."""
        pair, value, overflow = self.fresh("pair"), self.fresh(), self.fresh("overflow")
        struct_type = "!llvm.struct<(i64, i1)>"
        self.emit(f'{pair} = "llvm.intr.{op}.with.overflow"({a}, {b}) : (i64, i64) -> {struct_type}')
        self.emit(f"{value} = llvm.extractvalue {pair}[0] : {struct_type}")
        self.emit(f"{overflow} = llvm.extractvalue {pair}[1] : {struct_type}")
        return value, overflow

    def cmp(self, predicate: str, a: str, b: str, type_: str = I64) -> str:
        name = self.fresh("ok")
        self.emit(f"{name} = arith.cmpi {predicate}, {a}, {b} : {type_}")
        return name

    def all_of(self, conditions: list[str]) -> str:
        if not conditions:
            return self.const(True, I1)
        result = conditions[0]
        for c in conditions[1:]:
            result = self.binary("andi", result, c, I1)
        return result

    def check(self, condition: str) -> None:
        """Continue if `condition` (i1) holds, else jump to the failure block."""
        ok = self.label("ok")
        self.emit(f"cf.cond_br {condition}, {ok}, ^fail")
        self.emit_label(ok)

    def emit_label(self, label: str) -> None:
        """Start the block `label` (from label()); the previous block must have ended with a branch."""
        self._body.append(f"  {label}:")

    def check_nonzero(self, value: str, type_: str = I32) -> None:
        self.check(self.cmp("ne", value, self.const(0, type_), type_))

    def check_zero(self, value: str, type_: str = I32) -> None:
        self.check(self.cmp("eq", value, self.const(0, type_), type_))

    def check_nonnull(self, ptr: str) -> None:
        as_int = self.fresh()
        self.emit(f"{as_int} = llvm.ptrtoint {ptr} : !llvm.ptr to i64")
        self.check(self.cmp("ne", as_int, self.const(0)))

    def ret(self, value: str) -> None:
        self.emit(f"func.return {value} : {self.result}")

    def finish(self) -> None:
        params = ", ".join(f"{n}: {t}" for n, t in self.params)
        if self._scratch_size:
            size = self.const(self._scratch_size)
            self._prologue.append(f"    %scratch = llvm.alloca {size} x i64 : (i64) -> !llvm.ptr")
        lines = [f"  func.func @{self.name}({params}) -> {self.result} {{"]
        lines += self._prologue
        lines += self._body
        lines.append("  ^fail:")
        lines += self._fail
        lines.append(f"    %fail_value = arith.constant {self.fail_value} : {self.result}")
        lines.append(f"    func.return %fail_value : {self.result}")
        lines.append("  }")
        self.module.functions.append("\n".join(lines))
