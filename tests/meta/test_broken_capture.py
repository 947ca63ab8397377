"""The test of the test suite: with capture broken, the suite must fail loudly.

An eager result always equals eager, so a suite that compares values alone stays green when the compiler stops
working (before strict mode, 75 of 117 CPU e2e items passed with capture patched to raise). This runs a sample
of the suite in a pytest subprocess with tests/meta/broken_capture_plugin.py, which makes every capture raise
(every jitted call then runs eagerly), and asserts that every item fails (but the few listed in MAY_PASS, which
check what happens before any capture), nearly all because a call ran eagerly. The subprocess gets no
TRIDENT_STRICT from here: strict mode must come from the suite's own conftest.

Measured (2 cores, torch 2.13.0+cpu, Triton 3.6.0): 50 of 53 items fail, all 50 naming the fallback; with strict
mode off, 27 of the 53 passed. A test rather than a CI step: it runs wherever the suite runs (./dev test, both CI
pairs, a developer's machine), so a test added later that cannot tell a broken compiler fails there first.

The sample: the end-to-end programs, automatic dynamism, modules, and two fuzz properties -- the files where a
silent fallback hid most easily. Nothing compiles and properties do not shrink, so the run costs little
more than pytest's start (40-60 s on 2 cores shared with other work).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = [
    "tests/e2e/test_programs.py",
    "tests/e2e/test_dynamism.py",
    "tests/e2e/test_modules.py",
    "tests/reliability/test_fuzz_guards.py::test_fuzz_pointwise",
    "tests/reliability/test_fuzz_guards.py::test_fuzz_views",
]
# Items that may pass with capture broken: they check what happens before or without a capture. Every entry
# says why; anything else passing is a test that cannot tell a working compiler from a broken one.
MAY_PASS = {
    "tests/e2e/test_modules.py::test_wrong_call_raises_eagers_type_error": "a wrong call raises before a capture",
    "tests/e2e/test_modules.py::test_wrapper_is_the_module": "the wrapper's attributes: nothing is called",
    "tests/e2e/test_modules.py::test_jit_of_a_module_class_is_a_clear_error": "raised by trident.jit itself",
}


def test_a_sample_of_the_suite_fails_loudly_when_capture_is_broken(tmp_path: Path) -> None:
    report = tmp_path / "outcomes.json"
    env = {k: v for k, v in os.environ.items() if k != "TRIDENT_STRICT"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "tests" / "meta"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "broken_capture_plugin",
         "--broken-capture-report", str(report), *SAMPLE],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    output = done.stdout[-3000:] + done.stderr[-3000:]
    assert report.exists(), f"the sample run wrote no report (rc {done.returncode}):\n{output}"
    data = json.loads(report.read_text())
    assert data["strict"], "the suite's conftest did not turn strict mode on (TRIDENT_STRICT)"
    items = data["items"]
    by_outcome: dict[str, list[str]] = {}
    for nodeid, item in items.items():
        by_outcome.setdefault(item["outcome"], []).append(nodeid)
    failed = by_outcome.get("failed", [])
    loud = [nodeid for nodeid in failed if items[nodeid]["why"] == "ran eagerly"]
    ran = len(items) - len(by_outcome.get("skipped", []))
    counts = {k: len(v) for k, v in sorted(by_outcome.items())}
    summary = f"{len(failed)} of {ran} items failed under broken capture, {len(loud)} naming the fallback ({counts})"
    print(summary)
    assert done.returncode == 1, summary  # pytest's "tests failed", not a usage or collection error
    assert ran >= 40, summary  # the sample was collected
    passing = sorted(set(by_outcome.get("passed", [])) - set(MAY_PASS))
    assert not passing, f"{summary}; these pass with capture broken:\n  " + "\n  ".join(passing)
    assert not by_outcome.get("xfailed"), f"{summary}; an xfail hid the broken capture: {by_outcome['xfailed']}"
    # A failure for another reason (a compile count, say) is loud too, but strict mode should be what says it.
    quiet = {nodeid: items[nodeid]["why"] for nodeid in failed if nodeid not in loud}
    assert len(quiet) <= 0.1 * len(failed), f"{summary}; failing for another reason than a fallback: {quiet}"
