"""The search: which settings to measure, in what order, and when to stop.

Measurements are expensive (seconds each) and noisy, so the search is not a grid. It takes
one setting at a time, in the order of :data:`~fastdata.tune.space.SETTINGS` (``num_workers``,
then ``worker_method``, then ``prefetch_factor``, then ``pin_memory``), each in two steps:

1. **Screening**: a coarse-to-fine line search over the setting's values, the others fixed at
   the answer so far (torch's defaults to begin with). The values at positions 0, 1, 2, 4, 8,
   ... (and the last) in ascending order, stopping at the first that is refused for memory,
   fails, or falls clearly below the best so far (by more than ``tolerance``, even at the top
   of its confidence interval) — throughput as a function of workers is taken to rise,
   flatten, then fall. Then, around the cheapest position the trials cannot tell apart from
   the line's best (:func:`~fastdata.tune.decide.equivalent`), the positions halfway to its
   measured neighbours, until they are adjacent. Whenever a setting keeps the consumer busy
   for at least ``target`` of the time (its :attr:`~fastdata.tune.measure.Trial.utilization`),
   the cheaper values between it and the last that did not are bisected for the cheapest
   that still does, and the line ends; the later settings then try only values cheaper than
   the answer's (costlier ones cannot feed the consumer more). ``worker_method``'s line is
   over the worker counts up to the answer's, with thread workers (the first line measured
   process workers, torch's default): threads may keep up with fewer. ``prefetch_factor`` and
   ``worker_method`` are skipped without workers, ``pin_memory`` unless batches go to a
   device.
2. **Comparisons**: :func:`~fastdata.tune.decide.decide` names the cheaper setting to compare
   with the fastest measured, and the two are measured in pairs of back-to-back rounds in
   alternating order until the rule's verdict is in (see :mod:`.decide`), then the next,
   until the decision is final. Its choice is the answer the next setting starts from.

The budget is shared out as it goes: a screening trial gets what remains of it over the shares
still planned (the screening trials of every stage, and :data:`PLANNED_PAIRS` pairs per stage),
a paired round half a share, so trials that finish early leave time to later ones; the search
stops when the budget has no room for the next one. Before a trial starts,
its memory is predicted from the trials with fewer workers (the largest growth per worker
seen so far); a setting predicted over ``max_memory`` is refused without starting it, and a
running trial that goes over is stopped (:class:`~fastdata.tune.measure.MemoryGuard`).
Ctrl-C returns the best so far.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any, NamedTuple

from fastdata.errors import FastDataError
from fastdata.tune.decide import (
    MAX_PAIRS,
    Decision,
    decide,
    describe_refused,
    equivalent,
    explain,
    pairs_of,
)
from fastdata.tune.measure import Trial
from fastdata.tune.space import PARAMS, SETTINGS, SearchSpace
from fastdata.tune.words import describe, format_size

__all__ = ["Outcome", "SearchSpace", "TuneError", "search"]

PLANNED_PAIRS = 4
"""Pairs of paired rounds planned per stage when the budget is shared out (a comparison
takes as many as its verdict needs, up to :data:`~fastdata.tune.decide.MAX_PAIRS`)."""
_LAST_SHARES = 4
"""Near the end of the plan, the remaining budget is still split at least this many ways."""

Evaluate = Callable[[dict[str, Any], float], Trial]
"""Measures ``params`` within a time limit in seconds (see :func:`fastdata.tune.measure`)."""


class TuneError(FastDataError):
    """The loader failed on the first configuration the tuner measured, or no setting
    completed within the memory ceiling."""


class Outcome(NamedTuple):
    """What :func:`search` found: every trial in order, the chosen one's index, why, how the
    search ended (``"complete"``, ``"target"``, ``"budget"`` or ``"interrupted"``), and the
    drift seen between repeated measurements of a setting (None: none was repeated)."""

    trials: list[Trial]
    chosen: int
    reason: str
    stopped: str
    drift: float | None = None


class _StopSearch(Exception):  # noqa: N818 (control flow, not an error)
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Run:
    """The trials of one search: the cache, the budget, memory and the stopping rules."""

    def __init__(
        self,
        evaluate: Evaluate,
        *,
        budget_s: float,
        planned: int,
        target: float,
        tolerance: float,
        max_memory: int | None,
        max_pairs: int,
        clock: Callable[[], float],
        on_trial: Callable[[Trial], None] | None,
    ) -> None:
        self.evaluate, self.budget_s, self.planned = evaluate, budget_s, planned
        self.target, self.tolerance = target, tolerance
        self.max_memory, self.max_pairs = max_memory, max_pairs
        self.clock, self.on_trial = clock, on_trial
        self.start = clock()
        self.min_slice = budget_s / planned / 4
        self.used = 0.0  # shares used: 1 a screening trial, 1/2 a paired round
        self.trials: list[Trial] = []
        self.cache: dict[tuple[Any, ...], Trial] = {}
        self.pairs = 0

    def elapsed(self) -> float:
        return self.clock() - self.start

    def trial(self, params: dict[str, Any]) -> Trial:
        """Screen ``params`` with a share of the budget (once: later asks come from the
        cache).

        Raises:
            _StopSearch: ``"budget"`` when the budget has no room for the trial.
        """
        key = tuple(params[p] for p in PARAMS)
        if key in self.cache:
            return self.cache[key]
        remaining = self.budget_s - self.elapsed()
        if remaining < self.min_slice:
            raise _StopSearch("budget")
        trial = self._measure(params, self._share(remaining))
        self.used += 1
        self.cache[key] = trial
        return trial

    def _share(self, remaining: float) -> float:
        """A screening trial's time: the remaining budget over the shares still planned."""
        share = remaining / max(self.planned - self.used, _LAST_SHARES)
        return min(max(share, self.min_slice), remaining)

    def pair(self, first: dict[str, Any], second: dict[str, Any]) -> bool:
        """One pair of paired rounds, ``first`` then ``second``; whether both completed.

        Raises:
            _StopSearch: ``"budget"`` when the budget has no room for the pair.
        """
        remaining = self.budget_s - self.elapsed()
        if remaining < 2 * self.min_slice:
            raise _StopSearch("budget")
        share = min(self._share(remaining) / 2, remaining / 2)
        self.used += 1
        number, self.pairs = self.pairs, self.pairs + 1
        rounds = [self._measure(p, share, pair=number) for p in (first, second)]
        return all(t.ok for t in rounds)

    def _measure(self, params: dict[str, Any], time_limit: float, pair: int | None = None) -> Trial:
        predicted = self.predicted_rss(params)
        if self.max_memory is not None and predicted is not None and predicted > self.max_memory:
            trial = Trial(
                params=dict(params),
                refused=f"not started: predicted {format_size(predicted)}, over the memory "
                f"ceiling of {format_size(self.max_memory)}",
            )
        else:
            begun = self.clock()
            try:
                trial = self.evaluate(dict(params), time_limit)
            except Exception as exc:
                if not any(t.ok for t in self.trials):
                    raise TuneError(f"the loader failed with {describe(params)}: {exc!r}") from exc
                trial = Trial(params=dict(params), seconds=self.clock() - begun, error=repr(exc))
            if trial.ok and self.max_memory is not None and trial.peak_rss > self.max_memory:
                trial = replace(trial, refused=f"peak {format_size(trial.peak_rss)}, over the "
                                f"memory ceiling of {format_size(self.max_memory)}")  # fmt: skip
        if pair is not None:
            trial = replace(trial, pair=pair)
        self.trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(trial)
        return trial

    def predicted_rss(self, params: dict[str, Any]) -> float | None:
        """The peak RSS ``params`` would reach, extrapolated from the trials with fewer
        workers at the largest growth per worker seen between two measured worker counts
        (None with fewer than two worker counts measured, or none fewer than asked)."""
        peaks: dict[int, int] = {}
        for t in self.trials:
            if t.peak_rss > 0:
                w = t.params["num_workers"]
                peaks[w] = max(peaks.get(w, 0), t.peak_rss)
        counts = sorted(peaks)
        workers = params["num_workers"]
        below = [w for w in counts if w <= workers]
        if len(counts) < 2 or not below:
            return None
        growth = max(
            max((peaks[b] - peaks[a]) / (b - a) for a, b in pairwise(counts)),
            0.0,
        )
        return peaks[below[-1]] + (workers - below[-1]) * growth

    def fits(self, trial: Trial) -> bool:
        return trial.ok and (self.max_memory is None or trial.peak_rss <= self.max_memory)

    def reaches(self, trial: Trial) -> bool:
        return self.fits(trial) and trial.utilization >= self.target

    def decision(self) -> Decision:
        """The decision rule applied to the trials so far."""
        return decide(
            self.trials,
            target=self.target,
            tolerance=self.tolerance,
            max_memory=self.max_memory,
            max_pairs=self.max_pairs,
        )


