"""Build the native runtime (src/trident/csrc/**/*.cpp) into one shared object, once per torch/Python/source.

The shared object is both a CPython extension module (the Entry and Context types) and the library whose C
ABI generated code calls (`runtime_library_path()` goes into the ExecutionEngine's shared_libs). It lives
under `<TRIDENT_CACHE_DIR>/runtime/torch-<version>-<python>-<hash>/`, where the hash covers the sources,
the compiler command and the torch installation, so a changed source or another torch gets its own build.

g++ is invoked directly (no ninja). The translation units compile in parallel; the link writes into a
temporary directory next to the target and `os.replace` publishes it, so concurrent builders never expose
a half-written file to each other (a lock file also makes a second builder wait instead of compiling).

The library is loaded only from a folder only its owner can write (runtime/trust.py); elsewhere it is built into
a private temporary folder of the process instead, with a warning saying how to fix the cache.
A build says on stderr when it starts and when it ends (with the seconds it took: 20-40 s on 2 cores), and
a missing prerequisite (the compiler, Python's headers, torch's headers) is named before g++ runs.
"""
from __future__ import annotations

import atexit
import concurrent.futures
import fcntl
import functools
import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

import torch

from trident.runtime import trust
from trident.exc import TridentError
from trident.knobs import knobs
from trident import typed_ops

MODULE_NAME = "_trident_runtime"  # PyInit__trident_runtime in csrc/module.cpp
CSRC_DIR = Path(__file__).resolve().parent.parent / "csrc"
COMPILER = "g++"
# C++20 as torch's own cpp_extension uses: torch 2.15's headers need it (std::construct_at in ivalue_inl.h).
COMPILE_FLAGS = ("-O2", "-std=c++20", "-fPIC", "-fvisibility=hidden", "-g0")
TORCH_LIBS = ("-ltorch", "-ltorch_cpu", "-ltorch_python", "-lc10")


class RuntimeBuildError(TridentError):
    """The native runtime failed to compile or link; the message carries the command and compiler output."""


def _torch_lib_dir() -> Path:
    return Path(torch.__file__).resolve().parent / "lib"


def _link_libs() -> tuple[str, ...]:
    """The torch libraries the runtime links: torch's CUDA library too where there is one, since the runtime
    calls a few of ATen's CUDA kernels directly (declared weak in csrc/buffer_pool.cpp, so a CPU-only torch
    links and loads the same sources)."""
    return (*TORCH_LIBS, "-ltorch_cuda") if (_torch_lib_dir() / "libtorch_cuda.so").exists() else TORCH_LIBS


def _sources() -> list[Path]:
    return sorted(CSRC_DIR.rglob("*.cpp"))


def _object_name(source: Path) -> str:
    inside = source.relative_to(CSRC_DIR) if source.is_relative_to(CSRC_DIR) else Path(source.name)
    return "_".join(inside.with_suffix("").parts)


def _generated_sources() -> dict[str, str]:
    """Sources written at build time: file name -> C++ text."""
    return {"typed_ops.cpp": typed_ops.generate_source()}


def _abi_define() -> str:
    return f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"


