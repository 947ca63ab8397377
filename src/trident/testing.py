"""Helpers for tests of code that uses Trident."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def count_compiles() -> Iterator[Callable[[], int]]:
    """`with count_compiles() as compiles: ...; compiles()` is the number of specializations compiled inside."""
    from .driver import compile_count

    start = compile_count()
    yield lambda: compile_count() - start


def triton_launch_sites(fn: Callable[..., object]) -> list[object]:
    """What each Triton launch of a jitted function's specializations calls, in order: on CUDA the native
    `TritonLaunch` (variant_count, native_launches, fallback_launches, disabled_reason), on CPU the
    RecordedLaunch run through Triton's interpreter."""
    jitted = getattr(fn, "_trident", None)
    if jitted is None:
        raise TypeError(f"triton_launch_sites: expected a trident.jit function, got {type(fn).__name__}")
    return [site for spec in jitted.specializations for site in spec.compiled.launch_sites]
