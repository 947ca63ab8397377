"""Lowering symbolic integer expressions (sympy, from the ShapeEnv) to arith on i64, and checked i64 arithmetic.

Semantics follow Python ints: FloorDiv rounds toward -inf, Mod takes the divisor's sign. Python ints never
wrap and `//` or `%` by zero raises, while i64 arithmetic wraps silently and a division by zero traps
(SIGFPE kills the process). So every operation that can go wrong reports its condition to the caller's
`fail_unless(ok, kind, message)`: guards turn a failure into a miss, the host program into Python's
exception (ZeroDivisionError) or OverflowError, never into a wrong value or a crash.

Floats computed from symbolic ints (n / 3, math.sqrt(n), torch.sym_float(n)) are f64 with Python's results:
true division, Python's float // and %, pow, and the math functions LLVM has intrinsics for (libm's results,
as CPython's), with Python's exceptions where it raises (division by zero, math domain error, a power that
overflows). `lower_scalar_op` lowers one Python builtin applied in the host program (trident.scalar.<fn>);
`SymbolicIntLowering` lowers whole ShapeEnv expressions (guards)."""
from __future__ import annotations

from collections.abc import Callable

import sympy
from torch.utils._sympy import functions as torch_sympy

from .. import exc
from ..capture.specialize import is_float_expr, is_float_symbol
from ..ir.mlir_text import F64, I1, I64, FunctionBuilder, ModuleBuilder
from ..native_numbers import INT64_MIN
from . import runtime_abi as abi

FailUnless = Callable[[str, int, str], None]  # (ok: i1 SSA value, TRIDENT_EXC_* kind, message)

_OVERFLOW_INTRINSIC = {"addi": "sadd", "subi": "ssub", "muli": "smul"}


def checked_int_op(fb: FunctionBuilder, op: str, a: str, b: str, fail_unless: FailUnless, what: str) -> str:
    """a `op` b on i64 for op in addi/subi/muli/floordivsi/divsi/mod, failing where Python would not wrap."""
    too_wide = f"{what}: integer result does not fit in 64 bits (compiled code computes ints as int64)"
    if op in _OVERFLOW_INTRINSIC:
        value, overflow = fb.with_overflow(_OVERFLOW_INTRINSIC[op], a, b)
        fail_unless(fb.not_(overflow), abi.EXC_OVERFLOW, too_wide)
        return value
    fail_unless(fb.cmp("ne", b, fb.const(0)), abi.EXC_ZERO_DIVISION, "integer division or modulo by zero")
    # INT64_MIN // -1 is the one quotient that does not fit (and traps like a division by zero).
    wraps = fb.binary("andi", fb.cmp("eq", a, fb.const(INT64_MIN)), fb.cmp("eq", b, fb.const(-1)), I1)
    fail_unless(fb.not_(wraps), abi.EXC_OVERFLOW, too_wide)
    if op == "mod":
        return python_mod(fb, a, b)
    return fb.binary(op, a, b)


