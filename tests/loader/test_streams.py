"""fastdata.loader._streams: a loader's state over a fastdata stream — the stream's position
after the batches the record counts, with the loader's batching — loaded into a fresh loader
that continues with the next batch; what the stream's state and the loader disagree on is
refused."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest

import fastdata as fd
from fastdata.errors import ResumeError
from fastdata.loader._record import Record
from fastdata.loader._streams import batching, load_stream_state, stream_state


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("streams") / "pq"
    fd.synthetic.make_parquet(root, 60, files=2, row_group_size=10)
    return root


def loader(data: Path, batch_size: int | None = 4, **options: Any) -> fd.DataLoader:
    stream = fd.ParquetStream(data, batch_size=None, columns=["id"], shuffle=True, seed=3)
    return fd.DataLoader(stream, batch_size=batch_size, **options)


def ids(made: fd.DataLoader) -> list[list[int]]:
    return [batch["id"].tolist() for batch in made]


def test_batching_is_the_loaders_grouping_of_the_streams_items(data: Path) -> None:
    assert batching(loader(data, None)) == {"items_per_batch": 1, "drop_last": False}
    assert batching(loader(data, 4, drop_last=True)) == {"items_per_batch": 4, "drop_last": True}


@pytest.mark.parametrize(("batch_size", "drop_last"), [(4, False), (7, True), (None, False)])
@pytest.mark.parametrize("k", [0, 2, 8])
def test_a_state_after_k_batches_continues_with_the_next_one(
    data: Path, batch_size: int | None, drop_last: bool, k: int
) -> None:
    first = loader(data, batch_size, drop_last=drop_last)
    expected = ids(first)
    state = stream_state(first, first.dataset, Record(1, batches=k) if k else None)
    assert state["batches"] == k
    assert (state["batch_size"], state["drop_last"]) == (batch_size, drop_last)
    resumed = loader(data, batch_size, drop_last=drop_last)
    saved = json.loads(json.dumps(state))
    assert load_stream_state(resumed, resumed.dataset, [saved], False) == k
    assert ids(resumed) == expected[k:]


def test_a_loader_with_other_batching_is_refused(data: Path) -> None:
    made = loader(data, 4)
    state = stream_state(made, made.dataset, Record(1, batches=2))
    other = loader(data, 5)
    with pytest.raises(ResumeError, match=r"DataLoader batch_size=4 but this loader has batch_"):
        load_stream_state(other, other.dataset, [state], False)
    other = loader(data, 4, drop_last=True)
    with pytest.raises(ResumeError, match=r"DataLoader drop_last=False but this loader has drop"):
        load_stream_state(other, other.dataset, [state], False)


def test_counts_that_disagree_are_refused(data: Path) -> None:
    made = loader(data, 4)
    state = stream_state(made, made.dataset, Record(1, batches=2))
    wrong = copy.deepcopy(state)
    wrong["batches"] = 3
    with pytest.raises(ResumeError, match=r"batches=3 disagrees with its stream's per-rank"):
        load_stream_state(made, made.dataset, [wrong], False)
    wrong = copy.deepcopy(state)
    wrong["dataset"]["consumed"] = [4]
    with pytest.raises(ResumeError, match=r"disagree with its per-slot counts consumed=\[4\]"):
        load_stream_state(made, made.dataset, [wrong], False)


def test_a_state_that_says_its_epoch_was_done_with_rows_left_is_refused(data: Path) -> None:
    made = loader(data, 4)
    state = stream_state(made, made.dataset, Record(1, batches=2))
    with pytest.raises(ResumeError, match=r"epoch was done \(epoch_done=True\) but its stream"):
        load_stream_state(made, made.dataset, [state], True)
    assert made.dataset.resume is None  # the refused position is not kept


def test_a_stream_of_varying_rows_under_loader_batching_cannot_save_an_exact_state(
    data: Path,
) -> None:
    tokens = data.parent / "tokens"
    fd.synthetic.make_parquet(tokens, 40, files=1, max_tokens=20)
    packed = fd.pack(fd.ParquetStream(tokens, columns=["tokens"]), seq_len=16, rows=2)
    assert packed.varying
    made = fd.DataLoader(packed, batch_size=2)
    with pytest.raises(
        ResumeError, match=r"batched 2 at a time \(a DataLoader's batch_size=2\); batch in the"
    ):
        stream_state(made, packed, Record(1, batches=1))


@pytest.mark.parametrize("worker_method", ["multiprocessing", "thread"])
def test_out_of_order_workers_resume_twice_each_row_once(data: Path, worker_method: str) -> None:
    """in_order=False: the second state counts from where the first resume began."""

    def make() -> fd.DataLoader:
        return loader(data, 4, num_workers=2, in_order=False, worker_method=worker_method)

    seen: list[int] = []
    state = None
    for take in (3, 4):
        made = make()
        if state is not None:
            made.load_state_dict(state)
        iterator = iter(made)
        seen += [i for _ in range(take) for i in next(iterator)["id"].tolist()]
        state = json.loads(json.dumps(made.state_dict()))
        del iterator
    rest = make()
    rest.load_state_dict(state)
    seen += [i for batch in ids(rest) for i in batch]
    assert sorted(seen) == list(range(60))


@pytest.mark.parametrize("worker_method", ["multiprocessing", "thread"])
def test_a_resumed_epoch_read_again_is_read_in_full(data: Path, worker_method: str) -> None:
    made = loader(data, 4, num_workers=2, worker_method=worker_method)
    full = ids(made)
    iterator = iter(made)
    head = [next(iterator)["id"].tolist() for _ in range(3)]
    state = made.state_dict()
    del iterator
    resumed = loader(data, 4, num_workers=2, worker_method=worker_method)
    resumed.load_state_dict(state)
    assert head + ids(resumed) == full
    assert ids(resumed) == full  # the same epoch again, nothing loaded: all of it


def slow_start(worker_id: int) -> None:
    time.sleep(0.3)


def rows_once(data: Path, saved: dict[str, Any], seen: list[int], **options: Any) -> None:
    """``seen`` and what a loader resumed from ``saved`` gives: every row once."""
    rest = loader(data, 4, **options)
    rest.load_state_dict(json.loads(json.dumps(saved)))
    seen = seen + [i for batch in ids(rest) for i in batch]
    assert sorted(seen) == list(range(60))


@pytest.mark.parametrize("worker_method", ["multiprocessing", "thread"])
def test_persistent_workers_left_before_their_first_batch_count_from_the_start(
    data: Path, worker_method: str
) -> None:
    """The first iteration after a load was dropped before a batch: its readers took the
    position, so the next epoch of the same workers is counted from the epoch's start."""
    options = {
        "num_workers": 2,
        "persistent_workers": True,
        "worker_method": worker_method,
        "worker_init_fn": slow_start,  # the readers take the position after iter() returns
        "in_order": False,  # (then the state counts from where the readers began)
    }
    made = loader(data, 4, **options)
    iterator = iter(made)
    next(iterator)
    saved = made.state_dict()
    del iterator
    resumed = loader(data, 4, **options)
    resumed.load_state_dict(saved)
    iter(resumed)  # a loop stopped before its first step
    iterator = iter(resumed)  # the same workers, another epoch: all of it
    seen = [i for _ in range(3) for i in next(iterator)["id"].tolist()]
    state = resumed.state_dict()
    del iterator
    rows_once(data, state, seen, **options)


