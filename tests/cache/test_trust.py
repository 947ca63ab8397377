"""A cache only its owner can feed: Trident loads no record, library or runtime someone else could have written.

Each case stores a specialization, then makes part of the cache untrusted the way another local user could
(a folder writable by others, a file of another mode or owner, a symbolic link out of the cache), and checks that
a fresh jit of the function compiles instead of loading, warns once naming the path, what was found and the
fix, and writes nothing into the untrusted folder. The tests run as root (CI), so "another owner" is uid 65534
and modes come from chmod; `trust._current_uid` stands in an unprivileged user where the rule depends on it.
"""
from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import trident
from trident.runtime import trust
from trident.knobs import knobs, override
from trident.runtime import build
from trident.testing import count_compiles

NOBODY = 65534


def program(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x) * 2 + 1


X = torch.randn(4, 8)


@pytest.fixture
def disk_cache(tmp_path: Path) -> Iterator[Path]:
    with override(disk_cache=True, disk_cache_dir=tmp_path / "cache"):
        yield tmp_path / "cache"


class Stored:
    """The files of the one specialization `store` persisted."""

    def __init__(self, root: Path) -> None:
        (self.record,) = root.rglob("*.spec")
        (self.library,) = root.rglob("*.so")
        self.key_folder = self.record.parent
        self.root = root


def store(root: Path) -> Stored:
    with torch.no_grad(), count_compiles() as compiles:
        trident.jit(program)(X)
    assert compiles() == 1 and trident.cache.stats()["stores"] >= 1
    return Stored(root)


def fresh_call() -> tuple[int, list[str], str]:
    """A new jit of `program` called once: (compiles, trust warnings, explain); checks the result."""
    with torch.no_grad(), count_compiles() as compiles, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        jitted = trident.jit(program)
        torch.testing.assert_close(jitted(X), program(X), rtol=0, atol=0)
    texts = [str(w.message) for w in caught if issubclass(w.category, trust.UntrustedCacheWarning)]
    return compiles(), texts, trident.explain(jitted)


def listing(folder: Path) -> list[tuple[str, int, float]]:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime) for p in folder.iterdir())


def assert_refused(texts: list[str], path: Path, found: str, fix: str) -> None:
    assert len(texts) == 1, texts
    (text,) = texts
    assert f"{path} {found}" in text, text
    assert f"Fix: {fix}" in text and "TRIDENT_CACHE_DIR" in text, text


# ---------------------------------------------------------------------------------------------------------


def test_folders_and_files_are_made_owner_only(disk_cache: Path) -> None:
    stored = store(disk_cache)
    folder = stored.key_folder
    while True:
        assert stat.S_IMODE(folder.stat().st_mode) & 0o077 == 0, folder  # 0700 under any umask
        if folder == disk_cache:
            break
        folder = folder.parent
    for path in (stored.record, stored.library):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert fresh_call()[:2] == (0, [])  # loaded, without a warning


def test_world_writable_folder_is_refused_and_not_written(disk_cache: Path) -> None:
    stored = store(disk_cache)
    os.chmod(stored.key_folder, 0o777)
    before = listing(stored.key_folder)
    compiles, texts, explain = fresh_call()
    assert compiles == 1
    assert_refused(texts, stored.key_folder, "is writable by others (mode 0777)", f"`chmod 700 {stored.key_folder}`")
    assert "neither loads from it nor stores into it" in texts[0]
    assert listing(stored.key_folder) == before  # nothing published into it
    assert "not persisted: the disk cache folder is not trusted" in explain
    os.chmod(stored.key_folder, 0o700)  # the fix the warning names
    assert fresh_call()[:2] == (0, [])


def test_group_writable_record_is_refused(disk_cache: Path) -> None:
    stored = store(disk_cache)
    os.chmod(stored.record, 0o664)
    compiles, texts, _ = fresh_call()
    assert compiles == 1
    assert_refused(texts, stored.record, "is writable by others (mode 0664)", f"remove it (`rm {stored.record}`")
    assert trident.cache.stats()["untrusted"] >= 1
    # The folder is trusted, so the compiled specialization was stored again, owner-only, and is used next.
    assert fresh_call()[:2] == (0, [])


def test_library_of_another_owner_is_refused(disk_cache: Path) -> None:
    stored = store(disk_cache)
    os.chown(stored.library, NOBODY, NOBODY)
    compiles, texts, _ = fresh_call()
    assert compiles == 1
    assert_refused(texts, stored.library, f"is owned by uid {NOBODY} (nobody), not by you (uid 0 (root)) or root",
                   f"remove it (`rm -r {stored.library}`")


def test_folder_of_another_owner_is_refused_and_not_written(disk_cache: Path) -> None:
    stored = store(disk_cache)
    shard = stored.key_folder.parent
    os.chown(shard, NOBODY, NOBODY)
    before = listing(stored.key_folder)
    compiles, texts, _ = fresh_call()
    assert compiles == 1
    assert_refused(texts, shard, f"is owned by uid {NOBODY} (nobody)", f"remove it (`rm -r {shard}`")
    assert listing(stored.key_folder) == before


