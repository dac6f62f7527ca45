"""Tests of fastdata.tune._run: a search's bookkeeping on a fake clock: the cache, the budget
shared out, the memory predicted and refused, a broken loader."""

from __future__ import annotations

from typing import Any

import pytest

from fastdata.tune._run import Run, StopSearch, TuneError
from fastdata.tune._trial import Trial

from .fakes import FakeClock, GiB, settings


class Timed:
    """An ``evaluate`` that uses its whole time limit on ``clock`` and records the limits."""

    def __init__(self, clock: FakeClock, peak: int = GiB) -> None:
        self.clock, self.peak = clock, peak
        self.limits: list[float] = []

    def __call__(self, params: dict[str, Any], time_limit: float) -> Trial:
        self.limits.append(time_limit)
        self.clock.advance(time_limit)
        return Trial(params=params, throughput=10.0, peak_rss=self.peak, rel_ci=0.01)


def screen_all(run: Run) -> None:
    """Screen new settings until the run stops the search."""
    while True:
        run.trial(settings(len(run.trials)))


def make_run(evaluate: Any, clock: FakeClock, **options: Any) -> Run:
    options = {"budget_s": 100.0, "planned": 4, "target": 0.95, "tolerance": 0.05,
               "max_memory": None, "max_pairs": 8, "on_trial": None, **options}  # fmt: skip
    return Run(evaluate, clock=clock, **options)


def test_memory_is_predicted_from_the_growth_per_worker() -> None:
    run = Run(lambda p, t: Trial(params=p), budget_s=10, planned=5, target=0.95, tolerance=0.05,
               max_memory=None, max_pairs=6, clock=FakeClock(), on_trial=None)  # fmt: skip
    run.trials = [Trial(params=settings(0), peak_rss=GiB)]
    assert run.predicted_rss(settings(4)) is None  # one worker count: no growth known
    run.trials += [Trial(params=settings(1), peak_rss=2 * GiB),
                   Trial(params=settings(2), peak_rss=int(2.5 * GiB))]  # fmt: skip
    assert run.predicted_rss(settings(4)) == pytest.approx(4.5 * GiB)  # 2.5 + 2 x 1 GiB
    assert run.predicted_rss(settings(1)) == 2 * GiB  # measured


def test_a_screening_trial_is_measured_once_with_its_share_of_the_budget() -> None:
    clock = FakeClock()
    timed = Timed(clock)
    seen: list[Trial] = []
    run = make_run(timed, clock, on_trial=seen.append)
    first = run.trial(settings(0))
    assert run.trial(settings(0)) is first and timed.limits == [25.0]  # 100 s over 4 shares
    run.trial(settings(1))
    assert timed.limits[1] == pytest.approx(75 / 4)  # what remains, still split 4 ways
    assert seen == run.trials and len(run.trials) == 2
    with pytest.raises(StopSearch) as stopped:  # no room for a trial under a quarter share
        screen_all(run)
    assert stopped.value.why == "budget"
    assert run.elapsed() <= 100 and 100 - run.elapsed() < 100 / 4 / 4


def test_a_pair_measures_both_settings_back_to_back_with_half_shares() -> None:
    clock = FakeClock()
    timed = Timed(clock)
    run = make_run(timed, clock)
    assert run.pair(settings(1), settings(2))
    assert [t.pair for t in run.trials] == [0, 0] and timed.limits == [12.5, 12.5]
    assert [t.params for t in run.trials] == [settings(1), settings(2)]
    assert run.pair(settings(2), settings(1)) and run.pairs == 2
    assert run.trials[-1].pair == 1


def test_settings_over_the_memory_ceiling_are_refused_before_or_after() -> None:
    clock = FakeClock()
    timed = Timed(clock, peak=3 * GiB)
    run = make_run(timed, clock, max_memory=2 * GiB)
    over = run.trial(settings(0))
    assert over.refused == "peak 3 GiB, over the memory ceiling of 2 GiB" and not run.fits(over)
    run.trials = [
        Trial(params=settings(0), peak_rss=GiB),
        Trial(params=settings(1), peak_rss=GiB + GiB // 2),
    ]
    calls = len(timed.limits)
    predicted = run.trial(settings(3))  # 1.5 GiB + 2 x 0.5 GiB
    assert predicted.refused == "not started: predicted 2.5 GiB, over the memory ceiling of 2 GiB"
    assert len(timed.limits) == calls  # never started


def test_a_broken_loader_is_an_error_and_a_later_failure_a_failed_trial() -> None:
    clock = FakeClock()

    def broken(params: dict[str, Any], time_limit: float) -> Trial:
        raise OSError("no such file")

    with pytest.raises(TuneError, match=r"the loader failed with num_workers=0.*no such file"):
        make_run(broken, clock).trial(settings(0))
    run = make_run(broken, clock)
    run.trials = [Trial(params=settings(0), throughput=5.0)]  # one setting worked
    failed = run.trial(settings(1))
    assert failed.error == "OSError: no such file" and not failed.ok


def test_a_step_slowed_beside_the_workers_is_busy_only_for_its_own_time() -> None:
    """A step of 6 ms alone took 12 ms beside a thread worker holding the GIL: the consumer
    looked 97% busy at 81 batches/s, while a GPU would have been busy for 6 ms of each 12.3.
    Counted at the step's own time, the setting no longer reaches the target."""
    steps = {0: (6.0, 0.3), 1: (12.0, 0.97), 2: (6.1, 0.9)}  # workers: (step ms, busy)

    def evaluate(params: dict[str, Any], time_limit: float) -> Trial:
        step, busy = steps[params["num_workers"]]
        return Trial(params=params, throughput=busy / step * 1000, busy=busy,
                     step_ms=step, rel_ci=0.01)  # fmt: skip

    run = make_run(evaluate, FakeClock())
    alone, slowed, noisy = (run.trial(settings(w, method="thread")) for w in range(3))
    assert alone.busy == 0.3 and noisy.busy == 0.9  # within the tolerance: as measured
    assert slowed.busy == pytest.approx(0.97 * 6 / 12) and not run.reaches(slowed)
    gpu = make_run(lambda p, t: Trial(params=p, throughput=80.0, busy=0.97, step_ms=12.0,
                                      gpu_util=0.97, rel_ci=0.01), FakeClock())  # fmt: skip
    gpu.trials.append(alone)
    assert gpu.trial(settings(1)).busy == 0.97  # NVML measured the GPU itself


def test_without_a_trial_without_workers_the_step_beside_processes_is_its_own_time() -> None:
    """A search space without 0 workers: the step's own time is the quickest beside process
    workers (which hold no GIL of the training process), so a step slowed beside thread
    workers is still counted busy only for its own time."""
    steps = {("multiprocessing", 2): (6.0, 0.6), ("thread", 2): (12.0, 0.97)}

    def evaluate(params: dict[str, Any], time_limit: float) -> Trial:
        step, busy = steps[params["worker_method"], params["num_workers"]]
        return Trial(params=params, throughput=busy / step * 1000, busy=busy,
                     step_ms=step, rel_ci=0.01)  # fmt: skip

    run = make_run(evaluate, FakeClock())
    threads_first = run.trial(settings(2, method="thread"))
    assert threads_first.busy == 0.97  # nothing to compare with yet: as measured
    assert run.trial(settings(2)).busy == 0.6
    assert run.pair(settings(2), settings(2, method="thread"))  # the rounds that decide
    slowed = run.trials[-1]
    assert slowed.params["worker_method"] == "thread"
    assert slowed.busy == pytest.approx(0.97 * 6 / 12) and not run.reaches(slowed)
