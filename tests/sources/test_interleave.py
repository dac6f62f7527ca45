"""How a mix orders its sources (fastdata.sources._interleave): every row of every walk once,
every stretch of the order in proportion to the shares, pieces read once; and, end to end, a
mix over row groups larger than its shuffle window mixes every batch, every rank and every
worker."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata.sources._interleave import Pieces, interleave

# each source: its pieces' row counts (a walk of whole units from row 0)
walks_strategy = st.lists(
    st.lists(st.integers(1, 3000), min_size=1, max_size=6), min_size=1, max_size=4
)


def walks_of(sizes: list[list[int]]) -> list[list[tuple[int, int, int, int]]]:
    return [[(c, u, 0, n) for u, n in enumerate(units)] for c, units in enumerate(sizes)]


@settings(max_examples=150, deadline=None)
@given(walks_strategy, st.integers(1, 4096), st.booleans(), st.integers(0, 3))
def test_granules_cover_every_row_once_and_follow_the_shares(
    sizes: list[list[int]], round_rows: int, shuffle: bool, epoch: int
) -> None:
    walks = walks_of(sizes)
    granules, pieces = interleave(walks, round_rows, shuffle=shuffle, seed=7, epoch=epoch)
    rows = Counter((source, unit, row) for source, unit, a, b, _ in granules for row in range(a, b))
    expected = {
        (c, u, r) for c, units in enumerate(sizes) for u, n in enumerate(units) for r in range(n)
    }
    assert set(rows) == expected and set(rows.values()) == {1}
    for source, unit, a, b, index in granules:  # each granule lies in its piece
        p_source, p_unit, p_start, p_stop = pieces[index]
        assert (p_source, p_unit) == (source, unit) and p_start <= a < b <= p_stop
    # Every prefix of the order holds each source's share of its rows, to within a granule
    # on either side of the one being read (the granule sizes of each source).
    shares = [sum(units) for units in sizes]
    total = sum(shares)
    size = [max(b - a for s, _, a, b, _ in granules if s == c) for c in range(len(sizes))]
    taken = [0] * len(sizes)
    position = 0
    for source, _, a, b, _ in granules:
        taken[source] += b - a
        position += b - a
        for c, share in enumerate(shares):
            assert abs(taken[c] - position * share / total) <= 2 * max(size) + size[c]


def test_shuffled_pieces_come_in_another_order_per_epoch() -> None:
    walks = walks_of([[100] * 8, [50] * 8])
    orders = [
        [p for p in interleave(walks, 64, shuffle=True, seed=1, epoch=e)[1]] for e in range(3)
    ]
    assert orders[0] != orders[1] != orders[2]
    assert interleave(walks, 64, shuffle=True, seed=1, epoch=0)[1] == orders[0]  # seeded
    assert sorted(orders[0]) == sorted(orders[1])


def test_a_piece_is_read_once_while_its_granules_are_read() -> None:
    reads: Counter = Counter()
    lock = threading.Lock()

    def read(piece: tuple[int, int, int, int]) -> pa.Table:
        with lock:
            reads[piece] += 1
        return pa.table({"x": np.arange(piece[2], piece[3])})

    walks = walks_of([[1000] * 4, [700] * 3])
    granules, pieces = interleave(walks, 256, shuffle=True, seed=3, epoch=0)
    tables = Pieces(read)
    for _, _, a, b, index in granules:
        table = tables.table(index, pieces[index])
        first = pieces[index][2]
        assert table.slice(a - first, b - a)["x"].to_pylist() == list(range(a, b))
    assert set(reads.values()) == {1} and len(reads) == len(pieces)


def test_a_failed_read_is_raised_to_every_waiter_and_tried_again() -> None:
    calls = []

    def read(piece: tuple[int, int, int, int]) -> pa.Table:
        calls.append(piece)
        if len(calls) == 1:
            raise OSError("flaky")
        return pa.table({"x": [1]})

    tables = Pieces(read)
    with pytest.raises(OSError, match="flaky"):
        tables.table(0, (0, 0, 0, 1))
    assert tables.table(0, (0, 0, 0, 1)).num_rows == 1 and len(calls) == 2


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three corpora whose row groups (2,000 rows) are larger than the mix's shuffle window."""
    root = tmp_path_factory.mktemp("interleave")
    paths = {}
    for c, (name, rows) in enumerate({"web": 12_000, "code": 6_000, "books": 2_000}.items()):
        ids = np.arange(rows, dtype=np.int64) + c * 100_000
        pq.write_table(pa.table({"id": ids}), root / f"{name}.parquet", row_group_size=2_000)
        paths[name] = root / f"{name}.parquet"
    return paths


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_batch_rank_and_worker_mixes_the_sources(
    corpora: dict[str, Path], shuffle: bool, worker_method: str
) -> None:
    """Before, units were ordered whole: with row groups above the window, most batches held
    one source, and a rank could see none of a small one."""
    weights = {"web": 0.6, "code": 0.3, "books": 0.1}
    seen: Counter = Counter()
    for rank in range(2):
        sources = {n: fd.ParquetStream(p, columns=["id"]) for n, p in corpora.items()}
        stream = fd.mix(
            sources,
            weights=weights,
            batch_size=64,
            shuffle=shuffle,
            shuffle_buffer=512,
            rank=rank,
            world_size=2,
        )
        loader = fd.DataLoader(stream, batch_size=None, num_workers=2, worker_method=worker_method)
        per_worker: list[Counter] = [Counter(), Counter()]
        alone = 0  # batches of one source
        for k, batch in enumerate(loader):
            sources_in = batch["source"].tolist()
            seen.update(batch["id"].tolist())
            per_worker[k % 2].update(sources_in)  # workers take turns
            alone += len(set(sources_in)) == 1
        if shuffle:  # at most a worker's last window, cut short by the end of its rows
            assert alone <= 2
        for counts in per_worker:  # each worker: every source, near its weight
            total = sum(counts.values())
            for c, weight in enumerate(weights.values()):
                assert abs(counts[c] / total - weight) < 0.05
    assert sorted(seen) == sorted(
        c * 100_000 + i for c, n in enumerate((12_000, 6_000, 2_000)) for i in range(n)
    )
    assert set(seen.values()) == {1}
