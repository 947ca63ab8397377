"""The complete guard set of one capture, made once: what the call's arguments were, the tensors the function
closes over, the symbols and relations the trace relied on, the module state it read (capture/module_state.py),
the Python kernels it saw through (capture/python_kernels.py) and the int64 range of every int the program
computes (int64_ranges.py). The driver makes it right after the capture; nothing adds to it later."""
from __future__ import annotations

from collections.abc import Sequence

import sympy
import torch

from .. import exc
from ..capture.constant_views import byte_distance
from ..capture.inputs import CallFacts, LeafKind, LeafPath, tensor_fact
from ..capture.module_state import ModuleReads, module_paths, module_roots, tensor_names
from ..capture.trace import Trace
from .global_state import FunctionModesGuard, GlobalStateGuard, current_function_modes, current_global_state
from .guard_set import GuardSet
from .int64_ranges import int64_range_guards
from .module_state import bypass_guards, module_state_guards, see_through_guards
from .symbols import PropertyGuard, RelationGuard, SymbolBinding
from .tensors import DerivedConstantGuard, TensorGuard
from .values import IdentityGuard, ScalarGuard, SequenceGuard, ValueGuard


def guard_set(
    fn: object, param_names: list[str], values: Sequence[object], facts: CallFacts, trace: Trace,
    module_reads: ModuleReads,
) -> GuardSet:  # fmt: skip
    """Every guard of the specialization compiled from `trace` (the capture of `fn` on the call `values`, whose
    facts are `facts`, while it read `module_reads`)."""
    global_state = GlobalStateGuard(current_global_state())  # what the capture ran under
    function_modes = FunctionModesGuard(current_function_modes())
    roots = module_roots(fn, param_names, list(values))
    names = tensor_names(roots)  # id(tensor) -> how the user names a constant (a module path)
    constant_labels = {i: names[id(c)] for i, c in enumerate(trace.constants) if id(c) in names}
    attributes = (module_state_guards(module_reads, module_paths(roots)) + see_through_guards(trace.see_through)
                  + bypass_guards(trace.graph_module.graph, trace.see_through))
    sequences = tuple(SequenceGuard(s) for s in facts.sequences)
    tensors: list[TensorGuard] = []
    scalars: list[ScalarGuard] = []
    identities: list[IdentityGuard] = []
    identity_objects: list[object] = []
    derived: list[DerivedConstantGuard] = []
    properties: list[tuple[LeafPath, str, int, sympy.Expr]] = []

    def tensor_properties(path: LeafPath, fake: torch.Tensor) -> None:
        for d in range(fake.dim()):
            properties.append((path, "size", d, _expr(fake.size(d))))
        properties.append((path, "offset", 0, _expr(fake.storage_offset())))
        for d in range(fake.dim()):
            properties.append((path, "stride", d, _expr(fake.stride(d))))

    for index, leaf in enumerate(facts.leaves):
        if leaf.kind is LeafKind.TENSOR:
            assert leaf.tensor is not None
            tensors.append(TensorGuard(leaf.path, leaf.tensor))
            tensor_properties(leaf.path, trace.fake_leaves[index])  # type: ignore[arg-type]
        elif leaf.kind in (LeafKind.INT, LeafKind.FLOAT) and index in trace.fake_leaves:
            scalars.append(ScalarGuard(leaf.path, leaf.kind, None))
            properties.append((leaf.path, leaf.kind.value, 0, _expr(trace.fake_leaves[index])))
        elif leaf.kind is LeafKind.OBJECT:
            identities.append(IdentityGuard(leaf.path, len(identity_objects), type(leaf.value).__name__))
            identity_objects.append(leaf.value)
        else:
            scalars.append(ScalarGuard(leaf.path, leaf.kind, leaf.value))

    # Where each constant is read from (guard paths (-1, (i,))), named as explain shows it.
    constant_paths = [LeafPath(-1, (i,), f"{constant_labels.get(i, f'constant #{i}')} {tuple(c.shape)}")
                      for i, c in enumerate(trace.constants)]
    for i, (constant, fake) in enumerate(zip(trace.constants, trace.fake_constants)):
        if i in trace.derived_constants:  # Trident's own view: only its base can change
            base = trace.derived_constants[i]
            distance = byte_distance(constant, trace.constants[base])
            derived.append(DerivedConstantGuard(i, base, distance, constant_labels.get(base, "")))
            continue
        fact = tensor_fact(constant)
        if fact is None:
            raise exc.UnsupportedArgument(
                f"the function closes over a {type(constant).__name__} that is not a plain strided tensor"
                + (f" ({names[id(constant)]})" if id(constant) in names else "")
            )
        tensors.append(TensorGuard(constant_paths[i], fact))
        tensor_properties(constant_paths[i], fake)

    bindings: list[SymbolBinding] = []
    fixed: list[PropertyGuard] = []
    bound: set[sympy.Symbol] = set()
    for path, prop, dim, expr in properties:
        if isinstance(expr, sympy.Symbol) and expr not in bound:
            bound.add(expr)
            bindings.append(SymbolBinding(expr, path, prop, dim))
        elif prop == "float":  # capture/specialize.py retraces a float sympy bound to anything else as a constant
            raise exc.LoweringError(f"internal error: symbolic float '{path.name}' is {expr}, not its own symbol")
        else:
            fixed.append(PropertyGuard(path, prop, dim, expr))
    relations = _shape_env_relations(trace, bound)
    relations += int64_range_guards(trace, bound, relations)
    inputs = (*(facts.leaves[i].path for i in trace.placeholder_leaves), *constant_paths)  # the graph's placeholders
    values = tuple(ValueGuard(program, inputs, k) for k, program in enumerate(trace.value_programs))
    return GuardSet(
        sequences=sequences, tensors=tuple(tensors), derived=tuple(derived), attributes=tuple(attributes),
        scalars=tuple(scalars), identities=tuple(identities), bindings=tuple(bindings), properties=tuple(fixed),
        relations=tuple(relations), global_state=global_state,
        function_modes=function_modes, identity_objects=tuple(identity_objects),
        constant_labels=constant_labels, values=values,
    )  # fmt: skip


