"""Automatic dynamism beyond sizes and ints: float arguments and tensor layouts (strides, storage offsets).

A float that differs between two calls is traced as a symbol from then on and flows into ATen ops and Triton
kernels as the very double eager passes; what the trace cannot reproduce exactly (a float read as a Python
value, sympy-folded float arithmetic, inf/NaN) stays a constant. Strides and offsets that vary become symbols,
with what the trace relied on (expanded dims, contiguity) guarded. Every call is compared with eager bit for
bit, and the compiled path is proven to have run (native hits, compile counts, no eager calls).
"""
from __future__ import annotations

import math
import random

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

import trident
from trident.knobs import override
from trident.testing import count_compiles, expect_fallback, triton_launch_sites


def same(a: object, b: object) -> bool:
    """Bitwise equality of results (NaN payloads and the sign of zero included), dtypes and shapes."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))  # type: ignore[arg-type]
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        if a.dtype != b.dtype or a.shape != b.shape or a.stride() != b.stride():
            return False
        if a.dtype.is_floating_point:
            bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
            a, b = a.contiguous().view(bits), b.contiguous().view(bits)
        return torch.equal(a, b)
    return type(a) is type(b) and a == b


def hits(fn: object) -> list[int]:
    return fn._trident.entry.hits()  # type: ignore[attr-defined]


def eager_calls(fn: object) -> int:
    return fn._trident.eager_calls  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------------
# Floats


def sample(x, temperature: float):  # type: ignore[no-untyped-def]
    scaled = x / temperature
    return F.softmax(scaled, -1), torch.clamp(x, max=temperature), x * (temperature * 2.0 + 1.0)


def test_hundred_temperatures_compile_twice() -> None:
    f = trident.jit(sample)
    x = torch.randn(4, 16)
    temperatures = [0.05 + 0.0173 * i for i in range(100)]
    with torch.no_grad(), count_compiles() as compiles:
        for t in temperatures:
            assert same(f(x, t), sample(x, t)), t
    assert compiles() == 2
    assert hits(f) == [1, 99] and eager_calls(f) == 0
    text = trident.explain(f)
    assert "temperature: float == 0.05" in text and "temperature: any finite float" in text


def test_special_floats_stay_constants_and_negative_zero_flows() -> None:
    f = trident.jit(lambda x, t: x / t)
    x = torch.tensor([1.0, -2.0, 0.0, 3.5])
    values = [0.5, 0.25, -0.0, 0.0, float("inf"), float("nan"), -3.0, float("inf"), 1e-300, 1e300]
    with torch.no_grad(), count_compiles() as compiles:
        for t in values:
            assert same(f(x, t), x / t), t
    # 0.5 (constant), then one symbolic specialization for every finite value (-0.0 and 0.0 included, the
    # double reaches ATen as is), and inf and NaN each as constants of their own (guarded bitwise).
    assert compiles() == 4
    assert sum(hits(f)) == len(values) and eager_calls(f) == 0
    assert "t: float == inf" in trident.explain(f) and "t: float == nan" in trident.explain(f)


def test_float_branch_is_guarded_natively() -> None:
    def program(x, t):  # type: ignore[no-untyped-def]
        return x * t if t > 0.5 else x - t

    f = trident.jit(program)
    x = torch.randn(8)
    values = [0.25, 0.75, 0.9, 0.5, 0.1, 2.0, 0.5000001, -1.0]
    with torch.no_grad(), count_compiles() as compiles:
        for t in values:
            assert same(f(x, t), program(x, t)), t
    # 0.25 constant; 0.75 symbolic with the guard t > 0.5; 0.5 symbolic with not (t > 0.5).
    assert compiles() == 3
    assert hits(f) == [1, 4, 3]
    assert "zf" in trident.explain(f) and "> 0.5" in trident.explain(f)


def test_folded_float_arithmetic_stays_constant() -> None:
    """sympy folds t * 0.0 to 0 while eager computes -0.0 for a negative t: such a float is a constant."""

    def program(x, t):  # type: ignore[no-untyped-def]
        return x * (t * 0.0), x + (t - t)

    f = trident.jit(program)
    x = torch.ones(3)
    values = [1.0, -1.0, 2.0, -2.0, -1.0]
    with torch.no_grad(), count_compiles() as compiles:
        for t in values:
            assert same(f(x, t), program(x, t)), t
    assert compiles() == 4  # one per distinct value: the trace specialized t instead of folding it
    assert "t: float == -1.0" in trident.explain(f)


def test_math_sqrt_of_a_symbolic_float_stays_symbolic() -> None:
    """math.sqrt on a traced float is a symbolic op (capture/symbolic_math.py) lowered as the correctly rounded
    sqrt CPython's libm computes; a negative value raises Python's ValueError (test_fallback.py)."""

    def program(x, t):  # type: ignore[no-untyped-def]
        return x * math.sqrt(t)

    f = trident.jit(program)
    x = torch.randn(5)
    with torch.no_grad(), count_compiles() as compiles:
        for t in (4.0, 9.0, 2.0, 9.0):
            assert same(f(x, t), program(x, t)), t
    assert compiles() == 2 and hits(f) == [1, 3]


def test_int_and_float_mixed() -> None:
    def program(x, t, n):  # type: ignore[no-untyped-def]
        return x[:n] * (t * n), x[:n] / (n + t), x[:n] * (t / n - 1.5 * n)

    f = trident.jit(program)
    x = torch.randn(16)
    calls = [(0.5, 3), (0.7, 4), (-2.25, 5), (1e-3, 7), (3.0, 2), (0.1, 9)]
    with torch.no_grad(), count_compiles() as compiles:
        for t, n in calls:
            assert same(f(x, t, n), program(x, t, n)), (t, n)
    assert compiles() == 2 and hits(f) == [1, 5]
    assert "t: any finite float" in trident.explain(f) and "n: any int" in trident.explain(f)


def test_int_of_float_specializes_per_value() -> None:
    """int(n * 0.5) as a slice bound: the slice's size is guarded as TruncToInt(0.5 * n) == k, so each value
    gets its own specialization (write n // 2 for one specialization of all)."""

    def program(x, n):  # type: ignore[no-untyped-def]
        return x[: int(n * 0.5)] * 2

    f = trident.jit(program)
    x = torch.randn(20)
    with torch.no_grad(), count_compiles() as compiles:
        for n in (4, 6, 8, 6, 10):
            assert same(f(x, n), program(x, n)), n
    assert compiles() == 4 and eager_calls(f) == 0
    # Each value is its own specialization either way: n stays symbolic, and the size relation
    # TruncToInt(0.5*ToFloat(n)) == k the slice needs is guarded natively, computed as Python computes it.
    assert "TruncToInt(0.5*ToFloat(" in trident.explain(f)


def test_a_size_the_trace_needs_compiles_a_bounded_number_of_values_then_runs_eagerly() -> None:
    """A size that changes but that the trace needs as a value (a Python loop over it) stays a constant of each
    specialization; after _KEPT_CONSTANT_COMPILES such specializations of one call structure, new values run
    eagerly with one warning instead of compiling per value (a decode loop's cache length, per token). The
    values compiled so far still hit natively."""
    from trident.driver import _KEPT_CONSTANT_COMPILES

    def program(x):  # type: ignore[no-untyped-def]
        for i in range(x.shape[0]):
            x = x + i
        return x

    f = trident.jit(program)
    sizes = list(range(2, 2 + _KEPT_CONSTANT_COMPILES + 4))
    with torch.no_grad(), count_compiles() as compiles, expect_fallback("which changes between calls") as fallbacks:
        for n in sizes:
            x = torch.randn(n)
            assert same(f(x), program(x)), n
        x = torch.randn(3)
        assert same(f(x), program(x))  # compiled earlier: a native hit
    assert compiles() == 1 + _KEPT_CONSTANT_COMPILES  # the first call's constants, then the sizes that changed
    assert eager_calls(f) == len(sizes) - compiles() and hits(f)[1] == 2
    assert {e.reason for e in fallbacks} == {
        f"'{program.__qualname__}': the trace needs the value of size 0 of 'x' (e.g. `range(x.shape[0])`, or an "
        f"operator that reads concrete sizes), which changes between calls, so each value compiled a specialization "
        f"of its own; after {_KEPT_CONSTANT_COMPILES} of them, calls with new values run eagerly"
    }


def test_bool_stays_a_constant() -> None:
    def program(x, flag):  # type: ignore[no-untyped-def]
        return x * flag, x + 1 if flag else x - 1

    f = trident.jit(program)
    x = torch.randn(4)
    with torch.no_grad(), count_compiles() as compiles:
        for flag in (True, False, True, False, False, True):
            assert same(f(x, flag), program(x, flag)), flag
    assert compiles() == 2 and hits(f) == [3, 3]
    assert "flag: bool == True" in trident.explain(f) and "flag: bool == False" in trident.explain(f)


def test_float_division_by_zero_raises_as_python() -> None:
    def program(x, t):  # type: ignore[no-untyped-def]
        return x * (1.0 / t)

    f = trident.jit(program)
    x = torch.randn(3)
    with torch.no_grad():
        f(x, 2.0)
        f(x, 4.0)  # symbolic from here
        with pytest.raises(ZeroDivisionError, match="float division by zero"):
            f(x, 0.0)
        assert same(f(x, -8.0), program(x, -8.0))
    assert len(hits(f)) == 2 and eager_calls(f) == 0


def test_in_place_op_with_a_symbolic_scalar() -> None:
    def program(x, alpha, n):  # type: ignore[no-untyped-def]
        x.mul_(alpha)
        x.add_(n)
        return x

    f = trident.jit(program)
    with torch.no_grad(), count_compiles() as compiles:
        for alpha, n in ((0.5, 1), (1.5, 2), (-3.0, 7), (2.0, -4)):
            got, want = torch.arange(6.0), torch.arange(6.0)
            assert same(f(got, alpha, n), program(want, alpha, n))
            assert same(got, want)
    assert compiles() == 2 and hits(f) == [1, 3]


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * scale, mask=mask)


