"""fastdata.DataLoader's cost: against torch's DataLoader, and with stats on vs off.

Groups:

- ``loader-overhead``: a trivial map-style dataset, identical settings, fastdata.DataLoader
  vs ``torch.utils.data.DataLoader``: the extras must cost nothing when off (target >= 0.98).
- ``loader-overhead-workers``: the same with 2 persistent worker processes: what resume's
  bookkeeping costs where it runs, in each map-style worker (the global generators' states
  captured with every batch, about 0.1 ms, and carried to the main process). No target: on
  this trivial dataset the bookkeeping is most of a batch's work; on real data it is not.
- ``loader-stats``: a ParquetStream pipeline with ``stats=True`` vs the same loader with
  stats off (target: <= 2% slower, ratio >= 0.98).

Both sides should time the same, so each round times both, alternately
(``measure_interleaved``): drift of the machine between two blocks of rounds would otherwise
read as overhead.
``loader-stats`` also times the recording apart (``stats_cost_us_per_batch`` in the JSON):
the difference of two nearly equal epoch times is mostly the machine's noise.
"""

from __future__ import annotations

import math
import timeit
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.utils.data as tud

from fastdata import DataLoader, ParquetStream
from fastdata._stats import StageTimes, TimedCollate
from fastdata.loader._extras import Progress, consumer_stage
from fastdata.loader._record import Record
from fastdata.synthetic import make_parquet

from conftest import measure_interleaved, scaled

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
def test_overhead(benchmark) -> None:
    ours = DataLoader(Trivial(ITEMS), batch_size=64)
    theirs = tud.DataLoader(Trivial(ITEMS), batch_size=64)
    got = measure_interleaved(
        benchmark, lambda: drain(ours), {"torch-dataloader": lambda: drain(theirs)}, items=ITEMS
    )
    assert got == {"fastdata": ITEMS, "torch-dataloader": ITEMS}


@pytest.mark.benchmark(group="loader-overhead-workers")
def test_overhead_workers(benchmark) -> None:
    options = {"batch_size": 64, "num_workers": 2, "persistent_workers": True}
    ours = DataLoader(Trivial(ITEMS), **options)
    theirs = tud.DataLoader(Trivial(ITEMS), **options)
    got = measure_interleaved(
        benchmark, lambda: drain(ours), {"torch-dataloader": lambda: drain(theirs)}, items=ITEMS
    )
    assert got == {"fastdata": ITEMS, "torch-dataloader": ITEMS}


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
def test_stats(benchmark, data: Path) -> None:
    got = measure_interleaved(
        benchmark,
        lambda: parquet_rows(data, True),
        {"stats-off": lambda: parquet_rows(data, False)},
        items=ROWS,
        rounds=9,
    )
    assert got == {"fastdata": ROWS, "stats-off": ROWS}
    # The ratio of two ~equal epoch times is at the mercy of the machine's noise; the cost of
    # the timing itself, measured apart, says what stats=True adds to every batch.
    batches = math.ceil(ROWS / 1024)
    batch_us = benchmark.extra_info["paired"]["baseline:stats-off"] / batches * 1e6
    cost_us = stats_cost_us_per_batch()
    benchmark.extra_info.update(
        {"batch_us": round(batch_us, 2), "stats_cost_us_per_batch": round(cost_us, 3)}
    )
    print(f"\nstats=True costs {cost_us:.2f} us per batch; a batch costs {batch_us:.1f} us here")


def stats_cost_us_per_batch(n: int = 100_000) -> float:
    """What stats=True adds per batch, timed apart: the timed collate (against the bare
    one) and the loader's timing loop (against plain iteration), in microseconds."""
    times = StageTimes()
    timed = TimedCollate(tud.default_convert, times)
    items = list(range(n))

    def seconds(fn: Any) -> float:
        return min(timeit.repeat(fn, number=1, repeat=5))

    collate = seconds(lambda: [timed(i) for i in items]) - seconds(
        lambda: [tud.default_convert(i) for i in items]
    )

    def timed_loop() -> int:  # the loop fastdata.DataLoader runs around its iterator
        stage = consumer_stage(
            iter(items),
            Record(1),
            Progress(),
            starting=0.0,
            device=None,
            normalize=None,
            pin_memory=False,
            times=times,
        )
        return sum(1 for _ in stage)

    loop = seconds(timed_loop) - seconds(lambda: sum(1 for _ in iter(items)))
    return max(collate + loop, 0.0) / n * 1e6