def search(
    evaluate: Evaluate,
    space: SearchSpace,
    /,
    *,
    budget_s: float,
    target: float,
    tolerance: float = 0.05,
    max_memory: int | None = None,
    cores: int | None = None,
    max_pairs: int = MAX_PAIRS,
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
) -> Outcome:
    """Run the search of the module docstring and choose a setting by :mod:`.decide`'s rule.

    Args:
        evaluate: measures one setting within a time limit (seconds).
        space: the values to search.
        budget_s: seconds for all measurements together (by ``clock``).
        target: utilization at which the consumer counts as kept busy.
        tolerance: throughputs within this fraction of the fastest count as equally good.
        max_memory: bytes of peak RSS a trial may use (None: no limit).
        cores: usable CPU cores, for the reason's words on workers beyond them.
        max_pairs: pairs after which a comparison that cannot decide ends.
        clock: the time source of the budget.
        on_trial: called with each trial as it completes (the CLI's progress).

    Raises:
        TuneError: the first setting measured failed (a broken loader), or none completed
            within ``max_memory``.
        KeyboardInterrupt: interrupted before any setting was measured.
    """
    run = _Run(
        evaluate,
        budget_s=budget_s,
        planned=_planned(space),
        target=target,
        tolerance=tolerance,
        max_memory=max_memory,
        max_pairs=max_pairs,
        clock=clock,
        on_trial=on_trial,
    )
    stopped = "complete"
    try:
        stopped = _stages(run, space)
    except _StopSearch as stop:
        stopped = stop.why
    except KeyboardInterrupt:
        if not any(run.fits(t) for t in run.trials):
            raise
        stopped = "interrupted"
    if not any(run.fits(t) for t in run.trials):
        raise TuneError(_nothing_fits(run))
    decision = run.decision()
    return Outcome(
        run.trials, decision.chosen, _reason(run, decision, stopped, cores), stopped,
        decision.drift,
    )  # fmt: skip