class SymbolicIntLowering:
    def __init__(
        self, fb: FunctionBuilder, env: dict[sympy.Symbol, str], fail_unless: FailUnless,
        floats: dict[sympy.Symbol, str] | None = None,
    ) -> None:  # fmt: skip
        self.fb = fb
        self.env = env  # int symbol -> i64 SSA value
        self.floats = floats if floats is not None else {}  # float symbol (a traced Python float) -> f64 SSA value
        self.fail_unless = fail_unless
        # Lowered subexpressions: sympy does not share them (triton.next_power_of_2 of a size is a tree
        # that repeats each level), so without this the emitted code would grow exponentially.
        self._lowered: dict[sympy.Basic | tuple[str, sympy.Basic], str] = {}

    def int_expr(self, expr: sympy.Basic) -> str:
        if expr not in self._lowered:
            self._lowered[expr] = self._int_expr(expr)
        return self._lowered[expr]

    def _int_expr(self, expr: sympy.Basic) -> str:
        fb = self.fb
        if isinstance(expr, sympy.Integer) or (isinstance(expr, sympy.Number) and expr == int(expr)):
            return fb.const(int(expr))
        if isinstance(expr, sympy.Symbol):
            if expr not in self.env:
                raise exc.LoweringError(f"symbol {expr} is not bound to any input property")
            return self.env[expr]
        if isinstance(expr, sympy.Add):
            return self._fold_checked("addi", [self.int_expr(a) for a in expr.args], expr)
        if isinstance(expr, sympy.Mul):
            return self._fold_checked("muli", [self.int_expr(a) for a in expr.args], expr)
        division = {torch_sympy.FloorDiv: "floordivsi", torch_sympy.CleanDiv: "divsi", torch_sympy.PythonMod: "mod",
                    torch_sympy.Mod: "mod", sympy.Mod: "mod"}  # fmt: skip
        if type(expr) in division:
            a, b = self.int_expr(expr.args[0]), self.int_expr(expr.args[1])
            return checked_int_op(fb, division[type(expr)], a, b, self.fail_unless, str(expr))
        if isinstance(expr, (sympy.Max, torch_sympy.Max)):
            return self._fold("maxsi", [self.int_expr(a) for a in expr.args])
        if isinstance(expr, (sympy.Min, torch_sympy.Min)):
            return self._fold("minsi", [self.int_expr(a) for a in expr.args])
        bitwise = {torch_sympy.BitwiseFn_bitwise_or: "ori", torch_sympy.BitwiseFn_bitwise_and: "andi",
                   torch_sympy.BitwiseFn_bitwise_xor: "xori", torch_sympy.LShift: "shli",
                   torch_sympy.RShift: "shrsi"}  # fmt: skip
        if type(expr) in bitwise:  # Python's shifts and bitwise ops on ints match two's complement i64
            return fb.binary(bitwise[type(expr)], self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, sympy.Pow) and isinstance(expr.exp, sympy.Integer) and 0 < int(expr.exp) <= 8:
            base = self.int_expr(expr.base)
            return self._fold_checked("muli", [base] * int(expr.exp), expr)
        if isinstance(expr, torch_sympy.PowByNatural):
            return _int_pow(fb, self.int_expr(expr.args[0]), self.int_expr(expr.args[1]), self.fail_unless)
        rounding = {torch_sympy.FloorToInt: "floor", torch_sympy.CeilToInt: "ceil", torch_sympy.TruncToInt: "trunc",
                    torch_sympy.RoundToInt: "roundeven"}  # fmt: skip
        if type(expr) in rounding:  # math.floor / ceil / trunc, round() of a symbolic float
            rounded = _intrinsic(fb, rounding[type(expr)], self.float_expr(expr.args[0]))
            return _float_to_int(fb, rounded, self.fail_unless, str(expr))
        raise exc.LoweringError(f"cannot lower symbolic integer expression {expr} ({type(expr).__name__})")

    def float_expr(self, expr: sympy.Basic) -> str:
        """A symbolic float (ToFloat, true division, float powers, math functions) as f64, as Python computes it."""
        key = ("float", expr)  # one expression can be lowered as both (2 in IntTrueDiv(s0, 2) and in s0 + 2)
        if key not in self._lowered:
            self._lowered[key] = self._float_expr(expr)
        return self._lowered[key]

    def _float_expr(self, expr: sympy.Basic) -> str:
        fb = self.fb
        if isinstance(expr, sympy.Number):
            return fb.const(float(expr), F64)
        if is_float_symbol(expr):
            if expr not in self.floats:
                raise exc.LoweringError(f"symbol {expr} is not bound to any input property")
            return self.floats[expr]
        if not is_float_expr(expr):
            return _as_float(fb, ("int", self.int_expr(expr)))
        if isinstance(expr, torch_sympy.ToFloat):
            return _as_float(fb, ("int", self.int_expr(expr.args[0])))
        if isinstance(expr, (torch_sympy.IntTrueDiv, torch_sympy.FloatTrueDiv)):
            if isinstance(expr, torch_sympy.IntTrueDiv):
                _fail_beyond_exact_doubles(fb, [self.int_expr(x) for x in expr.args], self.fail_unless)
            a, b = (self.float_expr(x) for x in expr.args)
            self.fail_unless(_fcmp(fb, "une", b, fb.const(0.0, F64)), abi.EXC_ZERO_DIVISION, "division by zero")
            return fb.binary("divf", a, b, F64)
        if isinstance(expr, (sympy.Add, sympy.Mul)):
            values = [self.float_expr(a) for a in expr.args]
            return self._fold("addf" if isinstance(expr, sympy.Add) else "mulf", values, F64)
        if isinstance(expr, torch_sympy.FloatPow):
            return _pow(fb, [("float", self.float_expr(a)) for a in expr.args], self.fail_unless)[1]
        name = type(expr).__name__.removeprefix("OpaqueUnaryFn_")
        if name in _FLOAT_UNARY:
            return lower_scalar_op(fb, name, [("float", self.float_expr(expr.args[0]))], self.fail_unless)[1]
        raise exc.LoweringError(f"cannot lower symbolic float expression {expr} ({type(expr).__name__})")

    def bool_expr(self, expr: sympy.Basic) -> str:
        fb = self.fb
        if expr is sympy.true or expr == sympy.true:
            return fb.const(True, I1)
        if expr is sympy.false or expr == sympy.false:
            return fb.const(False, I1)
        predicates = {
            sympy.Eq: "eq", sympy.Ne: "ne", sympy.StrictLessThan: "slt", sympy.LessThan: "sle",
            sympy.StrictGreaterThan: "sgt", sympy.GreaterThan: "sge",
        }  # fmt: skip
        for cls, predicate in predicates.items():
            if isinstance(expr, cls):
                if any(is_float_expr(a) for a in expr.args):  # compared as Python compares a float
                    a, b = (self.float_expr(x) for x in expr.args)
                    return _fcmp(fb, _ORDERED[predicate], a, b)
                return fb.cmp(predicate, self.int_expr(expr.args[0]), self.int_expr(expr.args[1]))
        if isinstance(expr, sympy.And):
            return self._fold("andi", [self.bool_expr(a) for a in expr.args], I1)
        if isinstance(expr, sympy.Or):
            return self._fold("ori", [self.bool_expr(a) for a in expr.args], I1)
        if isinstance(expr, sympy.Not):
            return fb.not_(self.bool_expr(expr.args[0]))
        raise exc.LoweringError(f"cannot lower symbolic condition {expr} ({type(expr).__name__})")

    def _fold_checked(self, op: str, values: list[str], expr: sympy.Basic) -> str:
        result = values[0]
        for v in values[1:]:
            result = checked_int_op(self.fb, op, result, v, self.fail_unless, str(expr))
        return result

    def _fold(self, op: str, values: list[str], type_: str = I64) -> str:
        result = values[0]
        for v in values[1:]:
            result = self.fb.binary(op, result, v, type_)
        return result


