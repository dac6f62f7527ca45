"""fastdata.sources._cache_disk: a cache entry's files on disk — named per remote file, checked
against what the remote lists, downloaded atomically — and the locks, scan and writes the
cache is built of (the cache as a whole: test_cache.py)."""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fastdata.errors import SourceError
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
