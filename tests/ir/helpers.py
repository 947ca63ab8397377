"""Trace a function the way the driver does, for tests of single passes."""
from __future__ import annotations

import inspect
from collections.abc import Callable

from trident.capture.inputs import CallFacts, describe_call
from trident.capture.module_state import ModuleReads
from trident.capture.trace import Dynamism, Trace, trace_function
from trident.guards.build import guard_set
from trident.guards.guard_set import GuardSet
from trident.lowering.symbolic_ints import SCALAR_LOWERING


def capture(fn: Callable[..., object], *args: object, dynamism: Dynamism = Dynamism()) -> tuple[CallFacts, Trace, GuardSet]:
    names = list(inspect.signature(fn).parameters)
    facts = describe_call(names, list(args))
    trace = trace_function(fn, len(names), names, list(args), facts, dynamism, SCALAR_LOWERING)
    return facts, trace, guard_set(fn, names, list(args), facts, trace, ModuleReads())


def constant(name: str, value: int, type_: str = "i64") -> str:
    """Binds [[name]] to the SSA name of the (hoisted) constant `value`."""
    return f"CHECK-DAG: %[[{name}:c[0-9]+]] = arith.constant {value} : {type_}\n"
