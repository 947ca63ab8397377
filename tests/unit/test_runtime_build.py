"""Building the native runtime: the start and end announcements, and the errors naming a missing prerequisite.

The real runtime takes 20-40 s to build, so the announcement test builds a one-function stand-in through the
same code path (same compiler command, link and publish); the prerequisite tests stop before g++ runs."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from trident.runtime import build
from trident.runtime.build import RuntimeBuildError


def test_a_build_announces_its_start_and_its_end_with_the_seconds_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "probe.cpp"
    source.write_text('extern "C" int trident_build_probe() { return 7; }\n')
    monkeypatch.setattr(build, "_sources", lambda: [source])
    monkeypatch.setattr(build, "_generated_sources", lambda: {})
    target = tmp_path / "out" / "probe.so"
    target.parent.mkdir()
    build._build(target)
    assert target.is_file()
    lines = capsys.readouterr().err.splitlines()  # nothing else: not even torch's CUDA_HOME warning on CPU
    assert len(lines) == 2, lines
    assert lines[0].startswith("trident: building the native runtime for torch ")
    assert re.fullmatch(r"trident: built the native runtime in \d+\.\d s \(.*out\)", lines[1]), lines[1]


def test_a_missing_compiler_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(build, "COMPILER", "trident-test-no-such-gxx")
    with pytest.raises(RuntimeBuildError, match=r"needs the C\+\+ compiler 'trident-test-no-such-gxx', which is not "
                                                 r"on PATH; install it \(Debian/Ubuntu: apt-get install g\+\+\)"):
        build._build(tmp_path / "never.so")
    assert capsys.readouterr().err == ""  # nothing announced: the build never started
    assert not list(tmp_path.iterdir())


def test_missing_python_headers_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build, "_python_include_dir", lambda: str(tmp_path / "no-python-include"))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    with pytest.raises(RuntimeBuildError, match=rf"needs Python's C headers: Python.h is not in .*no-python-include; "
                                                rf"install them .*apt-get install python{version}-dev"):
        build._build(tmp_path / "never.so")


def test_missing_torch_headers_are_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "include"
    empty.mkdir()
    monkeypatch.setattr(build, "_torch_include_dirs", lambda: [str(empty)])
    with pytest.raises(RuntimeBuildError, match=r"needs torch's C\+\+ headers: torch/csrc/autograd/python_variable.h "
                                                r"is in none of \[.*include'\]; this torch .* was installed without"):
        build._build(tmp_path / "never.so")


def test_the_installed_toolchain_passes_the_check() -> None:
    build._check_toolchain(build._torch_include_dirs(), build._python_include_dir())  # raises if not
