"""The disk cache's parts on their own: fingerprints, code digests and dependencies, the record format, versions."""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import platform
import sys
import types
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from trident.cache import code_deps, fingerprint, record, versions
from trident.cache.fingerprint import StateWalk, Unfingerprintable, code_digest, format_path


def digest(value: object) -> str:
    walk = StateWalk()
    walk.walk_root(("global", "v"), value)
    return walk.digest()


def test_tensors_count_by_metadata_not_values() -> None:
    assert digest(torch.zeros(3, 4)) == digest(torch.ones(3, 4))
    assert digest(torch.zeros(3, 4)) != digest(torch.zeros(4, 3))
    assert digest(torch.zeros(3, 4)) != digest(torch.zeros(3, 4, dtype=torch.float64))
    assert digest(torch.zeros(4, 3).t()) != digest(torch.zeros(3, 4))  # strides


def test_scalars_and_structure_count_by_value() -> None:
    assert digest({"eps": 1e-5, "n": 3}) == digest({"eps": 1e-5, "n": 3})
    assert digest({"eps": 1e-5}) != digest({"eps": 1e-6})
    assert digest([1, 2]) != digest((1, 2))
    assert digest(frozenset({"a", "b"})) == digest(frozenset({"b", "a"}))
    shared = [1]
    assert digest([shared, shared]) != digest([[1], [1]])  # aliasing is structure too


def test_module_state_and_parameter_paths() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    walk = StateWalk()
    walk.walk_root(("global", "model"), model)
    path = walk.tensor_paths[id(model[0].weight)]
    assert format_path(path) == "model._modules['0']._parameters['weight']"
    other = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4, eps=1e-3))
    assert digest(model) != digest(other)  # a changed eps
    assert digest(model) == digest(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)))


def test_values_held_by_library_objects_count() -> None:
    """Library and standard-library objects whose value a trace can read are hashed by value; a decorator's
    wrapped user function by its code; a user enum by its value."""
    import collections
    import decimal
    import enum
    import functools
    import operator
    import types as pytypes
    import weakref

    assert digest(decimal.Decimal("0.5")) != digest(decimal.Decimal("0.25"))
    assert digest(collections.deque([1, 2])) != digest(collections.deque([1, 3]))
    assert digest(operator.itemgetter(1)) != digest(operator.itemgetter(2))
    assert digest(pytypes.SimpleNamespace(eps=1e-5)) != digest(pytypes.SimpleNamespace(eps=1e-6))
    assert digest(torch.finfo(torch.float16)) != digest(torch.finfo(torch.bfloat16))
    assert digest(bytearray(b"ab")) != digest(bytearray(b"ac"))
    assert digest(torch.ops.aten.add) != digest(torch.ops.prims.add)  # same name, another namespace

    class Tag(str):  # a subclass of a scalar type: its value counts, and its state
        pass

    assert digest(Tag("a")) != digest(Tag("b"))
    small, large = Tag("a"), Tag("b")
    assert digest(weakref.ref(small)) != digest(weakref.ref(large))  # followed
    one = functools.lru_cache(_code_function("def f(x):\n    return x + 1\n"))
    two = functools.lru_cache(_code_function("def f(x):\n    return x + 2\n"))
    assert digest(one) != digest(two)

    class Mode(enum.Enum):
        FAST = 1

    class ModeChanged(enum.Enum):  # the same class edited: same member name, another value
        FAST = 2

    ModeChanged.__qualname__ = Mode.__qualname__
    assert digest(Mode.FAST) != digest(ModeChanged.FAST)


def test_process_handles_are_named_by_type() -> None:
    """A logger's state (its level cache fills as it is used) is not a value the trace reads."""
    import logging

    logger = logging.getLogger("trident.test.fingerprint")
    before = digest(logger)
    logger.setLevel(logging.ERROR)
    logger.isEnabledFor(logging.INFO)
    assert digest(logger) == before


def _code_function(source: str):  # type: ignore[no-untyped-def]
    namespace: dict[str, object] = {"__name__": __name__}
    exec(compile(source, "<test>", "exec"), namespace)
    return namespace["f"]


def test_code_digest_covers_exception_handling() -> None:
    narrow = _code("def f(g):\n    try:\n        a = g()\n    except ValueError:\n        a = 0\n    return a\n", "f")
    wide = _code("def f(g):\n    try:\n        a = g()\n    except TypeError:\n        a = 0\n    return a\n", "f")
    assert code_digest(narrow) != code_digest(wide)


def test_cycles_and_depth() -> None:
    loop: list[object] = []
    loop.append(loop)
    digest(loop)  # terminates
    deep: list[object] = []
    for _ in range(fingerprint.DEPTH_LIMIT + 5):
        deep = [deep]
    with pytest.raises(Unfingerprintable, match="nested more than"):
        digest(deep)


