"""Trident's own reading of which pointer parameters a Triton kernel stores through (capture/kernel_stores.py),
on the TTIR torch's `generate_ttir` makes, beside torch's own analysis of the same launch.

Where torch's analysis decides, Trident's answer must contain it (both over-approximate; a write one misses would
let the other's answer through unsound). Where torch's stops (an op with a region it does not model), Trident's
decides. Where a store goes through a pointer made from memory, torch's answers "nothing" and Trident's refuses."""
from __future__ import annotations

import logging
import sys
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from torch._higher_order_ops.triton_kernel_wrap import get_mutated_tensors, kernel_side_table

from region_kernels import HAS_MAP_ELEMENTWISE, clamp_kernel

from trident.capture.triton_launches import _AnalysisFailure, _own_writes, exact_mutation_analysis


def both(kernel: Any, **kwargs: object) -> tuple[list[str] | str, list[str] | str]:
    """(torch's written tensors, or why its analysis failed; Trident's answer) for one launch of `kernel`, through
    the entry points capture uses (torch's get_mutated_tensors, whose failure it logs)."""
    kernel_idx = kernel_side_table.add_kernel(kernel)
    constant_args_idx = kernel_side_table.add_constant_args({})
    failure = _AnalysisFailure()
    module = sys.modules[get_mutated_tensors.__module__]
    log = getattr(module, "log", None) or logging.getLogger(module.__name__)
    log.addFilter(failure)
    try:
        with exact_mutation_analysis():
            theirs: list[str] | str = sorted(get_mutated_tensors(kernel_idx, constant_args_idx, dict(kwargs), {}))
            ours, _ = _own_writes(kernel_idx, constant_args_idx, dict(kwargs), {})
    finally:
        log.removeFilter(failure)
    return (failure.reason if failure.reason is not None else theirs), ours


def vector(n: int = 64, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.zeros(n, dtype=dtype)


@pytest.mark.skipif(not HAS_MAP_ELEMENTWISE, reason="tl.map_elementwise is newer than this Triton")
def test_an_op_with_a_region_torch_does_not_model_is_decided() -> None:
    theirs, ours = both(clamp_kernel, x_ptr=vector(), out_ptr=vector(), n=64, BLOCK=64)
    assert isinstance(theirs, str) and "map_elementwise" in theirs, theirs
    assert ours == ["out_ptr"]


@triton.jit
def _loop_kernel(a_ptr, b_ptr, idx_ptr, out_ptr, count_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    i = tl.arange(0, BLOCK)
    p = out_ptr
    for k in range(0, n, BLOCK):
        j = tl.load(idx_ptr + k + i)  # an index read from memory moves the store, not where it may point
        v = tl.load(a_ptr + j) + tl.sum(tl.load(b_ptr + i), 0)
        tl.store(p + k + i, v)
        p = p + 0  # a loop-carried pointer
    if n > 3:
        tl.atomic_add(count_ptr, 1.0)


def test_loops_reductions_gathers_and_atomics_give_torchs_answer() -> None:
    theirs, ours = both(_loop_kernel, a_ptr=vector(), b_ptr=vector(), idx_ptr=vector(dtype=torch.int32),
                        out_ptr=vector(), count_ptr=vector(1), n=64, BLOCK=64)  # fmt: skip
    assert theirs == ["count_ptr", "out_ptr"]
    assert sorted(ours) == theirs


@triton.jit
def _store_inlined(ptr, v, i):  # type: ignore[no-untyped-def]
    tl.store(ptr + i, v)


@triton.jit(noinline=True)
def _store_called(ptr, i):  # type: ignore[no-untyped-def]
    tl.store(ptr + i, 1.0)


@triton.jit(noinline=True)
def _load_called(ptr, i):  # type: ignore[no-untyped-def]
    return tl.load(ptr + i)


@triton.jit
def _call_kernel(x_ptr, y_ptr, z_ptr, w_ptr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    i = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + i) + _load_called(w_ptr, tl.program_id(0))
    _store_inlined(y_ptr, v, i)
    _store_called(z_ptr, tl.program_id(0))


def test_a_called_function_writes_what_its_caller_passes_it() -> None:
    theirs, ours = both(_call_kernel, x_ptr=vector(), y_ptr=vector(), z_ptr=vector(), w_ptr=vector(), BLOCK=64)
    assert theirs == ["y_ptr", "z_ptr"]
    assert sorted(ours) == theirs  # the callee that only loads writes nothing


@triton.jit
def _select_kernel(x_ptr, a_ptr, b_ptr, n, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    i = tl.arange(0, BLOCK)
    target = a_ptr if n > 8 else b_ptr  # either, decided at run time
    tl.store(target + i, tl.load(x_ptr + i))


def test_a_pointer_chosen_at_run_time_writes_both_candidates() -> None:
    theirs, ours = both(_select_kernel, x_ptr=vector(), a_ptr=vector(), b_ptr=vector(), n=64, BLOCK=64)
    assert sorted(ours) == ["a_ptr", "b_ptr"]
    assert isinstance(theirs, str) or set(theirs) <= set(ours)


@triton.jit
def _pointer_table_kernel(table_ptr, out_ptr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    target = tl.load(table_ptr).to(tl.pointer_type(tl.float32))  # an address read from memory
    tl.store(target + tl.arange(0, BLOCK), 1.0)


def test_a_store_through_a_pointer_read_from_memory_is_not_decided() -> None:
    """torch's analysis finds no write here; the kernel may write any tensor, `out_ptr` included."""
    theirs, ours = both(_pointer_table_kernel, table_ptr=vector(1, torch.int64), out_ptr=vector(), BLOCK=64)
    assert theirs == []
    assert isinstance(ours, str) and "cannot trace" in ours


def test_an_analysis_that_breaks_on_this_triton_leaves_torchs_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """IR bindings another Triton lacks make Trident's reading fail: it then gives no answer (not "cannot trace",
    which would make every tensor written), and kernel_writes keeps torch's."""
    from trident.capture import triton_launches

    def broken(*args: object) -> object:
        raise AttributeError("'operation' object has no attribute 'get_block'")

    monkeypatch.setattr(triton_launches, "stored_parameters", broken)
    _, ours = both(_select_kernel, x_ptr=vector(), a_ptr=vector(), b_ptr=vector(), n=64, BLOCK=64)
    assert isinstance(ours, str) and "get_block" in ours
    kernel_idx = kernel_side_table.add_kernel(_select_kernel)
    with exact_mutation_analysis():
        _, untraceable = _own_writes(kernel_idx, kernel_side_table.add_constant_args({}),
                                     dict(x_ptr=vector(), a_ptr=vector(), b_ptr=vector(), n=64, BLOCK=64), {})
    assert not untraceable


@triton.autotune(configs=[triton.Config({"BLOCK": 64, "SPLIT": 1})], key=["n"])
@triton.jit
def _configured_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2):  # type: ignore[no-untyped-def]
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n) * SCALE, mask=i < n)


def test_a_config_key_that_is_no_parameter_and_a_left_out_default_still_decide() -> None:
    """gemlite's configs carry keys its kernels do not take (Triton passes them on as options), and its launches
    leave defaulted parameters out: torch's analysis counts every key and refuses; Trident's reads the kernel's
    own parameters, defaults filled in, and decides."""
    theirs, ours = both(_configured_kernel, x_ptr=vector(), out_ptr=vector(), n=64)
    assert isinstance(theirs, str), theirs  # "KeyError: 'SCALE'", or "Incorrect number of arguments" where the
    assert ours == ["out_ptr"], ours        # counts differ