def python_mod(fb: FunctionBuilder, a: str, b: str) -> str:
    """a % b with Python's sign rule: a - floordiv(a, b) * b, for b != 0 and not (INT64_MIN, -1). The product
    may wrap, but the difference fits (it lies in [0, b) or (b, 0]), and wrapping arithmetic gets it right."""
    q = fb.binary("floordivsi", a, b)
    return fb.binary("subi", a, fb.binary("muli", q, b))


_ORDERED = {"eq": "oeq", "ne": "une", "slt": "olt", "sle": "ole", "sgt": "ogt", "sge": "oge"}


# ---------------------------------------------------------------------------------------------------------
# Python's scalar builtins on symbolic ints, floats and bools (the host program's `trident.scalar.<fn>` ops)

Scalar = tuple[str, str]  # (kind: "int" | "float" | "bool", SSA value: i64 for int and bool (0/1), f64 for float)

_FLOAT_BINARY = {"add": "addf", "sub": "subf", "mul": "mulf"}
_INT_BINARY = {"add": "addi", "sub": "subi", "mul": "muli", "floordiv": "floordivsi", "mod": "mod"}
_COMPARE = {"lt": ("slt", "olt"), "le": ("sle", "ole"), "gt": ("sgt", "ogt"), "ge": ("sge", "oge"),
            "eq": ("eq", "oeq"), "ne": ("ne", "une")}  # fmt: skip
_FLOAT_UNARY = {"sqrt", "exp", "log", "cos", "sin", "log2"}  # LLVM intrinsics with Python's (libm's) results
_DOMAIN = {"sqrt": "olt", "log": "ole", "log2": "ole"}  # x outside the domain: x < 0, x <= 0
_TO_INT = {"floor": "floor", "ceil": "ceil", "trunc": "trunc", "round": "roundeven"}  # round(): half to even


