"""Tests of fastdata.tune._replicas: a dataset that repeats its items once per worker is told
from one split between workers and from a constant one; the tuner does not advise workers on
its evidence and says why, bench warns that its rates count the repeats (the review rtun's
finding 1); a read-once stream's failure in thread workers says what it means."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest
import torch

import fastdata
from fastdata.config import LoaderConfig
from fastdata.tune import tune
from fastdata.tune.compare import compare
from fastdata.tune.measure import measure

THREADS = {"num_workers": 2, "prefetch_factor": 2, "pin_memory": False, "worker_method": "thread"}


class Unsplit(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Every worker yields all the items (torch's replica behaviour, not split by
    get_worker_info()), as the review's loaders:unsharded did."""

    def __init__(self, n: int = 512, pause: float = 0.0) -> None:
        self.n, self.pause = n, pause

    def __iter__(self) -> Iterator[torch.Tensor]:
        for i in range(self.n):
            if self.pause:
                time.sleep(self.pause)  # I/O-like: releases the GIL
            yield torch.tensor([float(i)])


class Split(Unsplit):
    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        wid, n = (0, 1) if info is None else (info.id, info.num_workers)
        return (x for i, x in enumerate(super().__iter__()) if i % n == wid)


class Constant(Unsplit):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return (torch.zeros(1) for _ in range(self.n))


class SilentStart(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
    """Split between workers, each clip starting with a silent (all-zero) frame: with batches
    of 1 the first batches of every worker are equal (the review rdc's finding 2)."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        wid, n = (0, 1) if info is None else (info.id, info.num_workers)
        for clip in range(wid, 40, n):
            yield torch.zeros(4)
            for frame in range(5):
                yield torch.full((4,), clip * 10 + frame + 1.0)


@dataclass
class Batch:
    x: torch.Tensor


def trial_of(dataset: Any, batch_size: int = 8, **settings: Any) -> Any:
    return measure(
        lambda **p: fastdata.DataLoader(dataset, batch_size=batch_size, **p),
        settings,
        step=None,
        time_limit=0.2,
        warmup=2,
        block=2,
    )


def test_a_dataset_repeated_per_worker_is_told_from_split_and_constant_ones() -> None:
    from fastdata.tune._replicas import Replicas, same

    assert trial_of(Unsplit(), **THREADS).repeats
    assert not trial_of(Split(), **THREADS).repeats
    assert not trial_of(Constant(), **THREADS).repeats  # equal everywhere: not the signature
    one = {**THREADS, "num_workers": 1}
    assert not trial_of(Unsplit(), **one).repeats  # one worker: one copy
    mapped = fastdata.DataLoader(list(range(64)), batch_size=8, **THREADS)
    assert Replicas(mapped)._wanted == ()  # a sampler splits a map-style dataset
    assert same({"x": torch.ones(2), "y": [1, "a"]}, {"x": torch.ones(2), "y": [1, "a"]})
    assert not same(torch.ones(2), torch.ones(2, dtype=torch.float64))


def test_sharded_data_whose_shards_begin_alike_is_not_taken_for_repeats() -> None:
    """rdc 2: a split dataset whose workers' first batches are equal (a leading silent frame,
    batches of 1) was flagged, its multi-worker trials failed with a false reason. Worker 0's
    first two batches must equal worker 1's first two now."""
    assert not trial_of(SilentStart(), batch_size=1, **THREADS).repeats
    assert not trial_of(SilentStart(), batch_size=1, **{**THREADS, "num_workers": 3}).repeats
    assert trial_of(Unsplit(), **{**THREADS, "num_workers": 3}).repeats


def test_numpy_and_dataclass_batches_are_compared_and_unordered_loaders_not_watched() -> None:
    """rdc 3: same() said False for NumPy arrays and dataclasses of tensors, so an unsplit
    dataset with such batches went unflagged; with in_order=False the batch numbers do not
    say which worker made a batch, and the check is not made (not 1 run in 5)."""
    from fastdata.tune._replicas import Replicas, same

    assert same(np.arange(3), np.arange(3)) and not same(np.arange(3), np.arange(1, 4))
    assert not same(np.arange(3), np.arange(3, dtype=np.float32))
    assert not same(np.zeros((2, 3)), np.zeros((3, 2))) and not same(np.zeros(2), torch.zeros(2))
    assert same(Batch(torch.ones(2)), Batch(torch.ones(2)))
    assert not same(Batch(torch.ones(2)), Batch(torch.zeros(2)))
    stacked = torch.utils.data.DataLoader(
        Unsplit(), batch_size=8, num_workers=2, collate_fn=lambda b: np.stack(b)
    )
    replicas = Replicas(stacked)
    for index, batch in zip(range(4), stacked, strict=False):
        replicas.see(index, batch)
    assert replicas.found
    unordered = torch.utils.data.DataLoader(Unsplit(), batch_size=8, num_workers=2, in_order=False)
    assert Replicas(unordered)._wanted == ()