@functools.lru_cache(maxsize=None)
def _build_dir() -> Path:
    """The cache folder for this (torch, Python, sources, flags) combination."""
    digest = hashlib.sha256()
    for path in _sources() + sorted(CSRC_DIR.rglob("*.h")):
        digest.update(path.relative_to(CSRC_DIR).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    for name, text in _generated_sources().items():  # these depend on the installed torch's schemas
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    # Everything else that changes the binary: the command template and which torch it links against.
    for part in (COMPILER, *COMPILE_FLAGS, *_link_libs(), _abi_define(), str(_torch_lib_dir())):
        digest.update(part.encode() + b"\0")
    tag = f"torch-{torch.__version__}-{sys.implementation.cache_tag}-{digest.hexdigest()[:16]}"
    return knobs.cache_dir / "runtime" / tag


def _run(command: list[str]) -> None:
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeBuildError(
            f"building Trident's native runtime failed (exit status {result.returncode})\n"
            f"command: {shlex.join(command)}\n{result.stderr}{result.stdout}"
        )


def _torch_include_dirs() -> list[str]:
    # Only needed when building; importing cpp_extension costs time that a cached load should not pay. A CUDA
    # build of torch on a machine without CUDA logs a warning about CUDA_HOME on that import, which concerns
    # CUDA extensions only: the runtime compiles no CUDA code, so the build's own two lines stay the only ones.
    cpp_extension_log = logging.getLogger("torch.utils.cpp_extension")
    level = cpp_extension_log.level
    cpp_extension_log.setLevel(logging.ERROR)
    try:
        from torch.utils import cpp_extension
    finally:
        cpp_extension_log.setLevel(level)
    return list(cpp_extension.include_paths())


def _python_include_dir() -> str:
    return sysconfig.get_paths()["include"]


# A header the runtime includes from each place (csrc/runtime_internal.h and friends): if it is absent, so is
# the rest, and g++ would bury that under pages of errors.
TORCH_HEADER = "torch/csrc/autograd/python_variable.h"


def _check_toolchain(torch_includes: list[str], python_include: str) -> None:
    """Raise RuntimeBuildError naming the first missing prerequisite of the build, with what to install."""
    where = "Trident's native runtime (compiled once per torch version)"
    if shutil.which(COMPILER) is None:
        raise RuntimeBuildError(
            f"{where} needs the C++ compiler '{COMPILER}', which is not on PATH; install it (Debian/Ubuntu: "
            "apt-get install g++) and call again"
        )
    if not (Path(python_include) / "Python.h").is_file():
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        raise RuntimeBuildError(
            f"{where} needs Python's C headers: Python.h is not in {python_include}; install them for Python "
            f"{version} (Debian/Ubuntu: apt-get install python{version}-dev)"
        )
    if not any((Path(d) / TORCH_HEADER).is_file() for d in torch_includes):
        raise RuntimeBuildError(
            f"{where} needs torch's C++ headers: {TORCH_HEADER} is in none of {torch_includes}; this torch "
            f"({torch.__version__} at {Path(torch.__file__).parent}) was installed without its include/ folder; "
            "reinstall torch from a wheel (pip install --force-reinstall torch)"
        )


def _build(target: Path) -> None:
    torch_includes, python_include = _torch_include_dirs(), _python_include_dir()
    _check_toolchain(torch_includes, python_include)
    includes = [*torch_includes, python_include]
    compile_base = [COMPILER, *COMPILE_FLAGS, _abi_define(), f"-I{CSRC_DIR}", *(f"-I{d}" for d in includes)]
    lib_dir = str(_torch_lib_dir())
    start = time.perf_counter()
    print(f"trident: building the native runtime for torch {torch.__version__} (once per torch version, "
          "usually 20-40 s)...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as work:
        sources = _sources()
        for name, text in _generated_sources().items():
            (Path(work) / name).write_text(text)
            sources.append(Path(work) / name)
        # One object per source, named by its path under csrc/ (graphs/replay.cpp -> graphs_replay.o).
        objects = [str(Path(work) / (_object_name(src) + ".o")) for src in sources]
        commands = [[*compile_base, "-c", str(src), "-o", obj] for src, obj in zip(sources, objects)]
        workers = max(1, min(len(commands), os.cpu_count() or 1))
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            for future in [pool.submit(_run, command) for command in commands]:
                future.result()  # re-raises the first compiler failure with its output
        partial = Path(work) / target.name
        _run([COMPILER, "-shared", *objects, "-o", str(partial), f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}",
              *_link_libs()])
        # Atomic publish: another process sees either no file or a complete one (same filesystem).
        os.replace(partial, target)
    print(f"trident: built the native runtime in {time.perf_counter() - start:.1f} s ({target.parent})",
          file=sys.stderr, flush=True)


_private_build_dirs: dict[Path, Path] = {}  # build folder refused -> this process's private folder for it


def _trusted_build_dir() -> tuple[Path, Path]:
    """(the build folder, the root it is checked from): _build_dir() under TRIDENT_CACHE_DIR, unless someone
    else could write there (runtime/trust.py). Then a fresh private folder of this process instead: Trident keeps
    working, at the price of building the runtime again in every such process until the cache is fixed, which
    the warning says how to do; loading a library others could have written is never an option."""
    folder = _build_dir()
    private = _private_build_dirs.get(folder)
    if private is not None:
        return private / folder.name, private
    try:
        trust.check(folder / f"{MODULE_NAME}.so", knobs.cache_dir, consequence=(
            "Trident builds its runtime into a private temporary folder instead, again in every process (~30 s) "
            "until this is fixed"))  # fmt: skip
        return folder, knobs.cache_dir
    except trust.Untrusted:
        private = _private_build_dirs[folder] = Path(tempfile.mkdtemp(prefix="trident-runtime-"))  # 0700, ours
        atexit.register(shutil.rmtree, private, ignore_errors=True)  # a loaded library outlives its file
        return private / folder.name, private


def runtime_library_path() -> str:
    """Path of the runtime shared object for this torch and Python, building it first if needed."""
    folder, root = _trusted_build_dir()
    target = folder / f"{MODULE_NAME}.so"
    if target.exists():
        trust.check(target, root)  # the file itself, right before it is loaded
        return str(target)
    trust.make_private_folders(target.parent, root)
    # One builder at a time per folder (parallel test workers would otherwise all compile); the atomic
    # os.replace in _build keeps a reader safe even where the lock is not honoured.
    with os.fdopen(os.open(target.parent / ".lock", os.O_RDWR | os.O_CREAT, trust.FILE_MODE), "r+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not target.exists():  # another process may have built it while we waited
                _build(target)
                os.chmod(target, 0o700)  # owner-only, like every cache entry
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return str(target)


_lock = threading.Lock()
_module: ModuleType | None = None
last_build_seconds: float | None = None  # set when this process built the library (None: it was cached)


def load_runtime() -> ModuleType:
    """The native runtime module (built on first use), with init(torch.Tensor, torch.nn.Parameter) done."""
    global _module, last_build_seconds
    if _module is not None:  # every call after the first: one global read
        return _module
    with _lock:
        if _module is None:
            start = time.perf_counter()
            existed = (_build_dir() / f"{MODULE_NAME}.so").exists()
            path = runtime_library_path()
            if not existed:
                last_build_seconds = time.perf_counter() - start
            name = f"trident.runtime.{MODULE_NAME}"
            loader = importlib.machinery.ExtensionFileLoader(name, path)
            spec = importlib.util.spec_from_file_location(name, path, loader=loader)
            assert spec is not None  # a file location with an explicit loader always gives a spec
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            module.init(torch.Tensor, torch.nn.Parameter)
            sys.modules[name] = module
            _module = module
    return _module
