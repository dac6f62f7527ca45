"""The local shard cache changes where a stream's bytes come from, never what it reads: a
``pyarrow.dataset``'s own filter and schema hold through it, an fsspec filesystem's file
versions (no ``mtime`` through pyarrow) are told apart, and a cached copy damaged on disk
with its metadata unchanged is not read (fsspec's memory filesystem, no server)."""

from __future__ import annotations

import io
import os
import threading
import uuid
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from fsspec.implementations.memory import MemoryFileSystem

import fastdata as fd
from fastdata.sources._cache import CachingHandler, cache_stats, refetched, start_fetching
from fastdata.sources._cache_disk import Remote, download, entry_of
from fastdata.sources._cache_versions import copy_of, drop_damaged, fsspec_tag


@pytest.fixture
def memory() -> Any:
    """A fresh folder of fsspec's (process-wide) memory filesystem, removed afterwards."""
    fs = fsspec.filesystem("memory")
    root = f"/fd-cache-{uuid.uuid4().hex[:12]}"
    yield fs, root
    if fs.exists(root):
        fs.rm(root, recursive=True)


def put(fs: Any, path: str, table: pa.Table, **options: Any) -> int:
    buf = io.BytesIO()
    pq.write_table(table, buf, **options)
    fs.pipe(path, buf.getvalue())
    return len(buf.getvalue())


def rows(stream: fd.ParquetStream, column: str = "id") -> list[Any]:
    return sorted(v for batch in stream for v in batch[column].tolist())


def outcome(source: Any, **options: Any) -> tuple[str, Any]:
    try:
        stream = fd.ParquetStream(source, batch_size=1_000, **options)
        return "rows", (rows(stream), stream.schema)
    except fd.SourceError as exc:  # SchemaError too
        return type(exc).__name__, str(exc)


# --------------------------------------------------------------------------- datasets
@pytest.fixture
def hive(memory: Any) -> tuple[pafs.FileSystem, str]:
    fs, root = memory
    for d, day in enumerate(("2026-01-01", "2026-01-02", "2026-01-03")):
        for part in range(2):
            first = d * 200 + part * 100
            ids = pa.array(range(first, first + 100), pa.int64())
            table = pa.table({"id": ids, "x": pc.multiply(ids, 2)})
            put(fs, f"{root}/date={day}/part-{part}.parquet", table)
    return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), root


@pytest.mark.parametrize("kind", ["filtered", "partition filter", "partition, no filter"])
def test_a_datasets_filter_holds_through_the_cache(
    kind: str, hive: tuple[pafs.FileSystem, str], tmp_path: Path
) -> None:
    fs, root = hive
    if kind == "filtered":
        dataset = ds.dataset(root, filesystem=fs, format="parquet").filter(pc.field("id") < 150)
    else:
        dataset = ds.dataset(root, filesystem=fs, format="parquet", partitioning="hive")
        if kind == "partition filter":  # refused without the cache: so with it
            dataset = dataset.filter(pc.field("date") == "2026-01-01")
    plain = outcome(dataset, columns=["id"])
    cached = outcome(dataset, columns=["id"], cache_dir=tmp_path / "cache")
    assert cached == plain
    if kind != "partition filter":
        assert list((tmp_path / "cache").rglob("*.data"))  # read through the cache
    if kind == "filtered":
        assert plain[0] == "rows" and plain[1][0] == list(range(150))
    elif kind == "partition filter":
        assert plain[0] == "SchemaError" and "partition column of the dataset" in plain[1]


def test_a_datasets_schema_casts_through_the_cache(memory: Any, tmp_path: Path) -> None:
    fsspec_fs, root = memory
    put(fsspec_fs, f"{root}/a.parquet", pa.table({"id": pa.array(range(50), pa.int32())}))
    put(fsspec_fs, f"{root}/b.parquet", pa.table({"id": pa.array(range(50, 90), pa.int64())}))
    fs = pafs.PyFileSystem(pafs.FSSpecHandler(fsspec_fs))
    schema = pa.schema([("id", pa.int64())])
    typed = ds.dataset(root, filesystem=fs, format="parquet", schema=schema)
    plain = outcome(typed)
    assert plain[0] == "rows" and plain[1][0] == list(range(90))
    assert outcome(typed, cache_dir=tmp_path / "cache") == plain


