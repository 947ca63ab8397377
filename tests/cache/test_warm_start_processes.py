"""Warm start across processes: what a new process reuses from the disk cache, and what makes it recompile.

One process compiles PROGRAM into a fresh cache folder. Then each variant runs in a new process against its
own copy of that folder (all variants at once, to keep the suite short): the same program must load instead
of compiling; any change to code, closed-over state or versions must compile; damaged files must be removed
and recompiled. Every process compares its result with eager PyTorch."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trident.cache import record as record_format
from trident.cache import store
from trident.knobs import override

from .helpers import finish, start, write_program

PROGRAM = """
W_SEED = int(os.environ.get("W_SEED", "0"))
SCALE = float(os.environ.get("SCALE", "0.5"))
if "FAKE_TRIDENT_VERSION" in os.environ:
    trident._version.__version__ = os.environ["FAKE_TRIDENT_VERSION"]  # what the cache key reads
torch.manual_seed(W_SEED)
W = torch.randn(16)  # a module global the function reads


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)
        self.eps = float(os.environ.get("EPS", "1e-5"))  # instance state read at capture

    def forward(self, x):
        return torch.nn.functional.layer_norm(self.linear(x), (16,), eps=self.eps)


def helper(h):
    return torch.tanh(h)


def make_step():
    block = Block().eval()
    bias = torch.randn(16)

    def step(x):
        return helper(block(x)) * SCALE + W + bias

    return step


step = make_step()
jitted = trident.jit(step)
torch.manual_seed(100)
x = torch.randn(3, 16)
with torch.no_grad(), count_compiles() as compiles:
    out = jitted(x)
    ok = torch.allclose(out, step(x), atol=1e-6)
    W.add_(1.0)  # an in-place update of a constant is seen: constants are passed by reference
    out_after = jitted(x)
    ok = ok and torch.allclose(out_after, step(x), atol=1e-6)
report(compiles(), ok=bool(ok), checksum=float(out.sum()), digest=digest(out, out_after),
       hits=jitted._trident.entry.hits(), eager_calls=jitted._trident.eager_calls, explain=trident.explain(jitted))
"""


DYNAMIC = """
@trident.jit
def total(x):
    return (x * 2).sum(0)

ok, outs = True, []
torch.manual_seed(0)  # the same inputs in every process (a fresh process's seed is not fixed)
with torch.no_grad(), count_compiles() as compiles:
    for n in (4, 5, 6, 7):  # the second size makes dim 0 symbolic: two specializations in all
        x = torch.randn(n, 8)
        outs.append(total(x))
        ok = ok and torch.allclose(outs[-1], (x * 2).sum(0))
report(compiles(), ok=bool(ok), digest=digest(*outs), hits=total._trident.entry.hits(), explain=trident.explain(total))
"""


def _truncate_library(folder: Path) -> None:
    (library,) = folder.rglob("*.so")
    library.write_bytes(library.read_bytes()[:1000])


def _truncate_record(folder: Path) -> None:
    (spec,) = folder.rglob("*.spec")
    spec.write_bytes(spec.read_bytes()[:-50])


# name -> (program text, extra environment, damage applied to the copied cache)
VARIANTS: dict[str, tuple[str, dict[str, str], Callable[[Path], None] | None]] = {
    "same program": (PROGRAM, {}, None),
    "new weight values": (PROGRAM, {"W_SEED": "1"}, None),
    "changed function body": (PROGRAM.replace("* SCALE + W + bias", "* SCALE - W + bias"), {}, None),
    "changed helper body": (PROGRAM.replace("return torch.tanh(h)", "return torch.sigmoid(h)"), {}, None),
    "changed global scalar": (PROGRAM, {"SCALE": "0.25"}, None),
    "changed module attribute": (PROGRAM, {"EPS": "1e-3"}, None),
    "changed Trident version": (PROGRAM, {"FAKE_TRIDENT_VERSION": "0.1.0+other"}, None),
    "truncated library": (PROGRAM, {}, _truncate_library),
    "truncated record": (PROGRAM, {}, _truncate_record),
}

Runs = dict[str, tuple[dict[str, Any], Path]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Every process of this module, in two batches of concurrent processes (each costs seconds of imports).

    Batch 1: the program compiled into a fresh cache ("populate"); two cold writers of one shared cache at
    once; the dynamic program cold. Batch 2: each variant against its own copy of the populated cache; the
    dynamic program warm; the program against what the two writers left."""
    root = tmp_path_factory.mktemp("processes")
    program, dynamic = write_program(root, PROGRAM), write_program(root, DYNAMIC, "dynamic.py")
    batch = {
        "populate": (start(program, root / "populated"), root / "populated"),
        "writer 1": (start(program, root / "shared"), root / "shared"),
        "writer 2": (start(program, root / "shared"), root / "shared"),
        "dynamic cold": (start(dynamic, root / "dynamic"), root / "dynamic"),
    }
    results: Runs = {name: (finish(process), cache) for name, (process, cache) in batch.items()}
    populate = results["populate"][0]
    assert populate["ok"] and populate["compiles"] == 1 and populate["stats"]["stores"] == 1, populate["log"]
    batch = {
        "dynamic warm": (start(dynamic, root / "dynamic"), root / "dynamic"),
        "after two writers": (start(program, root / "shared"), root / "shared"),
    }
    for name, (text, env, damage) in VARIANTS.items():
        folder = root / name.replace(" ", "-")
        shutil.copytree(root / "populated", folder / "cache")
        if damage is not None:
            damage(folder / "cache")
        batch[name] = (start(write_program(folder, text), folder / "cache", **env), folder / "cache")
    results.update({name: (finish(process), cache) for name, (process, cache) in batch.items()})
    return results


