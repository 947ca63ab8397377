"""Where the user's code is on the stack: the innermost frame outside Trident and torch. Warnings name its line
(user_stacklevel) and capture failures point at it (user_location)."""
from __future__ import annotations

import linecache
import os
import sys
import traceback

import torch

# trident/ and torch/, each with its separator (a sibling folder whose name merely starts the same is user code)
_LIBRARY_DIRS = tuple(os.path.dirname(os.path.abspath(path)) + os.sep for path in (__file__, torch.__file__))


def in_library(filename: str) -> bool:
    """Whether code from `filename` belongs to Trident or torch."""
    return os.path.abspath(filename).startswith(_LIBRARY_DIRS)


def user_stacklevel() -> int:
    """The stacklevel that makes a `warnings.warn` in the caller name the first frame above it outside Trident and
    torch: the user's line that led there, however many frames of ours or torch's (nn.Module.__call__, Dynamo's
    wrappers, a lazy entry) lie between."""
    frame, level = sys._getframe(1), 1
    while frame.f_back is not None and in_library(frame.f_code.co_filename):
        frame, level = frame.f_back, level + 1
    return level


def user_location(tb: traceback.StackSummary | list[traceback.FrameSummary]) -> str:
    """'file:line: code' of the innermost frame that belongs to neither torch nor trident."""
    for frame in reversed(tb):
        if in_library(frame.filename) or frame.filename.startswith("<"):
            continue
        code = (frame.line or linecache.getline(frame.filename, frame.lineno or 0)).strip()
        return f"{frame.filename}:{frame.lineno}: {code}"
    return "<unknown location>"
