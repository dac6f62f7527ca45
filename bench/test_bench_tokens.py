"""Token and text columns through ParquetStream + DataLoader against raw pyarrow (issue 19).

The corpus is ``synthetic.make_tokens``: documents with lognormal lengths (median 256
tokens, log-sd 1.0, so a mean of ~420 before clipping to 8,192), 4 files, row groups of
4,096 rows; the measured length statistics are written into each record's ``extra_info``.
Every group times fastdata and the baseline alternately, round by round
(``measure_interleaved``), on the same files in the same run:

- ``baseline:pyarrow``: one process, ``pyarrow.dataset(...).to_batches(batch_size=1024)``,
  each batch's column turned into torch values + offsets (zero-copy), the raw limit of a
  scan that yields the same two buffers;
- ``parquet-tokens``: the ``tokens`` column (list<int32>) through
  ``fastdata.DataLoader(ParquetStream(batch_size=1024), batch_size=None, num_workers=2)``,
  a new loader (new workers) per epoch as in training; each batch arrives as a
  ``fastdata.Ragged``;
- ``parquet-tokens-identity``: the same with ``collate_fn=lambda b: b``, which skips
  torch's ``default_convert`` of every item;
- ``parquet-tokens-persistent``: one loader with ``persistent_workers=True`` for every
  round, so the workers' start (fork, first reads, memory) is paid once, not per epoch;
- ``parquet-tokens-inline``: ``num_workers=0``;
- ``parquet-text`` / ``parquet-text-inline``: the ``text`` column (string) likewise.

Items are rows (documents); ``extra_info`` also has tokens (or text bytes) per second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch

from fastdata import DataLoader, ParquetStream
from fastdata.synthetic import make_tokens

from conftest import measure_interleaved, scaled

# Short mode: 200,000 documents, so that an epoch with workers (about 0.5 s on 2 cores) is not
# mostly their start-up (60,000 gave 0.1 s epochs, and ratios that moved with the fork's cost).
ROWS = scaled(200_000, 400_000)
BATCH = 1024
ROUNDS = scaled(9, 15)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    root = tmp_path_factory.mktemp("bench-tokens")
    make_tokens(root, ROWS, files=4, row_group_size=4096)
    table = pq.read_table(root, columns=["tokens", "text"])
    lengths = pc.list_value_length(table["tokens"]).to_numpy()
    text_bytes = pc.binary_length(table["text"]).to_numpy()
    facts = {
        "rows": ROWS,
        "tokens": int(lengths.sum()),
        "tokens_mean": round(float(lengths.mean()), 1),
        "tokens_median": float(np.median(lengths)),
        "tokens_max": int(lengths.max()),
        "text_bytes": int(text_bytes.sum()),
        "batch_size": BATCH,
        "row_group_size": 4096,
    }
    return root, facts


def pyarrow_scan(root: Path, column: str) -> tuple[int, int]:
    """Rows and elements, each batch's column as torch values + offsets, one process."""
    rows = elements = 0
    for rb in ds.dataset(root, format="parquet").to_batches(columns=[column], batch_size=BATCH):
        array = rb.column(0)
        if column == "tokens":
            offsets = torch.from_numpy(array.offsets.to_numpy())
            values = torch.from_numpy(array.flatten().to_numpy())
        else:
            bounds = np.frombuffer(array.buffers()[1], np.int32, len(array) + 1, array.offset * 4)
            offsets = torch.from_numpy(bounds)
            data = np.frombuffer(array.buffers()[2], np.uint8)[bounds[0] : bounds[-1]]
            values = torch.from_numpy(data)
        rows += len(offsets) - 1
        elements += values.numel()
    return rows, elements


def make_loader(root: Path, column: str, num_workers: int, **options: Any) -> DataLoader:
    stream = ParquetStream(root, columns=[column], batch_size=BATCH)
    return DataLoader(stream, batch_size=None, num_workers=num_workers, **options)


def fastdata_scan(loader: DataLoader, column: str) -> tuple[int, int]:
    rows = elements = 0
    for batch in loader:
        ragged = batch[column]
        rows += len(ragged)
        elements += ragged.values.numel()
    return rows, elements


def identity(batch: Any) -> Any:
    return batch


SCENARIOS: dict[str, tuple[str, int, dict[str, Any]]] = {
    "parquet-tokens": ("tokens", 2, {}),
    "parquet-tokens-identity": ("tokens", 2, {"collate_fn": identity}),
    "parquet-tokens-persistent": ("tokens", 2, {"persistent_workers": True}),
    "parquet-tokens-inline": ("tokens", 0, {}),
    "parquet-text": ("text", 2, {}),
    "parquet-text-inline": ("text", 0, {}),
}


@pytest.mark.parametrize("group", list(SCENARIOS))
def test_tokens(benchmark: Any, corpus: tuple[Path, dict[str, Any]], group: str) -> None:
    root, facts = corpus
    column, num_workers, options = SCENARIOS[group]
    benchmark.group = group
    reused = make_loader(root, column, num_workers, **options)

    def run() -> tuple[int, int]:  # a new loader per epoch, unless its workers persist
        fresh = not options.get("persistent_workers")
        loader = make_loader(root, column, num_workers, **options) if fresh else reused
        return fastdata_scan(loader, column)

    results = measure_interleaved(
        benchmark,
        run,
        {"pyarrow": lambda: pyarrow_scan(root, column)},
        items=ROWS,
        rounds=ROUNDS,
        unit="rows",
    )
    assert results["fastdata"] == results["pyarrow"]  # the same rows and elements
    elements = facts["tokens"] if column == "tokens" else facts["text_bytes"]
    assert results["fastdata"] == (ROWS, elements)
    info = benchmark.extra_info
    info.update(facts)
    unit = "tokens" if column == "tokens" else "text_bytes"
    info[f"fastdata_{unit}_per_s"] = round(elements / info["median_s"])
    info[f"pyarrow_{unit}_per_s"] = round(elements / info["paired"]["baseline:pyarrow"])


def test_tokens_threads(benchmark: Any, corpus: tuple[Path, dict[str, Any]]) -> None:
    """``parquet-tokens-threads``: the token column through two *thread* workers
    (``worker_method="thread"``: batches handed over in the process, no pickling) against
    raw pyarrow in one process and against the same loader with two worker processes, a new
    loader per epoch on every side."""
    root, facts = corpus
    benchmark.group = "parquet-tokens-threads"

    def threads() -> tuple[int, int]:
        return fastdata_scan(make_loader(root, "tokens", 2, worker_method="thread"), "tokens")

    def processes() -> tuple[int, int]:
        return fastdata_scan(make_loader(root, "tokens", 2), "tokens")

    results = measure_interleaved(
        benchmark,
        threads,
        {"pyarrow": lambda: pyarrow_scan(root, "tokens"), "process-workers": processes},
        items=ROWS,
        rounds=ROUNDS,
        unit="rows",
    )
    assert results["fastdata"] == results["pyarrow"] == results["process-workers"]
    benchmark.extra_info.update(facts)