def lower_scalar_op(fb: FunctionBuilder, fn: str, operands: list[Scalar], fail_unless: FailUnless) -> Scalar:
    """`fn` (a Python builtin or torch.sym_* function, by name) applied as Python applies it.

    Failures raise Python's exception (ZeroDivisionError, OverflowError) through fail_unless; whatever is
    not lowered here raises LoweringError, and the driver runs such calls eagerly."""
    kinds = [k for k, _ in operands]
    if fn in _COMPARE:
        a, b = operands
        if "float" in kinds:
            flag = _fcmp(fb, _COMPARE[fn][1], _as_float(fb, a), _as_float(fb, b))
        else:
            flag = fb.cmp(_COMPARE[fn][0], a[1], b[1])
        return "bool", _widen(fb, flag)
    if fn in ("and_", "or_", "xor") and set(kinds) <= {"bool", "int"}:
        kind = "bool" if kinds == ["bool", "bool"] else "int"  # bitwise on ints, logical on bools (0/1)
        return kind, fb.binary(fn.rstrip("_") + "i", operands[0][1], operands[1][1])
    if fn == "sym_not":
        return "bool", fb.binary("xori", operands[0][1], fb.const(1))
    if fn in ("sym_float", "float"):
        return "float", _as_float(fb, operands[0])
    if fn == "truediv":
        if kinds == ["int", "int"]:
            _fail_beyond_exact_doubles(fb, [v for _, v in operands], fail_unless)
        a, b = (_as_float(fb, x) for x in operands)
        message = "division by zero" if kinds == ["int", "int"] else "float division by zero"  # Python's words
        fail_unless(_fcmp(fb, "une", b, fb.const(0.0, F64)), abi.EXC_ZERO_DIVISION, message)
        return "float", fb.binary("divf", a, b, F64)
    if fn == "neg":
        if kinds[0] == "float":
            return "float", _unary(fb, "arith.negf", operands[0][1])
        return "int", checked_int_op(fb, "subi", fb.const(0), operands[0][1], fail_unless, "-x")
    if fn == "abs":
        if kinds[0] == "float":
            return "float", _intrinsic(fb, "fabs", operands[0][1])
        negated = checked_int_op(fb, "subi", fb.const(0), operands[0][1], fail_unless, "abs(x)")
        return "int", fb.binary("maxsi", operands[0][1], negated)
    if fn in ("sym_max", "sym_min", "max", "min"):
        a, b = operands
        if "float" in kinds:
            a_f, b_f = _as_float(fb, a), _as_float(fb, b)
            pick_b = _fcmp(fb, "ogt" if fn.endswith("max") else "olt", b_f, a_f)  # Python keeps the first on ties
            return "float", _select(fb, pick_b, b_f, a_f, F64)
        return "int", fb.binary("maxsi" if fn.endswith("max") else "minsi", a[1], b[1])
    if fn == "round" and len(operands) == 2 and kinds[1] == "none":
        operands, kinds = operands[:1], kinds[:1]  # round(x, None) is round(x)
    if fn in _TO_INT and len(operands) == 1:
        if kinds[0] != "float":
            return "int", operands[0][1]
        return "int", _float_to_int(fb, _intrinsic(fb, _TO_INT[fn], operands[0][1]), fail_unless, f"{fn}(x)")
    if fn.removeprefix("_sym_") in _FLOAT_UNARY and len(operands) == 1:
        x, name = _as_float(fb, operands[0]), fn.removeprefix("_sym_")
        if name in _DOMAIN:  # Python raises ValueError where libm returns nan or -inf
            outside = _fcmp(fb, _DOMAIN[name], x, fb.const(0.0, F64))
            fail_unless(fb.not_(outside), abi.EXC_VALUE, "math domain error")
        return "float", _intrinsic(fb, name, x)
    if fn == "pow":
        return _pow(fb, operands, fail_unless)
    if fn in _INT_BINARY and kinds == ["int", "int"]:
        return "int", checked_int_op(fb, _INT_BINARY[fn], operands[0][1], operands[1][1], fail_unless, f"x {fn} y")
    if fn in _FLOAT_BINARY and "float" in kinds:
        a, b = (_as_float(fb, x) for x in operands)
        return "float", fb.binary(_FLOAT_BINARY[fn], a, b, F64)
    if fn in ("floordiv", "mod") and "float" in kinds:
        return "float", _float_floordiv_mod(fb, fn, _as_float(fb, operands[0]), _as_float(fb, operands[1]), fail_unless)
    raise exc.LoweringError(f"cannot lower {fn}({', '.join(kinds)}) on symbolic scalars")


_EXACT_DOUBLE = 2**53


def _fail_beyond_exact_doubles(fb: FunctionBuilder, ints: list[str], fail_unless: FailUnless) -> None:
    """int / int in f64 equals Python's correctly rounded quotient only while both ints convert to doubles
    exactly (|n| <= 2**53): beyond that compiled code refuses (a guard misses, the host program raises) rather
    than return a quotient rounded twice."""
    for n in ints:
        exact = fb.binary(
            "andi", fb.cmp("sle", n, fb.const(_EXACT_DOUBLE)), fb.cmp("sge", n, fb.const(-_EXACT_DOUBLE)), I1
        )  # fmt: skip
        fail_unless(exact, abi.EXC_OVERFLOW, "int / int: an operand beyond 2**53 would be rounded before dividing")


