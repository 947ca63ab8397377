"""Capture: tracing decisions, unsupported constructs, and the guard facts recorded."""
from __future__ import annotations

import inspect

import pytest
import torch

from trident import exc
from trident.capture.inputs import LeafKind, describe_call
from trident.capture.module_state import ModuleReads
from trident.capture.trace import Dynamism, trace_function
from trident.guards.build import guard_set
from trident.guards.guard_set import first_failure, group_alike
from trident.lowering.symbolic_ints import SCALAR_LOWERING


def trace(fn, *args, dynamism=Dynamism()):  # type: ignore[no-untyped-def]
    names = list(inspect.signature(fn).parameters)
    facts = describe_call(names, list(args))
    return facts, trace_function(fn, len(names), names, list(args), facts, dynamism, SCALAR_LOWERING)


def test_describe_call_walks_tuples_and_lists() -> None:
    facts = describe_call(["xs", "n"], [(torch.zeros(2), [torch.ones(3), None]), 4])
    assert [leaf.path.name for leaf in facts.leaves] == ["xs[0]", "xs[1][0]", "xs[1][1]", "n"]
    assert [leaf.kind for leaf in facts.leaves] == [LeafKind.TENSOR, LeafKind.TENSOR, LeafKind.NONE, LeafKind.INT]
    assert [(s.path.name, s.kind, s.length) for s in facts.sequences] == [("xs", 1, 2), ("xs[1]", 2, 2)]


def test_tensor_subclass_is_an_identity_guarded_object() -> None:
    class Sub(torch.Tensor):
        pass

    facts = describe_call(["x"], [torch.zeros(2).as_subclass(Sub)])
    assert facts.leaves[0].kind is LeafKind.OBJECT


def test_data_dependent_control_flow_names_the_user_line() -> None:
    def branchy(x):  # type: ignore[no-untyped-def]
        # A truth of random values: one a guard cannot compute again (tests/e2e/test_value_reads.py).
        if torch.rand_like(x).sum() > 0:  # the line the error must point at
            return x
        return -x

    with pytest.raises(exc.UnsupportedConstruct) as info:
        trace(branchy, torch.randn(3))
    message = str(info.value)
    assert "data-dependent control flow" in message
    assert "if torch.rand_like(x).sum() > 0:  # the line the error must point at" in message
    assert "test_capture.py" in message


def test_item_is_unsupported() -> None:
    with pytest.raises(exc.UnsupportedConstruct, match=r"\.item\(\)"):
        trace(lambda x: x * x.max().item(), torch.randn(3))


def test_symbolic_int_index_stays_symbolic() -> None:
    def write(cache, k, pos):  # type: ignore[no-untyped-def]
        cache[:, pos] = k
        return cache[:, pos]

    facts, t = trace(write, torch.zeros(2, 8), torch.ones(2), 3, dynamism=Dynamism(ints=frozenset({(2, ())})))
    code = t.graph_module.code
    assert "select.int(" in code and ", 3)" not in code  # the index is the graph input, not the constant 3
    assert not any(str(g.expr).startswith("Eq") for g in t.shape_env.guards)


def test_constants_are_lifted_to_placeholders() -> None:
    w = torch.randn(3, 3)
    _, t = trace(lambda x: x @ w, torch.randn(2, 3))
    assert len(t.constants) == 1 and t.constants[0] is w
    assert not any(n.op == "get_attr" for n in t.graph_module.graph.nodes)


def test_first_failure_messages() -> None:
    fn = lambda x, n: x * n  # noqa: E731
    x = torch.randn(4, 8)
    facts, t = trace(fn, x, 3)
    guards = guard_set(fn, ["x", "n"], [x, 3], facts, t, ModuleReads())
    assert first_failure(guards, [x, 3], t.constants) is None
    assert first_failure(guards, [x, 4], t.constants) == "argument 'n': value mismatch: expected 3, got 4"
    assert first_failure(guards, [torch.randn(4, 16)[:, ::2], 3], t.constants) == (
        "argument 'x': stride mismatch at dim 0: expected 8, got 16"
    )
    assert first_failure(guards, [torch.randn(5, 8), 3], t.constants) == (
        "argument 'x': size mismatch at dim 0: expected 4, got 5"
    )


def test_tensor_guard_text_names_every_field_it_checks() -> None:
    """explain's line and the miss reason come from one table: a conj or neg bit, which the guard checks, shows
    in explain (two specializations differing only by it no longer read alike), and a type reads as its name."""
    x = torch._neg_view(torch.randn(4, 8))
    fn = lambda x: x * 2  # noqa: E731
    facts, t = trace(fn, x)
    guards = guard_set(fn, ["x"], [x], facts, t, ModuleReads())
    assert guards.tensors[0].describe() == "x: Tensor float32 cpu rank 2 neg bit"
    assert first_failure(guards, [torch.randn(4, 8)], t.constants) == (
        "argument 'x': neg bit mismatch: expected True, got False"
    )
    assert first_failure(guards, [torch.nn.Parameter(x.detach(), requires_grad=False)], t.constants) == (
        "argument 'x': type mismatch: expected Tensor, got Parameter"
    )


def test_list_valued_sym_size_is_split_per_dim() -> None:
    # torch 2.11's make_fx records x.size() inside some decompositions (repeat_interleave) as one list-valued
    # aten.sym_size.default node, which the importer cannot type. Build such a graph by hand (2.13 no longer
    # emits it) and check the split.
    import operator

    from trident.capture.trace import _split_size_lists
    from trident.ir.fx_import import import_graph, new_context

    _, t = trace(lambda x: x * 2, torch.randn(3, 2, 4), dynamism=Dynamism(sizes=frozenset({(0, (), 0)})))
    gm = t.graph_module
    graph = gm.graph
    x = next(n for n in graph.nodes if n.op == "placeholder")
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        sizes = graph.call_function(torch.ops.aten.sym_size.default, (x,))
        sizes.meta["val"] = list(x.meta["val"].shape)
        first = graph.call_function(operator.getitem, (sizes, 0))
        first.meta["val"] = x.meta["val"].shape[0]
        zeros = graph.call_function(torch.ops.aten.new_zeros.default, (x, sizes))
        zeros.meta["val"] = x.meta["val"].new_zeros(x.meta["val"].shape)
        view = graph.call_function(torch.ops.aten.view.default, (x, [first, 8]))
        view.meta["val"] = x.meta["val"].view(x.meta["val"].shape[0], 8)
    output.args = (list(output.args[0]) + [zeros, view],)
    _split_size_lists(gm)
    targets = [n.target for n in graph.nodes]
    assert torch.ops.aten.sym_size.default not in targets and operator.getitem not in targets
    assert zeros.args[1][1:] == [2, 4] and zeros.args[1][0].target is torch.ops.aten.sym_size.int
    assert view.args[1][0].target is torch.ops.aten.sym_size.int
    import_graph(graph, new_context())  # every value has a type now


def test_explain_merges_alike_guards_and_keeps_the_rest() -> None:
    lines = [
        "x: Tensor float32 cpu rank 2",
        "caches: list of length 4",
        "y: Tensor float32 cpu rank 2",
        *(f"caches[{i}]: tuple of length 2" for i in range(4)),
        "n: int == 3",
        "relation: s0 >= 2",
    ]
    assert group_alike(lines) == [
        "x, y: Tensor float32 cpu rank 2",
        "caches: list of length 4",
        "caches[0], caches[1], ... caches[3] (4 alike): tuple of length 2",
        "n: int == 3",
        "relation: s0 >= 2",
    ]
    assert group_alike(["no label here", "no label here"]) == ["no label here"]
