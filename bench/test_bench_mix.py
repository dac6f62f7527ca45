"""Mixing overhead (issue 21): ``fastdata.mix`` of two Parquet sources vs one stream over the
same files.

Data: ``make_parquet`` rows (``id``, ``label``, ``x``), split into two sources of 60% and 40%
of the rows (2 files each, row groups of 16,384). ``fastdata``: ``mix({"a": ..., "b": ...},
weights=<their sizes>)`` over one epoch of all rows, batches of 4,096, shuffled; baseline
``single-stream``: one ``ParquetStream`` over all four files with the same options. Both go
through ``fastdata.DataLoader(batch_size=None, num_workers=0)`` and are timed in alternating
rounds (``measure_interleaved``). The mix adds a ``source`` column, cuts each source's share
into pieces interleaved by weight (about ``shuffle_buffer x weight`` rows, read from each unit
read once), and counts each source's rows per batch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import fastdata as fd
from fastdata import DataLoader, ParquetStream

from conftest import measure_interleaved, scaled

ROWS = scaled(1_000_000, 4_000_000)
COLUMNS = ["id", "label", "x"]
OPTIONS = {"batch_size": 4096, "shuffle": True}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("bench-mix")
    a, b = int(ROWS * 0.6), ROWS - int(ROWS * 0.6)
    fd.synthetic.make_parquet(root / "a", a, files=2, row_group_size=16_384)
    fd.synthetic.make_parquet(root / "b", b, files=2, row_group_size=16_384, seed=1)
    return root / "a", root / "b"


def epoch(stream: fd.PlannedStream) -> int:
    return sum(len(batch["id"]) for batch in DataLoader(stream, batch_size=None))


@pytest.mark.benchmark(group="mix-overhead")
def test_mix_vs_one_stream(benchmark, data: tuple[Path, Path]) -> None:
    a, b = data
    sources = {"a": ParquetStream(a, columns=COLUMNS), "b": ParquetStream(b, columns=COLUMNS)}
    weights = {name: s.num_rows for name, s in sources.items()}
    mixed = fd.mix(sources, weights=weights, **OPTIONS)
    single = ParquetStream([a, b], columns=COLUMNS, **OPTIONS)
    got = measure_interleaved(
        benchmark,
        lambda: epoch(mixed),
        {"single-stream": lambda: epoch(single)},
        items=ROWS,
        rounds=21,  # epochs of ~60 ms on 2 cores: a median of more rounds
        unit="rows",
    )
    assert got["fastdata"] == got["single-stream"] == ROWS
