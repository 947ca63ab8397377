"""The complete guard set of one capture: what the call's arguments were (guards.build_guards), the module state
the function read (module_state.py), the Python kernels it saw through (python_kernels.py) and the int64 range
of every int the program computes (int64_ranges.py). Made here, once; nothing adds to it later."""
from __future__ import annotations

from collections.abc import Sequence

from .guards import GuardSet, build_guards, see_through_guards
from .inputs import CallFacts
from .int64_ranges import int64_range_guards
from .module_state import ModuleReads, module_paths, module_roots, tensor_names
from .trace import Trace


def guard_set(
    fn: object, param_names: list[str], values: Sequence[object], facts: CallFacts, trace: Trace,
    module_reads: ModuleReads,
) -> GuardSet:
    roots = module_roots(fn, param_names, list(values))
    guards = build_guards(facts, trace, tensor_names(roots))
    guards.attributes = module_reads.guards(module_paths(roots)) + see_through_guards(trace.see_through)
    guards.relations += int64_range_guards(trace, guards)
    return guards
