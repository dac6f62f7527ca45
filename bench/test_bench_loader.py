"""fastdata.DataLoader's cost: against torch's DataLoader, and with stats on vs off.

Groups:

- ``loader-overhead``: a trivial map-style dataset, identical settings, fastdata.DataLoader
  vs ``torch.utils.data.DataLoader``: the extras must cost nothing when off (target >= 0.98).
- ``loader-stats``: a ParquetStream pipeline with ``stats=True`` vs the same loader with
  stats off (target: <= 2% slower, ratio >= 0.98).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.utils.data as tud

from fastdata import DataLoader, ParquetStream
from fastdata.synthetic import make_parquet

from conftest import measure, scaled

ITEMS = scaled(20_000, 200_000)
ROWS = scaled(400_000, 4_000_000)


class Trivial(tud.Dataset):
    def __init__(self, n: int) -> None:
        self.data = torch.arange(n)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]


def drain(loader) -> int:
    return sum(len(batch) for batch in loader)


@pytest.mark.benchmark(group="loader-overhead")
def test_overhead_fastdata(benchmark) -> None:
    loader = DataLoader(Trivial(ITEMS), batch_size=64)
    assert (
        measure(benchmark, lambda: drain(loader), role="fastdata", items=ITEMS, rounds=15) == ITEMS
    )


@pytest.mark.benchmark(group="loader-overhead")
def test_overhead_torch(benchmark) -> None:
    loader = tud.DataLoader(Trivial(ITEMS), batch_size=64)
    got = measure(
        benchmark, lambda: drain(loader), role="baseline:torch-dataloader", items=ITEMS, rounds=15
    )
    assert got == ITEMS


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bench-loader")
    make_parquet(root, ROWS, files=4, row_group_size=32_768)
    return root


def parquet_rows(root: Path, stats: bool) -> int:
    stream = ParquetStream(root, columns=["id", "label", "x"], batch_size=1024)
    loader = DataLoader(stream, batch_size=None, stats=stats)
    return sum(len(batch["id"]) for batch in loader)


@pytest.mark.benchmark(group="loader-stats")
def test_stats_on(benchmark, data: Path) -> None:
    got = measure(benchmark, lambda: parquet_rows(data, True), role="fastdata", items=ROWS)
    assert got == ROWS


@pytest.mark.benchmark(group="loader-stats")
def test_stats_off(benchmark, data: Path) -> None:
    got = measure(
        benchmark, lambda: parquet_rows(data, False), role="baseline:stats-off", items=ROWS
    )
    assert got == ROWS