def _stages(run: _Run, space: SearchSpace) -> str:
    """Screen and compare one setting at a time (the module docstring); returns how the search
    ended: ``"target"`` when a setting reached the target, else ``"complete"``.

    Raises:
        TuneError: nothing fits after the first line (see :func:`_nothing_fits`).
        _StopSearch: ``"budget"`` when the budget ends.
    """
    reached = False
    for setting in SETTINGS:
        if setting.name == "num_workers":
            values: Sequence[Any] = space.num_workers
            params_for: Callable[[Any], dict[str, Any]] = space.base
        else:
            start = run.trials[run.decision().chosen].params
            if setting.needs_workers and start["num_workers"] == 0:
                continue
            if setting.name == "worker_method":
                if start["worker_method"] == "thread" or "thread" not in space.worker_method:
                    continue  # screened with threads already, or not searched
                values, params_for = _thread_workers(space, start)
            else:
                values = space.values(setting.name)
                if reached:  # costlier values cannot feed the consumer more
                    now = setting.rank(start[setting.name])
                    values = [v for v in values if setting.rank(v) <= now]
                params_for = _varying(start, setting.name)
        try:
            _line(run, values, params_for)
        except _StopSearch as stop:
            if stop.why != "target":
                raise
            reached = True
        if not any(run.fits(t) for t in run.trials):
            raise TuneError(_nothing_fits(run))
        _compare(run)
    return "target" if reached else "complete"


def _thread_workers(
    space: SearchSpace, start: dict[str, Any]
) -> tuple[list[int], Callable[[int], dict[str, Any]]]:
    """The worker method's line: thread workers at each worker count of the space up to the
    answer's, its other settings kept. Threads may feed the consumer with fewer workers than
    processes (no pickling, no second interpreter), or not at all at the same count (work that
    holds the GIL): the line finds the cheapest count that keeps up, as the first stage did
    for processes."""
    counts = [w for w in space.num_workers if 0 < w <= start["num_workers"]]
    return counts, lambda w: {**start, "num_workers": w, "worker_method": "thread"}


