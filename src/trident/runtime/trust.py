"""Whether a file in Trident's cache may be loaded: the cache holds native code and pickles, so it is trusted
like code, and only its owner may be able to write it.

A file passes when it and every folder from the cache root down to it are owned by the current user or by root
and writable by no one else (no group or other write bit), when its real path lies inside the cache (a
symbolic link pointing outside is refused), and when no folder above the root is writable by everyone without
the sticky bit (where anyone could swap the root itself; /tmp, sticky, is fine as a parent). Owner and root
are both accepted so that a read-only cache shipped in a container image (root-owned, not writable by the user)
stays usable. Folders above the root are not held to more (a group-writable home or a parent owned by another
user is common and cannot plant files the checks below the root accept).

Every loader calls `check` before reading a record, loading a library or the runtime; every writer makes its
folders with `make_private_folders` (0700; files are written 0600). A refusal is one warning per offending path,
consequence and process (UntrustedCacheWarning: the path, the owner or mode found, the fix) and an `Untrusted` exception
for the caller, which compiles instead and writes nothing there.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import stat
import threading
import warnings
from pathlib import Path

from ..frames import user_stacklevel

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH
SKIPPED = "Trident neither loads from it nor stores into it (calls compile instead)"


class UntrustedCacheWarning(UserWarning):
    """A cache file or folder someone other than its owner could have written; Trident does not load it."""


class Untrusted(Exception):
    """The refusal of one path (str(e) is the warning's text without the consequence)."""

    def __init__(self, path: Path, found: str, fix: str) -> None:
        super().__init__(f"{path} {found}; {fix}")
        self.path, self.found, self.fix = path, found, fix


_lock = threading.Lock()
_warned: set[tuple[str, str]] = set()


def _warn(refusal: Untrusted, consequence: str) -> None:
    text = (
        f"trident: not trusting the cache: {refusal.path} {refusal.found}. The cache holds native code and "
        f"pickles, so only its owner may be able to write it; {consequence}. Fix: {refusal.fix}, or set "
        "TRIDENT_CACHE_DIR (TRIDENT_DISK_CACHE_DIR for specializations) to a folder only you can write"
    )
    with _lock:  # once per path and consequence (the runtime and the disk cache may share a refused folder)
        if (str(refusal.path), consequence) in _warned:
            return
        _warned.add((str(refusal.path), consequence))
    warnings.warn(text, UntrustedCacheWarning, stacklevel=user_stacklevel())


def _owner(uid: int) -> str:
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def _current_uid() -> int:
    return os.geteuid()  # the user whose files are written; tests stand in another user here


def _check_in_cache(path: Path, info: os.stat_result, is_folder: bool) -> None:
    """One path at or below the cache root."""
    me = _current_uid()
    if info.st_uid not in (me, 0):
        raise Untrusted(
            path, f"is owned by {_owner(info.st_uid)}, not by you ({_owner(me)}) or root",
            f"remove it (`rm -r {path}`; Trident compiles again)",
        )
    if info.st_mode & _WRITABLE_BY_OTHERS:
        mode = f"mode {stat.S_IMODE(info.st_mode):04o}"
        if is_folder:
            raise Untrusted(path, f"is writable by others ({mode})", f"`chmod 700 {path}`")
        # A file someone else could write may have been altered already: replacing it is the fix, not chmod.
        raise Untrusted(path, f"is writable by others ({mode})", f"remove it (`rm {path}`; Trident compiles again)")


def _check_above_root(root: Path) -> None:
    for folder in reversed(root.parents):
        try:
            info = os.stat(folder)
        except FileNotFoundError:  # a fresh machine's ~/.cache: whoever makes it (Trident) makes it private
            return
        if info.st_mode & stat.S_IWOTH and not info.st_mode & stat.S_ISVTX:
            mode = f"mode {stat.S_IMODE(info.st_mode):04o}"
            raise Untrusted(
                folder, f"(a parent of the cache {root}) is writable by everyone without the sticky bit ({mode})",
                f"`chmod o-w {folder}` or `chmod +t {folder}`",
            )


def check(path: Path, root: Path, consequence: str = SKIPPED) -> None:
    """Raise Untrusted (after warning once) unless `path` and the folders from `root` down to it are trusted
    (see the module docstring). Components not made yet are skipped: whoever makes them makes them private."""
    try:
        _check(Path(path), Path(root))
    except Untrusted as refusal:
        _warn(refusal, consequence)
        raise


def trusted(path: Path, root: Path) -> bool:
    """Whether `path` exists and passes `check`, without a warning (for a writer deciding to replace it)."""
    try:
        _check(Path(path), Path(root))
    except Untrusted:
        return False
    return os.path.exists(path)


def _check(path: Path, root: Path) -> None:
    real_root = Path(os.path.realpath(root))
    real = Path(os.path.realpath(path))
    if real != real_root and real_root not in real.parents:
        raise Untrusted(path, f"leads to {real}, outside the cache {real_root}", f"remove the link (`rm {path}`)")
    _check_above_root(real_root)
    relative = real.relative_to(real_root).parts
    for depth in range(len(relative) + 1):  # the root, then each folder down to the path
        current = real_root.joinpath(*relative[:depth])
        try:
            info = os.stat(current)
        except FileNotFoundError:
            return
        except OSError as e:  # a folder this user cannot search: nothing below it can be vouched for
            raise Untrusted(current, f"cannot be inspected ({e.strerror})", "make it readable by you") from e
        _check_in_cache(current, info, stat.S_ISDIR(info.st_mode))


def make_private_folders(folder: Path, root: Path, consequence: str = SKIPPED) -> None:
    """Make `folder` (at or below `root`) and the missing folders between them owner-only (0700), then check
    the whole chain; raises Untrusted (after warning once) when an existing part is not trusted."""
    folder, root = Path(folder), Path(root)
    check(folder, root, consequence)  # before making anything inside an untrusted folder
    root.parent.mkdir(parents=True, exist_ok=True)  # above the root: the user's own folders, as they come
    parts = folder.relative_to(root).parts
    for depth in range(len(parts) + 1):
        with contextlib.suppress(FileExistsError):
            os.mkdir(root.joinpath(*parts[:depth]), FOLDER_MODE)
    check(folder, root, consequence)  # a folder made by someone else between the check and mkdir
