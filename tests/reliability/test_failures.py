"""A failure inside compiled code stays contained: the error eager raises (with where it came from), nothing
leaked, and the function keeps working for inputs that hit existing specializations."""
from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import trident


@triton.jit
def copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def broken_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.no_such_function(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


def test_a_triton_error_raises_tritons_exception_and_the_function_stays_usable() -> None:
    @trident.jit
    def fn(x, broken: bool):  # type: ignore[no-untyped-def]
        out = torch.empty_like(x)
        kernel = broken_kernel if broken else copy_kernel
        kernel[(triton.cdiv(x.numel(), 16),)](x, out, x.numel(), BLOCK=16)
        return out + 1

    x = torch.randn(40)
    torch.testing.assert_close(fn(x, False), x + 1)
    with pytest.raises(triton.TritonError) as info:
        fn(x, True)
    assert "no_such_function" in str(info.value)
    assert any("kernel 'broken_kernel'" in note for note in info.value.__notes__)
    for _ in range(3):  # the failing specialization leaves the working one intact
        torch.testing.assert_close(fn(x, False), x + 1)
    with pytest.raises(triton.TritonError):  # and fails the same way again, without a recompile
        fn(x, True)
    assert len(fn._trident.specializations) == 2


def test_an_aten_error_inside_compiled_code_is_eagers_error_and_contained() -> None:
    @trident.jit
    def fn(x, idx):  # type: ignore[no-untyped-def]
        return torch.index_select(x, 0, idx) * 2

    x, good, bad = torch.randn(4, 3), torch.tensor([0, 3]), torch.tensor([1, 10])
    torch.testing.assert_close(fn(x, good), x[good] * 2)
    with pytest.raises(IndexError) as eager:
        torch.index_select(x, 0, bad)
    with pytest.raises(IndexError) as compiled:  # same shapes: raised by ATen inside the compiled program
        fn(x, bad)
    assert str(compiled.value) == str(eager.value)
    assert len(fn._trident.specializations) == 1
    torch.testing.assert_close(fn(x, good), x[good] * 2)


@pytest.mark.parametrize("stage_name", ["llvm", "jit"])
def test_an_llvm_failure_writes_the_ir_and_the_replay_command_and_stays_contained(
    stage_name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    """An LLVM lowering or code-generation failure (injected: both are Trident bugs when they happen) runs the
    call eagerly with one warning naming the stage, the file the IR given to that stage was written to (and,
    for the pass pipeline, the torch-mlir-opt command that replays it); specializations compiled before keep
    working, and other inputs compile once the failure is gone."""
    from trident.lowering import pipeline
    from trident.testing import count_compiles, expect_fallback

    @trident.jit
    def fn(x):  # type: ignore[no-untyped-def]
        return (x * 2).sum(-1)

    x = torch.randn(3, 4)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), (x * 2).sum(-1))

        def failing(*args: object, **kwargs: object) -> object:
            raise RuntimeError(f"injected {stage_name} failure")

        monkeypatch.setattr(pipeline, "lower_to_llvm" if stage_name == "llvm" else "NativeModule", failing)
        y = torch.randn(2, 5, 7)
        with pytest.warns(UserWarning, match="trident: compiling") as records, expect_fallback(
            f"at stage '{stage_name}': RuntimeError: injected {stage_name} failure"
        ):
            torch.testing.assert_close(fn(y), (y * 2).sum(-1))  # another rank: a new specialization: eager
        message = str(records[0].message)
        assert f"at stage '{stage_name}'" in message and f"injected {stage_name} failure" in message
        ir_path = message.split("the IR given to that stage is in ")[1].split(";")[0].split(")")[0].strip()
        with open(ir_path) as f:
            ir_text = f.read()
        assert "@trident_run_1(" in ir_text  # the second specialization's program (func or llvm dialect)
        if stage_name == "llvm":
            assert f"--pass-pipeline='{pipeline.PIPELINE}' {ir_path}" in message
        monkeypatch.undo()
        for _ in range(2):  # the first specialization is intact
            torch.testing.assert_close(fn(x), (x * 2).sum(-1))
        with count_compiles() as compiles:
            torch.testing.assert_close(fn(torch.ones(2, 5, 8)), torch.full((2, 5), 16.0))  # and it compiles now
        assert compiles() == 1
    assert fn._trident.eager_calls == 1 and sum(fn._trident.entry.hits()) == 4