def _varying(start: dict[str, Any], name: str) -> Callable[[Any], dict[str, Any]]:
    """The settings ``start`` with setting ``name`` set to a given value."""
    return lambda value: {**start, name: value}


def _compare(run: _Run) -> None:
    """The comparisons :func:`decide` asks for, until its decision is final.

    Raises:
        _StopSearch: ``"budget"`` when the budget has no room for the next pair.
    """
    while (decision := run.decision()).next is not None:
        cheap, fast = run.trials[decision.next].params, run.trials[decision.fastest].params
        done = pairs_of(run.trials, decision.next, decision.fastest)
        order = (cheap, fast) if done % 2 == 0 else (fast, cheap)
        if not run.pair(*order):
            return  # a round failed or was refused: the rule decides on what is there


def _line(
    run: _Run,
    values: Sequence[Any],
    params_for: Callable[[Any], dict[str, Any]],
) -> None:
    """Coarse-to-fine search of one setting over ``values`` (see the module docstring).

    Raises:
        _StopSearch: ``"target"`` once the cheapest value reaching the target is known;
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
        raise _StopSearch("target")

    def cheapest() -> int | None:
        """The smallest measured position its trial cannot tell apart from this line's best."""
        fitting = [i for i, t in measured.items() if run.fits(t)]
        if not fitting:
            return None
        best = max((measured[i] for i in fitting), key=lambda t: t.throughput)
        return min(i for i in fitting if equivalent(measured[i], best, run.tolerance))

    peak = 0.0
    for i in _coarse(len(values)):
        trial = at(i)
        if not run.fits(trial):
            break  # failed or over memory: larger values only use more
        if trial.interval[1] < (1 - run.tolerance) * peak:
            break  # past the peak: slower even at the top of its confidence interval
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


def _coarse(n: int) -> list[int]:
    """Positions 0, 1, 2, 4, 8, ... below ``n``, and ``n - 1``."""
    positions = {0, n - 1}
    p = 1
    while p < n:
        positions.add(p)
        p *= 2
    return sorted(positions)


def _planned(space: SearchSpace) -> int:
    """A generous count of the shares of the budget the search takes: its screening trials
    and :data:`PLANNED_PAIRS` pairs per stage (two half-share rounds each)."""
    planned = 2 * len(_coarse(len(space.num_workers))) + PLANNED_PAIRS
    if space.num_workers[-1] > 0:
        for setting in SETTINGS[1:]:
            n = len(space.values(setting.name))
            if setting.name == "worker_method" and n > 1:  # a line over the worker counts
                n = len(space.num_workers)
            if n > 1:
                planned += len(_coarse(n)) - 1 + 2 * (n > 2) + PLANNED_PAIRS
    return planned


def _nothing_fits(run: _Run) -> str:
    """Why no setting can be chosen: every one failed or was refused for memory."""
    refused = [t for t in run.trials if t.refused is not None]
    if refused:
        first = refused[0]
        return (
            f"{describe(first.params)} was refused for memory ({first.refused}): no setting "
            "fits; raise max_memory (--max-memory) or free memory"
        )
    return "no setting completed (see the failed trials)"


def _reason(run: _Run, decision: Decision, stopped: str, cores: int | None) -> str:
    """Why the chosen trial was chosen, and how the search ended, in a few sentences."""
    trials = run.trials
    lines = explain(
        decision,
        trials,
        target=run.target,
        tolerance=run.tolerance,
        cores=cores,
    )
    if decision.refused:
        lines.append(describe_refused(trials, decision.refused, run.max_memory))
    failed = sum(1 for t in trials if t.error is not None)
    if failed:
        lines.append(f"{failed} trial(s) failed (see the table).")
    n = f"{len(trials)} trial{'' if len(trials) == 1 else 's'}"
    if run.pairs:
        n += f" ({run.pairs} pair{'' if run.pairs == 1 else 's'} of paired rounds among them)"
    lines.append(
        {
            "complete": f"Search complete: {n} in {run.elapsed():.0f} s.",
            "target": f"Search complete: {n} in {run.elapsed():.0f} s; screening ended at the "
            "first setting that reached the target, so costlier ones were not tried.",
            "budget": f"Stopped after {n} when the {run.budget_s:g} s budget was used; a "
            "larger budget measures more settings and finishes the comparisons.",
            "interrupted": f"Interrupted (Ctrl-C): the best of {n} so far.",
        }[stopped]
    )
    return " ".join(lines)