def scaled(x, scale):  # type: ignore[no-untyped-def]
    out = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), scale, BLOCK=16)
    return out + scale


def test_triton_kernel_takes_a_symbolic_float_on_cpu() -> None:
    f = trident.jit(scaled)
    x = torch.randn(40)
    scales = [0.25 + 0.31 * i for i in range(12)]
    with torch.no_grad(), count_compiles() as compiles:
        for s in scales:
            # the kernel multiplies by the fp32 scalar compiled Triton passes; ATen's add gets the double
            want = x * torch.tensor(s, dtype=torch.float32) + s
            assert same(f(x, s), want), s
    assert compiles() == 2 and hits(f) == [1, 11] and eager_calls(f) == 0
    assert len(triton_launch_sites(f)) == 2


# --------------------------------------------------------------------------------------------------------
# Layouts


def layout_program(x, y):  # type: ignore[no-untyped-def]
    z = torch.relu(x) * y + x.mean()
    return z.softmax(-1), x.reshape(-1).sum(), (x + y).t().contiguous()


def test_storage_offsets_and_alignments_share_one_specialization() -> None:
    f = trident.jit(layout_program)
    buffer = torch.randn(400)
    y = torch.randn(4, 8)
    offsets = [0, 5, 1, 17, 64, 3, 2, 100, 33, 7, 0, 255]
    with torch.no_grad(), count_compiles() as compiles:
        for k in offsets:
            x = buffer[k : k + 32].view(4, 8)  # aligned (k % 4 == 0) or not: one specialization either way
            assert same(f(x, y), layout_program(x, y)), k
    assert compiles() == 2 and hits(f) == [2, 10] and eager_calls(f) == 0


