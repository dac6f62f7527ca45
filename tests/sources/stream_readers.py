"""Small in-memory readers whose every row is known, and tables that count their rows, for the
tests of a stream and the modules it runs on."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa


class Units:
    """A reader of units of the given sizes; row ``i`` of the source has ``id == i``."""

    def __init__(self, rows: list[int]) -> None:
        self.rows = rows
        self.reads: list[tuple[int, int, int]] = []

    def unit_rows(self) -> list[int]:
        return self.rows

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        self.reads.append((unit, start, stop))
        first = sum(self.rows[:unit])
        return pa.table({"id": np.arange(first + start, first + stop, dtype=np.int64)})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": f"unit-{unit}", "row": row}

    def identity(self) -> dict[str, Any]:
        return {"rows": self.rows}


class Growing(Units):
    """A per-epoch reader: epoch ``e`` has one more unit of 3 rows than epoch ``e - 1``."""

    def for_epoch(self, epoch: int) -> Units:
        return Units([*self.rows, *[3] * epoch])


def tables(*sizes: int) -> Iterator[pa.Table]:
    """Tables of the given sizes whose ``id`` column counts the rows across them."""
    bounds = np.cumsum([0, *sizes])
    return (pa.table({"id": np.arange(a, b)}) for a, b in itertools.pairwise(bounds))
