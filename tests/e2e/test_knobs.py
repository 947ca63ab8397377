"""The README's knobs, set in the environment of a fresh process (as users set them), not through override().

Knobs are read once, when trident is imported, so each setting runs one program in its own Python process and
reads back what it reports: TRIDENT_DISABLE (functions and modules returned unchanged, nothing compiled, no
native runtime loaded), TRIDENT_DUMP_IR (each compile's torch-dialect, lowered and LLVM-dialect IR, per
specialization), TRIDENT_LOG (each topic logs its own events and only those), TRIDENT_MAX_SPECIALIZATIONS,
TRIDENT_DISK_CACHE / TRIDENT_DISK_CACHE_DIR and TRIDENT_BUFFER_POOL_MB."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"

PROGRAM = textwrap.dedent(
    """
    import json
    import torch
    import trident
    import trident.testing
    from trident.knobs import knobs
    from trident.runtime import build

    def f(x):
        return x * 2 + 1

    w = torch.randn(8, 8)

    def g(x):
        return (x @ w).relu()  # the mm's result is an intermediate: pooled unless TRIDENT_BUFFER_POOL_MB=0

    module = torch.nn.Linear(4, 4)
    jitted, jitted_g, jitted_module = trident.jit(f), trident.jit(g), trident.jit(module)
    x = torch.randn(4)
    ok = []
    with torch.no_grad(), trident.testing.count_compiles() as compiles, trident.testing.allow_fallback() as eager:
        for value in (x, x, x.double(), torch.arange(4)):  # float32 twice, then float64, then int64
            ok.append(bool(torch.equal(jitted(value), f(value))))
        rows = torch.randn(4, 8)
        ok.append(bool(torch.equal(jitted_g(rows), g(rows))))
        ok.append(bool(torch.equal(jitted_module(x), module(x))))
    state = getattr(jitted, "_trident", None)
    print("RESULT " + json.dumps({
        "ok": ok,
        "compiles": compiles(),
        "returned_unchanged": [jitted is f, jitted_g is g, jitted_module is module],
        "native": state is not None,
        "runtime_loaded": build._module is not None,
        "hits": list(state.entry.hits()) if state is not None else None,
        "eager": [e.reason for e in eager],
        "pool": None if state is None else jitted_g._trident.specializations[-1].compiled.buffer_pool is not None,
        "knobs": {"disable": knobs.disable, "max_specializations": knobs.max_specializations,
                  "disk_cache": knobs.disk_cache, "buffer_pool_mb": knobs.buffer_pool_mb,
                  "log": sorted(knobs.log), "dump_ir": str(knobs.dump_ir)},
        "stats": trident.cache.stats(),
    }), flush=True)
    """
)


def _start(tmp_path: Path, name: str, **env: str) -> subprocess.Popen[str]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "program.py").write_text(PROGRAM)
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TRIDENT_") or k == "TRIDENT_CACHE_DIR"}
    environment["PYTHONPATH"] = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    environment.update({"TRIDENT_DISK_CACHE": "0", "TRIDENT_STRICT": "1", **env})
    return subprocess.Popen([sys.executable, str(folder / "program.py")], env=environment, cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def _finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, f"program failed ({process.returncode}):\n{stderr[-4000:]}\n{stdout[-2000:]}"
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"no RESULT line:\n{stdout}\n{stderr}"
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    result["log"] = stderr
    return result


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Three processes, run side by side: everything on, one log topic, TRIDENT_DISABLE=1."""
    tmp_path = tmp_path_factory.mktemp("knobs")
    started = {
        "all": _start(
            tmp_path, "all", TRIDENT_DUMP_IR=str(tmp_path / "ir"), TRIDENT_LOG="recompiles,guards,compile,cache",
            TRIDENT_MAX_SPECIALIZATIONS="2", TRIDENT_DISK_CACHE="1", TRIDENT_DISK_CACHE_DIR=str(tmp_path / "specs"),
            TRIDENT_BUFFER_POOL_MB="0",
        ),  # fmt: skip
        "recompiles": _start(tmp_path, "recompiles", TRIDENT_LOG="recompiles"),
        "disabled": _start(tmp_path, "disabled", TRIDENT_DISABLE="1", TRIDENT_LOG="recompiles,guards,compile,cache"),
    }
    results = {name: _finish(process) for name, process in started.items()}
    results["all"]["ir"] = str(tmp_path / "ir")
    results["all"]["specs"] = str(tmp_path / "specs")
    return results


