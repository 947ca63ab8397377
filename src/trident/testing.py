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
