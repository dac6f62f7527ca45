"""The search: which configurations to measure, when to stop, and which one to choose.

Measurements are expensive (seconds each) and noisy, so the search is a short sequence of 1-D
line searches rather than a grid:

1. ``num_workers``, coarse to fine: the space's values at positions 0, 1, 2, 4, 8, ... (and
   the last) in ascending order, stopping at the first that is over ``max_memory``, fails,
   or falls clearly below the best so far (by more than ``tolerance``, even at the top of
   its confidence interval) — throughput as a function of workers is taken to rise,
   flatten, then fall. Then, around the cheapest position equivalent to the best
   (:func:`fastdata.tune.decide.equivalent`), the positions halfway to its measured
   neighbours, until they are adjacent (on a plateau this walks down to its cheap edge; a
   higher peak between coarse positions moves the search there).
2. ``prefetch_factor`` the same way, with the workers chosen so far (skipped without workers).
3. ``pin_memory``: each remaining value (only searched when batches go to a device).
4. Paired rounds, with what is left of the budget: the choice's rival (see
   :func:`_confirm`) and the fastest setting, back to back, alternating, up to
   :data:`PAIRS` pairs;
   :func:`~fastdata.tune.decide.decide` chooses the cheaper one when the pairs do not show
   it slower (a change of the machine between trials hits both rounds of a pair alike).

Whenever a configuration keeps the consumer busy for at least ``target`` of the time, the
smaller values between it and the last one that did not are bisected for the cheapest that
still does, and the search stops: nothing cheaper is left to find. Every trial gets an equal
share of what remains of the budget (so trials that settle early leave time to later ones);
the search stops when the budget is used, and Ctrl-C returns the best so far.

The choice is :func:`fastdata.tune.decide.decide`'s: the cheapest trial that cannot be told
apart from the fastest (overlapping 95% intervals, or within ``tolerance``) or that reaches
the target; more workers than cores only when measured faster beyond the intervals.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from fastdata._validate import is_int
from fastdata.errors import FastDataError
from fastdata.tune.decide import cost, decide, equivalent, explain
from fastdata.tune.measure import Trial
from fastdata.tune.report import describe, format_size

__all__ = ["Outcome", "SearchSpace", "TuneError", "search"]

PARAMS = ("num_workers", "prefetch_factor", "pin_memory")
"""The loader settings the tuner searches, in the order it searches them."""
PAIRS = 3
"""Paired rounds of the choice's rival and the fastest setting, budget permitting."""

Evaluate = Callable[[dict[str, Any], float], Trial]
"""Measures ``params`` within a time limit in seconds (see :func:`fastdata.tune.measure`)."""


class TuneError(FastDataError):
    """The loader failed on the first configuration the tuner measured."""


@dataclass(frozen=True)
class SearchSpace:
    """The values each searched setting may take, sorted and without duplicates."""

    num_workers: tuple[int, ...]
    prefetch_factor: tuple[int, ...]
    pin_memory: tuple[bool, ...]

    @classmethod
    def build(
        cls, given: Mapping[str, Iterable[Any]] | None, /, *, cores: int, device_used: bool
    ) -> SearchSpace:
        """The user's space (any subset of :data:`PARAMS`) completed with the defaults:
        ``num_workers`` 0 .. 2 x ``cores``, ``prefetch_factor`` 1 .. 8, ``pin_memory``
        False and True when batches go to a device, else False.

        Raises:
            ValueError: an unknown setting or a value it cannot take.
        """
        given = dict(given or {})
        unknown = sorted(set(given) - set(PARAMS))
        if unknown:
            raise ValueError(
                f"search_space has unknown setting(s) {', '.join(map(repr, unknown))}: "
                f"valid settings are {', '.join(PARAMS)}"
            )
        checks: dict[str, tuple[Callable[[Any], bool], str, tuple[Any, ...]]] = {
            "num_workers": (_int_at_least(0), "integers >= 0", tuple(range(2 * cores + 1))),
            "prefetch_factor": (_int_at_least(1), "integers >= 1", tuple(range(1, 9))),
            "pin_memory": (
                lambda v: isinstance(v, bool),
                "True / False",
                (False, True) if device_used else (False,),
            ),
        }
        values = {}
        for name, (valid, expected, default) in checks.items():
            chosen = tuple(given[name]) if name in given else default
            bad = [v for v in chosen if not valid(v)]
            if bad or not chosen:
                raise ValueError(
                    f"search_space[{name!r}]={list(chosen)!r}: expected a non-empty list of "
                    f"{expected}"
                )
            values[name] = tuple(sorted(set(chosen)))
        return cls(**values)

    def base(self, num_workers: int) -> dict[str, Any]:
        """The settings measured with ``num_workers`` before the later stages refine them:
        torch's default prefetch_factor of 2 (or the nearest allowed) and pin_memory off
        (where allowed)."""
        prefetch = None
        if num_workers > 0:
            prefetch = min(self.prefetch_factor, key=lambda v: (abs(v - 2), v))
        pin = False not in self.pin_memory  # False where allowed
        return {"num_workers": num_workers, "prefetch_factor": prefetch, "pin_memory": pin}


