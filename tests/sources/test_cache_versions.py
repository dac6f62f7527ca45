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
