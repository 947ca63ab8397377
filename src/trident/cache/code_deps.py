"""The user code that ran during a capture, recorded so that another process can check it is unchanged.

The lookup key covers the jitted function's own code (key.py). What it calls is found only by running it: a
helper in another module, a method of the user's model, a lambda from a config. While capture runs, a profile
hook (the runtime's record_code: sys.setprofile's hook, native, this thread only) records every code object that
starts. Code of torch, Triton, Trident and the other library packages (fingerprint.LIBRARY_PACKAGES) and of the
standard library is dropped: the versions in the key pin it. Each remaining code object becomes a CodeDependency:
its module, qualified name, first line, and code_digest (bytecode, constants, names; not line numbers).

Why code objects rather than source-file hashes: they say exactly what ran, also for code defined in a script
(`__main__`) or generated (dataclass `__init__`), ignore unrelated edits and comments, and a file edited after
import cannot make the cache describe code other than the code that ran. A dependency is found again by name
in the new process (ModuleCodes walks the module's functions, classes, Triton kernels and containers, and their
nested code; generated code, by the attribute path that reaches it); one that cannot be found (code run from an
exec'd string with ad-hoc globals) makes its specialization not persisted, with the reason logged.
"""
from __future__ import annotations

import contextlib
import dataclasses
import importlib
import sys
import types
from collections.abc import Callable, Iterator, Sequence

from ..runtime.build import load_runtime
from .fingerprint import code_digest, is_library_module, nested_codes
from .provenance import Root, code_names, function_parts


@dataclasses.dataclass(frozen=True)
class CodeDependency:
    module: str
    qualname: str
    firstlineno: int
    digest: str

    def describe(self) -> str:
        return f"{self.module}.{self.qualname} (line {self.firstlineno})"


class CodeRecorder:
    """Code objects that started while recording, with the globals they ran with and the module of their first
    caller (keyed by id: hashing a code object compares its contents, too slow for a hook that runs on every
    Python call)."""

    def __init__(self) -> None:
        self.codes: dict[int, tuple[types.CodeType, object, object]] = {}
        self.unavailable: str | None = None  # why nothing could be recorded


@contextlib.contextmanager
def recording_code(enabled: bool = True) -> Iterator[CodeRecorder]:
    """Record the code that runs in this thread inside the block (used around capture only)."""
    recorder = CodeRecorder()
    previous = sys.getprofile()
    if not enabled:
        recorder.unavailable = "the disk cache is off"
        yield recorder
        return
    if previous is not None:
        # Chaining another profiler's hook would change what it measures; leave it alone and persist nothing.
        recorder.unavailable = "another profiler (sys.setprofile) was active during capture"
        yield recorder
        return
    # Code that runs while a module is being imported (a lazy import inside the function or inside a library)
    # is left out: it defines the module, and what the function uses of it is checked through the code that
    # ran afterwards and the roots. It cannot be found again by name either (module and class bodies).
    find_and_load = getattr(sys.modules.get("_frozen_importlib"), "_find_and_load", None)
    import_code = getattr(find_and_load, "__code__", None)
    # A native profile function (csrc/code_recorder.cpp): a Python one runs on every call, return and builtin
    # call of the capture, which more than doubled make_fx's time on a Hugging Face model.
    load_runtime().record_code(recorder.codes, import_code)
    try:
        yield recorder
    finally:
        sys.setprofile(previous)


def dependencies(
    recorder: CodeRecorder, fn: Callable[..., object]
) -> tuple[list[CodeDependency], list[Root], str | None]:
    """(the user code that ran, the module globals it names as roots, why it cannot be persisted or None)."""
    if recorder.unavailable is not None:
        return [], [], recorder.unavailable
    func, _ = function_parts(fn)
    own = {id(c) for c in nested_codes(func.__code__)} if func is not None else set()  # covered by the key
    found: dict[tuple[str, str, int], tuple[CodeDependency, types.CodeType]] = {}
    indexes: dict[str, ModuleCodes] = {}
    for code_id, (code, code_globals, caller) in recorder.codes.items():
        if code_id in own:
            continue
        module_name = code_globals.get("__name__") if isinstance(code_globals, dict) else None
        module_name = module_name if isinstance(module_name, str) else None
        if is_library_module(module_name):
            continue
        module = sys.modules.get(module_name) if module_name else None
        if module is None or vars(module) is not code_globals:
            # Code made at run time with ad-hoc globals: torch.fx's generated forward, namedtuple's __new__. It is
            # the library's when a library called it or it is namedtuple's template; otherwise it cannot be found
            # again, and the specialization is not persisted.
            library_caller = is_library_module(caller if isinstance(caller, str) else None)
            if library_caller or (module_name or "").startswith("namedtuple_"):
                continue
            where = f"{_qualname(code)} ({code.co_filename}:{code.co_firstlineno})"
            return [], [], f"code {where} ran during capture from globals that belong to no imported module"
        where = f"{_qualname(code)} ({code.co_filename}:{code.co_firstlineno})"
        if module_name not in indexes:
            indexes[module_name] = ModuleCodes(module)
        index = indexes[module_name]
        dep = CodeDependency(module_name, index.name_of(code), code.co_firstlineno, code_digest(code))
        if index.digests.get((dep.qualname, dep.firstlineno)) != dep.digest:
            return [], [], (
                f"code {where} ran during capture but cannot be found again by name in module {module_name} "
                "(code created at run time, e.g. by exec)"
            )
        found.setdefault((dep.module, dep.qualname, dep.firstlineno), (dep, code))
    deps = [found[k][0] for k in sorted(found)]
    roots: dict[Root, None] = {}
    for k in sorted(found):
        dep, code = found[k]
        for name in code_names(code):
            roots.setdefault(("module", dep.module, name), None)
    return deps, list(roots), None