def lowers_scalar_op(fn: str, kinds: list[str]) -> bool:
    """Whether `lower_scalar_op` lowers `fn` on operands of these kinds (a dry run on a scratch builder), for
    capture to decide which symbols can stay symbolic."""
    fb = FunctionBuilder(ModuleBuilder(), "dry_run", [], I64, 0)
    try:
        lower_scalar_op(fb, fn, [(k, f"%{i}") for i, k in enumerate(kinds)], lambda ok, kind, message: None)
    except exc.LoweringError:
        return False
    return True


def lowers_condition(expr: sympy.Basic) -> bool:
    """Whether `SymbolicIntLowering.bool_expr` lowers a guard over int symbols (a dry run, as above)."""
    fb = FunctionBuilder(ModuleBuilder(), "dry_run", [], I1, 0)
    env = {s: f"%{s}" for s in expr.free_symbols}
    try:
        SymbolicIntLowering(fb, env, lambda ok, kind, message: None).bool_expr(expr)
    except exc.LoweringError:
        return False
    return True


def _pow(fb: FunctionBuilder, operands: list[Scalar], fail_unless: FailUnless) -> Scalar:
    (ka, a), (kb, b) = operands
    if ka != "float" and kb != "float":
        # int ** int with a non-negative exponent (torch guards the sign of a symbolic one): square and
        # multiply, each product checked, in a loop over the exponent's bits.
        return "int", _int_pow(fb, a, b, fail_unless)
    x, y = _as_float(fb, (ka, a)), _as_float(fb, (kb, b))
    zero = fb.const(0.0, F64)
    base_zero = _fcmp(fb, "oeq", x, zero)
    fail_unless(
        fb.not_(fb.binary("andi", base_zero, _fcmp(fb, "olt", y, zero), I1)),
        abi.EXC_ZERO_DIVISION, "0.0 cannot be raised to a negative power",
    )  # fmt: skip
    result = name = fb.fresh()
    fb.emit(f"{name} = llvm.intr.pow({x}, {y}) : (f64, f64) -> f64")
    # Python raises OverflowError where the result of finite operands is infinite.
    finite_in = fb.binary("andi", _is_finite(fb, x), _is_finite(fb, y), I1)
    overflow = fb.binary("andi", finite_in, fb.not_(_is_finite(fb, result)), I1)
    fail_unless(fb.not_(overflow), abi.EXC_OVERFLOW, "(34, 'Numerical result out of range')")
    return "float", result


def _int_pow(fb: FunctionBuilder, base: str, exponent: str, fail_unless: FailUnless) -> str:
    result, square, remaining = fb.alloca(1, I64, "pow"), fb.alloca(1, I64, "sq"), fb.alloca(1, I64, "e")
    fb.store(fb.const(1), I64, result)
    fb.store(base, I64, square)
    fb.store(exponent, I64, remaining)
    head, body, done = fb.label("pow_head"), fb.label("pow_body"), fb.label("pow_done")
    fb.emit(f"cf.br {head}")
    fb.emit_label(head)
    e = fb.load(remaining)
    fb.emit(f"cf.cond_br {fb.cmp('sgt', e, fb.const(0))}, {body}, {done}")
    fb.emit_label(body)
    e, sq, r = fb.load(remaining), fb.load(square), fb.load(result)
    odd = fb.cmp("ne", fb.binary("andi", e, fb.const(1)), fb.const(0))
    times, times_overflow = fb.with_overflow("smul", r, sq)
    fail_unless(fb.not_(fb.binary("andi", odd, times_overflow, I1)), abi.EXC_OVERFLOW, _TOO_WIDE)
    fb.store(_select(fb, odd, times, r, I64), I64, result)
    rest = fb.binary("shrsi", e, fb.const(1))
    fb.store(rest, I64, remaining)
    squared, squared_overflow = fb.with_overflow("smul", sq, sq)
    # The square is needed only while exponent bits remain.
    still_needed = fb.cmp("sgt", rest, fb.const(0))
    fail_unless(fb.not_(fb.binary("andi", still_needed, squared_overflow, I1)), abi.EXC_OVERFLOW, _TOO_WIDE)
    fb.store(squared, I64, square)
    fb.emit(f"cf.br {head}")
    fb.emit_label(done)
    return fb.load(result)