def test_persistent_workers_repeating_their_items_are_still_flagged() -> None:
    from fastdata.tune._replicas import Replicas

    loader = torch.utils.data.DataLoader(
        Unsplit(64), batch_size=8, num_workers=2, persistent_workers=True
    )
    replicas = Replicas(loader)
    for _ in range(2):
        for index, batch in enumerate(loader):
            replicas.see(index, batch)
    assert replicas.found


def test_tune_with_only_multi_worker_settings_says_the_repeats() -> None:
    """rdc 4: every setting failed as repeats and tune() raised "no setting completed (see the
    failed trials)", with no trials to see and no warning."""
    from fastdata.tune import TuneError
    from fastdata.tune._replicas import RepeatedItemsWarning

    space = {"num_workers": [2, 3], "worker_method": ["thread"]}
    with (
        pytest.warns(RepeatedItemsWarning, match="once per worker"),
        pytest.raises(TuneError, match=r"repeats its items once per worker") as raised,
    ):
        tune(Unsplit(4096), loader_kwargs={"batch_size": 16}, step_ms=1, budget_s=2,
             search_space=space)  # fmt: skip
    assert "add num_workers 0 or 1" in str(raised.value)
    assert "see the failed trials" not in str(raised.value)


def test_a_trial_writes_repeats_only_when_set() -> None:
    """rdc 6: version-3 files carried "repeats", which readers of version 3 before it refuse;
    written only when True, every file without repeats still reads there."""
    from fastdata.tune import Trial

    plain = Trial(params={"num_workers": 0}, throughput=1.0)
    assert "repeats" not in plain.to_dict()
    assert Trial.from_dict(plain.to_dict()) == plain
    flagged = replace(plain, repeats=True)
    assert flagged.to_dict()["repeats"] is True
    assert Trial.from_dict(flagged.to_dict()) == flagged


@pytest.mark.slow
def test_tune_does_not_advise_workers_for_a_dataset_that_repeats_its_items() -> None:
    """rtun 1: `fastdata tune` chose 2 workers for such a loader ("193.6 batches/s against
    107.5"), and every sample came twice. Trials with 2 or more workers now fail with the
    reason, the choice is among the others, the reason says what to do, and Python warns."""
    from fastdata.tune._replicas import REPEATS, RepeatedItemsWarning

    space = {"num_workers": [0, 1, 2], "worker_method": ["thread"]}
    with pytest.warns(RepeatedItemsWarning, match=r"repeats its items once per worker"):
        result = tune(Unsplit(2048, pause=0.0005), loader_kwargs={"batch_size": 16},
                      step_ms=5, budget_s=3, search_space=space)  # fmt: skip
    assert result.config.num_workers <= 1
    repeated = [t for t in result.trials if t.params["num_workers"] == 2]
    assert repeated and all(t.repeats and t.error == REPEATS for t in repeated)
    assert "get_worker_info()" in result.reason and "left out" in result.reason
    assert "repeats its items once per worker" in result.report()


def test_bench_says_its_rates_count_repeated_batches() -> None:
    from fastdata.tune._replicas import RepeatedItemsWarning

    def make() -> torch.utils.data.DataLoader:  # type: ignore[type-arg]
        return torch.utils.data.DataLoader(Unsplit(4096), batch_size=8)

    # rdc 8: nothing is printed "above" a warning, and "it" did not fit both sides
    with pytest.warns(RepeatedItemsWarning, match=r"rates of fastdata's rounds count") as caught:
        result = compare(make, config=LoaderConfig(**THREADS), rounds=2, budget_s=0.8)
    assert "above" not in str(caught[0].message)
    assert result.repeats == ("fastdata",)
    report = " ".join(result.report().split())
    assert "warning: Your IterableDataset repeats its items once per worker" in report
    assert "(and so does the ratio)" in report and "get_worker_info()" in report
    assert "rates of fastdata's rounds above" in report
    both = replace(result, repeats=("your loader", "fastdata"))
    assert "overstate the data delivered" in both._repeated_rates()


@pytest.mark.filterwarnings("ignore:OneShot cannot be pickled")
def test_a_read_once_stream_in_thread_workers_fails_with_what_it_means() -> None:
    from fastdata.tune._replicas import failure_hint

    def read() -> Iterator[torch.Tensor]:
        for i in range(640):
            time.sleep(0.001)  # reading: the generator is executing, the GIL released
            yield torch.tensor([float(i)])

    class OneShot(torch.utils.data.IterableDataset):  # type: ignore[type-arg]
        def __init__(self) -> None:
            self.items = read()

        def __iter__(self) -> Iterator[torch.Tensor]:
            return (x for x in self.items)

    loader = fastdata.DataLoader(OneShot(), batch_size=16, **THREADS)
    with pytest.raises(ValueError, match="generator already executing") as raised:
        list(loader)
    assert "read the same generator at once" in failure_hint(raised.value)
    assert failure_hint(ValueError("other")) == ""