def test_row_strides_share_one_specialization() -> None:
    f = trident.jit(layout_program)
    y = torch.randn(4, 8)
    with torch.no_grad(), count_compiles() as compiles:
        for width in (8, 9, 16, 12, 33, 10, 64):
            x = torch.randn(4, width)[:, :8]  # stride (width, 1): contiguous only for width 8
            assert same(f(x, y), layout_program(x, y)), width
    # width 8 is contiguous; 9 makes the row stride symbolic, and x.reshape(-1) then relies on it not being
    # contiguous (a guard): every later width hits that specialization.
    assert compiles() == 2 and hits(f) == [1, 6]


def test_expanded_and_transposed_inputs_are_never_confused() -> None:
    """Strides 0 (expanded) and unit strides become symbols once they vary, but what the trace relied on is
    guarded: an in-place update of an expanded input raises as in eager, a view of a non-contiguous input is
    refused as in eager, whatever was compiled before.

    Where eager raises, so does the capture (at `x.view(-1)`: the symbolic strides cannot be flattened), so
    those calls run eagerly and raise eager's error: the only fallbacks; every call that returns runs natively."""

    def update(x, y):  # type: ignore[no-untyped-def]
        x.add_(y)
        return x.view(-1)

    def make(kind: str, seed: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed)
        if kind == "expanded_rows":
            return torch.randn(1, 4, generator=g).expand(3, 4)
        if kind == "expanded_cols":
            return torch.randn(3, 1, generator=g).expand(3, 4)
        if kind == "transposed":
            return torch.randn(4, 3, generator=g).t()
        if kind == "stepped":
            return torch.randn(3, 8, generator=g)[:, ::2]
        return torch.randn(3, 4, generator=g)

    f = trident.jit(update)
    y = torch.randn(3, 4)
    kinds = ["contiguous", "expanded_rows", "transposed", "contiguous", "stepped", "expanded_cols"] * 2
    outcomes = []
    with torch.no_grad():
        for seed, kind in enumerate(kinds):
            got_in, want_in = make(kind, seed), make(kind, seed)
            try:
                want = update(want_in, y)
            except RuntimeError as e:
                refused = "return x.view(-1): Cannot view a tensor"  # the capture, where eager raises (docstring)
                with expect_fallback(refused), pytest.raises(RuntimeError) as raised:
                    f(got_in, y)
                assert str(raised.value).split("\n")[0] == str(e).split("\n")[0]
                outcomes.append("raised")
                continue
            assert same(f(got_in, y), want) and same(got_in, want_in)
            outcomes.append("ok")
    assert outcomes == ["ok", "raised", "raised", "ok", "ok", "raised"] * 2  # [:, ::2] views as stride 2
    assert hits(f)[0] == 4  # every contiguous call ran the first specialization natively
    assert sum(hits(f)) == outcomes.count("ok") and f._trident.eager_calls == outcomes.count("raised")


