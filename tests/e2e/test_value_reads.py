"""A tensor's truth read in Python (`if mask.all():`, `bool(t)`, `v in t`): the specialization is guarded on it.

Each read is answered with the compiling call's truth; the guard computes it again for every call (its value
program) and misses on the other truth, which compiles a second specialization. Reads the guard could not compute
again as the trace did (after a write, of random values, an int) still run the call eagerly, with one warning."""
from __future__ import annotations

import pytest
import torch
from helpers_native import assert_native, jit_state

import trident
from trident.guards.guard_set import first_failure
from trident.testing import expect_fallback

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _value_lines(f: object) -> list[str]:
    return [line.strip() for line in trident.explain(f).splitlines() if "a truth read from the call's tensors" in line]


@pytest.mark.parametrize("device", DEVICES)
def test_each_truth_gets_its_own_specialization(device: str) -> None:
    def branchy(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if mask.all():
            return x * 2
        return x + mask

    f = trident.jit(branchy)
    x = torch.randn(6, device=device)
    full = torch.ones(6, dtype=torch.bool, device=device)
    holed = full.clone()
    holed[3] = False
    calls = [full, holed, full, holed, holed.clone(), torch.ones_like(full)]
    with torch.no_grad():
        for mask in calls:
            assert torch.equal(f(x, mask), branchy(x, mask))
    assert_native(f, hits=len(calls), compiles=2)
    truths = [line.endswith("-> True (a truth read from the call's tensors)") for line in _value_lines(f)]
    assert truths == [True, False]
    assert "if mask.all():" in _value_lines(f)[0]


@pytest.mark.gpu
def test_a_truth_is_not_read_while_the_users_stream_captures_a_cuda_graph() -> None:
    """On CUDA a truth read syncs, which would end a capture of the user's own (torch.cuda.graph). The guard then
    misses without reading, and the call compiles the branch the function takes while capturing (transformers
    skips its mask reads then); after the capture the first specialization hits again."""

    def branchy(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if not torch.cuda.is_current_stream_capturing() and mask.all():
            return x * 2
        return x * 3

    f = trident.jit(branchy)
    x = torch.randn(64, device="cuda")
    mask = torch.ones(64, dtype=torch.bool, device="cuda")
    with torch.no_grad():
        assert torch.equal(f(x, mask), x * 2)
        graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
            captured = f(x, mask)
        x.copy_(torch.randn(64, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, x * 3)
        assert torch.equal(f(x, mask), x * 2)
    assert_native(f, hits=3, compiles=2)
    assert [line.endswith("-> True (a truth read from the call's tensors)") for line in _value_lines(f)] == [True]
    assert jit_state(f).entry.hits()[0] == 2, trident.explain(f)


def test_the_guard_recomputes_a_truth_from_several_operands_and_sizes() -> None:
    """The read's whole computation runs again, on sizes that change (symbolic) and on a second argument."""

    def step(x: torch.Tensor, limit: torch.Tensor) -> torch.Tensor:
        if (x.sum() / x.numel()) > limit:
            return x - limit
        return x * limit

    f = trident.jit(step)
    calls = [(torch.full((n,), v), torch.tensor(0.5)) for n, v in ((4, 1.0), (5, 1.0), (6, 0.0), (7, 2.0), (3, 0.25))]
    with torch.no_grad():
        for x, limit in calls:
            assert torch.equal(f(x, limit), step(x, limit))
        assert torch.equal(f(torch.full((4,), 1.0), torch.tensor(2.0)), torch.full((4,), 2.0))  # the limit decides
    state = jit_state(f)
    assert state.eager_calls == 0
    assert len(state.specializations) <= 4  # static then symbolic sizes, each with both truths at most
    assert any(line.endswith("-> False (a truth read from the call's tensors)") for line in _value_lines(f))


def test_python_check_agrees_with_the_native_guard() -> None:
    """first_failure (explain's reason for a miss) computes the read as the native guard does."""

    def branchy(mask: torch.Tensor) -> torch.Tensor:
        return mask.float() * (2 if mask.any() else 3)

    f = trident.jit(branchy)
    with torch.no_grad():
        f(torch.tensor([False, True]))
    spec = jit_state(f).specializations[0]
    with torch.no_grad():  # the global state the specialization was compiled under
        assert first_failure(spec.guards, (torch.tensor([True, False]),), spec.trace_constants) is None
        why = first_failure(spec.guards, (torch.tensor([False, False]),), spec.trace_constants)
    assert why is not None and "-> False, compiled for True" in why, why


def test_a_read_that_fails_misses_and_raises_as_eager() -> None:
    """A value program that raises (an index out of range) is a miss, not an error of the guard: the call runs
    eagerly and raises eager's error; the specialization still serves good calls natively."""

    def pick(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return x * 2 if x[idx].all() else x

    f = trident.jit(pick)
    x, good, bad = torch.ones(4), torch.tensor([1, 2]), torch.tensor([1, 9])
    with torch.no_grad():
        assert torch.equal(f(x, good), x * 2)
        spec = jit_state(f).specializations[0]
        why = first_failure(spec.guards, (x, bad), spec.trace_constants)
        assert why is not None and "reading it failed (IndexError" in why, why
        with expect_fallback("IndexError"), pytest.raises(IndexError):
            f(x, bad)
        assert torch.equal(f(x, good), x * 2)
    state = jit_state(f)
    assert state.entry.hits() == [2] and len(state.specializations) == 1


def test_a_closed_over_tensor_written_between_calls_is_read_again() -> None:
    enabled = torch.tensor(True)

    def gated(x: torch.Tensor) -> torch.Tensor:
        return x + 1 if enabled else x - 1

    f = trident.jit(gated)
    x = torch.zeros(3)
    with torch.no_grad():
        assert torch.equal(f(x), torch.ones(3))
        enabled.fill_(False)  # in place: the same tensor, so only its value tells
        assert torch.equal(f(x), -torch.ones(3))
        enabled.fill_(True)
        assert torch.equal(f(x), torch.ones(3))
    assert_native(f, hits=3, compiles=2)


def test_in_on_a_tensor_is_a_truth() -> None:
    def has_pad(ids: torch.Tensor) -> torch.Tensor:
        return ids * 0 if 7 in ids else ids

    f = trident.jit(has_pad)
    with torch.no_grad():
        for ids in ([1, 7, 2], [1, 2, 3], [7, 7, 7]):
            assert torch.equal(f(torch.tensor(ids)), has_pad(torch.tensor(ids)))
    assert_native(f, hits=3, compiles=2)


def test_read_after_a_write_runs_eagerly() -> None:
    """The guard runs before the call: it cannot compute what the program read after writing. Eager, once warned."""

    def bump(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        return x * 2 if x.sum() > 0 else x

    def bump_then_read(x: torch.Tensor, flag: torch.Tensor) -> torch.Tensor:
        x.add_(1)  # not what the read computes from, but it might have been (an alias): refused as well
        return x * 2 if flag.any() else x

    x = torch.zeros(3)
    with torch.no_grad():
        with expect_fallback("it is computed by aten.add_.Tensor"):
            assert torch.equal(trident.jit(bump)(x), torch.full((3,), 2.0))
        with expect_fallback("the function ran aten.add_.Tensor before it"):
            assert torch.equal(trident.jit(bump_then_read)(x, torch.tensor([True])), torch.full((3,), 4.0))
    assert torch.equal(x, torch.full((3,), 2.0))  # written once per call, by the eager runs


@pytest.mark.parametrize(
    ("read", "reason"),
    [
        pytest.param(lambda x: x * 2 if torch.rand(()) > 2 else x, "aten.rand.default, which a guard cannot",
                     id="random"),
        pytest.param(lambda x: x * int(x.sum()), "int(tensor) reads a tensor's value in Python:", id="int"),
        pytest.param(lambda x: x * 2 if x.sum().item() > 0 else x, ".item() reads a tensor's value in Python:",
                     id="float-item"),
    ],
)
def test_reads_a_guard_cannot_hold_still_run_eagerly(read: object, reason: str) -> None:
    f = trident.jit(read)
    x = torch.ones(3)
    with torch.no_grad(), expect_fallback(reason):
        assert torch.equal(f(x), read(x))  # type: ignore[operator]
    assert jit_state(f).specializations == []


def test_transformers_counts_only_other_fakes_as_tracing_and_only_during_captures() -> None:
    """library_branches: while captures run (nested, or in two threads ending in any order), transformers'
    is_fake_tensor does not count their own fakes; any other FakeTensor still counts; after the last, its own."""
    pytest.importorskip("transformers")
    from torch._subclasses.fake_tensor import FakeTensorMode

    import transformers.utils.import_utils as hf_imports
    from trident.capture.value_reads import library_branches

    original = hf_imports.is_fake_tensor
    first, second, third = (FakeTensorMode().from_tensor(torch.zeros(1)) for _ in range(3))
    a, b = library_branches(lambda t: t is first), library_branches(lambda t: t is second)
    a.__enter__()
    assert not hf_imports.is_fake_tensor(first) and hf_imports.is_fake_tensor(second)
    b.__enter__()
    assert not hf_imports.is_fake_tensor(first) and not hf_imports.is_fake_tensor(second)
    a.__exit__(None, None, None)  # the first capture ends while the second still runs
    assert hf_imports.is_fake_tensor(first) and not hf_imports.is_fake_tensor(second)
    assert hf_imports.is_fake_tensor(third) and not hf_imports.is_fake_tensor(torch.zeros(1))
    b.__exit__(None, None, None)
    assert hf_imports.is_fake_tensor is original
