"""ParquetStream against the raw pyarrow scan and the map-style recipes people write instead.

Groups (each: fastdata and its baselines on the same files, same run):

- ``parquet-scan``: ``ParquetStream(batch_size=4096)`` over numeric columns vs
  ``pyarrow.dataset(...).to_batches()`` converted to torch (the raw limit), and vs itself
  with ``read_ahead=0`` (what reading ahead on background threads adds); the sides take
  turns within each round (``measure_interleaved``).
- ``parquet-scan-small``: the stream and pyarrow's scan in batches of 1,024 rows, where
  per-batch work shows; sides take turns likewise. Both scan groups also record each side's
  median CPU time per scan (``extra_info["cpu_s"]``, all threads): the work itself, where the
  wall-clock ratio on a shared machine also measures how much of the cores each side wins.
- ``parquet-rows``: rows/s into 256-row batches through a DataLoader (num_workers=0):
  ParquetStream batches vs a per-row ``pq.read_table(...).slice(i, 1)`` map-style dataset
  and vs an in-memory map-style table with ``default_collate``.
- ``parquet-resume``: time to the first batch when resuming at 90% of an epoch vs at 10%;
  ``parquet-resume-elastic`` the same with a state saved under 2 ranks x 2 workers and
  loaded by one process (the remainder of every old reader re-split).
- memory: peak RSS streaming a dataset 10x larger (asserted < 50 MB growth).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset

from fastdata import DataLoader, ParquetStream
from fastdata.sources.state import Delivered
from fastdata.synthetic import make_parquet

from conftest import measure, measure_interleaved, scaled

COLUMNS = ["id", "label", "x"]
# 1.6M rows in short mode: 28 row groups, so a scan is long enough (~50 ms) for the reads
# ahead to fill their pipeline, as they do over the 64 row groups of full mode.
ROWS = scaled(1_600_000, 4_000_000)
PER_ROW_ITEMS = scaled(300, 3_000)
# A short-mode scan takes ~20-50 ms: more rounds steady its medians (1-2 s per scenario).
SCAN_ROUNDS = 15


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-parquet")
    make_parquet(root, ROWS, files=4, row_group_size=65_536)
    return root


# What the data is, for the record next to every number of the scan scenarios.
SCAN_DATA = {
    "rows": ROWS,
    "files": 4,
    "row_group_rows": 65_536,
    "columns": "id int64 (row index), label int32 (0-9), x float32 (standard normal)",
    "nulls": 0,
    "compression": "snappy",
}
SMALL_BATCH = 1024


def cpu_timed(sides: dict[str, Callable[[], int]]) -> tuple[dict, dict[str, list[float]]]:
    """``sides`` each recording the process CPU time (all threads) of its calls: on the
    shared machine, wall-clock ratios also measure how much of the cores each side's threads
    win from other work; CPU time is the work itself."""
    cpu: dict[str, list[float]] = {name: [] for name in sides}

    def timed(name: str, fn: Callable[[], int]) -> Callable[[], int]:
        def run() -> int:
            start = time.process_time()
            result = fn()
            cpu[name].append(time.process_time() - start)
            return result

        return run

    return {name: timed(name, fn) for name, fn in sides.items()}, cpu


def cpu_medians(cpu: dict[str, list[float]]) -> dict[str, float]:
    """Median CPU seconds per call of each side, the warm-up round left out."""
    return {name: statistics.median(times[1:]) for name, times in cpu.items()}


def scan_fastdata(root: Path, read_ahead: int = 2, batch_size: int = 4096) -> int:
    n = 0
    stream = ParquetStream(root, columns=COLUMNS, batch_size=batch_size, read_ahead=read_ahead)
    for batch in stream:
        n += len(batch["id"])
    return n


def scan_pyarrow(root: Path, batch_size: int = 4096) -> int:
    n = 0
    dataset = ds.dataset(root, format="parquet")
    for rb in dataset.to_batches(columns=COLUMNS, batch_size=batch_size):
        batch = {c: torch.from_numpy(rb.column(c).to_numpy()) for c in COLUMNS}
        n += len(batch["id"])
    return n


@pytest.mark.benchmark(group="parquet-scan")
def test_scan(benchmark, data: Path) -> None:
    """Batches of 4,096 rows against pyarrow's scan, and against the stream without reading
    ahead (what the background reads add); the sides take turns within each round."""
    sides, cpu = cpu_timed(
        {
            "fastdata": lambda: scan_fastdata(data),
            "pyarrow": lambda: scan_pyarrow(data),
            "read-ahead-0": lambda: scan_fastdata(data, read_ahead=0),
        }
    )
    fastdata = sides.pop("fastdata")
    results = measure_interleaved(benchmark, fastdata, sides, items=ROWS, rounds=SCAN_ROUNDS)
    benchmark.extra_info["data"] = SCAN_DATA | {"batch_size": 4096}
    benchmark.extra_info["cpu_s"] = cpu_medians(cpu)
    assert set(results.values()) == {ROWS}


@pytest.mark.benchmark(group="parquet-scan-small")
def test_scan_small_batches(benchmark, data: Path) -> None:
    """Batches of 1,024 rows, where the stream's per-batch work (cutting, converting,
    counting) shows, against pyarrow's scan at the same batch size; sides take turns."""
    sides, cpu = cpu_timed(
        {
            "fastdata": lambda: scan_fastdata(data, batch_size=SMALL_BATCH),
            "pyarrow": lambda: scan_pyarrow(data, batch_size=SMALL_BATCH),
        }
    )
    fastdata = sides.pop("fastdata")
    results = measure_interleaved(benchmark, fastdata, sides, items=ROWS, rounds=SCAN_ROUNDS)
    benchmark.extra_info["data"] = SCAN_DATA | {"batch_size": SMALL_BATCH}
    benchmark.extra_info["cpu_s"] = cpu_medians(cpu)
    assert set(results.values()) == {ROWS}


