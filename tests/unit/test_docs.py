"""The README and the docs say what is true: the knob table is the one knobs.py's declarations make, the example
runs natively, the results table is the raw result it names, every file the docs point at exists, and pyproject
points only at files inside the repository."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from helpers_native import assert_native
from trident.knobs import KNOB_DOCS, markdown_table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _section(text: str, title: str) -> str:
    """The body of the `## title` section of a markdown text."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no '## {title}' section"
    return match.group(1)


def _table_rows(section: str) -> list[list[str]]:
    """The cells of each row of the markdown tables in `section`, header rows included, separators left out."""
    rows = []
    for line in section.splitlines():
        if line.startswith("|") and not re.fullmatch(r"\|[-|\s]+\|", line):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def test_readme_knob_table_is_the_table_the_declarations_make() -> None:
    """knobs.py declares each knob once; the README's table is what users read, so it must be that table exactly
    (to change a knob's text, change its declaration and paste knobs.markdown_table() here)."""
    section = _section(README.read_text(), "Knobs")
    table = markdown_table()
    assert _table_rows(section) == _table_rows(table), "README's knob table differs from knobs.markdown_table()"
    assert table in section, "README's knob table is not spelled as knobs.markdown_table() spells it"


def test_knobs_py_spells_only_declared_variables() -> None:
    # knobs.py is the one module that reads the environment: every TRIDENT_* name it spells is a declared knob.
    read = set(re.findall(r"\"(TRIDENT_[A-Z0-9_]+)\"", (ROOT / "src" / "trident" / "knobs.py").read_text()))
    assert len(read) >= 10, read
    assert read == set(KNOB_DOCS), f"spelled, not declared: {sorted(read - set(KNOB_DOCS))}"


def test_readme_example_runs_natively() -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    namespace: dict[str, object] = {}
    exec(compile(code, str(README), "exec"), namespace)  # strict mode (conftest): an eager fallback fails it
    assert_native(namespace["rms_norm"], hits=2, compiles=1)
    assert_native(namespace["mlp"], hits=1, compiles=1)
    x, w = namespace["x"], namespace["w"]
    with torch.no_grad():
        expected = namespace["rms_norm"].__wrapped__(x, w)  # type: ignore[attr-defined]
    assert torch.allclose(namespace["y"], expected)  # type: ignore[arg-type]


# README column -> the system's name in benchmarks/llm's JSON
_SYSTEMS = {"eager": "eager", "torch.compile": "compile", "compile (cpp_wrapper)": "compile_cpp",
            "compile (reduce-overhead)": "compile_ro", "trident (direct)": "trident",
            "**trident**": "trident_graphs"}  # fmt: skip


def test_readme_results_table_is_the_raw_result_it_names() -> None:
    section = _section(README.read_text(), "Results")
    (raw_name,) = set(re.findall(r"benchmarks/results/[\w.\-]+\.json", section))
    raw = json.loads((ROOT / raw_name).read_text())
    assert "batch 1" in section
    cells = {(c["model"], c["pos_kind"], c["system"]): c for c in raw["cells"] if c["batch"] == 1}
    (machine,) = [r["machine"] for r in raw["runs"] if r["argv"][r["argv"].index("--batch") + 1] == "1"]
    caption = " ".join(section.split())
    for field in ("gpu", "driver", "cuda", "torch", "triton", "python"):
        assert str(machine[field]) in caption, f"the caption does not name {field} {machine[field]}"
    header, *rows = _table_rows(section)
    assert len(rows) == 4, rows
    for row in rows:
        model, position = re.match(r"`(\w+)`", row[0]).group(1), row[1]
        values = dict(zip(header, row))
        for column, system in _SYSTEMS.items():
            ms = cells[(model, position, system)]["ms_per_token"]
            assert float(values[column].strip("*")) == round(ms, 2), (model, position, column, ms)
        # The device time: the GPU time of the step's CUDA graph, captured with the tensor position only.
        device = cells[(model, "tensor", "cuda_graph")]["device_ms_per_token"]
        assert float(values["device"]) == round(device, 2), (model, position, device)
        ratio = cells[(model, position, "trident_graphs")]["ms_per_token"] / device
        assert float(values["**trident / device**"].strip("*").rstrip("×")) == round(ratio, 2), (model, position, ratio)


_PATH_ROOTS = ("src", "tests", "docs", "benchmarks", "examples", "llm", "capture", "lowering", "cache", "csrc", "runtime")


def _named_paths(text: str) -> set[str]:
    """The backticked tokens of `text` that name a file or folder of the repository."""
    names = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if re.fullmatch(r"[\w.*\-/]+", token) and (
            re.search(r"\.(py|json|md|png|h|cpp|toml)$", token) or token.split("/")[0] in _PATH_ROOTS and "/" in token
        ):
            names.add(token)
    return names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_files_the_docs_name_exist(doc: Path) -> None:
    names = _named_paths(doc.read_text())
    assert len(names) >= 3, names  # a check that finds nothing to check is broken
    bases = [ROOT, ROOT / "benchmarks", ROOT / "benchmarks" / "results", ROOT / "src" / "trident", ROOT / "docs"]
    missing = [name for name in sorted(names) if not any(list(base.glob(name.rstrip("/"))) for base in bases)]
    assert not missing, f"{doc.name} names files that do not exist: {missing}"


def test_pyproject_points_only_inside_the_repository() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    paths = [ROOT / project["project"]["readme"]]
    license_ = project["project"].get("license")
    if isinstance(license_, dict) and "file" in license_:
        paths.append(ROOT / license_["file"])
    paths += [ROOT / p for p in project["project"].get("license-files", [])]
    setuptools = project["tool"]["setuptools"]
    packages_root = ROOT / setuptools["packages"]["find"]["where"][0]
    for package, patterns in setuptools.get("package-data", {}).items():
        for pattern in patterns:
            matches = list((packages_root / package.replace(".", "/")).glob(pattern))
            assert matches, f"package-data {package}: {pattern} matches no file"
            paths += matches
    for path in paths:
        assert path.is_file(), path
        assert path.resolve().is_relative_to(ROOT), f"{path} lies outside the repository"
