"""Resume of :func:`fastdata.bucket_by_length` over a fastdata DataLoader: the loader's state
never loses the rows the bucketing holds (it refuses while it holds some), and the bucketing's
own state resumes exactly, from any batch, pools and buckets, with workers and thread
workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import fastdata as fd
from fastdata.errors import ResumeError

BUCKET = {"key": "tokens", "batch_size": 8, "buffer_size": 60, "seed": 3}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bucket_resume") / "pq"
    fd.synthetic.make_parquet(root, 300, files=3, row_group_size=50, max_tokens=40)
    return root


def loader(data: Path, workers: int = 0, method: str = "multiprocessing") -> fd.DataLoader:
    stream = fd.ParquetStream(data, columns=["id", "tokens"], batch_size=25, shuffle=True)
    return fd.DataLoader(stream, batch_size=None, num_workers=workers, worker_method=method)


def ids(batches: Any) -> list[list[int]]:
    return [b["id"].tolist() for b in batches]


def test_the_loader_state_refuses_while_the_bucketing_holds_rows(data: Path) -> None:
    # (it was a state past the 51 rows held, which a resume lost)
    source = loader(data)
    batches = fd.bucket_by_length(source, **BUCKET)
    for _ in range(3):
        next(batches)
    with pytest.raises(ResumeError, match=r"holds 51 rows .* save the bucketing's state_dict"):
        source.state_dict()


@pytest.mark.parametrize("device", [None, "cpu"])  # torch's iterator, or the device stage's
def test_the_loader_state_refuses_while_a_bucketing_of_its_iterator_holds_rows(
    data: Path, device: str | None
) -> None:
    stream = fd.ParquetStream(data, columns=["id", "tokens"], batch_size=25)
    source = fd.DataLoader(stream, batch_size=None, device=device)
    batches = fd.bucket_by_length(iter(source), **BUCKET)
    next(batches)
    with pytest.raises(ResumeError, match="bucket_by_length holds 67 rows"):
        source.state_dict()
    list(batches)
    source.state_dict()  # all yielded: nothing lost


def test_the_loader_state_at_the_end_of_the_bucketing_still_works(data: Path) -> None:
    source = loader(data)
    list(fd.bucket_by_length(source, **BUCKET))
    state = source.state_dict()  # nothing held: the next epoch
    again = loader(data)
    again.load_state_dict(state)
    assert sum(len(b) for b in ids(fd.bucket_by_length(again, **BUCKET))) == 300


@pytest.mark.parametrize(("workers", "method"), [(0, "multiprocessing"), (2, "thread")])
def test_the_bucketing_resumes_exactly_from_every_batch(
    data: Path, workers: int, method: str
) -> None:
    whole = ids(fd.bucket_by_length(loader(data, workers, method), **BUCKET))
    assert sorted(i for b in whole for i in b) == list(range(300))
    for cut in range(len(whole) + 1):
        batches = fd.bucket_by_length(loader(data, workers, method), **BUCKET)
        first = ids(next(batches) for _ in range(cut))
        state = json.loads(json.dumps(batches.state_dict()))
        resumed = fd.bucket_by_length(loader(data, workers, method), **BUCKET)
        resumed.load_state_dict(state)
        assert resumed.state_dict() == state  # loaded, not iterated: the loaded state
        assert first + ids(resumed) == whole, f"resumed after batch {cut}"


@pytest.mark.parametrize("drop_last", [False, True])
def test_pools_that_end_on_a_batch_resume_exactly(data: Path, drop_last: bool) -> None:
    # 25-row items, pools of 50 rows in batches of 5: nothing held after a pool's last batch
    kwargs = {**BUCKET, "batch_size": 5, "buffer_size": 50, "drop_last": drop_last}
    whole = ids(fd.bucket_by_length(loader(data), **kwargs))
    for cut in range(len(whole) + 1):
        batches = fd.bucket_by_length(loader(data), **kwargs)
        first = ids(next(batches) for _ in range(cut))
        resumed = fd.bucket_by_length(loader(data), **kwargs)
        resumed.load_state_dict(batches.state_dict())
        assert first + ids(resumed) == whole, f"resumed after batch {cut}"


@pytest.mark.slow
def test_the_bucketing_resumes_exactly_with_worker_processes(data: Path) -> None:
    whole = ids(fd.bucket_by_length(loader(data, 2), **BUCKET))
    for cut in (0, 5, 9, len(whole) - 1, len(whole)):
        batches = fd.bucket_by_length(loader(data, 2), **BUCKET)
        first = ids(next(batches) for _ in range(cut))
        state = batches.state_dict()
        resumed = fd.bucket_by_length(loader(data, 2), **BUCKET)
        resumed.load_state_dict(state)
        assert first + ids(resumed) == whole, f"resumed after batch {cut}"


@pytest.mark.parametrize("boundaries", [None, "auto"])
def test_a_drawn_seed_is_saved_and_a_resume_continues_its_order(
    data: Path, boundaries: Any
) -> None:
    kwargs = {**BUCKET, "seed": None, "boundaries": boundaries}
    for cut in (0, 4, 17):
        batches = fd.bucket_by_length(loader(data), **kwargs)
        first = ids(next(batches) for _ in range(cut))
        state = json.loads(json.dumps(batches.state_dict()))
        rest = ids(batches)
        resumed = fd.bucket_by_length(loader(data), **kwargs)
        resumed.load_state_dict(state)
        assert ids(resumed) == rest, f"resumed after batch {cut}"
        assert sorted(i for b in first + rest for i in b) == list(range(300))


def test_a_state_of_samples_resumes_exactly(data: Path) -> None:
    def samples() -> fd.DataLoader:
        stream = fd.ParquetStream(data, columns=["id", "tokens"], shuffle=True)
        return fd.DataLoader(stream, batch_size=None)

    kwargs = {"length_fn": lambda s: len(s["tokens"]), "batch_size": 8, "buffer_size": 60}
    key = [[int(s["id"]) for s in b] for b in fd.bucket_by_length(samples(), **kwargs)]
    for cut in (0, 7, 8, 20, len(key)):
        batches = fd.bucket_by_length(samples(), **kwargs)
        first = [[int(s["id"]) for s in next(batches)] for _ in range(cut)]
        resumed = fd.bucket_by_length(samples(), **kwargs)
        resumed.load_state_dict(batches.state_dict())
        assert first + [[int(s["id"]) for s in b] for b in resumed] == key


@pytest.mark.parametrize("boundaries", [[10, 20, 30], "auto"])
def test_buckets_resume_exactly_from_every_batch(data: Path, boundaries: Any) -> None:
    # a bucket holds rows from anywhere in the epoch so far: the resume re-reads from a
    # checkpoint before the oldest and drops each bucket's rows yielded before
    kwargs = {**BUCKET, "boundaries": boundaries, "buffer_size": 40}
    whole = ids(fd.bucket_by_length(loader(data), **kwargs))
    assert sorted(i for b in whole for i in b) == list(range(300))
    for cut in range(len(whole) + 1):
        batches = fd.bucket_by_length(loader(data), **kwargs)
        first = ids(next(batches) for _ in range(cut))
        resumed = fd.bucket_by_length(loader(data), **kwargs)
        resumed.load_state_dict(json.loads(json.dumps(batches.state_dict())))
        assert first + ids(resumed) == whole, f"resumed after batch {cut}"


def test_buckets_of_samples_resume_exactly() -> None:
    lengths = [(i * 7919) % 23 for i in range(200)]

    class Lengths:  # a stateful iterable of samples: its position is a count
        def __init__(self) -> None:
            self.at = 0

        def __iter__(self) -> Any:
            while self.at < len(lengths):
                self.at += 1
                yield self.at - 1

        def state_dict(self) -> dict[str, int]:
            return {"at": self.at}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.at = state["at"]

    kwargs = {"length_fn": lengths.__getitem__, "batch_size": 4, "boundaries": [5, 12, 18]}
    whole = list(fd.bucket_by_length(Lengths(), **kwargs))
    for cut in range(len(whole) + 1):
        batches = fd.bucket_by_length(Lengths(), **kwargs)
        first = [next(batches) for _ in range(cut)]
        resumed = fd.bucket_by_length(Lengths(), **kwargs)
        resumed.load_state_dict(batches.state_dict())
        assert first + list(resumed) == whole, f"resumed after batch {cut}"


def test_a_state_that_does_not_fit_is_refused(data: Path) -> None:
    batches = fd.bucket_by_length(loader(data), **BUCKET)
    next(batches)
    state = batches.state_dict()
    with pytest.raises(ResumeError, match="batch_size was 8 when saved, and is 4 now"):
        fd.bucket_by_length(loader(data), **{**BUCKET, "batch_size": 4}).load_state_dict(state)
    with pytest.raises(ResumeError, match="not a bucket_by_length state"):
        fd.bucket_by_length(loader(data), **BUCKET).load_state_dict(loader(data).state_dict())
    with pytest.raises(ResumeError, match="after the bucketing started"):
        batches.load_state_dict(state)
    with pytest.raises(ResumeError, match="its stream has no state_dict"):
        fd.bucket_by_length([[1, 2]], length_fn=len, batch_size=1).state_dict()
