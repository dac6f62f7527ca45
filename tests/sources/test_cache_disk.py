"""fastdata.sources._cache_disk: a cache entry's files on disk — named per remote file, checked
against what the remote lists, downloaded atomically — and the locks, scan and writes the
cache is built of (the cache as a whole: test_cache.py)."""

from __future__ import annotations

import errno
import json
import os
import zlib
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

from fastdata.errors import CacheError, SourceError
from fastdata.sources import _cache_disk
from fastdata.sources._cache_disk import (
    Lock,
    Remote,
    check,
    crc32_file,
    download,
    entry_of,
    scan,
    temporary,
    write_atomically,
)

LOCAL = pafs.LocalFileSystem()


class _FullDisk:
    """A file being written on a full disk: created, every write refused (ENOSPC)."""

    def __init__(self, f: Any) -> None:
        self.f = f

    def write(self, data: Any) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> _FullDisk:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cache's disk is full: writing an entry's data fails as the OS fails it (ENOSPC);
    forked DataLoader workers inherit it."""

    def opening(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = open(file, mode, *args, **kwargs)  # noqa: SIM115 - the caller closes it
        return _FullDisk(f) if "w" in mode and ".data.tmp-" in os.fspath(file) else f

    monkeypatch.setattr(_cache_disk, "open", opening, raising=False)


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    path = tmp_path / "remote" / "shard.tar"
    path.parent.mkdir()
    path.write_bytes(bytes(range(256)) * 100)
    return path


def fetched(tmp_path: Path, remote: Path) -> tuple[object, Remote]:
    info = LOCAL.get_file_info(str(remote))
    listed = Remote(info.size, info.mtime_ns)
    entry = entry_of(str(tmp_path / "cache"), "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    assert download(LOCAL, entry, str(remote), listed) == remote.stat().st_size
    return entry, listed


def test_an_entry_is_named_by_the_remote_and_the_path(tmp_path: Path) -> None:
    one = entry_of(str(tmp_path), "s3", "bucket/a")
    assert one == entry_of(str(tmp_path), "s3", "bucket/a")
    assert one.key != entry_of(str(tmp_path), "gcs", "bucket/a").key
    assert one.data == os.path.join(str(tmp_path), one.key[:2], one.key + ".data")
    assert (one.meta, one.lock) == (one.data[:-5] + ".json", one.data[:-5] + ".lock")


def test_a_downloaded_entry_holds_the_file_and_its_checksum(tmp_path: Path, remote: Path) -> None:
    entry, listed = fetched(tmp_path, remote)
    assert Path(entry.data).read_bytes() == remote.read_bytes()
    meta = json.loads(Path(entry.meta).read_text())
    assert meta["crc32"] == zlib.crc32(remote.read_bytes()) == crc32_file(entry.data)
    assert check(entry, str(remote), listed, os.stat(entry.data)) == (True, None)
    assert not [p for p in Path(entry.data).parent.iterdir() if ".tmp-" in p.name]


def test_another_version_of_the_file_is_not_the_entrys(tmp_path: Path, remote: Path) -> None:
    entry, listed = fetched(tmp_path, remote)
    changed = Remote(listed.size, (listed.mtime_ns or 0) + 1)
    assert check(entry, str(remote), changed, os.stat(entry.data)) == (False, None)


def test_a_damaged_entry_says_what_is_wrong(tmp_path: Path, remote: Path) -> None:
    entry, listed = fetched(tmp_path, remote)
    with open(entry.data, "r+b") as f:  # same size, other bytes: the checksum finds it
        f.write(b"\xff\xff")
    assert check(entry, str(remote), listed, os.stat(entry.data)) == (
        False,
        "its checksum does not match",
    )
    with open(entry.data, "ab") as f:
        f.write(b"more")
    ok, damage = check(entry, str(remote), listed, os.stat(entry.data))
    assert not ok and damage is not None and "bytes, not" in damage
    Path(entry.meta).write_text("{")
    assert check(entry, str(remote), listed, os.stat(entry.data)) == (
        False,
        "its metadata is unreadable",
    )


def test_a_file_that_changes_while_downloading_is_refused(tmp_path: Path, remote: Path) -> None:
    entry = entry_of(str(tmp_path / "cache"), "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    with pytest.raises(SourceError, match="the file changed while streaming"):
        download(LOCAL, entry, str(remote), Remote(10, 0))
    assert not os.path.exists(entry.data)
    assert not list(Path(entry.data).parent.iterdir())  # nor its temporary file


def test_a_lock_is_exclusive_until_released(tmp_path: Path) -> None:
    path = str(tmp_path / "x.lock")
    with Lock(path) as held:
        assert held
        with Lock(path, wait=False) as second:
            assert not second
    with Lock(path, wait=False) as again:
        assert again


def test_the_scan_lists_entries_and_removes_dead_downloads(tmp_path: Path) -> None:
    folder = tmp_path / "ab"
    folder.mkdir()
    write_atomically(str(folder / "abkey.data"), b"12345")
    dead = Path(temporary(str(folder / "abother.data")))
    dead.write_bytes(b"partial")
    found = list(scan(str(tmp_path)))
    assert [(size, base) for _, size, base in found] == [(5, str(folder / "abkey"))]
    assert not dead.exists()


# --------------------------------------------------------------------------- the cache's own errors
def files_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file())


@pytest.mark.usefixtures("full_disk")
def test_a_full_cache_disk_is_a_cache_error_naming_the_cache_not_the_file(
    tmp_path: Path, remote: Path
) -> None:
    entry = entry_of(str(tmp_path / "cache"), "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    info = LOCAL.get_file_info(str(remote))
    with pytest.raises(CacheError) as caught:
        download(LOCAL, entry, str(remote), Remote(info.size, info.mtime_ns))
    error = caught.value
    assert error.path == str(remote)  # the remote file it was caching
    assert f"cache_dir={str(tmp_path / 'cache')!r}" in error.reason
    assert f"[Errno 28] No space left on device: {entry.data!r}" in error.reason
    assert "its disk is full" in error.reason and "cache_limit=" in error.reason
    assert "not at fault" in error.reason
    assert isinstance(error, SourceError) and not isinstance(error, OSError)
    assert files_in(tmp_path / "cache") == []  # nor its temporary file


def test_an_error_reading_the_remote_is_not_the_caches(tmp_path: Path, remote: Path) -> None:
    entry = entry_of(str(tmp_path / "cache"), "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    with pytest.raises(FileNotFoundError) as caught:
        download(LOCAL, entry, str(remote) + ".gone", Remote(None, None))
    assert not isinstance(caught.value, CacheError)
    assert files_in(tmp_path / "cache") == []


def test_a_cache_under_a_regular_file_says_so(tmp_path: Path, remote: Path) -> None:
    (tmp_path / "afile").write_text("x")
    entry = entry_of(str(tmp_path / "afile" / "cache"), "s3", str(remote))
    with pytest.raises(CacheError, match="a part of its path is a regular file") as caught:
        download(LOCAL, entry, str(remote), Remote(None, None))
    assert "Not a directory" in caught.value.reason and "free space" not in caught.value.reason
    assert "pass a cache_dir= this process can create and write" in caught.value.reason


def test_an_atomic_write_that_fails_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(src: str, dst: str) -> None:
        raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))

    monkeypatch.setattr(_cache_disk.os, "replace", refused)
    with pytest.raises(OSError, match="quota"):
        write_atomically(str(tmp_path / "x.json"), b"{}")
    assert files_in(tmp_path) == []


def test_a_download_deletes_what_a_killed_download_of_its_entry_left(
    tmp_path: Path, remote: Path
) -> None:
    entry = entry_of(str(tmp_path / "cache"), "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    dead = [Path(temporary(entry.data)), Path(temporary(entry.meta))]
    other = Path(temporary(entry_of(str(tmp_path / "cache"), "s3", "elsewhere").data))
    for path in [*dead, other]:
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"partial")
    download(LOCAL, entry, str(remote), Remote(None, None))
    assert not any(path.exists() for path in dead)
    assert other.exists()  # another entry's: its download may be running


def test_the_scan_removes_lock_files_of_no_entry_that_no_one_holds(tmp_path: Path) -> None:
    folder = tmp_path / "ab"
    folder.mkdir()
    write_atomically(str(folder / "abkey.data"), b"12345")
    kept = [folder / "abkey.lock", folder / "abheld.lock"]
    orphan = folder / "aborphan.lock"
    for path in [*kept, orphan]:
        path.touch()
    with Lock(str(folder / "abheld.lock")):  # a download starting
        list(scan(str(tmp_path)))
    assert all(path.exists() for path in kept) and not orphan.exists()
