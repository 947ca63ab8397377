"""Each knob is declared once (knobs.py); what is derived from the declarations is what they say: the environment
reading (variable, type, default), the compile-affecting knobs of the disk cache's key, and the options the
lowering passes get as values instead of reading the process-wide knobs."""
from __future__ import annotations

import ast
import dataclasses
import inspect
import typing
from pathlib import Path

import pytest
import torch

from trident.knobs import (
    COMPILED, DECLARED, KNOB_DOCS, CompileOptions, Knobs, from_environment, knobs, markdown_table, override,
)  # fmt: skip

ROOT = Path(__file__).resolve().parents[2]
LOWERING = ROOT / "src" / "trident" / "lowering"
TYPES = typing.get_type_hints(Knobs)


def _default(name: str) -> object:
    declared = DECLARED[name]
    return declared.default_factory() if declared.default_factory is not None else declared.default


def _set_value(name: str) -> tuple[str, object]:
    """A text to set the knob's variable to, and the value it must read as, chosen by the knob's type."""
    kind, default = TYPES[name], _default(name)
    if kind is bool:  # the README's setting is the one that changes it
        return DECLARED[name].setting, not default
    if kind is int:
        return " 7 ", 7
    if kind is float:
        return "7.5", 7.5
    if kind in (Path, Path | None):
        return "/tmp/trident-knob", Path("/tmp/trident-knob")
    if kind == frozenset[str]:
        return "b, a,,", frozenset({"a", "b"})
    raise AssertionError(f"knob {name!r} has a type the test does not know: {kind}")


def test_every_field_of_knobs_is_declared_once_with_its_own_variable() -> None:
    assert list(DECLARED) == [field.name for field in dataclasses.fields(Knobs)]
    envs = [declared.env for declared in DECLARED.values()]
    assert len(set(envs)) == len(envs) and all(env.startswith("TRIDENT_") for env in envs), envs
    assert KNOB_DOCS == {declared.env: declared.doc for declared in DECLARED.values()}
    assert markdown_table().count("\n| `TRIDENT_") == len(DECLARED)