def test_recursion_limit_is_unfingerprintable_not_an_error() -> None:
    """State nested within DEPTH_LIMIT can still exceed the frames Python has left (a caller deep in its stack, a
    library's module state walked as user code: flag-gems' on the H200 raised RecursionError out of the first
    call). The walk says the state is unfingerprintable (not persisted) instead."""
    nested: object = 0
    for _ in range(fingerprint.DEPTH_LIMIT - 5):
        nested = {"next": nested}
    StateWalk().walk_root(("arg", "x"), nested)  # fits with the default limit
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        with pytest.raises(Unfingerprintable, match="recursion limit"):
            StateWalk().walk_root(("arg", "x"), nested)
    finally:
        sys.setrecursionlimit(limit)


def _code(source: str, name: str) -> types.CodeType:
    namespace: dict[str, object] = {}
    exec(compile(source, "<test>", "exec"), namespace)
    return namespace[name].__code__  # type: ignore[attr-defined, no-any-return]


def test_code_digest_ignores_position_not_behaviour() -> None:
    base = _code("def f(x):\n    return x + 1\n", "f")
    moved = _code("\n\n\ndef f(x):\n    return x + 1\n", "f")
    changed = _code("def f(x):\n    return x + 2\n", "f")
    assert code_digest(base) == code_digest(moved)
    assert code_digest(base) != code_digest(changed)


SCALE_FOR_RECORDING = 2


def helper_for_recording(x: torch.Tensor) -> torch.Tensor:
    return x * SCALE_FOR_RECORDING


def test_recording_finds_user_code_by_name() -> None:
    def fn(x):  # type: ignore[no-untyped-def]
        return helper_for_recording(x)

    with code_deps.recording_code() as recorder:
        fn(torch.ones(2))
    deps, roots, reason = code_deps.dependencies(recorder, fn)
    assert reason is None
    assert [d.qualname for d in deps] == ["helper_for_recording"]
    assert ("module", __name__, "SCALE_FOR_RECORDING") in roots  # the globals its code names are roots
    assert code_deps.verify(deps, {}) is None
    changed = dataclasses.replace(deps[0], digest="0" * 32)
    assert "changed since it was captured" in (code_deps.verify([changed], {}) or "")


def test_recording_refuses_code_it_cannot_find_again() -> None:
    namespace: dict[str, object] = {"__name__": "not_a_module"}
    exec("def made(x):\n    return x + 1\n", namespace)

    def fn(x):  # type: ignore[no-untyped-def]
        return namespace["made"](x)  # type: ignore[operator]

    with code_deps.recording_code() as recorder:
        fn(1)
    _, _, reason = code_deps.dependencies(recorder, fn)
    assert reason is not None and "belong to no imported module" in reason


@dataclasses.dataclass
class GeneratedInitA:  # two dataclasses: their generated __init__ share a qualified name and first line
    x: int


@dataclasses.dataclass
class GeneratedInitB:
    x: int
    y: int = 2


def test_a_generated_dataclass_init_is_found_by_its_attribute_path() -> None:
    """Every dataclass's `__init__` is `__create_fn__.<locals>.__init__` at line 2 of "<string>" (as Hugging
    Face's model outputs are): the one that ran is found again by the attribute that holds it, and a change to it
    is still seen."""

    def fn(x):  # type: ignore[no-untyped-def]
        return GeneratedInitB(x).y

    with code_deps.recording_code() as recorder:
        fn(1)
    deps, _, reason = code_deps.dependencies(recorder, fn)
    assert reason is None, reason
    assert [d.qualname for d in deps] == ["GeneratedInitB.__init__"], deps
    assert code_deps.verify(deps, {}) is None
    changed = dataclasses.replace(deps[0], digest="0" * 32)
    assert "changed since it was captured" in (code_deps.verify([changed], {}) or "")


@triton.jit
def _kernel_for_recording(x_ptr, n, EVEN: tl.constexpr):  # type: ignore[no-untyped-def]
    pass


# Lambdas written at module level inside the kernel objects, as kernel libraries write them.
HEURISTIC_KERNEL = triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})(_kernel_for_recording)
TUNED_KERNEL = triton.autotune(configs=[triton.Config({"EVEN": True}, pre_hook=lambda nargs: nargs.get("n"))],
                               key=["n"])(_kernel_for_recording)


def test_lambdas_of_a_kernels_heuristics_and_configs_are_found_by_name() -> None:
    """A heuristic's lambda and an autotune config's pre_hook run during capture (Triton calls them at the
    launch): they are found again through the kernel objects that hold them, in the module's globals."""

    def fn(n):  # type: ignore[no-untyped-def]
        return HEURISTIC_KERNEL.values["EVEN"]({"n": n}), TUNED_KERNEL.configs[0].pre_hook({"n": n})

    with code_deps.recording_code() as recorder:
        fn(4)
    deps, _, reason = code_deps.dependencies(recorder, fn)
    assert reason is None, reason
    assert [d.qualname for d in deps] == ["<lambda>", "<lambda>"], deps
    assert code_deps.verify(deps, {}) is None


