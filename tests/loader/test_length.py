"""fastdata.loader._length: ``len()`` of a loader that batches a stream's rows is the number
of batches its iteration yields — each worker batches its own share, its last batch short
(dropped with ``drop_last``) — for process and thread workers, ``num_workers=0``, ranks,
uneven shares, another epoch and a resumed one (counted whole, as ``len(stream)`` counts it);
anything else keeps torch's count."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata as fd
from fastdata.loader._length import loader_length, rank_batches

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write(root: Path, rows: int, row_group: int) -> Path:
    path = root / f"rows{rows}_rg{row_group}.parquet"
    pq.write_table(pa.table({"id": list(range(rows))}), path, row_group_size=row_group)
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write(tmp_path_factory.mktemp("length"), 300, 64)


def loader(path: Path, batch_size: int | None = 64, **options: Any) -> fd.DataLoader:
    stream_options = {
        k: options.pop(k) for k in ("rank", "world_size", "shuffle", "even_batches") if k in options
    }
    stream = fd.ParquetStream(path, columns=["id"], **stream_options)
    return fd.DataLoader(stream, batch_size=batch_size, **options)


def batches(made: Any) -> list[list[int]]:
    return [batch["id"].tolist() for batch in made]


@pytest.mark.parametrize("worker_method", ["multiprocessing", "thread"])
def test_each_worker_ends_its_share_with_its_own_short_batch(
    data: Path, worker_method: str
) -> None:
    # 300 rows, 2 workers of 150: 3 batches of 64 each (64, 64, 22), not ceil(300 / 64) = 5.
    made = loader(data, 64, num_workers=2, worker_method=worker_method)
    assert len(made) == len(batches(made)) == 6
    dropping = loader(data, 64, num_workers=3, drop_last=True, worker_method=worker_method)
    assert len(dropping) == len(batches(dropping)) == 3  # 100 rows each: 1 full batch


@SETTINGS
@given(
    rows=st.integers(1, 120),
    row_group=st.integers(1, 50),
    batch_size=st.integers(1, 40),
    num_workers=st.integers(0, 3),
    world_size=st.integers(1, 3),
    rank=st.integers(0, 2),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    even_batches=st.sampled_from([None, "drop", "pad"]),
    worker_method=st.sampled_from(["multiprocessing", "thread"]),
)
def test_len_is_the_number_of_batches_iterated(
    rows: int,
    row_group: int,
    batch_size: int,
    num_workers: int,
    world_size: int,
    rank: int,
    drop_last: bool,
    shuffle: bool,
    even_batches: str | None,
    worker_method: str,
) -> None:
    with tempfile.TemporaryDirectory() as root:
        made = loader(
            write(Path(root), rows, row_group),
            batch_size,
            num_workers=num_workers,
            drop_last=drop_last,
            worker_method=worker_method,
            rank=rank % world_size,
            world_size=world_size,
            shuffle=shuffle,
            even_batches=even_batches,
        )
        assert len(made) == len(batches(made))


@pytest.mark.parametrize("worker_method", ["multiprocessing", "thread"])
def test_len_counts_the_epoch_set_and_a_resumed_epoch_whole(data: Path, worker_method: str) -> None:
    made = loader(data, 32, num_workers=3, shuffle=True, worker_method=worker_method)
    made.dataset.set_epoch(2)
    assert len(made) == len(batches(made)) == 12  # 100 rows each: 4 batches (32, 32, 32, 4)
    it = iter(made)
    taken = [next(it) for _ in range(5)]
    state = made.state_dict()
    del it
    for workers in (3, 2, 0):  # the same layout, then other numbers of readers (elastic)
        resumed = loader(data, 32, num_workers=workers, shuffle=True, worker_method=worker_method)
        resumed.load_state_dict(state)
        before = len(resumed)  # the epoch whole, as the resumed iteration will make it
        rest = batches(resumed)
        seen = {i for b in taken for i in b["id"].tolist()}
        assert sorted(i for b in rest for i in b) == sorted(set(range(300)) - seen)
        assert before == len(resumed) == len(taken) + len(rest)


def test_a_mix_and_an_image_stream_count_their_workers_batches(tmp_path: Path) -> None:
    a, b = write(tmp_path, 70, 16), write(tmp_path, 45, 7)
    mixed = fd.mix(
        {"a": fd.ParquetStream(a, columns=["id"]), "b": fd.ParquetStream(b, columns=["id"])}
    )
    made = fd.DataLoader(mixed, batch_size=25, num_workers=2)
    assert len(made) == len(batches(made)) == 6  # 58 and 57 rows: 3 batches each, not 5
    fd.synthetic.make_images(tmp_path / "img", 21, classes=2, min_short=16, max_short=20)
    images = fd.ImageStream.from_folder(tmp_path / "img", size=8, crop="center")
    made = fd.DataLoader(images, batch_size=8, num_workers=2)
    assert len(made) == sum(1 for _ in made) == 4  # 11 and 10 images: 2 batches each, not 3


def test_other_loaders_keep_torchs_count(data: Path, tmp_path: Path) -> None:
    in_stream = fd.ParquetStream(data, columns=["id"], batch_size=64)
    made = fd.DataLoader(in_stream, batch_size=None, num_workers=2)
    assert len(made) == len(in_stream) == len(batches(made))
    rows = fd.DataLoader(fd.ParquetStream(data, columns=["id"]), batch_size=None, num_workers=2)
    assert len(rows) == 300
    assert len(fd.DataLoader(list(range(10)), batch_size=4)) == 3
    docs = pa.table({"tokens": pa.array([[d] * 3 for d in range(20)], pa.list_(pa.int64()))})
    pq.write_table(docs, tmp_path / "docs.parquet")
    packed = fd.pack(fd.ParquetStream(tmp_path / "docs.parquet", columns=["tokens"]), seq_len=4)
    with pytest.raises(TypeError, match="packed stream has no len"):
        len(fd.DataLoader(packed, batch_size=None))
    assert loader_length(fd.DataLoader(list(range(10)), batch_size=4), lambda: 7) == 7


def test_a_streams_length_does_not_ask_for_torchs_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch's count of a stream is ``len(stream)``, which plans the epoch: ``len()`` of a
    loader over a stream's rows plans it once, for its own count, not for torch's too."""
    path = write(tmp_path, 131, 40)
    stream = fd.ParquetStream(path, columns=["id"])
    loader = fd.DataLoader(stream, batch_size=32, num_workers=2)
    asked = []
    counted = type(stream).__len__
    monkeypatch.setattr(type(stream), "__len__", lambda self: asked.append(1) or counted(self))
    assert len(loader) == sum(1 for _ in loader) == 6
    assert asked == []


def test_rank_batches_counts_every_rank_as_it_iterates(tmp_path: Path) -> None:
    # 131 rows over 2 ranks x 2 workers: 66 = 33 + 33 and 65 = 33 + 32 rows in batches of
    # 32: 4 and 3 batches, where ceil(66 / 32) == ceil(65 / 32) == 3.
    path = write(tmp_path, 131, 40)
    for rank, expected in ((0, 4), (1, 3)):
        made = loader(path, 32, num_workers=2, rank=rank, world_size=2)
        assert len(batches(made)) == expected
        other = fd.ParquetStream(path, columns=["id"], rank=1 - rank, world_size=2)
        assert rank_batches(other, 2, 32, False, rank=rank) == expected