# --------------------------------------------------------------------------- versions
def test_a_rewritten_file_of_the_same_size_is_fetched_again(memory: Any, tmp_path: Path) -> None:
    fs, root = memory  # fsspec's memory filesystem reports no mtime, only 'created'
    path = f"{root}/t/part-0.parquet"
    sizes = [put(fs, path, pa.table({"v": pa.array([1, 2, 3, 4], pa.int64())}))]

    def read() -> tuple[list[int], dict[str, float]]:
        stream = fd.ParquetStream(
            f"{root}/t", filesystem=fs, batch_size=10, cache_dir=tmp_path / "cache"
        )
        return rows(stream, "v"), cache_stats(stream)["cache"]

    assert read()[0] == [1, 2, 3, 4]
    sizes.append(put(fs, path, pa.table({"v": pa.array([5, 6, 7, 8], pa.int64())})))
    assert sizes[0] == sizes[1]  # the same size: only a version tells them apart
    values, counts = read()
    assert values == [5, 6, 7, 8]
    assert (counts["misses"], counts["invalid"]) == (1, 0)  # another version, not damage
    values, counts = read()  # and that version is then reused
    assert (values, counts["misses"]) == ([5, 6, 7, 8], 0) and counts["hits"] > 0


class Unversioned(MemoryFileSystem):  # type: ignore[misc]
    """A store whose listing says nothing of a file's version (no mtime, ETag, ...)."""

    protocol = "fd-unversioned"

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        found = super().info(path, **kwargs)
        return {key: found[key] for key in ("name", "size", "type")}