@pytest.mark.parametrize(
    "damage", [lambda d: d[:-1], lambda d: d[:10], lambda d: d[:-3] + bytes([d[-3] ^ 1]) + d[-2:], lambda d: b"x" + d],
    ids=["truncated", "header only", "altered", "other format"],
)  # fmt: skip
def test_damaged_records_are_recognised(damage) -> None:  # type: ignore[no-untyped-def]
    good = record.MAGIC + hashlib.blake2b(b"payload", digest_size=32).digest() + b"payload"
    with pytest.raises(record.CorruptRecord, match="digest mismatch|unreadable payload"):
        record.decode(good)  # whole, but not a pickle: unreadable
    with pytest.raises(record.CorruptRecord, match="digest mismatch|other format|not a record"):
        record.decode(damage(good))


def test_environment_names_every_version() -> None:
    names = dict(versions.environment())
    for name in ("trident", "trident sources", "torch", "triton", "torch-mlir", "python abi", "python"):
        assert names[name] and names[name] != "absent", name
    assert names["triton"].startswith("3.")
    assert names["cpu features"]  # LLVM generates code for this CPU's instruction set


def test_lookup_key_covers_the_default_device() -> None:
    from trident.capture.inputs import describe_call
    from trident.capture.trace import Dynamism
    from trident.cache.key import lookup_key

    def fn(x):  # type: ignore[no-untyped-def]
        return x + torch.ones(3)

    facts = describe_call(["x"], [torch.ones(3)])
    here = lookup_key(fn, ["x"], 1, "runtime.so", facts, Dynamism())
    with torch.device("meta"):  # factory calls in fn would allocate there: another trace
        elsewhere = lookup_key(fn, ["x"], 1, "runtime.so", facts, Dynamism())
    assert here != elsewhere
    assert here == lookup_key(fn, ["x"], 1, "runtime.so", facts, Dynamism())


def test_inaccessible_reservations_are_not_taken_for_addresses() -> None:
    """A PROT_NONE reservation (the CUDA driver reserves one at 0x200000000) holds no object compiled code could
    use, so integers that fall into it are not flagged; an address in readable memory still is."""
    import ctypes
    import struct

    from trident.cache.native_library import baked_addresses

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    map_private_anonymous = 0x02 | 0x20
    reserved = libc.mmap(None, 1 << 20, 0, map_private_anonymous, -1, 0)  # PROT_NONE
    readable = libc.mmap(None, 1 << 20, 0x1 | 0x2, map_private_anonymous, -1, 0)  # PROT_READ | PROT_WRITE
    assert ctypes.c_void_p(-1).value not in (reserved, readable) and reserved and readable
    try:
        inside_reservation = struct.pack("<Q", reserved + 8)
        inside_readable = struct.pack("<Q", readable + 8)
        assert baked_addresses(b"\x00" * 8 + inside_reservation, []) == []
        assert baked_addresses(b"\x00" * 8 + inside_readable, []) == [readable + 8]
    finally:
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(ctypes.c_void_p(reserved), 1 << 20)
        libc.munmap(ctypes.c_void_p(readable), 1 << 20)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 code: where a 64-bit value can sit is known there")
def test_instruction_bytes_that_read_like_an_address_are_not_taken_for_one(tmp_path: Path) -> None:
    """In an x86-64 library a 64-bit value sits in a movabs immediate or in a data section; other windows of
    machine code are instruction bytes (a big host program's `mov rax, [rsp + 0x7f40]` reads like a library
    address, and kept a Qwen2 specialization out of the disk cache on a GPU host). A real library with one address
    of readable memory in each place: the movabs and the constant are found, the instruction bytes are not."""
    import ctypes
    import subprocess

    from trident.cache.native_library import baked_addresses
    from trident.runtime.build import COMPILER

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    readable = libc.mmap(None, 1 << 20, 0x1 | 0x2, 0x02 | 0x20, -1, 0)  # PROT_READ | PROT_WRITE, private anonymous
    assert readable and readable != ctypes.c_void_p(-1).value and readable >= 1 << 32
    in_movabs, in_rodata, in_instruction = readable + 8, readable + 16, readable + 24
    instruction = ",".join(hex(b) for b in b"\x48\x8b\x84\x24" + in_instruction.to_bytes(8, "little"))
    (tmp_path / "planted.cpp").write_text(
        f'extern "C" void load_it() {{ __asm__ volatile("movabs ${in_movabs:#x}, %%rax" ::: "rax"); }}\n'
        f'extern "C" void bytes_only() {{ __asm__ volatile(".byte {instruction}"); }}\n'
        f"extern const unsigned long long kept = {in_rodata:#x}ULL;\n"
    )
    try:
        subprocess.run([COMPILER, "-shared", "-fPIC", "-O1", "planted.cpp", "-o", "planted.so"], cwd=tmp_path,
                       check=True, capture_output=True)
        data = (tmp_path / "planted.so").read_bytes()
        assert in_instruction.to_bytes(8, "little") in data  # planted, yet not a value the code uses
        assert baked_addresses(data, []) == [in_movabs, in_rodata]
        assert baked_addresses(b"\x00" + in_instruction.to_bytes(8, "little"), []) == [in_instruction]  # no ELF
    finally:
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.munmap(ctypes.c_void_p(readable), 1 << 20)
