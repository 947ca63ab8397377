"""One short run of each benchmark script so they do not rot (no timing is asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(
    script: str, *args: str, returncode: int = 0, timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    """benchmarks/`script` run with `args` in a fresh process, as a user runs it; its exit status must be
    `returncode`. The process inherits the suite's strict mode (tests/conftest.py): a call a benchmark runs
    eagerly without meaning to fails it."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == returncode, result.stdout + result.stderr
    return result


def test_host_overhead_cpu_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = run_benchmark("host_overhead_cpu.py", "--quick", "--no-compile", "--no-cpp-floor", "--json", str(out))
    assert "20 ops" in result.stdout and "100 ops" in result.stdout
    data = json.loads(out.read_text())
    assert data["machine"]["torch"] and data["results"]["20 ops"]["trident"] > 0


def test_private_views_cpu_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("private_views_cpu.py", "--calls", "20", "--rounds", "1", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["views"] == 80 and set(data["us_per_call"]) == {"below autograd", "through autograd", "eager"}


def test_libraries_runs(tmp_path: Path) -> None:
    cases = ["liger", "fla", "qwen2-liger-fla", "hf-arange"]
    run_benchmark("libraries.py", str(tmp_path), "--device", "cpu", "--only", ",".join(cases), "--steps", "2",
                  "--rounds", "1")
    rows = json.loads((tmp_path / "libraries.cpu.json").read_text())["results"]
    assert [r["library"] for r in rows] == cases
    assert all(r["status"] == "ok" or r["status"].startswith("not installed") for r in rows), rows


def test_module_overhead_cpu_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("module_overhead_cpu.py", "--calls", "20", "--rounds", "1", "--json", str(out))
    data = json.loads(out.read_text())
    assert set(data["ns_per_call"]) == {"entry", "lazy entry", "python fwd", "module", "module, entry", "module+8 attrs"}


def test_eager_fallback_cpu_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("eager_fallback_cpu.py", "--calls", "20", "--rounds", "1", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["guard_sets_remembered"] == 1
    # every timed Trident call ran eagerly (warm-up + 20 calls each; "captured every call" does 20 // 20 = 1)
    assert data["eager_calls"] == [21, 2]
    assert set(data["us_per_call"]) == {"eager", "trident, remembered", "trident, captured every call"}


def test_dynamo_overhead_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("dynamo_overhead.py", "--no-inductor", "--calls", "20", "--rounds", "1", "--json", str(out))
    data = json.loads(out.read_text())
    assert data["all_native"] is True
    assert set(data["results"]) == {"eager", "compile, backend=eager", "compile, backend=trident", "trident.jit"}


def test_hf_generate_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    result = run_benchmark("hf_generate.py", "--model", "tiny", "--cache", "static", "--systems",
                           "eager,hf_compiled,cudagraphs,backend,trident_jit,trident_jit_cache", "--tokens", "3",
                           "--rounds", "1", "--stop-check", "deferred", "--out", str(out))
    cells = json.loads(out.read_text())["cells"]
    systems = ["eager", "trident_jit", "trident_jit_cache", "hf_compiled", "cudagraphs", "backend"]  # Dynamo's last
    assert [c["system"] for c in cells] == systems
    assert all(c["status"] == "ok" and c["tokens_equal_eager"] and c["stop_check"] == "deferred" for c in cells), cells
    # The plot is written where matplotlib is importable, and says so where it is not.
    plotted = f"plot: {out.with_suffix('.png')}" in result.stdout
    assert plotted == out.with_suffix(".png").exists() and (plotted or "no plot written" in result.stdout)
    again = run_benchmark("hf_generate.py", "--plot-only", str(out))
    assert "| static | 1 | deferred | trident_jit_cache |" in again.stdout, again.stdout


def test_hf_generate_says_where_a_static_cells_time_over_the_device_goes(tmp_path: Path) -> None:
    """From a GPU run's cells (kept in benchmarks/results): trident.jit's ms per token split into the device time,
    HF's loop (the floor minus the hand graph) and Trident's forward over the floor's."""
    copy = tmp_path / "cells.json"
    copy.write_text((ROOT / "benchmarks/results/hf_generate_qwen2_kept_cache.h100.json").read_text())
    result = run_benchmark("hf_generate.py", "--plot-only", str(copy))
    assert ("static cache, batch 1, sync stop check: trident.jit 4.449 ms = device 4.219 + HF's loop +0.141 (the floor 4.360, "
            "1.03x device) + Trident's forward over the floor's +0.088; inside the replay 167 us; 1.05x device, "
            "1.02x the floor") in result.stdout, result.stdout
    assert "static cache, batch 8, sync stop check: trident.jit 5.482 ms" in result.stdout, result.stdout


def test_hf_generate_repeats_a_kept_decode_call_within_the_cache() -> None:
    """The call graph_device_ms times back to back on a GPU (here on the CPU, the same HF code): a decode call of
    a generate, repeated KEPT_REPEATS times, writes the cache's next positions without running past its end (more
    repeats do, with eager's error), and after the put-back it gives the first repeat's logits again. It takes
    the generate's own specialization (grad mode is in its guard): nothing compiles."""
    import pytest
    import torch

    from trident.testing import count_compiles

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.hf_generate import KEPT_REPEATS, build_model, generate_fn, kept_decode_call

    ready, run = generate_fn("trident_jit", "static", build_model("tiny", torch.device("cpu")))
    ids = torch.randint(1, 100, (2, 16), generator=torch.Generator().manual_seed(1))
    run(ids, 64)
    call, put_back = kept_decode_call(ready, lambda: run(ids, 64))
    with count_compiles() as compiles:
        first = call().logits
        for _ in range(KEPT_REPEATS - 1):
            call()
    assert compiles() == 0
    with pytest.raises(IndexError, match="out of bounds"):
        for _ in range(80):  # the cache holds prompt + 64 - 1 = 79 positions
            call()
    put_back()
    assert torch.equal(first, call().logits)


def test_hf_token_time_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("hf_token_time.py", "--model", "tiny", "--tokens", "3", "--out", str(out))
    (cell,) = json.loads(out.read_text())["cells"]
    assert cell["system"] == "trident_jit" and cell["eager_calls"] == 0, cell
    assert cell["forward_host_us"]["median"] > 0 and cell["forward_back_to_back_ms"] > 0, cell


def test_quantized_decode_parses_its_arguments_and_says_what_it_needs(tmp_path: Path) -> None:
    """benchmarks/quantized_decode.py runs only with CUDA and gemlite; here, its options and its refusal."""
    result = run_benchmark("quantized_decode.py", "--help", timeout=120)
    assert "trident_graphs" in result.stdout and "hand_graph" in result.stdout and "--out" in result.stdout
    result = run_benchmark("quantized_decode.py", "--systems", "eager,nope", returncode=2, timeout=120)
    assert "unknown system(s) ['nope']" in result.stderr, result.stderr
    import torch

    if not torch.cuda.is_available():
        result = run_benchmark("quantized_decode.py", "--work", str(tmp_path), returncode=2, timeout=120)
        assert "needs a CUDA GPU" in result.stderr, result.stderr


def test_hf_compile_time_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("hf_compile_time.py", "--families", "llama,qwen2", "--layers", "1,2", "--new-tokens", "2", "--out",
                  str(out))
    data = json.loads(out.read_text())
    assert data["machine"]["torch"] and data["machine"]["transformers"] and data["machine"]["cpu"], data["machine"]
    cells = {(r["family"], r["layers"], r["phase"]): r for r in data["results"]}
    assert set(cells) == {(f, n, p) for f in ("llama", "qwen2") for n in (1, 2)
                          for p in ("prefill", "decode", "generate", "generate static")}
    # Each phase compiled what it should and ran nothing eagerly: the times are compile times.
    assert all(r["compiles"] >= 1 and r["eager_calls"] == 0 and r["wall"] > 0 for r in cells.values()), cells
    assert cells[("llama", 1, "prefill")]["compiles"] == 1 and cells[("llama", 1, "decode")]["compiles"] == 1
    assert set(data["per_layer_fits"]) == {f"{f} {p}" for f in ("llama", "qwen2")
                                           for p in ("prefill", "decode", "generate", "generate static")}


def test_hf_guards_cpu_runs(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    run_benchmark("hf_guards_cpu.py", "--layers", "2", "--repeat", "100", "--out", str(out))
    data = json.loads(out.read_text())
    assert data["machine"]["cpu"] and data["layers"] == 2, data
    # the prefill and the decode specialization; only the decode one accepts a decode call
    assert [(r["decode"], r["accepts"]) for r in data["rows"]] == [(False, False), (True, True)], data["rows"]
    assert all(r["guard_us"] > 0 for r in data["rows"]) and data["rows"][1]["guards"]["tensors"] > 0, data["rows"]
