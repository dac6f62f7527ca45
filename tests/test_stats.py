"""Tests of fastdata._stats: per-stage times and the shard cache's counts in shared memory (one
row per process, summed), the collate and pin timers the loader wraps around torch's steps,
and the clock of the consumer's wait."""

from __future__ import annotations

import pickle
import threading
import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from fastdata import _stats
from fastdata._stats import (
    CACHE_COUNTS,
    STAGES,
    CacheCounts,
    PinTimer,
    StageTimes,
    TimedCollate,
    WaitClock,
    unwrap,
)


class FakeClock:
    """``time.perf_counter`` that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(_stats, "time", types.SimpleNamespace(perf_counter=fake))
    return fake


work = st.lists(
    st.tuples(st.sampled_from(STAGES), st.integers(0, 10**6), st.integers(0, 1000)), max_size=40
)


@settings(deadline=None)
@given(work)
def test_stage_totals_sum_what_was_added(adds: list[tuple[str, int, int]]) -> None:
    times = StageTimes()
    expected: dict[str, list[float]] = {}
    for stage, micros, count in adds:
        times.add(stage, micros / 1e6, count)
        seconds, n = expected.setdefault(stage, [0.0, 0])
        expected[stage] = [seconds + micros / 1e6, n + count]
    totals = times.totals()
    assert set(totals) == {stage for stage, (_, n) in expected.items() if n > 0}
    for stage, got in totals.items():
        assert got["count"] == expected[stage][1]
        assert got["seconds"] == pytest.approx(expected[stage][0])
    times.reset()
    assert times.totals() == {}


def test_a_stage_counts_one_item_by_default_and_unknown_stages_fail() -> None:
    times = StageTimes()
    times.add("decode", 0.5)
    times.add("decode", 0.25)
    assert times.totals() == {"decode": {"seconds": 0.75, "count": 2}}
    with pytest.raises(KeyError):
        times.add("decoding", 1.0)


@settings(deadline=None)
@given(st.lists(st.tuples(st.sampled_from(CACHE_COUNTS), st.integers(0, 10**9)), max_size=40))
def test_cache_totals_sum_what_was_added(adds: list[tuple[str, int]]) -> None:
    counts = CacheCounts()
    for name, n in adds:
        counts.add(name, n)
    expected = Counter[str]()
    for name, n in adds:
        expected[name] += n
    assert counts.totals() == {name: expected[name] for name in CACHE_COUNTS}


def test_cache_counts_from_many_threads_are_all_kept() -> None:
    counts = CacheCounts()

    def hit() -> None:
        for _ in range(2000):
            counts.add("hits")
            counts.add("fetched_bytes", 3)

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert counts.totals()["hits"] == 8000
    assert counts.totals()["fetched_bytes"] == 24000
    with pytest.raises(KeyError):
        counts.add("hit")


def test_both_tables_pickle_after_use() -> None:
    """The memoryview (and the lock) made on first use stay behind: a copy sent to a spawned
    worker makes its own."""
    times, counts = StageTimes(), CacheCounts()
    times.add("read", 1.0)
    counts.add("misses", 2)
    times_copy, counts_copy = pickle.loads(pickle.dumps((times, counts)))
    assert times_copy.totals() == {"read": {"seconds": 1.0, "count": 1}}
    times_copy.add("read", 1.0)
    counts_copy.add("misses", 1)
    assert times_copy.totals()["read"] == {"seconds": 2.0, "count": 2}
    assert counts_copy.totals()["misses"] == 3


class Recording(Dataset[int]):
    """Each item adds to the stage times and the cache counts of the process reading it."""

    def __init__(self, times: StageTimes, counts: CacheCounts) -> None:
        self.times, self.counts = times, counts

    def __len__(self) -> int:
        return 40

    def __getitem__(self, i: int) -> int:
        for _ in range(50):
            self.times.add("read", 0.5, 2)
            self.counts.add("hits")
        return i


def test_worker_processes_add_to_the_tables_the_main_process_reads() -> None:
    times, counts = StageTimes(), CacheCounts()
    loader = DataLoader(
        Recording(times, counts), batch_size=None, num_workers=2, multiprocessing_context="fork"
    )
    assert sorted(loader) == list(range(40))
    assert times.totals() == {"read": {"seconds": 1000.0, "count": 4000}}
    assert counts.totals()["hits"] == 2000
    Recording(times, counts)[0]  # the main process has a row of its own too
    assert times.totals()["read"]["count"] == 4100


def test_timed_collate_records_its_time_and_returns_the_batch(clock: FakeClock) -> None:
    times = StageTimes()

    def collate(items: list[int]) -> int:
        clock.now += 2.0
        return sum(items)

    timed = TimedCollate(collate, times)
    assert timed([1, 2, 3]) == 6
    assert timed([4]) == 4
    assert times.totals() == {"collate": {"seconds": 4.0, "count": 2}}


class Pinnable:
    """A batch type with its own pin_memory(), which torch's pin step calls."""

    def __init__(self, value: int, pinned: bool = False) -> None:
        self.value, self.pinned = value, pinned

    def pin_memory(self, device: Any = None) -> Pinnable:
        return Pinnable(self.value, pinned=True)


