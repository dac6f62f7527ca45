"""Tests of fastdata.tune.measure: the arithmetic of one trial on an injected clock (busy
fraction, throughput, start-up and the interval checked exactly), the sampler, a trial the
memory guard stops, and the GPU utilization averaged over the steady state."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from fastdata.tune import Trial, TuneError, tune
from fastdata.tune._nvml import open_nvml
from fastdata.tune.measure import STEP_FAILED, MemoryGuard, Sampler, measure

from .fakes import FakeClock, GiB, Passes, Readings, fake_pynvml, guarded, paced


def test_busy_fraction_throughput_and_startup_are_exact_on_a_fake_clock() -> None:
    clock = FakeClock()
    wait, step = 0.030, 0.010

    def factory(**params: Any) -> Iterator[int]:
        clock.advance(0.5)  # building the loader: part of start-up
        return paced(clock, lambda i: 0.2 if i == 0 else wait, 1000)

    trial = measure(
        factory,
        {"num_workers": 0},
        step=lambda batch: clock.advance(step),
        time_limit=60,
        memory=lambda: 42.0,
        clock=clock,
    )
    assert trial.busy == pytest.approx(step / (wait + step), rel=1e-9)
    assert trial.throughput == pytest.approx(1 / (wait + step), rel=1e-9)
    assert trial.startup_s == pytest.approx(0.5 + 0.2)  # the first batch is start-up, not steady
    assert (trial.wait_ms, trial.step_ms) == (pytest.approx(30.0), pytest.approx(10.0))
    assert trial.peak_rss == 42
    assert trial.rel_ci == pytest.approx(0, abs=1e-9)  # constant: stable after 6 blocks
    assert trial.batches == 6


def test_warm_up_of_every_pass_is_discarded_and_passes_repeat() -> None:
    clock = FakeClock()
    # Each pass: 5 batches; the first 2 (warm-up: the first round of 2 workers) are slow.
    trial = measure(
        lambda **p: Passes(clock, costs=[1.0, 0.5, 0.01, 0.01, 0.01]),
        {"num_workers": 2},
        step=None,
        time_limit=60,
        warmup=2,
        block=2,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.throughput == pytest.approx(100.0)
    assert trial.busy == 0.0
    assert trial.startup_s == pytest.approx(1.0)
    assert trial.batches == 12  # 6 blocks of 2, taken 3 per pass over 4 passes


def test_a_trial_may_end_during_the_warm_up_of_a_later_pass() -> None:
    clock = FakeClock()
    # Pass 1 measures 3 batches of 1 s (3.1 s in all); time is up in pass 2's warm-up batch.
    trial = measure(
        lambda **p: Passes(clock, costs=[0.1, 1.0, 1.0, 1.0]),
        {"num_workers": 1},
        step=None,
        time_limit=3.15,
        min_blocks=3,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.batches == 3
    assert trial.throughput == pytest.approx(1.0)


def endless(cost: Callable[[int], float], **options: Any) -> Trial:
    """One trial, in the main process, of an endless loader whose batch ``i`` costs
    ``cost(i)`` seconds of a fake clock."""
    clock = FakeClock()
    return measure(
        lambda **p: paced(clock, cost, 10**6),
        {"num_workers": 0},
        step=None,
        memory=lambda: 1.0,
        clock=clock,
        **options,
    )


def test_a_trial_measures_enough_blocks_for_an_interval_past_its_time_limit() -> None:
    # Batch times alternate 30 and 10 ms: the time limit (100 ms) is up after four batches,
    # but the trial goes on to min_blocks=6 blocks (150 ms), so its interval exists.
    trial = endless(lambda i: 0.01 if i % 2 else 0.03, time_limit=0.1, rel_ci=0.0)
    assert trial.batches == 6
    # Blocks of one batch, 10 and 30 ms three times each: mean 20 ms; t with 5 df: 2.5706.
    mean, sd = 0.02, (6 * 0.01**2 / 5) ** 0.5
    assert trial.rel_ci == pytest.approx(2.570582 * sd / 6**0.5 / mean, rel=3e-3)  # t expansion
    low, high = trial.interval
    assert low == pytest.approx(trial.throughput / (1 + trial.rel_ci))
    assert high == pytest.approx(trial.throughput / (1 - trial.rel_ci))


def test_a_loader_too_slow_for_the_blocks_stops_at_twice_its_time_limit() -> None:
    trial = endless(lambda i: 1.0 + 0.1 * (i % 2), time_limit=2.0)
    assert trial.seconds == pytest.approx(4.2)  # start-up batch, then 3 measured: past 4 s
    assert trial.batches == 3
    assert 0 < trial.rel_ci < math.inf  # 3 blocks: an interval, a wide one (t with 2 df)


def test_a_slow_trial_goes_on_past_twice_its_limit_until_its_interval_has_an_upper_bound() -> None:
    """Batches alternate 1 s and 3 s (start-up 3 s, limit 3 s): at twice the limit two blocks
    give a half-width of 635%, three 172%, four 92%: the trial stops there, so a paired round
    always counts rather than being measured again for nothing."""
    trial = endless(lambda i: 1.0 if i % 2 else 3.0, time_limit=3.0)
    assert trial.batches == 4 and trial.seconds == pytest.approx(11.0)
    assert trial.rel_ci == pytest.approx(3.182446 * (4 / 3) ** 0.5 / 2 / 2)  # t with 3 df
    # An interval that never gets an upper bound stops at four times the limit.
    stalled = endless(lambda i: 1.0 if i % 2 else 3.0, time_limit=1.0)
    assert stalled.seconds == pytest.approx(4.0) and stalled.batches == 1


def test_a_trial_stops_at_its_time_limit_when_the_estimate_stays_unstable() -> None:
    trial = endless(lambda i: 0.01 if i % 2 else 0.05, time_limit=3.0, rel_ci=0.0)  # never stable
    assert 3.0 <= trial.seconds < 3.0 + 0.05
    assert 0 < trial.rel_ci < 0.2  # alternating times: the CI shrinks but never to 0
    assert trial.throughput == pytest.approx(1 / 0.03, rel=0.01)


@pytest.mark.parametrize("batches", [0, 2])
def test_loaders_too_short_to_measure_say_so(batches: int) -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match=rf"yielded {batches} batch\(es\) in a pass, all warm-up"):
        measure(
            lambda **p: Passes(clock, [0.01] * batches),
            {"num_workers": 2},
            step=None,
            time_limit=1.0,
            warmup=2,
            memory=lambda: 1.0,
            clock=clock,
        )


def test_sampler_collects_until_stopped_then_takes_a_last_sample() -> None:
    values = iter(range(1000))
    with Sampler(lambda: float(next(values)), interval=0.001) as sampler:
        time.sleep(0.05)
    assert len(sampler.values) >= 2
    assert sampler.values == sorted(sampler.values)
    assert not sampler.running


# ------------------------------------------------------------------------ memory guard


def test_the_guard_stops_a_trial_over_the_ceiling_at_the_next_batch() -> None:
    readings = Readings(start=GiB, step=GiB / 4)
    clock = FakeClock()
    guard = guarded(readings, ceiling=2 * GiB, clock=clock)

    def factory(**params: Any) -> Iterator[int]:
        readings.processes |= {21, 22}  # the trial's workers

        def batches() -> Iterator[int]:
            for i in range(10**6):
                clock.advance(0.01)
                guard.read()  # the sampler's reading, made deterministic here
                yield i

        return batches()

    trial = measure(factory, {"num_workers": 2}, step=None, time_limit=60, guard=guard,
                    clock=clock, sample_interval=60)  # fmt: skip
    assert trial.refused == "used 2.25 GiB, over the memory ceiling of 2 GiB"
    assert not trial.ok and trial.error is None
    assert trial.batches < 10  # stopped at the next batch, not at the time limit
    assert readings.killed == []  # stopped by itself: its workers shut down, none killed
    guard.start()
    assert guard.tripped is None  # a new trial starts afresh


def test_a_loader_error_after_the_guard_tripped_is_a_refusal_not_a_failure() -> None:
    readings = Readings(start=3 * GiB, step=0)
    guard = guarded(readings, ceiling=2 * GiB)

    def factory(**params: Any) -> Iterator[int]:
        guard.read()
        raise RuntimeError("DataLoader worker (pid 21) is killed by signal: Killed.")

    trial = measure(factory, {"num_workers": 1}, step=None, time_limit=1, guard=guard,
                    sample_interval=60)  # fmt: skip
    assert trial.refused is not None and trial.error is None and trial.batches == 0
    unguarded = MemoryGuard(None, read_rss=lambda: 1.0, processes=set, kill=print)
    with pytest.raises(RuntimeError, match="killed by signal"):
        measure(factory, {"num_workers": 1}, step=None, time_limit=1, guard=unguarded)


# --------------------------------------------------------------------- GPU utilization


def test_gpu_utilization_is_averaged_over_the_steady_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([50]))
    clock = FakeClock()
    trial = measure(
        lambda **p: paced(clock, lambda i: 0.01, 100),
        {"num_workers": 0},
        step=lambda b: time.sleep(0.002),  # real time passes, so the sampler samples
        time_limit=1e9,
        gpu=open_nvml(0),
        sample_interval=0.001,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.gpu_util == 0.5
    plain = measure(
        lambda **p: paced(clock, lambda i: 0.01, 100),
        {"num_workers": 0},
        step=None,
        time_limit=1e9,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert plain.gpu_util is None


def test_an_error_of_the_step_propagates_marked_as_the_steps() -> None:
    """The search tells it from the loader's own failures by the mark (and ends with it)."""
    clock = FakeClock()

    def step(batch: int) -> None:
        if batch == 3:
            raise MemoryError("out of memory in the step")

    with pytest.raises(MemoryError, match="in the step") as raised:
        measure(lambda **p: paced(clock, lambda i: 0.01, 100), {"num_workers": 0}, step=step,
                time_limit=60, memory=lambda: 1.0, clock=clock)  # fmt: skip
    assert getattr(raised.value, STEP_FAILED)

    def loader_fails(**params: Any) -> Iterator[int]:
        yield 1
        raise OSError("the loader's own failure")

    with pytest.raises(OSError, match="own failure") as raised:
        measure(loader_fails, {"num_workers": 0}, step=None, time_limit=60,
                memory=lambda: 1.0, clock=clock)  # fmt: skip
    assert not getattr(raised.value, STEP_FAILED, False)


def test_too_few_batches_is_said_without_a_dict_in_a_repr() -> None:
    with pytest.raises(ValueError, match="yielded 1 batch") as raised:
        measure(lambda **p: [1], {"num_workers": 0, "pin_memory": False}, step=None,
                time_limit=1.0)  # fmt: skip
    assert "the loader built with num_workers=0, pin_memory=False yielded 1 batch(es)" in str(
        raised.value
    )
    with pytest.raises(TuneError, match=r"failed with num_workers=0.*: ValueError: the loader "):
        tune(lambda **p: torch.utils.data.DataLoader([1], batch_size=None), budget_s=1,
             search_space={"num_workers": [0]})  # fmt: skip
