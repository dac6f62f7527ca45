"""Hugging Face ``datasets`` streaming against ParquetStream on the same Parquet files.

Group ``hf-streaming``: rows/s into torch batches of 256 rows, one process (num_workers=0),
over the numeric columns ``id`` (int64), ``label`` (int32) and ``x`` (float32) of
``make_parquet`` files (4 files, row groups of 65,536 rows; 400,000 rows and 41 MB on disk in
short mode, most of it the unread ``text`` and ``tokens`` columns; 4,000,000 rows in full mode).

- ``fastdata``: ``ParquetStream(batch_size=256)`` + ``fastdata.DataLoader(batch_size=None)``.
- ``baseline:datasets-dataloader``: the route of the ``datasets`` documentation ("Use with
  PyTorch"): ``load_dataset("parquet", data_files=..., streaming=True)
  .select_columns(...).with_format("torch")`` handed to ``torch.utils.data.DataLoader
  (batch_size=256)``: examples one by one, stacked by ``default_collate``.
- ``baseline:datasets-iter``: the same dataset's own batched iteration,
  ``.iter(batch_size=256)``, which skips the per-example step: the fastest ``datasets`` route
  to torch batches (no DataLoader, so no workers).

Group ``hf-streaming-text``: the same with the ``text`` (string) and ``tokens``
(list<int32>, 1 to 512 ids) columns added, over the first rows, against ``.iter`` only (the
documented route cannot stack ragged lists without a collate function of one's own): strings
and lists become Python objects on both sides.

Both sides are built once, outside the timing; a round iterates them. The baselines run over
the first rows only (their rate is steady after the first batch), so each round stays short.
"""

from __future__ import annotations

from pathlib import Path

import datasets
import pytest
from torch.utils.data import DataLoader as TorchLoader

from fastdata import DataLoader, ParquetStream
from fastdata.synthetic import make_parquet
from test_bench_parquet import drain

from conftest import measure_interleaved, scaled

COLUMNS = ["id", "label", "x"]
BATCH = 256
ROWS = scaled(400_000, 4_000_000)
PER_EXAMPLE_ROWS = scaled(4_096, 40_960)  # the documented route: ~3k rows/s on 2 cores
BATCHED_ROWS = scaled(51_200, 512_000)
ALL_COLUMNS = [*COLUMNS, "text", "tokens"]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("bench-hf")
    return [str(p) for p in make_parquet(root, ROWS, files=4, row_group_size=65_536)]


def hf_stream(files: list[str], columns: list[str]) -> datasets.IterableDataset:
    datasets.disable_progress_bars()
    return (
        datasets.load_dataset("parquet", data_files=files, split="train", streaming=True)
        .select_columns(columns)
        .with_format("torch")
    )


@pytest.mark.benchmark(group="hf-streaming")
def test_hf_streaming(benchmark, files: list[str]) -> None:
    ours = DataLoader(ParquetStream(files, columns=COLUMNS, batch_size=BATCH), batch_size=None)
    hf = hf_stream(files, COLUMNS)
    theirs = TorchLoader(hf, batch_size=BATCH)
    got = measure_interleaved(
        benchmark,
        lambda: drain(ours),
        {
            "datasets-dataloader": lambda: drain(theirs, PER_EXAMPLE_ROWS),
            "datasets-iter": lambda: drain(hf.iter(batch_size=BATCH), BATCHED_ROWS),
        },
        items=ROWS,
        rounds=5,
        unit="rows",
        baseline_items={"datasets-dataloader": PER_EXAMPLE_ROWS, "datasets-iter": BATCHED_ROWS},
    )
    assert got == {
        "fastdata": ROWS,
        "datasets-dataloader": PER_EXAMPLE_ROWS,
        "datasets-iter": BATCHED_ROWS,
    }
    sizes = sum(Path(f).stat().st_size for f in files)
    benchmark.extra_info["data"] = (
        f"{ROWS} rows, columns id int64 / label int32 / x float32 read of 5, "
        f"{len(files)} files, {sizes / 1e6:.1f} MB"
    )


@pytest.mark.benchmark(group="hf-streaming-text")
def test_hf_streaming_text(benchmark, files: list[str]) -> None:
    ours = DataLoader(ParquetStream(files, columns=ALL_COLUMNS, batch_size=BATCH), batch_size=None)
    hf = hf_stream(files, ALL_COLUMNS)
    got = measure_interleaved(
        benchmark,
        lambda: drain(ours, BATCHED_ROWS),
        {"datasets-iter": lambda: drain(hf.iter(batch_size=BATCH), BATCHED_ROWS)},
        items=BATCHED_ROWS,
        rounds=5,
        unit="rows",
    )
    assert got == {"fastdata": BATCHED_ROWS, "datasets-iter": BATCHED_ROWS}
