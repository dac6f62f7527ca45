"""The local shard cache changes where a stream's bytes come from, never what it reads: a
``pyarrow.dataset``'s own filter and schema hold through it, an fsspec filesystem's file
versions (no ``mtime`` through pyarrow) are told apart, and a cached copy damaged on disk
with its metadata unchanged is not read (fsspec's memory filesystem, no server)."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.memory import MemoryFileSystem
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

import fastdata as fd
from fastdata.sources._cache import cache_stats


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
    typed = ds.dataset(root, filesystem=fs, format="parquet", schema=pa.schema([("id", pa.int64())]))
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


def test_a_store_without_versions_is_warned_of_once_per_stream(
    memory: Any, tmp_path: Path
) -> None:
    _, root = memory
    fs = Unversioned()
    for part in range(3):
        put(fs, f"{root}/u/part-{part}.parquet", pa.table({"v": pa.array([part], pa.int64())}))
    with pytest.warns(UserWarning, match="cannot tell") as caught:
        stream = fd.ParquetStream(
            f"{root}/u", filesystem=fs, batch_size=10, cache_dir=tmp_path / "cache"
        )
        assert rows(stream, "v") == [0, 1, 2]
    assert sum("cannot tell" in str(w.message) for w in caught) == 1
    assert "cache_dir" in str(caught[0].message)