def test_disable_returns_functions_and_modules_unchanged_and_compiles_nothing(runs: dict[str, Any]) -> None:
    run = runs["disabled"]
    assert all(run["ok"]), run
    assert run["knobs"]["disable"] is True
    assert run["returned_unchanged"] == [True, True, True]
    assert not run["native"] and run["compiles"] == 0
    assert not run["runtime_loaded"]  # plain eager: the native runtime was not even loaded
    assert run["eager"] == []  # not counted as fallbacks either: strict mode has nothing to say
    assert "trident:" not in run["log"], run["log"]  # nothing compiled, so nothing logged


def test_dump_ir_writes_each_stage_of_each_specialization(runs: dict[str, Any]) -> None:
    folder = Path(runs["all"]["ir"])
    names = sorted(p.name for p in folder.iterdir())
    stages = ("llvm", "lowered", "torch")
    # f compiles twice (float32, float64; int64 is past the cap), g and the module once each
    for name, count in (("f", 2), ("g", 1)):
        assert [n for n in names if n.startswith(f"{name}.")] == [f"{name}.{i}.{s}.mlir" for i in range(count)
                                                                 for s in stages], names  # fmt: skip
    torch_ir = (folder / "f.1.torch.mlir").read_text()
    assert "func.func @main" in torch_ir and "torch.aten.mul.Scalar" in torch_ir and "torch.aten.add.Scalar" in torch_ir
    assert "!torch.vtensor<[4],f64>" in torch_ir  # specialization 1 is the float64 one
    lowered = (folder / "f.1.lowered.mlir").read_text()
    assert "func.func @trident_guard_1" in lowered and "func.func @trident_run_1" in lowered
    assert "torch." not in lowered.replace("torch.aten", "")  # lowered out of the torch dialect
    llvm = (folder / "f.1.llvm.mlir").read_text()
    assert "llvm.func @trident_guard_1" in llvm and "llvm.func @trident_run_1" in llvm
    assert "func.func" not in llvm
    g_ir = (folder / "g.0.torch.mlir").read_text()
    assert "torch.aten.mm" in g_ir and "torch.aten.relu" in g_ir


def test_log_topics_each_log_their_events(runs: dict[str, Any]) -> None:
    log = runs["all"]["log"]
    assert runs["all"]["knobs"]["log"] == ["cache", "compile", "guards", "recompiles"]
    # compile: one line per compiled specialization, with its time
    assert log.count("trident: compiled specialization") == 4, log  # f twice, g, the module
    assert "trident: compiled specialization 1 of 'f' in " in log
    # guards: the guards of each new specialization
    assert "trident: guards of 'f' #1:\n  x: Tensor float64 cpu rank 1\n  x: sizes [4] strides [1] offset 0" in log
    assert "global state: grad off" in log
    # recompiles: why a function that had a specialization compiled again
    assert "trident: recompiling 'f': argument 'x': dtype mismatch: expected torch.float32, got torch.float64" in log
    assert log.count("trident: recompiling") == 1, log  # first compiles are not recompiles
    # cache: the disk cache's decisions
    assert "trident: cache: persisted specialization 0 of 'f'" in log, log


def test_one_log_topic_logs_only_its_events(runs: dict[str, Any]) -> None:
    log = runs["recompiles"]["log"]
    assert "trident: recompiling 'f': argument 'x': dtype mismatch" in log, log
    for other in ("compiled specialization", "guards of", "cache:"):
        assert other not in log, log


def test_max_specializations_and_disk_cache_knobs_from_the_environment(runs: dict[str, Any]) -> None:
    capped, default = runs["all"], runs["recompiles"]
    assert all(capped["ok"]) and all(default["ok"])
    assert capped["knobs"]["max_specializations"] == 2 and default["knobs"]["max_specializations"] == 64
    assert capped["hits"] == [2, 1] and capped["compiles"] == 4  # the int64 call: past the cap, eager
    assert capped["eager"] == ["'f' reached TRIDENT_MAX_SPECIALIZATIONS=2 specializations; further new inputs run "
                               "eagerly"]  # fmt: skip
    assert default["hits"] == [2, 1, 1] and default["compiles"] == 5 and default["eager"] == []
    # TRIDENT_DISK_CACHE=1 with its folder: every compiled specialization stored there; =0: nothing stored
    assert capped["knobs"]["disk_cache"] is True and capped["stats"]["stores"] == 4, capped["log"]
    assert len(list(Path(capped["specs"]).rglob("*.spec"))) == 4
    assert default["knobs"]["disk_cache"] is False and default["stats"]["stores"] == 0


def test_buffer_pool_knob_from_the_environment(runs: dict[str, Any]) -> None:
    assert runs["all"]["knobs"]["buffer_pool_mb"] == 0.0 and runs["all"]["pool"] is False  # allocates every call
    assert runs["recompiles"]["knobs"]["buffer_pool_mb"] == 256.0 and runs["recompiles"]["pool"] is True
