"""A sampler's replay checks that it draws what the saved run drew (fastdata.loader._digest):
a sampler with a random.Random of its own resumed after its first epoch is refused with a
ResumeError, not delivered with items lost and repeated, whatever its units (indices, batches
as lists, arrays or tensors, (index, scale) pairs, string keys) and also when what was
consumed lies out of order beyond the prefix (in_order=False). An iterable dataset's replay in
thread workers cannot be checked: loading such a state warns (fastdata.ReplayWarning), in
exactly that case. Exact replays still resume batch for batch; older states still load."""

from __future__ import annotations

import hashlib
import json
import random
import time
import warnings
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data as tud
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastdata as fd


class Shuffled(tud.IterableDataset):
    """Shards by worker and shuffles its shard: with the global numpy generator, or
    (``own``) the worker's own generator (fastdata.worker_generator())."""

    def __init__(self, n: int, own: bool = False) -> None:
        self.n = n
        self.own = own

    def __iter__(self):
        info = tud.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        shard = np.arange(wid, self.n, nw)
        if self.own:
            order = torch.randperm(len(shard), generator=fd.worker_generator()).numpy()
        else:
            order = np.random.permutation(len(shard))
        yield from (int(i) for i in shard[order])


class Items(tud.Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


class OwnRandomSampler(tud.Sampler):
    """A sampler with a random.Random of its own and no state_dict()."""

    def __init__(self, n: int, seed: int = 5) -> None:
        self.n = n
        self.rng = random.Random(seed)

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        order = list(range(self.n))
        self.rng.shuffle(order)
        return iter(order)


def through_json(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def flat(batches: list[Any]) -> list[int]:
    return [int(i) for b in batches for i in torch.as_tensor(b).reshape(-1).tolist()]


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def save_after(make, k: int, epochs_before: int = 0, seed: int = 0) -> tuple[list, dict]:
    """The first ``k`` batches of epoch ``epochs_before`` and the state saved after them."""
    seed_all(seed)
    loader = make()
    for _ in range(epochs_before):
        list(loader)
    iterator = iter(loader)
    head = [next(iterator) for _ in range(k)]
    state = through_json(loader.state_dict())
    del iterator
    return head, state


def resume_all(make, state: dict[str, Any]) -> list[Any]:
    resumed = make()
    resumed.load_state_dict(state)
    return list(resumed)


# ------------------------------------------------------------------ samplers
def test_a_sampler_with_its_own_generator_is_refused_after_its_first_epoch() -> None:
    def make() -> fd.DataLoader:
        return fd.DataLoader(Items(20), batch_size=4, sampler=OwnRandomSampler(20))

    _, state = save_after(make, 2, epochs_before=1)
    resumed = make()
    resumed.load_state_dict(state)
    iterator = iter(resumed)
    with pytest.raises(fd.ResumeError, match=r"replaying the epoch's order .* state_dict"):
        next(iterator)  # before any batch is handed out


def test_a_sampler_with_its_own_generator_resumes_in_its_first_epoch() -> None:
    def make() -> fd.DataLoader:
        return fd.DataLoader(Items(20), batch_size=4, sampler=OwnRandomSampler(20))

    full = flat(list(make()))
    head, state = save_after(make, 2)
    assert flat(head) + flat(resume_all(make, state)) == full


class Keyed(tud.Dataset):
    """Items 0..23 under any key a sampler below yields."""

    def __len__(self) -> int:
        return 24

    def __getitem__(self, key: Any) -> int:
        if isinstance(key, tuple):
            return int(key[0])
        return int(key[1:]) if isinstance(key, str) else int(key)


class OwnUnits(tud.Sampler):
    """A sampler (or, ``batches``, a batch sampler of 4) with a random.Random of its own and
    no state_dict(), yielding units of the kind named."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.rng = random.Random(5)

    def __len__(self) -> int:
        return 6 if self.kind.startswith("batch") else 24

    def __iter__(self):
        order = list(range(24))
        self.rng.shuffle(order)
        if self.kind == "batch ndarray":
            return iter(np.array(order).reshape(6, 4))
        if self.kind == "batch tensor":
            return iter(torch.tensor(order).reshape(6, 4))
        if self.kind == "batch of pairs":  # (index, scale) pairs in batches
            return iter([[(j, 0.5) for j in order[k : k + 4]] for k in range(0, 24, 4)])
        if self.kind == "scale pairs":
            return iter([(i, 0.5 + (i % 3) / 4) for i in order])  # (index, scale)
        return iter([f"k{i}" for i in order])  # string keys


def keyed_loader(kind: str) -> fd.DataLoader:
    if kind.startswith("batch"):
        return fd.DataLoader(Keyed(), batch_sampler=OwnUnits(kind))
    return fd.DataLoader(Keyed(), batch_size=4, sampler=OwnUnits(kind))


UNIT_KINDS = ["batch ndarray", "batch tensor", "batch of pairs", "scale pairs", "string keys"]


@pytest.mark.parametrize("kind", UNIT_KINDS)
def test_units_that_are_not_plain_indices_are_checked(kind: str) -> None:
    """The review's finding 5: such units switched the check off (items lost, no error)."""
    _, state = save_after(lambda: keyed_loader(kind), 2, epochs_before=1)
    assert "digest_v1" in state["sampler"]
    with pytest.raises(fd.ResumeError, match="replaying the epoch's order"):
        resume_all(lambda: keyed_loader(kind), state)


@pytest.mark.parametrize("kind", UNIT_KINDS)
def test_units_that_are_not_plain_indices_resume_exactly_in_the_first_epoch(kind: str) -> None:
    full = flat(list(keyed_loader(kind)))
    head, state = save_after(lambda: keyed_loader(kind), 2)
    assert flat(head) + flat(resume_all(lambda: keyed_loader(kind), state)) == full


def test_units_that_cannot_be_encoded_are_not_checked() -> None:
    class Key:
        def __init__(self, i: int) -> None:
            self.i = i

    class ObjectKeys(tud.Dataset):
        def __len__(self) -> int:
            return 12

        def __getitem__(self, key: Key) -> int:
            return key.i

    class Sampler(tud.Sampler):
        def __len__(self) -> int:
            return 12

        def __iter__(self):
            return iter([Key(i) for i in range(12)])

    def make() -> fd.DataLoader:
        return fd.DataLoader(ObjectKeys(), batch_size=4, sampler=Sampler())

    head, state = save_after(make, 1)
    assert "digest_v1" not in state["sampler"]
    assert flat(head) + flat(resume_all(make, state)) == list(range(12))


def test_the_digest_of_units_in_one_call_is_that_of_one_at_a_time() -> None:
    """The replay digests what it skips in one update; the same bytes as the draws' (and as
    the first release's array("q") encoding, so its states still resume)."""
    from fastdata.loader._digest import IndexDigest

    def digest(chunks: list[list[Any]]) -> str | None:
        found = IndexDigest()
        for chunk in chunks:
            found.units(chunk)
        return found.value()

    for units in (
        [5, 3, 9, 0],
        [np.int64(5), torch.tensor(3), 9, 0],
        [[1, 2], [3, 4]],
        [(1, 0.5), (2, 0.75)],
        ["k1", "k2"],
        [np.array([1, 2]), torch.tensor([3, 4])],
    ):
        assert digest([list(units)]) == digest([[u] for u in units]) is not None
    first_release = hashlib.blake2b(array("q", [5, 3, 9, 0]).tobytes(), digest_size=16)
    assert digest([[5, 3, 9, 0]]) == first_release.hexdigest()
    batches = array("q", [2, 1, 2]).tobytes() + array("q", [2, 3, 4]).tobytes()
    assert digest([[[1, 2], [3, 4]]]) == hashlib.blake2b(batches, digest_size=16).hexdigest()
    assert digest([[np.array([1, 2]), torch.tensor([3, 4])]]) == digest([[[1, 2], [3, 4]]])
    assert digest([[(1, 0.5)]]) != digest([[(1, 0.75)]])
    assert digest([[object()]]) is None


class SlowFirst(tud.Dataset):
    """Items 0..31; item ``slow`` takes 0.6 s, so its batch is still in flight while later
    ones are consumed (in_order=False)."""

    def __init__(self, slow: int) -> None:
        self.slow = slow

    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> int:
        time.sleep(0.6 if i == self.slow else 0.0)
        return i


def out_of_order(sampler: Any, slow: int) -> fd.DataLoader:
    return fd.DataLoader(
        SlowFirst(slow),
        batch_size=2,
        sampler=sampler,
        num_workers=3,
        worker_method="thread",
        in_order=False,
    )


def test_out_of_order_consumption_beyond_an_empty_prefix_is_checked() -> None:
    """The review's finding 9: the epoch's first batch still in flight (the consumed prefix
    is 0 units), the ranges consumed out of order were not covered by any digest."""
    probe = OwnRandomSampler(32)
    list(iter(probe))
    slow = next(iter(probe))  # the first index of the sampler's second epoch

    def make() -> fd.DataLoader:
        return out_of_order(OwnRandomSampler(32), slow)

    _, state = save_after(make, 3, epochs_before=1)
    sampler = state["sampler"]
    assert sampler["units"] == 0 and sampler["done"] and sampler["digest_v1_units"] > 0
    with pytest.raises(fd.ResumeError, match="replaying the epoch's order"):
        resume_all(make, state)


def test_out_of_order_consumption_beyond_the_prefix_resumes_exactly() -> None:
    """The same with a sampler a resume restores: every item once, also resumed twice."""

    def sampler() -> tud.RandomSampler:
        return tud.RandomSampler(Items(32), generator=torch.Generator().manual_seed(3))

    slow = next(iter(sampler()))

    def make() -> fd.DataLoader:
        return out_of_order(sampler(), slow)

    head, state = save_after(make, 3)
    assert state["sampler"]["units"] == 0 and state["sampler"]["done"]
    resumed = make()
    resumed.load_state_dict(state)
    iterator = iter(resumed)
    middle = [next(iterator) for _ in range(2)]
    again = through_json(resumed.state_dict())
    del iterator
    rest = resume_all(make, again)
    assert sorted(flat(head + middle + rest)) == list(range(32))


# ------------------------------------------------------------------ thread workers' replay
def replay_warnings(make, state: dict[str, Any]) -> list[str]:
    """The ReplayWarnings that loading ``state`` raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        make().load_state_dict(state)
    return [str(w.message) for w in caught if issubclass(w.category, fd.ReplayWarning)]


@pytest.mark.parametrize("saved", ["multiprocessing", "thread"])
def test_a_thread_replay_of_an_iterable_without_state_dict_warns_at_load(saved: str) -> None:
    """The review's f_iter_thread_replay case: a dataset shuffling its shard with the global
    np.random, resumed in thread workers (saved with either), lost 8-9 of 40 items silently."""

    def make(method: str) -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2, worker_method=method)

    _, state = save_after(lambda: make(saved), 3)
    resumed = make("thread")
    with pytest.warns(fd.ReplayWarning) as caught:
        resumed.load_state_dict(state)
    assert len(caught) == 1 and caught[0].filename == __file__  # the user's line
    message = str(caught[0].message)
    for said in (
        "worker(s) 0, 1",
        "global random generators (random, numpy, torch)",
        "state_dict() / load_state_dict()",
        "fastdata.worker_generator()",
        "get_worker_info().seed",
        "worker_method='multiprocessing'",
    ):
        assert said in message, said
    assert issubclass(fd.ReplayWarning, UserWarning)


class Counted(tud.IterableDataset):
    """A deterministic shard per worker, with state_dict() (a position)."""

    def __init__(self) -> None:
        self.start = 0

    def __iter__(self):
        info = tud.get_worker_info()
        yield from range(info.id + 2 * self.start, 40, info.num_workers)

    def state_dict(self) -> dict[str, Any]:
        return {"start": self.start}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.start = state["start"]


def test_the_replay_warning_is_not_raised_elsewhere(tmp_path: Path) -> None:
    def iterable(method: str, dataset: Any = None) -> Any:
        return lambda: fd.DataLoader(
            dataset or Shuffled(40), batch_size=4, num_workers=2, worker_method=method
        )

    _, state = save_after(iterable("multiprocessing"), 3)
    assert replay_warnings(iterable("multiprocessing"), state) == []  # process workers
    _, between = save_after(iterable("thread"), 0)  # before the epoch: nothing replayed
    assert replay_warnings(iterable("thread"), between) == []
    _, stateful_state = save_after(iterable("thread", Counted()), 3)
    assert replay_warnings(iterable("thread", Counted()), stateful_state) == []

    def mapped() -> fd.DataLoader:
        return fd.DataLoader(
            Items(40), batch_size=4, shuffle=True, num_workers=2, worker_method="thread"
        )

    _, state = save_after(mapped, 3)
    assert replay_warnings(mapped, state) == []
    fd.synthetic.make_parquet(tmp_path, 40, files=1)

    def stream() -> fd.DataLoader:
        rows = fd.ParquetStream(tmp_path, columns=["id"], batch_size=4, shuffle=True, seed=1)
        return fd.DataLoader(rows, batch_size=None, num_workers=2, worker_method="thread")

    _, state = save_after(stream, 3)
    assert replay_warnings(stream, state) == []


def test_a_state_with_the_first_releases_worker_digests_loads_them_ignored() -> None:
    """States saved by the release that checked iterable workers' batches hold a digest_v1
    per worker: it loads, ignored (corrupt or not), and the replay is as before."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2)

    head, state = save_after(make, 3)
    state["workers"][0]["digest_v1"] = "ab" * 32
    state["workers"][1]["digest_v1"] = 3
    assert sorted(flat(head) + flat(resume_all(make, state))) == list(range(40))


# ------------------------------------------------------------------ older states, edits
def test_a_state_without_digests_loads_unchecked() -> None:
    """A state saved by the release before the digests (no digest_v1 field) resumes as it
    did: unchecked."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(Items(20), batch_size=4, sampler=OwnRandomSampler(20))

    _, state = save_after(make, 2, epochs_before=1)
    assert "digest_v1" in state["sampler"]
    del state["sampler"]["digest_v1"]
    assert len(resume_all(make, state)) == 3  # (the replayed order is not checked: as before)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("digest_v1", "xyz"),
        ("digest_v1", 3),
        ("digest_v1", "ab" * 40),
        ("digest_v1_units", -1),
        ("digest_v1_units", 99),
        ("digest_v1_units", "8"),
    ],
)
def test_a_corrupt_digest_is_refused_at_load(field: str, value: Any) -> None:
    loader = fd.DataLoader(Items(20), batch_size=4, shuffle=True)
    _, state = save_after(lambda: loader, 2)
    state["sampler"][field] = value
    with pytest.raises(fd.ResumeError, match=f"{field}=.* (is corrupt|the state is corrupt)"):
        loader.load_state_dict(state)


# ------------------------------------------------------------------ the property
@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["process-global", "seeded-sampler", "own-sampler"]))
    workers = draw(st.integers(1, 3))
    batch = draw(st.integers(4, 6))
    per_worker = 64 if kind == "process-global" else 0
    n = per_worker * workers if per_worker else 48
    batches = (n // workers // batch) * workers if per_worker else n // batch
    k = draw(st.integers(1, min(batches - 1, 6)))
    epoch = draw(st.integers(0, 2)) if kind.endswith("sampler") else 0
    if kind == "own-sampler":
        epoch = max(epoch, 1)
    return {"kind": kind, "workers": workers, "batch": batch, "n": n, "k": k, "epoch": epoch}


def loader_for(case: dict[str, Any]) -> fd.DataLoader:
    kind, n, batch = case["kind"], case["n"], case["batch"]
    if kind in ("seeded-sampler", "own-sampler"):
        sampler: Any = (
            tud.RandomSampler(Items(n), generator=torch.Generator().manual_seed(3))
            if kind == "seeded-sampler"
            else OwnRandomSampler(n)
        )
        return fd.DataLoader(Items(n), batch_size=batch, sampler=sampler)
    return fd.DataLoader(Shuffled(n), batch_size=batch, num_workers=case["workers"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_an_exact_replay_resumes_batch_for_batch_and_a_divergent_one_refuses(
    case: dict[str, Any],
) -> None:
    seed_all(1)
    reference = loader_for(case)
    for _ in range(case["epoch"]):
        list(reference)
    full = [b.tolist() for b in reference]
    head, state = save_after(lambda: loader_for(case), case["k"], case["epoch"], seed=1)
    seed_all(2)  # another job: the state brings back what it needs
    resumed = loader_for(case)
    resumed.load_state_dict(state)
    if case["kind"] == "own-sampler":
        with pytest.raises(fd.ResumeError, match="cannot resume"):
            list(resumed)
    else:
        assert [b.tolist() for b in head] + [b.tolist() for b in resumed] == full