def verify(deps: Sequence[CodeDependency], indexes: dict[str, dict[tuple[str, int], str]]) -> str | None:
    """Why the code recorded at capture differs from this process's, or None when all of it is the same.

    `indexes` caches module_code_index per module name across the records one miss reads."""
    for dep in deps:
        module = sys.modules.get(dep.module)
        if module is None and dep.module != "__main__":
            # Capture imported it (a lazy import in the function or a library it calls); so would capture here.
            try:
                module = importlib.import_module(dep.module)
            except Exception as e:
                return f"module {dep.module} (code {dep.describe()} ran at capture) does not import here: {e}"
        if module is None:
            return f"module {dep.module} (code {dep.describe()} ran at capture) is not loaded in this process"
        if dep.module not in indexes:
            indexes[dep.module] = module_code_index(module)
        digest = indexes[dep.module].get((dep.qualname, dep.firstlineno))
        if digest is None:
            return f"code {dep.describe()} that ran at capture is not defined in this process"
        if digest != dep.digest:
            return f"code {dep.describe()} changed since it was captured"
    return None


# Attributes of Triton's kernel objects (JITFunction, Heuristics, Autotuner, Config) that hold user functions.
_TRITON_FUNCTION_HOLDERS = ("fn", "values", "configs", "pre_hook", "post_hook", "early_config_prune", "perf_model")


class ModuleCodes:
    """Every code object reachable from a module's globals, by name and first line -> code_digest.

    The name is the code's qualified name, except for code generated at run time (a file name such as
    "<string>": a dataclass's `__init__`, an exec'd kernel wrapper), where many share one qualified name and first
    line (every dataclass `__init__` is `__create_fn__.<locals>.__init__` at line 2): there it is the attribute
    path that reaches the function from the module (`CausalLMOutputWithPast.__init__`), which `name_of` gives for
    the code objects this walk met."""

    def __init__(self, module: types.ModuleType) -> None:
        from torch._library.custom_ops import CustomOpDef

        self.digests: dict[tuple[str, int], str] = {}
        self._paths: dict[int, str] = {}  # id(generated code) -> its name here
        self._codes: list[types.CodeType] = []  # keeps those ids valid while this index lives
        seen: set[int] = set()

        def add_function(fn: types.FunctionType, path: str) -> None:
            generated = fn.__code__.co_filename.startswith("<")
            for nested in nested_codes(fn.__code__):
                name = _qualname(nested)
                if generated:
                    inner = name.removeprefix(_qualname(fn.__code__))
                    name = f"{path}{inner}"
                    self._paths.setdefault(id(nested), name)
                    self._codes.append(nested)
                self.digests.setdefault((name, nested.co_firstlineno), code_digest(nested))

        def visit(value: object, path: str, depth: int) -> None:
            if id(value) in seen or depth > 8:
                return
            seen.add(id(value))
            if isinstance(value, (staticmethod, classmethod)):
                visit(value.__func__, path, depth + 1)
            elif isinstance(value, property):
                for accessor, suffix in ((value.fget, "fget"), (value.fset, "fset"), (value.fdel, "fdel")):
                    visit(accessor, f"{path}.{suffix}", depth + 1)
            elif isinstance(value, types.FunctionType):
                add_function(value, path)
                wrapped = value.__dict__.get("__wrapped__")
                if wrapped is not None:
                    visit(wrapped, f"{path}.__wrapped__", depth + 1)
            elif isinstance(value, type) and value.__module__ == module.__name__:
                for name, item in dict(vars(value)).items():
                    visit(item, f"{path}.{name}", depth + 1)
            elif isinstance(value, CustomOpDef):  # torch.library.custom_op: the name holds the op, not the function
                for fn in (value._init_fn, value._abstract_fn, *value._backend_fns.values()):
                    visit(fn, f"{path}.{getattr(fn, '__name__', '')}", depth + 1)
                    for cell in getattr(fn, "__closure__", None) or ():  # register_kernel wraps the user's function
                        try:
                            visit(cell.cell_contents, f"{path}.<closure>", depth + 1)
                        except ValueError:  # an empty cell
                            pass
            elif type(value).__module__.partition(".")[0] == "triton":
                # A kernel's wrappers hold functions written in the module: heuristics' and autotune configs'
                # lambdas, pre- and post-hooks, the kernel's own function (not its caches of compiled variants).
                for name in _TRITON_FUNCTION_HOLDERS:
                    item = getattr(value, name, None)
                    if item is not None:
                        visit(item, f"{path}.{name}", depth + 1)
            elif isinstance(value, (list, tuple)) and len(value) <= 256:
                for k, item in enumerate(value):
                    visit(item, f"{path}[{k}]", depth + 1)
            elif isinstance(value, dict) and len(value) <= 256:
                for key, item in list(value.items()):
                    visit(item, f"{path}[{key!r}]", depth + 1)

        for name, value in list(vars(module).items()):
            visit(value, name, 0)

    def name_of(self, code: types.CodeType) -> str:
        """The name `code` has in this index (its attribute path when generated), or its qualified name."""
        return self._paths.get(id(code), _qualname(code))


def module_code_index(module: types.ModuleType) -> dict[tuple[str, int], str]:
    """(name, first line) -> code_digest of every code object reachable from a module's globals (ModuleCodes)."""
    return ModuleCodes(module).digests


def _qualname(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python 3.11+