def test_a_store_without_versions_is_warned_of_once_per_stream(memory: Any, tmp_path: Path) -> None:
    _, root = memory
    fs = Unversioned()
    for part in range(3):
        put(fs, f"{root}/u/part-{part}.parquet", pa.table({"v": pa.array([part], pa.int64())}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stream = fd.ParquetStream(
            f"{root}/u", filesystem=fs, batch_size=10, cache_dir=tmp_path / "cache"
        )
        assert rows(stream, "v") == [0, 1, 2]
    said = [str(w.message) for w in caught if "cannot tell" in str(w.message)]
    assert len(said) == 1 and "delete the cache folder" in said[0]


# --------------------------------------------------------------------------- damage on disk
def test_a_cached_copy_damaged_with_its_metadata_kept_is_fetched_again_not_blamed_on_the_file(
    memory: Any, tmp_path: Path
) -> None:
    fs, root = memory
    values = np.arange(20_000, dtype=np.int64)
    put(fs, f"{root}/d/a.parquet", pa.table({"v": values}), compression="snappy")
    cache = tmp_path / "cache"

    def read() -> tuple[list[int], dict[str, float]]:
        stream = fd.ParquetStream(f"{root}/d", filesystem=fs, batch_size=50_000, cache_dir=cache)
        return rows(stream, "v"), cache_stats(stream)["cache"]

    assert read()[0] == values.tolist()
    (copy,) = cache.rglob("*.data")
    stat = copy.stat()
    with open(copy, "r+b") as f:  # the pages, not the footer: bit rot, a restore's damage
        f.seek(8)
        f.write(b"\xff" * 4096)
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the metadata says nothing
    assert copy.stat().st_ino == stat.st_ino
    got, counts = read()
    assert got == values.tolist()
    assert (counts["invalid"], counts["misses"]) == (1, 1)
    assert read()[1]["invalid"] == 0  # fetched again whole


def test_only_a_copy_whose_bytes_differ_from_its_download_is_dropped(tmp_path: Path) -> None:
    remote = tmp_path / "remote.bin"
    remote.write_bytes(os.urandom(10_000))
    local = pafs.LocalFileSystem()
    cache = str(tmp_path / "cache")
    entry = entry_of(cache, "s3", str(remote))
    os.makedirs(os.path.dirname(entry.data))
    download(local, entry, str(remote), Remote(10_000, 1))
    read = frozenset({copy_of(entry.data)})
    assert drop_damaged(entry, str(remote), read) == (False, False)  # intact: the remote's fault
    assert drop_damaged(entry, str(remote), frozenset()) == (False, False)  # the remote was read
    stat = os.stat(entry.data)
    with open(entry.data, "r+b") as f:
        f.write(b"\x00" * 16)
    os.utime(entry.data, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the copy that was read
    assert drop_damaged(entry, str(remote), read) == (True, True)
    assert not os.path.exists(entry.data) and not os.path.exists(entry.meta)
    assert fsspec_tag(local, str(remote)) is None  # pyarrow's own filesystems give mtimes


class Counted(MemoryFileSystem):  # type: ignore[misc]
    """The memory filesystem, counting its info() calls (a HEAD request each on s3fs)."""

    protocol = "fd-counted"
    asked = 0

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        Counted.asked += 1
        return super().info(path, **kwargs)


def test_the_version_of_a_listed_path_costs_no_request_more(memory: Any, tmp_path: Path) -> None:
    _, root = memory
    fs = Counted()
    paths = [f"{root}/c/part-{i}.parquet" for i in range(4)]
    for path in paths:
        fs.pipe(path, b"PAR1")
    handler = CachingHandler(pafs.PyFileSystem(pafs.FSSpecHandler(fs)), str(tmp_path), None)
    Counted.asked = 0
    infos = handler.get_file_info(paths)
    assert Counted.asked == len(paths)  # one info() a path, as pyarrow's FSSpecHandler asks
    assert [info.size for info in infos] == [4] * 4
    assert all(handler._listed[path].tag for path in paths)  # 'created' of each file


def test_a_cached_copy_whose_footer_is_damaged_is_fetched_again_while_planning(
    memory: Any, tmp_path: Path
) -> None:
    fs, root = memory
    put(fs, f"{root}/f/a.parquet", pa.table({"v": np.arange(1_000, dtype=np.int64)}))
    cache = tmp_path / "cache"

    def read() -> tuple[list[int], dict[str, float]]:
        stream = fd.ParquetStream(f"{root}/f", filesystem=fs, batch_size=5_000, cache_dir=cache)
        return rows(stream, "v"), cache_stats(stream)["cache"]

    assert read()[0] == list(range(1_000))
    (copy,) = cache.rglob("*.data")
    stat = copy.stat()
    with open(copy, "r+b") as f:  # the footer's Thrift, ahead of its length and magic
        f.seek(stat.st_size - 60)
        f.write(b"\xff" * 40)
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    got, counts = read()
    assert got == list(range(1_000))
    assert counts["invalid"] == 1


def damage(copy: Path) -> None:
    """Overwrite the pages of a cached copy with its size, inode and mtime kept."""
    stat = copy.stat()
    with open(copy, "r+b") as f:
        for offset in range(8, stat.st_size - 2_000, 5_000):
            f.seek(offset)
            f.write(b"\xff" * 64)
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns))


@pytest.mark.parametrize("order", ["gone", "replaced", "replaced by another process"])
def test_reads_that_failed_on_a_copy_another_read_dropped_or_replaced_are_read_again(
    memory: Any, tmp_path: Path, order: str
) -> None:
    """Two reads open one damaged copy and both fail; the first to check drops it. The
    second, checking with the copy gone or fetched again intact, must read again too (the
    two in one process share its cache's handler; a process worker has its own)."""
    fs, root = memory
    path = f"{root}/a.bin"
    fs.pipe(path, os.urandom(50_000))
    remote = pafs.PyFileSystem(pafs.FSSpecHandler(fs))

    def cached() -> pafs.FileSystem:
        handler = CachingHandler(remote, str(tmp_path / "cache"), None)
        handler.fetch = True  # planned: opens fetch whole files
        return pafs.PyFileSystem(handler)

    cached().open_input_file(path).close()
    (copy,) = (tmp_path / "cache").rglob("*.data")
    damage(copy)
    racing = cached()
    first = racing if order != "replaced by another process" else cached()
    first.open_input_file(path).close()  # read A opens the damaged copy,
    racing.open_input_file(path).close()  # and so does read B
    assert refetched(first, path)  # A's read failed: damaged, dropped
    if order != "gone":
        first.open_input_file(path).close()  # A reads again: fetched again, intact
    assert refetched(racing, path)  # B's read failed on the copy A dropped: read it again
    assert first.handler.counts.totals()["invalid"] == 1
    assert racing.handler.counts.totals()["invalid"] == (first is racing)
    racing.open_input_file(path).close()
    fresh = cached()  # a read that fails on the one intact copy it opened: the remote's fault
    fresh.open_input_file(path).close()
    assert not refetched(fresh, path)
    assert not refetched(cached(), path)  # this one read no copy: the remote's fault too


def test_row_groups_read_at_once_from_a_damaged_copy_are_all_read_again(
    memory: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fs, root = memory
    values = np.arange(40_000, dtype=np.int64)
    put(fs, f"{root}/d/a.parquet", pa.table({"v": values}), row_group_size=10_000)
    cache = tmp_path / "cache"

    def stream() -> fd.ParquetStream:
        return fd.ParquetStream(f"{root}/d", filesystem=fs, batch_size=10_000, cache_dir=cache)

    assert rows(stream(), "v") == values.tolist()
    (copy,) = cache.rglob("*.data")
    damage(copy)  # every row group's pages, not the footer: a restore that kept the times
    s = stream()
    start_fetching(s)  # as iterating does, once planned
    both = threading.Barrier(2, timeout=60)
    checked = CachingHandler.drop_damaged

    def after_both_failed(self: CachingHandler, path: str) -> bool:
        both.wait()  # both reads failed on the damaged copy before either checks it
        return checked(self, path)

    monkeypatch.setattr(CachingHandler, "drop_damaged", after_both_failed)
    with ThreadPoolExecutor(2) as pool:  # two read-ahead threads
        tables = list(pool.map(lambda unit: s.reader.read(unit, 0, 10_000), [0, 1]))
    assert [t["v"].to_pylist() for t in tables] == [
        values[:10_000].tolist(),
        values[10_000:20_000].tolist(),
    ]
    counts = cache_stats(s)["cache"]
    assert (counts["invalid"], counts["misses"]) == (1, 1)
