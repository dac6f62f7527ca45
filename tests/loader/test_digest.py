"""A resume that replays checks that the replay reproduces what was consumed
(fastdata.loader._digest): a sampler's indices, an iterable worker's batches. Where it does
not — a sampler with a random.Random of its own resumed after its first epoch, a thread
worker shuffling with the process's global numpy generator — the resume is refused with a
ResumeError, not delivered with items lost and repeated (the review's findings 1 and 2);
exact replays still resume batch for batch; states without the digests still load."""

from __future__ import annotations

import json
import random
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


# ------------------------------------------------------------------ finding 1
@pytest.mark.parametrize(("saved", "loaded"), [("multiprocessing", "thread"), ("thread", "thread")])
def test_a_thread_replay_from_the_global_generators_is_refused(saved: str, loaded: str) -> None:
    def make(method: str) -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2, worker_method=method)

    _, state = save_after(lambda: make(saved), 3)
    resumed = make(loaded)
    resumed.load_state_dict(state)
    with pytest.raises(fd.ResumeError, match=r"worker \d replayed .* global generators"):
        list(resumed)


def test_a_process_replay_from_the_global_generators_still_resumes() -> None:
    def make() -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2)

    head, state = save_after(make, 3)
    resumed = make()
    resumed.load_state_dict(state)
    assert sorted(flat(head) + flat(list(resumed))) == list(range(40))


# ------------------------------------------------------------------ finding 2
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
    resumed = make()
    resumed.load_state_dict(state)
    assert flat(head) + flat(list(resumed)) == full


class OwnRandomShards(tud.IterableDataset):
    """Shards by worker, shuffled by a random.Random the dataset holds (no state_dict)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rng = random.Random(0)

    def __iter__(self):
        info = tud.get_worker_info()
        shard = list(range(info.id, self.n, info.num_workers))
        self.rng.shuffle(shard)
        yield from shard


def test_persistent_workers_whose_dataset_holds_its_generator_refuse_after_an_epoch() -> None:
    """The same hazard as the sampler's, in persistent workers: their dataset copies' own
    generators moved on over epoch 0, the resumed run's fresh workers replay from its start."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(
            OwnRandomShards(64), batch_size=4, num_workers=2, persistent_workers=True
        )

    _, state = save_after(make, 3, epochs_before=1)
    resumed = make()
    resumed.load_state_dict(state)
    with pytest.raises(fd.ResumeError, match=r"worker \d replayed"):
        list(resumed)


