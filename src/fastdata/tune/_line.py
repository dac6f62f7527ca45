"""The screening of one setting: a coarse-to-fine line search over its values.

The values at positions 0, 1, 2, 4, 8, ... (and the last) in ascending order (:func:`coarse`),
stopping at the first that is refused for memory, fails, or (from position 2 on: one worker
can be slower than none where two are faster) falls clearly below the best so far; then,
around the cheapest position the trials cannot tell apart from the line's best, the positions
halfway to its measured neighbours, until they are adjacent. A value that
reaches the target ends the line once the cheapest value that still does is bisected for
(:func:`line`). The worker method's line runs over the worker counts with thread workers
(:func:`thread_workers`); the other settings' lines vary one setting of the answer so far
(:func:`varying`). :mod:`fastdata.tune.search` describes the whole search.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastdata.tune._run import Run, StopSearch
from fastdata.tune._statistics import equivalent
from fastdata.tune._trial import Trial
from fastdata.tune.space import SearchSpace

__all__ = ["coarse", "line", "processes_left_out", "thread_workers", "varying"]


def thread_workers(
    run: Run, space: SearchSpace, start: dict[str, Any], reached: bool
) -> tuple[list[int], Callable[[int], dict[str, Any]]]:
    """The worker method's line: thread workers at the space's worker counts, torch's defaults
    for the rest. Threads may feed the consumer with fewer workers than processes (no
    pickling, no second interpreter), or where processes do not help at all (a hand-over
    that costs more than the work), or not at the same count (work that holds the GIL): the
    line finds the cheapest count that keeps up, as the first stage did for processes. Up to
    the answer's count once it reached the target (more cannot feed the consumer more), else
    up to the largest count the processes' line measured. Where a process worker failed or
    was over the memory ceiling (:func:`processes_left_out`), the processes' line says
    nothing of threads (a handle that does not survive a fork, a second interpreter's
    memory), so threads run on their own range: every count the space has."""
    top = start["num_workers"]
    if processes_left_out(run):
        top = max(space.num_workers)
    elif not reached:
        screened = [t.params["num_workers"] for t in run.trials if t.pair is None and run.fits(t)]
        top = max([top, *screened])
    counts = [w for w in space.num_workers if 0 < w <= top]
    return counts, lambda w: {**space.base(w), "worker_method": "thread"}


def processes_left_out(run: Run) -> list[Trial]:
    """The screening trials of process workers that failed or did not fit in memory."""
    return [
        t for t in run.trials
        if t.pair is None and t.params["num_workers"] > 0
        and t.params.get("worker_method") != "thread" and not run.fits(t)
    ]  # fmt: skip


def varying(start: dict[str, Any], name: str) -> Callable[[Any], dict[str, Any]]:
    """The settings ``start`` with setting ``name`` set to a given value."""
    return lambda value: {**start, name: value}


def line(
    run: Run,
    values: Sequence[Any],
    params_for: Callable[[Any], dict[str, Any]],
) -> None:
    """Coarse-to-fine search of one setting over ``values`` (see the module docstring).

    Raises:
        StopSearch: ``"target"`` once the cheapest value reaching the target is known;
            ``"budget"`` when the screening budget is used.
    """
    measured: dict[int, Trial] = {}

    def at(i: int) -> Trial:
        measured[i] = run.trial(params_for(values[i]))
        if run.reaches(measured[i]):
            bisect_cheapest(i)
        return measured[i]

    def bisect_cheapest(high: int) -> None:
        low = max((j for j, t in measured.items() if j < high and not run.reaches(t)), default=-1)
        while high - low > 1:
            mid = (low + high) // 2
            measured[mid] = run.trial(params_for(values[mid]))
            low, high = (low, mid) if run.reaches(measured[mid]) else (mid, high)
        raise StopSearch("target")

    def cheapest() -> int | None:
        """The smallest measured position its trial cannot tell apart from this line's best."""
        fitting = [i for i, t in measured.items() if run.fits(t)]
        if not fitting:
            return None
        best = max((measured[i] for i in fitting), key=lambda t: t.throughput)
        return min(i for i in fitting if equivalent(measured[i], best, run.tolerance))

    peak = 0.0
    for i in coarse(len(values)):
        trial = at(i)
        if not run.fits(trial):
            break  # failed or over memory: larger values only use more
        if i > 1 and trial.interval[1] < (1 - run.tolerance) * peak:
            break  # past the peak: slower even at the top of its confidence interval
        # (not at position 1: one worker is often slower than none, where the hand-over costs
        # more than the work, and two are faster; the same dip can follow any setting's start)
        peak = max(peak, trial.throughput)
    while (anchor := cheapest()) is not None:
        tested = sorted(measured)
        pos = tested.index(anchor)
        neighbours = tested[max(pos - 1, 0) : pos] + tested[pos + 1 : pos + 2]
        between = [(n + anchor) // 2 for n in neighbours if abs(n - anchor) > 1]
        if not between:
            return
        for i in between:
            at(i)


def coarse(n: int) -> list[int]:
    """Positions 0, 1, 2, 4, 8, ... below ``n``, and ``n - 1``."""
    positions = {0, n - 1}
    p = 1
    while p < n:
        positions.add(p)
        p *= 2
    return sorted(positions)
