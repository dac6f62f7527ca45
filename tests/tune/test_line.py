"""Tests of fastdata.tune._line: the coarse positions, the coarse-to-fine line over one
setting's values on a made-up rate curve, the bisection for the cheapest value that reaches the
target, and the thread workers' line."""

from __future__ import annotations

from typing import Any

import pytest

from fastdata.tune._line import coarse, line, thread_workers, varying
from fastdata.tune._run import Run, StopSearch
from fastdata.tune._trial import Trial
from fastdata.tune.space import SearchSpace

from .fakes import FakeClock, settings


def rise_then_fall(workers: int) -> float:
    """5 batches/s without workers; 10 per worker up to a 40/s plateau from 4 to 6 workers;
    then 8 less per worker (the cores are oversubscribed)."""
    if workers == 0:
        return 5.0
    return min(10.0 * workers, 40.0) if workers <= 6 else 40.0 - 8.0 * (workers - 6)


def curve_run(rate: Any = rise_then_fall, target: float = 0.95) -> Run:
    """A run whose trials follow ``rate`` with a 1% interval; busy is rate / 40."""

    def evaluate(params: dict[str, Any], time_limit: float) -> Trial:
        r = rate(params["num_workers"])
        return Trial(params=params, throughput=r, busy=r / 40, rel_ci=0.01)

    return Run(evaluate, budget_s=1e6, planned=10, target=target, tolerance=0.05,
               max_memory=None, max_pairs=8, clock=FakeClock(), on_trial=None)  # fmt: skip


def measured(run: Run) -> list[int]:
    return [t.params["num_workers"] for t in run.trials]


def test_coarse_positions_double_and_end_at_the_last() -> None:
    assert coarse(1) == [0]
    assert coarse(2) == [0, 1]
    assert coarse(10) == [0, 1, 2, 4, 8, 9]
    assert coarse(17) == [0, 1, 2, 4, 8, 16]


def test_the_line_stops_past_the_peak_then_refines_around_the_cheapest_best() -> None:
    run = curve_run(target=2.0)  # never reached: the line runs its whole course
    line(run, range(17), lambda w: settings(w))
    # 8 workers (24/s) fall clearly below the peak: 16 is never tried. Then halfway to the
    # neighbours of 4 (the cheapest of the 40/s plateau): 3 and 6, then 5; 3 and 5 adjacent.
    assert measured(run) == [0, 1, 2, 4, 8, 3, 6, 5]


def test_a_value_reaching_the_target_ends_the_line_at_the_cheapest_that_does() -> None:
    run = curve_run(target=0.95)  # 38/s: 4 workers, not 3
    with pytest.raises(StopSearch) as stopped:
        line(run, range(17), lambda w: settings(w))
    assert stopped.value.why == "target"
    assert measured(run) == [0, 1, 2, 4, 3]  # bisected between 2 (short) and 4 (reaches)


def test_a_failing_value_ends_the_coarse_climb() -> None:
    def fails_from_four(workers: int) -> float:
        if workers >= 4:
            raise MemoryError("worker killed")
        return rise_then_fall(workers)

    run = curve_run(fails_from_four, target=2.0)
    run.trials.append(Trial(params=settings(0), throughput=1.0))  # a setting worked before
    line(run, range(17), lambda w: settings(w))
    assert measured(run)[1:] == [0, 1, 2, 4, 3]  # 4 failed: no 8; refined below it only


def test_thread_workers_are_tried_up_to_the_answer_or_the_largest_count_screened() -> None:
    space = SearchSpace.build({"num_workers": range(9)}, cores=4, device_used=False)
    run = curve_run()
    run.trials = [Trial(params=settings(w), throughput=rise_then_fall(w)) for w in (0, 1, 2, 4, 8)]
    counts, params_for = thread_workers(run, space, settings(4), reached=True)
    assert counts == [1, 2, 3, 4]  # the answer reached the target: more cannot feed more
    assert params_for(3) == settings(3, method="thread")
    counts, _ = thread_workers(run, space, settings(4), reached=False)
    assert counts == [1, 2, 3, 4, 5, 6, 7, 8]  # up to the largest count the processes tried


def test_a_varying_setting_keeps_the_others_of_the_answer() -> None:
    start = settings(3, 2, pin=True)
    assert varying(start, "prefetch_factor")(6) == settings(3, 6, pin=True)
    assert start == settings(3, 2, pin=True)  # the answer itself is left as it was