# ------------------------------------------------------------------ older states, edits
def test_a_state_without_digests_loads_unchecked() -> None:
    """A state saved by the release before the digests (no digest_v1 fields) resumes as
    it did: unchecked."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(Items(20), batch_size=4, sampler=OwnRandomSampler(20))

    _, state = save_after(make, 2, epochs_before=1)
    assert "digest_v1" in state["sampler"]
    del state["sampler"]["digest_v1"]
    resumed = make()
    resumed.load_state_dict(state)
    assert len(list(resumed)) == 3  # (the replayed order is not checked: as before)

    def make_iterable() -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2, worker_method="thread")

    _, state = save_after(make_iterable, 3)
    assert all("digest_v1" in w for w in state["workers"])
    for worker in state["workers"]:
        del worker["digest_v1"]
    resumed = make_iterable()
    resumed.load_state_dict(state)
    assert len(flat(list(resumed))) == 28


@pytest.mark.parametrize("where", ["sampler", "worker"])
@pytest.mark.parametrize("value", ["xyz", 3, "ab" * 40])
def test_a_corrupt_digest_is_refused_at_load(where: str, value: Any) -> None:
    if where == "sampler":
        loader = fd.DataLoader(Items(20), batch_size=4, shuffle=True)
    else:
        loader = fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2)
    _, state = save_after(lambda: loader, 2)
    if where == "sampler":
        state["sampler"]["digest_v1"] = value
    else:
        state["workers"][0]["digest_v1"] = value
    with pytest.raises(fd.ResumeError, match=r"digest_v1=.* is corrupt"):
        loader.load_state_dict(state)


def test_the_digest_is_taken_before_the_consumer_changes_a_batch() -> None:
    """A training loop that changes its batches in place does not make an exact replay
    look divergent."""

    def make() -> fd.DataLoader:
        return fd.DataLoader(Shuffled(40), batch_size=4, num_workers=2)

    seed_all(0)
    loader = make()
    iterator = iter(loader)
    head = []
    for _ in range(3):
        batch = next(iterator)
        head += batch.tolist()
        batch.zero_()  # the consumer's in-place change
    state = through_json(loader.state_dict())
    del iterator
    resumed = make()
    resumed.load_state_dict(state)
    assert sorted(head + flat(list(resumed))) == list(range(40))


def test_only_random_values_that_differ_warn() -> None:
    """A thread worker's replay whose items are the same but whose random floats differ
    (draws from the shared global generators) resumes, with a warning."""

    class Jittered(tud.IterableDataset):
        def __iter__(self):
            info = tud.get_worker_info()
            for i in range(info.id, 24, info.num_workers):
                yield [i, float(np.random.rand())]

    def make() -> fd.DataLoader:
        return fd.DataLoader(Jittered(), batch_size=3, num_workers=2, worker_method="thread")

    head, state = save_after(make, 2)
    resumed = make()
    resumed.load_state_dict(state)
    with pytest.warns(UserWarning, match="floating-point values differ"):
        rest = list(resumed)
    assert sorted(flat([b[0] for b in head + rest])) == list(range(24))


# ------------------------------------------------------------------ the property
@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            ["process-global", "thread-own", "seeded-sampler", "own-sampler", "thread-global"]
        )
    )
    workers = draw(st.integers(1, 3))
    batch = draw(st.integers(4, 6))
    per_worker = 64 if kind.endswith("global") or kind == "thread-own" else 0
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
    dataset = Shuffled(n, own=kind == "thread-own")
    method = "multiprocessing" if kind == "process-global" else "thread"
    return fd.DataLoader(
        dataset, batch_size=batch, num_workers=case["workers"], worker_method=method
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_an_exact_replay_resumes_batch_for_batch_and_a_divergent_one_refuses(
    case: dict[str, Any],
) -> None:
    divergent = case["kind"] in ("own-sampler", "thread-global")
    seed_all(1)
    reference = loader_for(case)
    for _ in range(case["epoch"]):
        list(reference)
    full = [b.tolist() for b in reference]
    head, state = save_after(lambda: loader_for(case), case["k"], case["epoch"], seed=1)
    seed_all(2)  # another job: the state brings back what it needs
    resumed = loader_for(case)
    resumed.load_state_dict(state)
    if divergent:
        with pytest.raises(fd.ResumeError, match="cannot resume"):
            list(resumed)
    else:
        assert [b.tolist() for b in head] + [b.tolist() for b in resumed] == full


# ------------------------------------------------------------------ the summary
def test_a_summary_tells_items_apart_and_floats_aside() -> None:
    from fastdata.loader._digest import chain, summary

    images = torch.arange(64 * 3 * 8 * 8, dtype=torch.int64).reshape(64, 3, 8, 8).to(torch.uint8)
    batch = {"image": images, "label": torch.arange(64), "noise": torch.zeros(64)}
    ident, values = summary(batch)
    # one sampled value per image: another image order is another summary
    shuffled = {**batch, "image": images.flip(0)}
    assert summary(shuffled)[0] != ident
    # floats go to the second half: the same items with other random values
    noisy = {**batch, "noise": torch.ones(64)}
    assert summary(noisy)[0] == ident and summary(noisy)[1] != values
    # a view is summarized as its values (no copy made), and so is a numpy array
    channels_last = images.permute(0, 2, 3, 1)
    assert summary(channels_last) == summary(channels_last.contiguous())
    assert summary(channels_last.numpy())[1:] == summary(channels_last.contiguous().numpy())[1:]
    assert len(chain("", summary(batch))) == 64 and chain("", summary(batch)) != chain(
        "", summary(shuffled)
    )
    # objects of the user's count by their type, not their repr (which may hold an address)
    assert summary([object()]) == summary([object()])
