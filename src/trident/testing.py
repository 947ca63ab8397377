"""Helpers for tests of code that uses Trident."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from . import fallback
from .fallback import FallbackEvent, UnexpectedFallback  # re-exported for tests


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


# -- strict mode: a test fails when a call runs eagerly unless the test says it expects that ------------------------
@contextlib.contextmanager
def strict(enabled: bool = True) -> Iterator[None]:
    """Inside, a jitted call that runs eagerly raises UnexpectedFallback (what TRIDENT_STRICT=1 sets for a whole
    process), except inside expect_fallback()/allow_fallback()."""
    from .knobs import override

    with override(strict=enabled):
        yield


@contextlib.contextmanager
def allow_fallback() -> Iterator[list[FallbackEvent]]:
    """Eager fallbacks are allowed inside; yields the list of those that happened, filled when the block ends
    (with those of any thread in that time). For harnesses that assert on the share themselves (the fuzz)."""
    with fallback.allowing() as seen:
        yield seen


@contextlib.contextmanager
def expect_fallback(match: str = "", *, function: str | None = None) -> Iterator[list[FallbackEvent]]:
    """The block must run at least one call eagerly whose reason contains `match` (and, given `function`, of
    that jitted function), and every call it runs eagerly must match: a fallback of another kind inside the
    block is as unexpected as one outside it. Fails with AssertionError otherwise; yields the block's events."""
    with allow_fallback() as seen:
        yield seen
    matching = [e for e in seen if match in e.reason and (function is None or e.function == function)]
    expected = f"an eager fallback whose reason contains {match!r}" + (f" of '{function}'" if function else "")
    if not matching:
        got = "; ".join(f"'{e.function}': {e.reason}" for e in seen) or "no eager fallback at all"
        raise AssertionError(f"expected {expected}; got {got}")
    others = [e for e in seen if e not in matching]
    if others:
        got = "; ".join(f"'{e.function}': {e.reason}" for e in others)
        raise AssertionError(f"expected only {expected}; also got {got}")


def unexpected_fallbacks() -> list[FallbackEvent]:
    """Strict-mode violations so far, including those whose UnexpectedFallback a caller caught."""
    return fallback.violations()


def fallback_events() -> list[FallbackEvent]:
    """The most recent eager fallbacks of this process (function, reason), oldest first (the last 1024)."""
    return fallback.events()


__all__ = [
    "FallbackEvent", "UnexpectedFallback", "allow_fallback", "count_compiles", "expect_fallback",
    "fallback_events", "strict", "triton_launch_sites", "unexpected_fallbacks",
]