_TOO_WIDE = "x ** y: integer result does not fit in 64 bits (compiled code computes ints as int64)"


def _float_floordiv_mod(fb: FunctionBuilder, fn: str, a: str, b: str, fail_unless: FailUnless) -> str:
    """Python's float // and % (CPython's float_divmod: the remainder takes the divisor's sign)."""
    zero, one = fb.const(0.0, F64), fb.const(1.0, F64)
    what = "float floor division by zero" if fn == "floordiv" else "float modulo"
    fail_unless(_fcmp(fb, "une", b, zero), abi.EXC_ZERO_DIVISION, what)
    mod = fb.binary("remf", a, b, F64)
    div = fb.binary("divf", fb.binary("subf", a, mod, F64), b, F64)
    signs_differ = fb.cmp("ne", _fcmp(fb, "olt", b, zero), _fcmp(fb, "olt", mod, zero), I1)
    adjust = fb.binary("andi", _fcmp(fb, "une", mod, zero), signs_differ, I1)
    mod = _select(fb, adjust, fb.binary("addf", mod, b, F64), mod, F64)
    div = _select(fb, adjust, fb.binary("subf", div, one, F64), div, F64)
    if fn == "mod":
        return _select(fb, _fcmp(fb, "oeq", mod, zero), _copysign(fb, zero, b), mod, F64)
    floor = _intrinsic(fb, "floor", div)
    round_up = _fcmp(fb, "ogt", fb.binary("subf", div, floor, F64), fb.const(0.5, F64))
    floor = _select(fb, round_up, fb.binary("addf", floor, one, F64), floor, F64)
    return _select(fb, _fcmp(fb, "oeq", div, zero), _copysign(fb, zero, fb.binary("divf", a, b, F64)), floor, F64)


def _float_to_int(fb: FunctionBuilder, value: str, fail_unless: FailUnless, what: str) -> str:
    """An integral f64 as i64; Python's int would grow, so a value outside int64 (or inf/nan) fails."""
    in_range = fb.binary(
        "andi", _fcmp(fb, "oge", value, fb.const(-(2.0**63), F64)), _fcmp(fb, "olt", value, fb.const(2.0**63, F64)), I1
    )  # fmt: skip
    fail_unless(in_range, abi.EXC_OVERFLOW, f"{what}: integer result does not fit in 64 bits (or is not finite)")
    return _unary(fb, "arith.fptosi", value, "f64 to i64")


def _as_float(fb: FunctionBuilder, scalar: Scalar) -> str:
    kind, value = scalar
    if kind == "float":
        return value
    return _unary(fb, "arith.sitofp", value, "i64 to f64")


def _unary(fb: FunctionBuilder, op: str, value: str, types: str = "f64") -> str:
    name = fb.fresh()
    fb.emit(f"{name} = {op} {value} : {types}")
    return name


def _intrinsic(fb: FunctionBuilder, name: str, value: str) -> str:
    result = fb.fresh()
    fb.emit(f"{result} = llvm.intr.{name}({value}) : (f64) -> f64")
    return result


def _copysign(fb: FunctionBuilder, magnitude: str, sign: str) -> str:
    result = fb.fresh()
    fb.emit(f"{result} = llvm.intr.copysign({magnitude}, {sign}) : (f64, f64) -> f64")
    return result


def _fcmp(fb: FunctionBuilder, predicate: str, a: str, b: str) -> str:
    name = fb.fresh("ok")
    fb.emit(f"{name} = arith.cmpf {predicate}, {a}, {b} : f64")
    return name


def _is_finite(fb: FunctionBuilder, value: str) -> str:
    return _fcmp(fb, "olt", _intrinsic(fb, "fabs", value), fb.const(float("inf"), F64))


def _select(fb: FunctionBuilder, condition: str, a: str, b: str, type_: str) -> str:
    name = fb.fresh()
    fb.emit(f"{name} = arith.select {condition}, {a}, {b} : {type_}")
    return name


def _widen(fb: FunctionBuilder, flag: str) -> str:
    widened = fb.fresh()
    fb.emit(f"{widened} = arith.extui {flag} : i1 to i64")
    return widened


class _ScalarLowering:
    """capture.specialize.ScalarLowering, answered by dry runs of this module's lowering."""

    lowers_condition = staticmethod(lowers_condition)
    lowers_scalar_op = staticmethod(lowers_scalar_op)


SCALAR_LOWERING = _ScalarLowering()  # what trace_function is given (capture does not import the lowering)
