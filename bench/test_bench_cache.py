"""Streaming from object storage with the local shard cache, against the same data on local
disk, over a local S3-protocol server (moto, started by the ``s3`` fixture).

- ``s3-cache-parquet``: a second epoch of ``ParquetStream(cache_dir=...)`` (numeric columns,
  batches of 4,096, read in this process) over Parquet files on the S3 server, every file in
  the cache already, against the same stream over the same files on local disk. The cached
  epoch reads local copies through the cache's filesystem: what it costs is opening each
  file through it (a metadata check per open, reads through a Python file object).
- ``s3-cache-parquet-first``: the first epoch (an empty cache each round: plan from the
  remote footers, fetch every file whole while reading), against local disk; reported.
- ``s3-cache-tar`` and ``s3-cache-tar-first``: the same for ``ImageStream.from_tar`` over
  WebDataset shards of small JPEGs (decoded and center-cropped to 32 px on 2 threads).

Each group times both sides in the same rounds (``measure_interleaved``) and records the
cache's counts of the measured rounds in ``extra_info["cache"]`` (``hit_rate`` = opens
served from the cache / opens that used it).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest

import fastdata as fd
from fastdata.sources._cache import cache_stats

from conftest import measure_interleaved, scaled

ROWS = scaled(400_000, 1_600_000)
IMAGES = scaled(2_048, 8_192)
COLUMNS = ["id", "label", "x"]


@pytest.fixture(scope="module")
def remote(s3: pafs.S3FileSystem, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The data on local disk and in a fresh bucket: ``{"parquet": (local, remote), ...}``."""
    root = tmp_path_factory.mktemp("bench-cache")
    fd.synthetic.make_parquet(root / "parquet", ROWS, files=8, row_group_size=65_536)
    fd.synthetic.make_tar_shards(root / "tar", IMAGES, shards=8, texture="smooth",
                                 min_short=48, max_short=64)  # fmt: skip
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    s3.create_dir(bucket)
    for kind in ("parquet", "tar"):
        pafs.copy_files(str(root / kind), f"{bucket}/{kind}", destination_filesystem=s3)
    return {"root": root, "bucket": bucket, "s3": s3}


def parquet(source: str | Path, **cache: Any) -> fd.ParquetStream:
    return fd.ParquetStream(source, columns=COLUMNS, batch_size=4096, **cache)


def tar(source: str | Path, **cache: Any) -> fd.ImageStream:
    return fd.ImageStream.from_tar(
        source, size=32, crop="center", batch_size=64, decode_threads=2, **cache
    )


MAKERS = {"parquet": parquet, "tar": tar}


def epoch(stream: Any) -> int:
    return sum(1 for _ in stream)


def counts_of(stream: Any) -> dict[str, float]:
    return dict(cache_stats(stream)["cache"])


def describe(kind: str, root: Path) -> dict[str, Any]:
    files = sorted((root / kind).iterdir())
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


@pytest.mark.parametrize("kind", ["parquet", "tar"])
def test_second_epoch_from_the_cache(
    benchmark, kind: str, remote: dict[str, Any], tmp_path
) -> None:
    make = MAKERS[kind]
    cached = make(f"{remote['bucket']}/{kind}", filesystem=remote["s3"], cache_dir=tmp_path)
    local = make(remote["root"] / kind)
    batches = epoch(cached)  # the first epoch fills the cache
    before = counts_of(cached)
    benchmark.group = f"s3-cache-{kind}"
    results = measure_interleaved(
        benchmark, lambda: epoch(cached), {"local-disk": lambda: epoch(local)},
        items=batches, unit="batches",
    )  # fmt: skip
    assert results["fastdata"] == results["local-disk"] == batches
    after = counts_of(cached)
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    assert misses == 0 and hits > 0
    benchmark.extra_info["cache"] = {"hit_rate": hits / (hits + misses), "hits": hits,
                                     "misses": misses}  # fmt: skip
    benchmark.extra_info["data"] = describe(kind, remote["root"])


@pytest.mark.parametrize("kind", ["parquet", "tar"])
def test_first_epoch_fills_the_cache(
    benchmark, kind: str, remote: dict[str, Any], tmp_path
) -> None:
    make = MAKERS[kind]
    seen: list[dict[str, float]] = []

    def first_epoch() -> int:
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
        stream = make(f"{remote['bucket']}/{kind}", filesystem=remote["s3"],
                      cache_dir=tmp_path / "cache")  # fmt: skip
        batches = epoch(stream)
        seen.append(counts_of(stream))
        return batches

    benchmark.group = f"s3-cache-{kind}-first"
    results = measure_interleaved(
        benchmark, first_epoch, {"local-disk": lambda: epoch(make(remote["root"] / kind))},
        items=epoch(make(remote["root"] / kind)), unit="batches", rounds=5,
    )  # fmt: skip
    assert results["fastdata"] == results["local-disk"]
    last = seen[-1]
    assert last["misses"] == describe(kind, remote["root"])["files"]
    benchmark.extra_info["cache"] = {
        "hit_rate": last["hits"] / (last["hits"] + last["misses"]),
        "fetched_bytes": last["fetched_bytes"],
    }
    benchmark.extra_info["data"] = describe(kind, remote["root"])