def test_a_new_process_loads_instead_of_compiling(runs: Runs) -> None:
    result, _ = runs["same program"]
    cold = runs["populate"][0]
    assert result["ok"], result
    assert result["compiles"] == 0, result["log"]
    assert result["stats"]["loads"] == 1
    assert "loaded from the disk cache" in result["explain"]
    assert result["hits"] == cold["hits"] == [2] and result["eager_calls"] == 0  # both calls ran the loaded code
    assert result["digest"] == cold["digest"]  # the cold process's results, bit for bit


def test_closed_over_weights_are_re_resolved_not_baked(runs: Runs) -> None:
    """Other values in the same structure: the cached code runs on this process's tensors (W, bias, the
    Linear's parameters all come from seed 1 here)."""
    result, _ = runs["new weight values"]
    assert result["compiles"] == 0, result["log"]
    assert result["ok"], result  # equals this process's eager result
    assert result["checksum"] != pytest.approx(runs["populate"][0]["checksum"], rel=1e-3)


@pytest.mark.parametrize(
    "name", ["changed function body", "changed helper body", "changed global scalar", "changed module attribute",
             "changed Trident version"],
)  # fmt: skip
def test_a_change_is_a_miss(runs: Runs, name: str) -> None:
    result, _ = runs[name]
    assert result["ok"], result
    assert result["compiles"] == 1, result["log"]
    assert result["stats"]["loads"] == 0


@pytest.mark.parametrize("name", ["truncated library", "truncated record"])
def test_damaged_files_are_removed_and_recompiled(runs: Runs, name: str) -> None:
    result, cache = runs[name]
    assert result["ok"], result
    assert result["compiles"] == 1, result["log"]
    assert result["digest"] == runs["populate"][0]["digest"]  # recompiled: the same bits as the first compile
    assert result["stats"]["corrupt"] == 1, result["log"]
    assert "removed corrupt record" in result["log"]
    # The recompiled specialization replaced the damaged one: the folder is consistent again.
    assert_consistent(cache)
    assert len(list(cache.rglob("*.spec"))) == 1


def test_two_writers_at_once(runs: Runs) -> None:
    """Two cold processes compile and publish the same specialization concurrently: both run correctly and the
    folder holds only whole files that agree with each other."""
    for name in ("writer 1", "writer 2"):
        result, cache = runs[name]
        assert result["ok"], result
        assert result["compiles"] + result["stats"]["loads"] == 1, result["log"]
        assert result["digest"] == runs["populate"][0]["digest"]
    assert_consistent(cache)
    # Files are named by their content, and a record's content is the same in every process that compiles the
    # same specialization: the two writers published one record and one library between them.
    assert len(list(cache.rglob("*.spec"))) == 1 and len(list(cache.rglob("*.so"))) == 1
    after, _ = runs["after two writers"]
    assert after["ok"] and after["compiles"] == 0 and after["stats"]["loads"] == 1, after["log"]
    assert after["digest"] == runs["populate"][0]["digest"]


def test_a_new_process_follows_the_same_recompilation_sequence(runs: Runs) -> None:
    """Automatic dynamism: the dynamism state is in the lookup key, so the warm process loads the static
    specialization for the first size and the symbolic one for the second, as the cold process compiled them."""
    cold, _ = runs["dynamic cold"]
    assert cold["ok"] and cold["compiles"] == 2, cold["explain"]
    warm, _ = runs["dynamic warm"]
    assert warm["ok"], warm
    assert warm["compiles"] == 0 and warm["stats"]["loads"] == 2, warm["log"]
    assert warm["explain"].count("loaded from the disk cache") == 2
    assert warm["hits"] == cold["hits"] == [1, 3]  # size 4 static, sizes 5-7 symbolic, in both processes
    assert warm["digest"] == cold["digest"]  # the same inputs: the cold process's results, bit for bit


def assert_consistent(cache: Path) -> None:
    """Every record is whole and names a library whose bytes match; no temporary file is left behind."""
    with override(disk_cache_dir=cache):
        root = store.cache_root()
    assert not [p for p in root.rglob(f"{store.TEMP_PREFIX}*")], "temporary files left behind"
    specs = list(root.rglob("*" + store.RECORD_SUFFIX))
    assert specs
    for spec in specs:
        record = record_format.decode(spec.read_bytes())
        library = spec.parent / record.library
        assert record_format.library_digest(library.read_bytes()) == record.library_digest
