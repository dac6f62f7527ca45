"""``fastdata demo``: stream the built-in synthetic dataset and measure it.

The demo is the package's smoke test on a new machine: it writes a deterministic dataset,
streams it through :class:`fastdata.ParquetStream` and :class:`fastdata.DataLoader` for a few
epochs, checks that every row arrives exactly once per epoch, and reports the throughput.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

INTEGER_MINIMA = {"rows": 1, "batch_size": 1, "num_workers": 0, "epochs": 1}
"""The smallest value of each integer argument of :func:`run_demo` (the CLI checks the same)."""


@dataclass(frozen=True)
class DemoResult:
    """What the demo measured."""

    data: str
    rows: int
    batch_size: int
    num_workers: int
    epochs: int
    first_batch_s: float
    rows_per_s: float
    exactly_once: bool

    def report(self) -> str:
        """A short human-readable summary."""
        check = "yes" if self.exactly_once else "NO"
        return "\n".join(
            [
                f"fastdata demo: {self.rows:,} rows from {self.data}",
                f"  batch_size={self.batch_size} num_workers={self.num_workers} "
                f"epochs={self.epochs}",
                f"  time to first batch: {self.first_batch_s * 1000:.1f} ms",
                f"  throughput: {self.rows_per_s:,.0f} rows/s (median over epochs)",
                f"  every row exactly once per epoch: {check}",
            ]
        )


def run_demo(
    *,
    rows: int = 500_000,
    batch_size: int = 4096,
    num_workers: int = 0,
    data: str | os.PathLike[str] | None = None,
    epochs: int = 2,
) -> DemoResult:
    """Write (or reuse) the synthetic dataset, stream it ``epochs`` times, measure.

    Raises:
        TypeError, ValueError: an argument of the wrong kind or out of range
            (:data:`INTEGER_MINIMA`).
    """
    import torch

    from fastdata import DataLoader, ParquetStream
    from fastdata._validate import check_int
    from fastdata.synthetic import make_parquet

    values = {"rows": rows, "batch_size": batch_size, "num_workers": num_workers, "epochs": epochs}
    for name, minimum in INTEGER_MINIMA.items():
        check_int(name, values[name], minimum=minimum)
    with tempfile.TemporaryDirectory(prefix="fastdata-demo-") as scratch:
        root = Path(data) if data is not None else Path(scratch)
        if not list(root.glob("*.parquet")):
            make_parquet(root, rows, files=4, row_group_size=16_384)
        stream = ParquetStream(
            root, columns=["id", "label", "x"], batch_size=batch_size, shuffle=True, seed=0
        )
        loader: DataLoader[Any] = DataLoader(stream, batch_size=None, num_workers=num_workers)
        rates, first_batch, ok = [], 0.0, True
        for epoch in range(epochs):
            stream.set_epoch(epoch)
            seen = torch.zeros(stream.num_rows, dtype=torch.int32)
            start = time.perf_counter()
            for i, batch in enumerate(loader):
                if i == 0 and epoch == 0:
                    first_batch = time.perf_counter() - start
                seen.index_add_(0, batch["id"], torch.ones_like(batch["id"], dtype=torch.int32))
            rates.append(stream.num_rows / (time.perf_counter() - start))
            ok = ok and bool((seen == 1).all())
        rates.sort()
        return DemoResult(
            data=str(root) if data is not None else "a temporary folder",
            rows=stream.num_rows,
            batch_size=batch_size,
            num_workers=num_workers,
            epochs=epochs,
            first_batch_s=first_batch,
            rows_per_s=rates[len(rates) // 2],
            exactly_once=ok,
        )
