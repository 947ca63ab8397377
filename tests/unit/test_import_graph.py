"""The package's layering, read from the source (docs/design.md, "Layout"): capture -> ir -> lowering -> artifact ->
runtime, with cache/ (warm start) and driver.py above them.

- No circle among imports, counting those inside functions and under TYPE_CHECKING: any module imports without
  a half-initialised module in its way, and no two modules depend on each other.
- capture/, ir/, guards/ and lowering/ never import runtime/, cache/, the driver or the API, not even inside a
  function: what they produce is plain data (the artifact) that the runtime instantiates.
- capture/ imports neither guards/ nor lowering/: it records facts, which guards/ turns into the guard set. guards/
  uses only the lowering's building blocks (each kind lowers itself with them); the guard pass and the pipeline
  import guards/, never the other way round.
- runtime/ imports none of those nor the compiler's backend: it reads the artifact.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "trident"
LOWER_LAYERS = ("trident.capture", "trident.ir", "trident.guards", "trident.lowering")
UPPER_LAYERS = ("trident.runtime", "trident.cache", "trident.driver", "trident.api", "trident.module",
                "trident.graphs.recorder")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imports(name: str) -> list[tuple[str, bool]]:
    """(imported trident module, at module level?) for every import statement in the module."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        at_top = node in tree.body
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:  # `from . import store` imports the module trident.cache.store
                child = f"{target}.{alias.name}"
                found.append((child if child in MODULES else target, at_top))
        elif isinstance(node, ast.Import):
            found += [(alias.name, at_top) for alias in node.names]
    return [(target, top) for target, top in found if target.split(".")[0] == "trident" and target in MODULES]


def _in(name: str, layers: tuple[str, ...]) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def test_the_graph_reads_the_package() -> None:
    assert len(MODULES) > 40 and "trident.lowering.lower_host_program" in MODULES
    assert ("trident.capture.results", True) in _imports("trident.lowering.lower_host_program")
    assert ("trident.cache.store", False) in _imports("trident.cache")


def test_imports_have_no_circle() -> None:
    graph = {name: {t for t, _ in _imports(name) if t != name} for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])


def test_capture_ir_and_lowering_do_not_import_the_runtime_or_the_cache() -> None:
    upward = [
        f"{name} imports {target}"
        for name in sorted(MODULES)
        if _in(name, LOWER_LAYERS)
        for target, _ in _imports(name)
        if _in(target, UPPER_LAYERS)
    ]
    assert upward == []


def test_capture_imports_neither_the_guards_nor_the_lowering() -> None:
    downward = [
        f"{name} imports {target}"
        for name in sorted(MODULES)
        if _in(name, ("trident.capture",))
        for target, _ in _imports(name)
        if _in(target, ("trident.guards", "trident.lowering"))
    ]
    assert downward == []


def test_guards_use_only_the_lowerings_building_blocks() -> None:
    blocks = ("trident.lowering.runtime_abi", "trident.lowering.leaf_access", "trident.lowering.symbolic_ints")
    beyond = [
        f"{name} imports {target}"
        for name in sorted(MODULES)
        if _in(name, ("trident.guards",))
        for target, _ in _imports(name)
        if _in(target, ("trident.lowering",)) and target not in blocks
    ]
    assert beyond == []


def test_the_runtime_reads_the_artifact_not_the_compiler() -> None:
    """runtime/ instantiates and runs what the artifact describes: it imports none of capture/, ir/, guards/,
    lowering/ or the compiler's backend (a disk load never needs them)."""
    compiler = LOWER_LAYERS + ("trident.backend",)
    reached = [
        f"{name} imports {target}"
        for name in sorted(MODULES)
        if _in(name, ("trident.runtime",))
        for target, _ in _imports(name)
        if _in(target, compiler)
    ]
    assert reached == []