def _expr(value: object) -> sympy.Expr:
    if isinstance(value, (torch.SymInt, torch.SymFloat)):
        return value.node.expr
    return sympy.Integer(int(value))  # type: ignore[call-overload]


def _shape_env_relations(trace: Trace, bound: set[sympy.Symbol]) -> list[RelationGuard]:
    shape_env = trace.shape_env
    relations: list[RelationGuard] = []
    seen: set[sympy.Basic] = set()
    for guard in shape_env.guards:
        # In terms of the symbols that survived replacement (s1 -> s0 after Eq(s0, s1)): the ones the fake
        # inputs' sizes carry, so the ones bound. Input properties equal to a replaced symbol are checked
        # against its replacement by PropertyGuards.
        expr = shape_env.simplify(guard.expr)
        if expr in seen or expr == sympy.true:
            continue
        seen.add(expr)
        relations.append(RelationGuard(expr))
    # Value ranges the trace assumed (sizes >= 2 once 0/1 were specialized away, bounds learned from guards).
    for symbol in sorted(bound, key=str):
        vr = shape_env.var_to_range.get(symbol)
        if vr is None:
            continue
        if isinstance(vr.lower, sympy.Integer):  # unbounded ends are int_oo, not Integer
            relations.append(RelationGuard(sympy.Ge(symbol, sympy.Integer(int(vr.lower)))))
        if isinstance(vr.upper, sympy.Integer):
            relations.append(RelationGuard(sympy.Le(symbol, sympy.Integer(int(vr.upper)))))
    unbound = set().union(*(r.expr.free_symbols for r in relations)) - bound if relations else set()
    if unbound:
        raise exc.UnsupportedConstruct(
            f"the trace relied on sizes that are not inputs' sizes or ints ({sorted(map(str, unbound))})"
        )
    return relations