class Outcome(NamedTuple):
    """What :func:`search` found: every trial in order, the chosen one's index, why, and how
    the search ended (``"complete"``, ``"target"``, ``"budget"`` or ``"interrupted"``)."""

    trials: list[Trial]
    chosen: int
    reason: str
    stopped: str


class _StopSearch(Exception):  # noqa: N818 (control flow, not an error)
    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class _Run:
    """The trials of one search: the cache, the budget and the stopping rules."""

    def __init__(
        self,
        evaluate: Evaluate,
        *,
        budget_s: float,
        planned: int,
        target: float,
        tolerance: float,
        max_memory: int | None,
        cores: int | None,
        clock: Callable[[], float],
        on_trial: Callable[[Trial], None] | None,
    ) -> None:
        self.evaluate, self.budget_s, self.planned = evaluate, budget_s, planned
        self.target, self.tolerance = target, tolerance
        self.max_memory, self.cores = max_memory, cores
        self.clock, self.on_trial = clock, on_trial
        self.start = clock()
        self.min_slice = budget_s / planned / 4
        self.trials: list[Trial] = []
        self.cache: dict[tuple[Any, ...], Trial] = {}

    def trial(self, params: dict[str, Any], *, again: int | None = None) -> Trial:
        """Measure ``params`` with a share of the budget: once, later asks come from the
        cache, unless ``again`` is a pair number (a paired round: half a planned share)."""
        key = tuple(params[p] for p in PARAMS)
        if key in self.cache and again is None:
            return self.cache[key]
        remaining = self.budget_s - (self.clock() - self.start)
        if remaining < self.min_slice:
            raise _StopSearch("budget")
        if again is not None:
            share = max(self.budget_s / self.planned / 2, self.min_slice)
        else:
            share = max(remaining / max(self.planned - len(self.trials), 1), self.min_slice)
        begun = self.clock()
        try:
            trial = self.evaluate(dict(params), min(share, remaining))
        except Exception as exc:
            if not any(t.ok for t in self.trials):
                raise TuneError(f"the loader failed with {describe(params)}: {exc!r}") from exc
            trial = Trial(params=dict(params), seconds=self.clock() - begun, error=repr(exc))
        if again is not None:
            trial = replace(trial, pair=again)
        self.cache.setdefault(key, trial)
        self.trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(trial)
        return trial

    def fits(self, trial: Trial) -> bool:
        return trial.ok and (self.max_memory is None or trial.peak_rss <= self.max_memory)

    def reaches(self, trial: Trial) -> bool:
        return self.fits(trial) and trial.busy >= self.target

    def rule(self) -> dict[str, Any]:
        """The keyword arguments of :func:`decide` and :func:`explain` for this search."""
        return {
            "target": self.target,
            "tolerance": self.tolerance,
            "max_memory": self.max_memory,
            "cores": self.cores,
        }

    def chosen(self) -> int:
        """The index of the trial the decision rule picks from the trials so far."""
        return decide(self.trials, **self.rule()).chosen


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
    clock: Callable[[], float] = time.monotonic,
    on_trial: Callable[[Trial], None] | None = None,
) -> Outcome:
    """Run the search of the module docstring and choose a configuration.

    Args:
        evaluate: measures one configuration within a time limit (seconds).
        space: the values to search.
        budget_s: seconds for all measurements together (by ``clock``).
        target: busy fraction at which the consumer counts as kept busy.
        tolerance: throughputs within this fraction of the best count as equally good.
        max_memory: bytes of peak RSS a chosen configuration may use (None: no limit).
        cores: usable CPU cores; more workers are chosen only when measured faster beyond
            the intervals (None: no such rule).
        clock: the time source of the budget.
        on_trial: called with each trial as it completes (the CLI's progress).

    Raises:
        TuneError: the first configuration measured failed (a broken loader).
        KeyboardInterrupt: interrupted before any configuration was measured.
    """
    run = _Run(
        evaluate,
        budget_s=budget_s,
        planned=_planned(space),
        target=target,
        tolerance=tolerance,
        max_memory=max_memory,
        cores=cores,
        clock=clock,
        on_trial=on_trial,
    )
    stopped = "complete"
    try:
        _line(run, space.num_workers, space.base)
        workers = run.trials[run.chosen()].params
        if workers["num_workers"] > 0:
            _line(run, space.prefetch_factor, lambda pf: {**workers, "prefetch_factor": pf})
        best = run.trials[run.chosen()].params
        for pin in space.pin_memory:
            if run.reaches(run.trial({**best, "pin_memory": pin})):
                raise _StopSearch("target")
        _confirm(run)
    except _StopSearch as stop:
        stopped = stop.why
    except KeyboardInterrupt:
        if not any(t.ok for t in run.trials):
            raise
        stopped = "interrupted"
    chosen = run.chosen()
    return Outcome(run.trials, chosen, _reason(run, stopped), stopped)