def test_set_epoch_after_a_load_counts_the_new_epoch_from_its_start(data: Path) -> None:
    made = loader(data, 4, num_workers=2)
    iterator = iter(made)
    [next(iterator) for _ in range(3)]
    saved = made.state_dict()
    del iterator
    resumed = loader(data, 4, num_workers=2)
    resumed.load_state_dict(saved)
    resumed.dataset.set_epoch(1)  # the loaded position belongs to epoch 0
    iterator = iter(resumed)
    seen = [i for _ in range(4) for i in next(iterator)["id"].tolist()]
    state = resumed.state_dict()
    del iterator
    assert state["batches"] == 4
    rows_once(data, state, seen, num_workers=2)


def test_an_elastic_resume_counts_from_the_layout_change(data: Path) -> None:
    made = loader(data, 4, num_workers=2)
    iterator = iter(made)
    head = [i for _ in range(5) for i in next(iterator)["id"].tolist()]
    saved = made.state_dict()
    del iterator
    resumed = loader(data, 4, num_workers=1)
    resumed.load_state_dict(saved)
    iterator = iter(resumed)
    head += [i for _ in range(2) for i in next(iterator)["id"].tolist()]
    state = resumed.state_dict()
    del iterator
    rows_once(data, state, head, num_workers=1)


def test_a_state_saved_out_of_order_loads_into_a_loader_in_order(data: Path) -> None:
    made = loader(data, 4, num_workers=2, in_order=False)
    state = stream_state(made, made.dataset, None)
    assert state["in_order"] is False
    record = Record(2, batches=3)
    record.handed = [0, 3]  # worker 1 made every batch so far
    state = stream_state(made, made.dataset, record)
    assert state["dataset"]["consumed"] == [0, 12]
    in_order = loader(data, 4, num_workers=2)
    assert load_stream_state(in_order, in_order.dataset, [state], False) == 3
