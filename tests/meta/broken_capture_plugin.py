"""A pytest plugin for the test of the test suite (test_broken_capture.py): every capture raises.

Loaded with `-p broken_capture_plugin` (this folder on PYTHONPATH) into a pytest run of a sample of the
suite. It replaces the driver's capture with one that always raises, so every jitted call runs eagerly, and
writes each item's outcome to the JSON file named by --broken-capture-report. A suite that asserts what ran
fails nearly everywhere; one that only compares results with eager would still pass (an eager result always
equals eager).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

BROKEN = "capture broken on purpose by tests/meta/broken_capture_plugin.py"


def _broken_trace_function(*args: object, **kwargs: object) -> object:
    raise RuntimeError(BROKEN)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--broken-capture-report", required=True, help="where to write each item's outcome (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    # A failing property would shrink for minutes, calling eagerly each time; the first failure is the answer.
    # Loaded before collection, so the fuzz module's settings(...) inherit it.
    from hypothesis import Phase, settings

    settings.register_profile("broken_capture", phases=[Phase.explicit, Phase.reuse, Phase.generate])
    settings.load_profile("broken_capture")


_items: dict[str, dict[str, Any]] = {}
_strict: list[bool] = []


def pytest_sessionstart(session: pytest.Session) -> None:
    # Not at import: trident reads its knobs when first imported, and the suite's conftest (loaded by now) sets
    # TRIDENT_STRICT before that. The driver looks trace_function up at each compile.
    from trident import driver
    from trident.knobs import knobs

    driver.trace_function = _broken_trace_function
    _strict.append(knobs.strict)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    item = _items.setdefault(report.nodeid, {"outcome": "passed", "why": ""})
    if report.failed and item["outcome"] != "failed":
        text = report.longreprtext
        # What made it fail: strict mode (the call ran eagerly), or another assertion (a count, a value).
        item.update(outcome="failed", why="ran eagerly" if "ran eagerly" in text or "eager fallback" in text else
                    text.strip().splitlines()[-1][:300] if text.strip() else report.when)
    elif report.skipped and item["outcome"] == "passed":
        item["outcome"] = "xfailed" if hasattr(report, "wasxfail") else "skipped"


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = Path(session.config.getoption("--broken-capture-report"))
    path.write_text(json.dumps({"strict": _strict[:1] == [True], "items": _items}, indent=1))