def _line(
    run: _Run,
    values: Sequence[Any],
    params_for: Callable[[Any], dict[str, Any]],
) -> None:
    """Coarse-to-fine search of one setting over ``values`` (see the module docstring).

    Raises:
        _StopSearch: ``"target"`` once the cheapest value reaching the target is known;
            ``"budget"`` when the budget is used.
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
        """The smallest measured position equivalent to this line's best."""
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


def _confirm(run: _Run) -> None:
    """Paired rounds, with what is left of the budget: the choice's rival and the fastest
    setting, back to back, in alternating order, up to :data:`PAIRS` pairs (see
    :mod:`fastdata.tune.decide`).
    The rival is the fastest setting with the most workers below the choice's — workers are
    what a choice costs; one measured at a bad moment is measured again — or, for a choice
    with more workers than cores, the fastest within the cores (what must be beaten to pass
    them); with neither, the fastest cheaper setting. Stops quietly when the budget ends.
    """
    decision = decide(run.trials, **run.rule())
    if decision.fastest is None:
        return
    chosen, fastest = run.trials[decision.chosen], run.trials[decision.fastest]
    cheaper = [
        t
        for t in run.trials
        if run.fits(t) and t.pair is None and cost(t.params) < cost(chosen.params)
    ]
    if not cheaper:
        return
    workers = chosen.params["num_workers"]
    if run.cores is not None and workers > run.cores:  # what justified passing the cores
        fewer = [t for t in cheaper if t.params["num_workers"] <= run.cores]
    else:
        fewer = [t for t in cheaper if t.params["num_workers"] < workers]
        most = max((t.params["num_workers"] for t in fewer), default=0)
        fewer = [t for t in fewer if t.params["num_workers"] == most]
    rival = max(fewer or cheaper, key=lambda t: t.throughput)
    try:
        for pair in range(PAIRS):
            order = (rival, fastest) if pair % 2 == 0 else (fastest, rival)
            for trial in order:
                run.trial(trial.params, again=pair)
    except _StopSearch:
        return


def _coarse(n: int) -> list[int]:
    """Positions 0, 1, 2, 4, 8, ... below ``n``, and ``n - 1``."""
    positions = {0, n - 1}
    p = 1
    while p < n:
        positions.add(p)
        p *= 2
    return sorted(positions)


def _planned(space: SearchSpace) -> int:
    """A generous count of the trials the search will make, to share the budget out."""
    planned = len(_coarse(len(space.num_workers))) + 2 + PAIRS  # a pair: two half shares
    if len(space.prefetch_factor) > 1 and space.num_workers[-1] > 0:
        planned += len(_coarse(len(space.prefetch_factor))) + 1
    return planned + len(space.pin_memory) - 1


def _reason(run: _Run, stopped: str) -> str:
    """Why the chosen trial was chosen, and how the search ended, in a few sentences."""
    trials = run.trials
    decision = decide(trials, **run.rule())
    lines = explain(decision, trials, **run.rule())
    ok = [t for t in trials if t.ok]
    over = len(ok) - len([t for t in ok if run.fits(t)])
    if decision.fastest is not None and over:
        lines.append(
            f"{over} trial(s) over max_memory={format_size(run.max_memory or 0)} excluded."
        )
    failed = len(trials) - len(ok)
    if failed:
        lines.append(f"{failed} trial(s) failed (see the table).")
    elapsed = run.clock() - run.start
    n = f"{len(trials)} trial{'' if len(trials) == 1 else 's'}"
    lines.append(
        {
            "complete": f"Search complete: {n} in {elapsed:.0f} s.",
            "target": f"Stopped early after {n}: the target was reached and nothing cheaper "
            "was left to try.",
            "budget": f"Stopped after {n} when the {run.budget_s:g} s budget was used; a "
            "larger budget measures more candidates.",
            "interrupted": f"Interrupted (Ctrl-C): the best of {n} so far.",
        }[stopped]
    )
    return " ".join(lines)


def _int_at_least(minimum: int) -> Callable[[Any], bool]:
    return lambda v: is_int(v) and v >= minimum
