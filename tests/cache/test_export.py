"""Ahead-of-time export (trident.export / trident.load, cache/export.py): a fresh process that loads an export
serves its first call natively, without compiling; one whose call the export does not match compiles.

The exporting process compiles into its own disk cache and exports; every loading process starts with an
empty disk cache of its own, so whatever it loads came from the export."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import trident
from trident.cache.export import ExportError
from trident.knobs import override

from . import test_warm_start_triton as triton_round_trip
from .helpers import finish, start, write_program

PROGRAM = """
EXPORT, LOAD, N = os.environ.get("EXPORT"), os.environ.get("LOAD"), int(os.environ.get("N", "4"))
torch.manual_seed(0)
W = torch.randn(8)


@trident.jit
def step(x):
    return torch.relu(x * W).sum(0) + 1


if LOAD:
    available = trident.load(LOAD)
x = torch.randn(N, 8)
with torch.no_grad(), count_compiles() as compiles:
    out = step(x)
    out_again = step(x)
    ok = torch.equal(out, torch.relu(x * W).sum(0) + 1) and torch.equal(out_again, out)
written = [str(p) for p in trident.export(step, EXPORT)] if EXPORT else []
report(compiles(), ok=bool(ok), hits=step._trident.entry.hits(), explain=trident.explain(step), written=written,
       available=available if LOAD else None)
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:
    root = tmp_path_factory.mktemp("export")
    program = write_program(root, PROGRAM)
    result = finish(start(program, root / "exporting-cache", EXPORT=str(root / "exported")))
    assert result["ok"] and result["compiles"] == 1 and result["stats"]["stores"] == 1, result["log"]
    return root, program, result


def test_export_writes_the_record_and_its_library(exported: tuple[Path, Path, dict]) -> None:
    root, _, result = exported
    (record,) = result["written"]
    assert Path(record).parent.parent.parent.parent == root / "exported", record
    assert sorted(p.suffix for p in Path(record).parent.iterdir()) == [".so", ".spec"]


def test_a_fresh_process_loads_the_export_and_calls_natively(exported: tuple[Path, Path, dict]) -> None:
    root, program, _ = exported
    result = finish(start(program, root / "empty-cache-1", LOAD=str(root / "exported")))
    assert result["ok"], result
    assert result["available"] == 1
    assert result["compiles"] == 0, result["log"]
    assert result["stats"]["loads"] == 1 and result["stats"]["stores"] == 0, result["stats"]
    assert result["hits"] == [2], result["hits"]  # both calls ran natively, the first one included
    assert "loaded from the disk cache" in result["explain"], result["explain"]
    assert not list((root / "empty-cache-1").rglob("*.spec"))  # loaded from the export, nothing written


def test_a_call_the_export_does_not_match_compiles(exported: tuple[Path, Path, dict]) -> None:
    root, program, _ = exported
    result = finish(start(program, root / "empty-cache-2", LOAD=str(root / "exported"), N="5"))
    assert result["ok"], result
    assert result["compiles"] == 1 and result["stats"]["loads"] == 0, result["log"]
    assert result["stats"]["rejected"] == 1, result["stats"]  # its guards rejected the other size


def test_exporting_what_the_disk_cache_did_not_persist_says_why(tmp_path: Path) -> None:
    @trident.jit
    def double(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    with override(disk_cache=False):
        double(torch.ones(3))
        with pytest.raises(ExportError, match="only specializations the disk cache persisted") as caught:
            trident.export(double, str(tmp_path / "out"))
    assert "specialization 0: the disk cache is off (TRIDENT_DISK_CACHE=0)" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_loading_a_folder_without_an_export_says_so(tmp_path: Path) -> None:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache"):
        with pytest.raises(ExportError, match="holds no exported specializations"):
            trident.load(str(tmp_path))
    with override(disk_cache=False), pytest.raises(ExportError, match="TRIDENT_DISK_CACHE=0 turned off"):
        trident.load(str(tmp_path))


# Triton launch sites (tests/cache/test_warm_start_triton.py's four programs): exported after their first call,
# loaded by a fresh process; on CUDA with the binaries Triton compiled, launched natively from the first call.
LOAD_FIRST = 'if os.environ.get("LOAD"):\n    trident.load(os.environ["LOAD"])\n'
TRITON_PROGRAM = LOAD_FIRST + triton_round_trip.PROGRAM.replace(
    "        explains[fn.__name__] = trident.explain(jitted)\n",
    "        explains[fn.__name__] = trident.explain(jitted)\n"
    "        if os.environ.get(\"EXPORT\"):\n            trident.export(jitted, os.environ[\"EXPORT\"])\n",
)


def _export_then_load_triton(root: Path, device: str) -> tuple[dict, dict]:
    program = write_program(root, TRITON_PROGRAM)
    exporting = finish(triton_round_trip._start(program, root / "exporting-cache", DEVICE=device,
                                                EXPORT=str(root / "exported")))  # fmt: skip
    loading = finish(triton_round_trip._start(program, root / "empty-cache", DEVICE=device,
                                              LOAD=str(root / "exported")))  # fmt: skip
    assert exporting["compiles"] == 4 and all(exporting["ok"].values()), exporting["log"]
    assert all(loading["ok"].values()) and loading["digests"] == exporting["digests"], loading
    assert loading["compiles"] == 0 and loading["stats"]["loads"] == 4, loading["log"]
    assert not list((root / "empty-cache").rglob("*.spec"))
    return exporting, loading


def test_exported_triton_launches_load_in_a_fresh_process(tmp_path: Path) -> None:
    _, loading = _export_then_load_triton(tmp_path, "cpu")
    for explain in loading["explains"].values():
        assert "loaded from the disk cache" in explain and "run through Triton's interpreter" in explain, explain


@pytest.mark.gpu
def test_exported_triton_launches_run_natively_from_the_first_call(tmp_path: Path) -> None:
    _, loading = _export_then_load_triton(tmp_path, "cuda")
    assert loading["stats"]["triton_binaries_loaded"] >= 1, loading["stats"]
    for explain in loading["explains"].values():
        native = "launched natively, 1 compiled variant(s), 1 native launch(es), 0 through Triton's launcher"
        assert native in explain, explain