def make_pinnable(items: list[int]) -> Pinnable:
    return Pinnable(sum(items))


def test_stats_time_the_pin_step_torch_runs() -> None:
    times = StageTimes()
    collate = TimedCollate(make_pinnable, times, pin=True)
    wrapped = collate([1, 2, 3])
    assert isinstance(wrapped, PinTimer)
    # What torch's pin-memory thread does with each batch:
    pinned = torch.utils.data._utils.pin_memory.pin_memory(wrapped, None)
    assert (pinned.value, pinned.pinned) == (6, True)
    assert times.totals()["pin"]["count"] == 1 and times.totals()["collate"]["count"] == 1
    # Where torch does not pin, the loader takes the batch out unchanged.
    unpinned = next(WaitClock([collate([4])]))
    assert (unpinned.value, unpinned.pinned) == (4, False)


def test_the_pin_timer_records_the_time_pinning_took(clock: FakeClock) -> None:
    times = StageTimes()

    class Slow(Pinnable):
        def pin_memory(self, device: Any = None) -> Pinnable:
            clock.now += 0.25
            return Pinnable(self.value, pinned=True)

    assert PinTimer(Slow(1), times).pin_memory().pinned
    assert times.totals() == {"pin": {"seconds": 0.25, "count": 1}}


def test_a_timed_collate_pickles_for_spawned_workers() -> None:
    times = StageTimes()
    copy = pickle.loads(pickle.dumps(TimedCollate(make_pinnable, times, pin=True)))
    assert copy.pin and copy.collate_fn is make_pinnable
    assert unwrap(copy([2, 3])).value == 5
    assert copy.times.totals()["collate"]["count"] == 1


def test_unwrap_takes_out_a_pin_timers_batch_and_leaves_the_rest() -> None:
    batch = {"x": torch.arange(3)}
    assert unwrap(PinTimer(batch, StageTimes())) is batch
    assert unwrap(batch) is batch


@settings(deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=20))
def test_the_wait_clock_counts_only_the_time_in_next(waits: list[tuple[int, int]]) -> None:
    """Each pair: the time the iterator takes to produce a batch, then the consumer's time."""
    fake = FakeClock()
    saved = _stats.time
    _stats.time = types.SimpleNamespace(perf_counter=fake)  # type: ignore[assignment]
    try:

        def batches() -> Iterator[Any]:
            for i, (produce, _) in enumerate(waits):
                fake.now += produce
                yield PinTimer(i, StageTimes()) if i % 2 else i
            fake.now += 7  # finding out there is no more

        clock = WaitClock(batches())
        assert iter(clock) is clock
        got = []
        for batch, (_, consume) in zip(clock, waits, strict=False):
            got.append(batch)
            fake.now += consume
        assert list(clock) == []
        assert got == list(range(len(waits)))  # PinTimers unwrapped
        assert clock.take() == sum(produce for produce, _ in waits) + 7
        assert clock.take() == 0.0
    finally:
        _stats.time = saved
