"""How a mix orders its sources' rows in an epoch (:mod:`fastdata.sources.mix`).

Each source contributes its share of the epoch as pieces of its units, in its own order (its
*walk*; shuffled, the pieces come in a seeded order). Ordering whole units would leave a
rank, a worker or a shuffle window with the rows of one source wherever units are large
(a row group of 20,000 rows against a 16,384-row window). So each piece is cut into
*granules* of about ``round_rows * share / epoch_rows`` rows, and the granules of all sources
are ordered by where they fall within their own source's share (as a fraction of it): every
stretch of ``round_rows`` rows of the epoch then holds about one granule of each source, in
proportion to the weights, and so does any span of the order (a rank's, a worker's, a
shuffle window, which permutes the rows within it).

A granule is read from its piece (:class:`Pieces`): the piece is read once and kept while
the granules after it are read, so cutting costs no extra reads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["MIN_ROUND_ROWS", "Pieces", "interleave"]

MIN_ROUND_ROWS = 1024  # rows in which every source appears, without a larger shuffle window
_KEPT = 2  # pieces of a source kept: the one being read and the next (read ahead)

UnitPiece = tuple[int, int, int, int]  # (source, unit, start, stop)
Granule = tuple[int, int, int, int, int]  # (source, unit, start, stop, piece index)


def interleave(
    walks: Sequence[Sequence[UnitPiece]],
    round_rows: int,
    *,
    shuffle: bool,
    seed: int,
    epoch: int,
) -> tuple[list[Granule], list[UnitPiece]]:
    """The epoch's granules in order, and the pieces they are cut from (see the module
    docstring). ``walks``: each source's pieces in its own order; ``shuffle``: the pieces
    of each source in a seeded order, and a seeded phase for where its granules fall."""
    shares = [sum(stop - start for _, _, start, stop in walk) for walk in walks]
    total = sum(shares)
    pieces: list[UnitPiece] = []
    keys: list[float] = []
    granules: list[Granule] = []
    for c, (walk, share) in enumerate(zip(walks, shares, strict=True)):
        if not share:
            continue
        rng = np.random.default_rng([seed, epoch, 2, c])
        order = rng.permutation(len(walk)) if shuffle else range(len(walk))
        phase = float(rng.random()) if shuffle else 0.5
        size = max(1, round(round_rows * share / total))
        done = 0
        for k in order:
            source, unit, start, stop = walk[k]
            pieces.append(walk[k])
            for first in range(start, stop, size):
                last = min(first + size, stop)
                keys.append((done + (last - first) * phase) / share)
                granules.append((source, unit, first, last, len(pieces) - 1))
                done += last - first
    order = np.argsort(np.asarray(keys), kind="stable")  # ties: the source listed first
    return [granules[i] for i in order], pieces


class Pieces:
    """The pieces granules are read from, each read once: the last :data:`_KEPT` of each
    source are kept (a read under way is waited for, not repeated), so granules read in
    order, by one reader and its read-ahead threads, read each piece once."""

    def __init__(self, read: Callable[[UnitPiece], pa.Table]) -> None:
        self._read = read
        self._lock = threading.Lock()
        self._kept: dict[int, OrderedDict[int, Future[pa.Table]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {"_read": self._read}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_read"])  # type: ignore[misc]

    def table(self, index: int, piece: UnitPiece) -> pa.Table:
        """The rows of ``piece`` (number ``index`` of the epoch's pieces)."""
        with self._lock:
            kept = self._kept.setdefault(piece[0], OrderedDict())
            future = kept.get(index)
            mine = future is None
            if future is None:
                future = kept[index] = Future()
                while len(kept) > _KEPT:
                    kept.popitem(last=False)
            kept.move_to_end(index)
        if mine:
            try:
                future.set_result(self._read(piece))
            except BaseException as exc:
                with self._lock:
                    kept.pop(index, None)
                future.set_exception(exc)
        return future.result()