def test_symlink_out_of_the_cache_is_refused(disk_cache: Path, tmp_path: Path) -> None:
    stored = store(disk_cache)
    outside = tmp_path / "elsewhere" / stored.library.name
    outside.parent.mkdir()
    stored.library.rename(outside)
    stored.library.symlink_to(outside)
    compiles, texts, _ = fresh_call()
    assert compiles == 1
    assert_refused(texts, stored.library, f"leads to {outside}, outside the cache {disk_cache}",
                   f"remove the link (`rm {stored.library}`)")


def test_cache_root_reached_through_a_symlink_is_used(tmp_path: Path) -> None:
    real = tmp_path / "real-cache"
    with override(disk_cache=True, disk_cache_dir=real):
        store(real)
    (tmp_path / "link").symlink_to(real)
    with override(disk_cache=True, disk_cache_dir=tmp_path / "link"):
        assert fresh_call()[:2] == (0, [])


def test_parent_writable_by_everyone_needs_the_sticky_bit(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    with override(disk_cache=True, disk_cache_dir=shared / "cache"):
        store(shared / "cache")
        os.chmod(shared, 0o1777)  # like /tmp: others cannot rename or replace the cache folder
        assert fresh_call()[:2] == (0, [])
        os.chmod(shared, 0o777)  # without the sticky bit anyone could swap the cache folder for their own
        compiles, texts, _ = fresh_call()
        assert compiles == 1
        assert_refused(texts, shared, "(a parent of the cache", f"`chmod o-w {shared}` or `chmod +t {shared}`")
        assert "without the sticky bit (mode 0777)" in texts[0]


def test_root_owned_read_only_cache_is_used(disk_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache shipped in a container image: owned by root, writable by no one, read by an unprivileged user."""
    stored = store(disk_cache)
    for folder, _, files in os.walk(disk_cache):
        for name in files:
            os.chmod(Path(folder) / name, 0o444)
    for folder, _, _ in os.walk(disk_cache, topdown=False):
        os.chmod(folder, 0o555)
    monkeypatch.setattr(trust, "_current_uid", lambda: 1000)  # the user running the image
    assert fresh_call()[:2] == (0, [])
    assert trust.trusted(stored.record, disk_cache)
    os.chown(stored.record, 1000, 1000)  # the user's own file is trusted too; another user's is not
    assert trust.trusted(stored.record, disk_cache)
    os.chown(stored.record, NOBODY, NOBODY)
    assert not trust.trusted(stored.record, disk_cache)


# ---------------------------------------------------------------------------------------------------------
# The native runtime


@pytest.fixture
def runtime_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], tuple[Path, Path]]:
    """`_trusted_build_dir` for a cache root, without building anything."""
    monkeypatch.setattr(build, "_private_build_dirs", {})

    def decide(cache_dir: Path) -> tuple[Path, Path]:
        monkeypatch.setattr(build, "_build_dir", lambda: cache_dir / "runtime" / "torch-x")
        with override(cache_dir=cache_dir):
            assert knobs.cache_dir == cache_dir
            return build._trusted_build_dir()

    return decide


def test_runtime_is_loaded_from_a_trusted_cache(
    tmp_path: Path, runtime_folder: Callable[..., tuple[Path, Path]]
) -> None:
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    with warnings.catch_warnings():
        warnings.simplefilter("error", trust.UntrustedCacheWarning)
        assert runtime_folder(cache) == (cache / "runtime" / "torch-x", cache)


def test_runtime_under_folders_not_made_yet_is_built_there(
    tmp_path: Path, runtime_folder: Callable[..., tuple[Path, Path]]
) -> None:
    """A fresh machine has no ~/.cache yet: the default cache lies below folders that do not exist."""
    cache = tmp_path / "home" / ".cache" / "trident"
    with warnings.catch_warnings():
        warnings.simplefilter("error", trust.UntrustedCacheWarning)
        assert runtime_folder(cache) == (cache / "runtime" / "torch-x", cache)
    trust.check(cache / "records" / "a.spec", cache)  # nothing made yet, nothing refused


def test_runtime_in_an_untrusted_cache_is_built_privately(
    tmp_path: Path, runtime_folder: Callable[..., tuple[Path, Path]]
) -> None:
    cache = tmp_path / "cache"
    (cache / "runtime" / "torch-x").mkdir(parents=True)
    library = cache / "runtime" / "torch-x" / f"{build.MODULE_NAME}.so"
    library.write_bytes(b"planted")
    os.chown(library, NOBODY, NOBODY)
    with pytest.warns(trust.UntrustedCacheWarning) as caught:
        folder, root = runtime_folder(cache)
    (text,) = [str(w.message) for w in caught]
    assert f"{library} is owned by uid {NOBODY} (nobody)" in text
    assert "builds its runtime into a private temporary folder instead" in text
    assert cache not in folder.parents and root in folder.parents
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root.stat().st_uid == os.geteuid()
    assert runtime_folder(cache) == (folder, root)  # one private folder per process, one warning