class PerRowParquet(Dataset):
    """The anti-pattern: open and read the file for every item."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.n = pq.ParquetFile(path).metadata.num_rows

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        row = pq.read_table(self.path, columns=COLUMNS).slice(i, 1).to_pylist()[0]
        return {k: np.asarray(v) for k, v in row.items()}


class InMemoryTable(Dataset):
    """A map-style dataset over a table held in memory, rows fetched one by one."""

    def __init__(self, root: Path) -> None:
        table = pq.read_table(root, columns=COLUMNS)
        self.columns = {c: table[c].to_numpy() for c in COLUMNS}
        self.n = table.num_rows

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {c: v[i] for c, v in self.columns.items()}


def drain(loader, limit: int | None = None) -> int:
    n = 0
    for batch in loader:
        n += len(batch["id"])
        if limit is not None and n >= limit:
            break
    return n


@pytest.mark.benchmark(group="parquet-rows")
def test_rows_fastdata(benchmark, data: Path) -> None:
    def run():
        stream = ParquetStream(data, columns=COLUMNS, batch_size=256)
        return drain(DataLoader(stream, batch_size=None))

    assert measure(benchmark, run, role="fastdata", items=ROWS, rounds=3) == ROWS


@pytest.mark.benchmark(group="parquet-rows")
def test_rows_per_row_read_table(benchmark, data: Path) -> None:
    first = sorted(data.glob("*.parquet"))[0]
    loader = TorchLoader(PerRowParquet(first), batch_size=256)
    n = measure(
        benchmark,
        lambda: drain(loader, PER_ROW_ITEMS),
        role="baseline:per-row-read_table",
        items=PER_ROW_ITEMS,
        rounds=1,
    )
    assert n >= PER_ROW_ITEMS


@pytest.mark.benchmark(group="parquet-rows")
def test_rows_in_memory_map_style(benchmark, data: Path) -> None:
    dataset = InMemoryTable(data)
    limit = ROWS // 4  # per-item Python work: a quarter of the data is plenty to time it
    loader = TorchLoader(dataset, batch_size=256)
    n = measure(
        benchmark,
        lambda: drain(loader, limit),
        role="baseline:in-memory-default_collate",
        items=limit,
        rounds=3,
    )
    assert n >= limit


def first_batch_after_resume(root: Path, fraction: float, *, elastic: bool = False) -> float:
    """Seconds from load_state_dict to the first batch, resuming ``fraction`` into an epoch:
    under the layout the state was saved with, or (``elastic``) with a state saved by rank 0
    of 2 ranks x 2 workers, loaded by one process."""
    saver = {"rank": 0, "world_size": 2} if elastic else {}
    stream = ParquetStream(root, columns=COLUMNS, batch_size=4096, shuffle=True, **saver)
    readers = 2 if elastic else 1
    consumed = int(sum(stream.reader_items(readers)) * fraction)
    # The state a run interrupted after `consumed` batches would have saved: a loader's
    # state before its first batch, with the stream's position moved there.
    dataset = stream.state_dict(Delivered(consumed, readers))
    fresh = DataLoader(ParquetStream(root, columns=COLUMNS, batch_size=4096), batch_size=None)
    state = fresh.state_dict() | {
        "batches": dataset["batches"][0],
        "dataset": dataset,
        "num_workers": dataset["num_workers"],
        "base_seed": 0,  # the seed workers resumed mid-epoch go on with
    }
    start = time.perf_counter()
    resumed = DataLoader(
        ParquetStream(root, columns=COLUMNS, batch_size=4096, shuffle=True), batch_size=None
    )
    resumed.load_state_dict(state)
    next(iter(resumed))
    return time.perf_counter() - start


# How far into the epoch each side resumes: the ratio is what a late resume costs over an
# early one.
RESUME_AT = {"fastdata": 0.9, "baseline:resume-at-10pct": 0.1}


@pytest.mark.benchmark(group="parquet-resume")
@pytest.mark.parametrize("role", list(RESUME_AT))
def test_resume(benchmark, data: Path, role: str) -> None:
    fraction = RESUME_AT[role]
    measure(
        benchmark,
        lambda: first_batch_after_resume(data, fraction),
        role=role,
        items=1,
        unit="resumes",
    )


@pytest.mark.benchmark(group="parquet-resume-elastic")
@pytest.mark.parametrize("role", list(RESUME_AT))
def test_elastic_resume(benchmark, data: Path, role: str) -> None:
    fraction = RESUME_AT[role]
    measure(
        benchmark,
        lambda: first_batch_after_resume(data, fraction, elastic=True),
        role=role,
        items=1,
        unit="resumes",
    )


RSS_SCRIPT = """
import json, resource, sys
from fastdata import ParquetStream
stream = ParquetStream(sys.argv[1], columns=["id", "label", "x", "tokens"], batch_size=4096,
                       shuffle=True, shuffle_buffer=16384)