@pytest.mark.parametrize("name", list(DECLARED))
def test_each_knob_reads_its_variable_with_its_type_and_default(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    declared = DECLARED[name]
    for other in DECLARED.values():
        monkeypatch.delenv(other.env, raising=False)
    unset = getattr(from_environment(), name)
    assert unset == _default(name) == getattr(Knobs(), name), name  # the dataclass default is the declared one
    text, expected = _set_value(name)
    monkeypatch.setenv(declared.env, text)
    value = getattr(from_environment(), name)
    assert value == expected and value != unset, (declared.env, text, value)
    runtime_type = frozenset if typing.get_origin(TYPES[name]) is frozenset else TYPES[name]  # Path | None as is
    assert isinstance(unset, runtime_type) and isinstance(value, runtime_type), (name, TYPES[name], unset, value)
    if TYPES[name] is bool:  # set but empty reads as unset, whichever way the flag defaults
        monkeypatch.setenv(declared.env, "")
        assert getattr(from_environment(), name) is _default(name)
    # Only its own variable moved it: every other knob still reads its default.
    monkeypatch.setenv(declared.env, text)
    others = from_environment()
    assert all(getattr(others, n) == _default(n) for n in DECLARED if n != name)


def test_numeric_defaults_are_the_ones_the_readme_states() -> None:
    for name, declared in DECLARED.items():
        if TYPES[name] in (int, float):
            assert f"(default {declared.default:g}" in declared.doc, (name, declared.doc)


def test_the_cache_key_holds_exactly_the_knobs_declared_to_change_a_compile() -> None:
    from trident.cache.key import compiled_knobs

    assert COMPILED == tuple(name for name, declared in DECLARED.items() if declared.compiles)
    assert {"see_through", "opaque_ops", "private_views", "buffer_pool_mb", "cuda_graphs", "replay_plan"} == set(
        COMPILED
    )  # today's list: a change to it is a decision, made in the declarations
    assert [name for name, _ in compiled_knobs()] == list(COMPILED)
    assert set(COMPILED) <= {field.name for field in dataclasses.fields(CompileOptions)}
    assert compiled_knobs() == CompileOptions.current().key()


@pytest.mark.parametrize("name", list(DECLARED))
def test_a_knob_changes_the_cache_key_exactly_when_declared_to(name: str) -> None:
    """From the defaults, a knob that changes a compile changes the key; any other leaves it as it is."""
    from trident.cache.key import compiled_knobs

    with override(**{field.name: _default(field.name) for field in dataclasses.fields(Knobs)}):
        before = compiled_knobs()
        changed: object = {float: 0.0, int: 1, bool: not _default(name)}.get(TYPES[name], _set_value(name)[1])
        with override(**{name: changed}):
            after = compiled_knobs()
    assert (after != before) == DECLARED[name].compiles, (name, before, after)


def test_what_of_a_knob_the_key_holds_is_what_the_compile_depends_on() -> None:
    """The pool's size is read when a specialization is made, not compiled; CUDA graphs and replay plans change a
    compile only together (whether a replay plan is lowered). Records are shared across what a compile ignores."""
    from trident.cache.key import compiled_knobs

    with override(buffer_pool_mb=256.0):
        pooled = compiled_knobs()
    with override(buffer_pool_mb=64.0):
        assert compiled_knobs() == pooled
    with override(cuda_graphs=False, replay_plan=True):
        no_plan = compiled_knobs()
    with override(cuda_graphs=True, replay_plan=False):
        assert compiled_knobs() == no_plan
    with override(opaque_ops=frozenset({"b::x", "a::y"})):
        assert dict(compiled_knobs())["opaque_ops"] == ("a::y", "b::x")  # a set, spelled in one order


def _reads_of_knobs(path: Path) -> list[str]:
    """Where the module reads the process-wide knobs: `knobs.<name>`, or imports `knobs` / `override` from
    trident.knobs (or the module itself)."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "knobs":
            found.append(f"{path.name}:{node.lineno}: knobs.{node.attr}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith("knobs"):
            names = [alias.name for alias in node.names if alias.name in ("knobs", "override")]
            found += [f"{path.name}:{node.lineno}: imports {name}" for name in names]
        elif isinstance(node, ast.ImportFrom) and any(a.name == "knobs" for a in node.names):
            found.append(f"{path.name}:{node.lineno}: imports the knobs module")
    return found


def test_no_capture_or_lowering_module_reads_the_knobs() -> None:
    """Capture and the passes take their options as values (the driver reads a CompileOptions once per miss;
    pipeline.py, when called without one, once per compile)."""
    modules = sorted(LOWERING.glob("*.py")) + sorted((LOWERING.parent / "capture").glob("*.py"))
    assert len(modules) >= 20 and LOWERING / "pipeline.py" in modules
    reads = [read for module in modules for read in _reads_of_knobs(module)]
    assert not reads, reads
    # The check finds what it looks for.
    assert _reads_of_knobs(ROOT / "src" / "trident" / "driver.py"), "driver.py reads knobs: the check finds nothing"


def test_compile_specialization_takes_its_options_as_a_value() -> None:
    from trident.lowering import pipeline

    parameter = inspect.signature(pipeline.compile_specialization).parameters["options"]
    assert parameter.default is None  # None: the knobs as they are when the compile starts


def test_the_host_program_lowering_follows_the_options_it_is_given_not_the_knobs() -> None:
    from trident.capture.inputs import describe_call
    from trident.capture.trace import Dynamism, trace_function
    from trident.ir.fx_import import import_graph, new_context
    from trident.ir.mlir_text import ModuleBuilder
    from trident.lowering.aliasing import PRIVATE_VIEW
    from trident.lowering.leaf_access import ConstantPool
    from trident.lowering.lower_host_program import HostProgramLowering, OpTable
    from trident.lowering.pipeline import _find_main, placeholder_sources
    from trident.lowering.symbolic_ints import SCALAR_LOWERING

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x * 2).t().sum(0)  # t() views an intermediate nothing outside the call reaches: a private view

    args = [torch.randn(3, 4)]
    facts = describe_call(["x"], args)
    trace = trace_function(f, 1, ["x"], args, facts, Dynamism(), SCALAR_LOWERING)

    def aten_calls(private_views: bool) -> list[str]:
        torch_module, _ = import_graph(trace.graph_module.graph, new_context())
        lowering = HostProgramLowering(
            ModuleBuilder(), "run", _find_main(torch_module), placeholder_sources(trace, facts), trace.outputs,
            [leaf.path for leaf in facts.leaves], ConstantPool(list(trace.constants)), OpTable(),
            private_views=private_views,
        )  # fmt: skip
        with override(private_views=not private_views):  # the knob says the opposite: the pass must not look
            lowering.run()
        return lowering.aten_calls

    knob = knobs.private_views
    assert any(call.endswith(PRIVATE_VIEW) for call in aten_calls(True)), aten_calls(True)
    assert not any(call.endswith(PRIVATE_VIEW) for call in aten_calls(False)), aten_calls(False)
    assert knobs.private_views is knob