def _random_layout(rng: random.Random, rows: int, cols: int) -> torch.Tensor:
    kind = rng.choice(["contiguous", "transposed", "rows", "cols", "step", "offset", "expand_row", "expand_col"])
    if kind == "transposed":
        return torch.randn(cols, rows).t()
    if kind == "rows":
        return torch.randn(rows + 2, cols)[2:]
    if kind == "cols":
        return torch.randn(rows, cols + 3)[:, 3:]
    if kind == "step":
        return torch.randn(rows, 2 * cols)[:, ::2]
    if kind == "offset":
        k = rng.randint(1, 40)
        return torch.randn(rows * cols + k)[k:].view(rows, cols)
    if kind == "expand_row":
        return torch.randn(1, cols).expand(rows, cols)
    if kind == "expand_col":
        return torch.randn(rows, 1).expand(rows, cols)
    return torch.randn(rows, cols)


@triton.jit
def _add_rows(x_ptr, y_ptr, out_ptr, n_cols, sxr, sxc, syr, syc, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * sxr + cols * sxc, mask=mask)
    y = tl.load(y_ptr + row * syr + cols * syc, mask=mask)
    tl.store(out_ptr + row * n_cols + cols, x * 2.0 + y, mask=mask)


def triton_layout_program(x, y):  # type: ignore[no-untyped-def]
    out = torch.empty(x.shape, dtype=x.dtype)
    _add_rows[(x.shape[0],)](x, y, out, x.shape[1], x.stride(0), x.stride(1), y.stride(0), y.stride(1), BLOCK=16)
    return out + 1


@pytest.mark.parametrize("program", ["aten", "triton"])
def test_random_layouts_settle(program: str) -> None:
    """60 random layouts (and sizes) of the same ranks and dtypes: every call equals a pure-torch reference,
    none runs eagerly, and the function needs far fewer specializations than layouts."""
    fn = layout_program if program == "aten" else triton_layout_program
    f = trident.jit(fn)
    rng = random.Random(0)
    with torch.no_grad(), count_compiles() as compiles:
        for _ in range(60):
            rows, cols = rng.randint(2, 5), rng.randint(2, 8)  # sizes of 1 are specializations of their own
            x, y = _random_layout(rng, rows, cols), _random_layout(rng, rows, cols)
            want = layout_program(x, y) if program == "aten" else (x * 2.0 + y) + 1
            got = f(x, y)
            if program == "aten":
                assert same(got, want)
            else:
                assert torch.equal(got, want)
    assert eager_calls(f) == 0 and sum(hits(f)) == 60
    assert compiles() <= 35, compiles()  # 30 (ATen) and 26 (Triton) when written; 44 each before layouts were symbolic


# --------------------------------------------------------------------------------------------------------
# Operators with int results


@pytest.fixture
def flash_attention_on_cpu():  # type: ignore[no-untyped-def]
    """A CPU kernel for aten::_scaled_dot_product_flash_attention (CUDA-only in torch), so that its int results
    (max_q, max_k: the query and key lengths, symbolic when those are) run here as they do on a GPU."""

    def kernel(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None):  # type: ignore[no-untyped-def]
        out = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale)
        empty = q.new_empty(0)
        return out, q.new_zeros(q.shape[:3]), empty, empty, q.size(2), k.size(2), empty, empty, empty

    library = torch.library.Library("aten", "IMPL")
    library.impl("_scaled_dot_product_flash_attention", kernel, "CPU")
    yield
    library._destroy()


def test_an_operators_int_result_of_a_symbolic_length_compiles(flash_attention_on_cpu) -> None:  # type: ignore[no-untyped-def]
    """Flash attention returns the key length as an int (max_k): with a key length that changes (a DynamicCache
    decode), that result is symbolic, and the import unpacks it like the operator's tensors, natively (the op
    kept opaque, as CUDA's C++ kernel is)."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, int]:
        out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)
        return out[0] * 2, out[5] + 1

    f = trident.jit(attend)
    q = torch.randn(1, 4, 1, 16)
    with override(opaque_ops=frozenset({"aten::_scaled_dot_product_flash_attention"})), count_compiles() as compiles:
        for length in (5, 6, 7, 9):
            k, v = torch.randn(1, 4, length, 16), torch.randn(1, 4, length, 16)
            assert same(f(q, k, v), attend(q, k, v))
    assert compiles() == 2 and eager_calls(f) == 0, trident.explain(f)
    assert sum(hits(f)) == 4, trident.explain(f)