rows = sum(len(b["id"]) for b in stream)
print(json.dumps({"rows": rows, "max_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def peak_rss_mb(root: Path) -> tuple[int, float]:
    out = subprocess.run(
        [sys.executable, "-c", RSS_SCRIPT, str(root)], capture_output=True, text=True, check=True
    )
    result = json.loads(out.stdout)
    return result["rows"], result["max_rss_kb"] / 1024


def test_memory_does_not_grow_with_the_dataset(tmp_path: Path) -> None:
    """Peak RSS streaming 10x the rows grows by less than 50 MB. Both datasets span more
    windows (16,384 rows) than the stream holds at once (the current one and ``read_ahead``
    = 2 more), so what differs is only the amount of data."""
    small_rows = scaled(100_000, 400_000)
    make_parquet(tmp_path / "small", small_rows, files=2, row_group_size=16_384)
    make_parquet(tmp_path / "large", small_rows * 10, files=20, row_group_size=16_384)
    rows_small, rss_small = peak_rss_mb(tmp_path / "small")
    rows_large, rss_large = peak_rss_mb(tmp_path / "large")
    assert (rows_small, rows_large) == (small_rows, small_rows * 10)
    print(f"\npeak RSS: {rss_small:.0f} MB for {rows_small:,} rows, {rss_large:.0f} MB for 10x")
    assert rss_large - rss_small < 50, "streaming memory must be bounded, not grow with the data"
