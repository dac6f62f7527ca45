"""The bookkeeping of one search: its trials, the budget shared out, memory, and the errors
that end it.

:class:`Run` measures what the search's strategy (:mod:`fastdata.tune._line`,
:mod:`fastdata.tune.search`) asks for. A screening trial is measured once (later asks come
from its cache) with what remains of the budget over the shares still planned; a pair of
paired rounds takes half a share each, so trials that finish early leave time to later ones.
When the budget has no room for the next one, :class:`StopSearch` ends the search. Before a
trial starts, its memory is predicted from the trials with fewer workers (the largest growth
per worker seen so far); a setting predicted over ``max_memory`` is refused without starting
it, and one that went over is refused after. A broken loader (the first setting fails) is a
:class:`TuneError`. A Ctrl-C recorded by :class:`~fastdata.tune._interrupt.Interrupts` ends
the search at the next trial or round boundary, even where its ``KeyboardInterrupt`` was lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from itertools import pairwise
from typing import Any

from fastdata.errors import FastDataError
from fastdata.tune._interrupt import Interrupts
from fastdata.tune._replicas import failure_hint
from fastdata.tune._trial import Trial
from fastdata.tune.decide import Decision, decide
from fastdata.tune.measure import STEP_FAILED
from fastdata.tune.space import PARAMS
from fastdata.tune.words import describe, format_size

__all__ = ["Evaluate", "Run", "StopSearch", "TuneError"]

_LAST_SHARES = 4
"""Near the end of the plan, the remaining budget is still split at least this many ways."""

Evaluate = Callable[[dict[str, Any], float], Trial]
"""Measures ``params`` within a time limit in seconds (see :func:`fastdata.tune.measure`)."""


class TuneError(FastDataError):
    """The loader failed on the first configuration the tuner measured, or no setting
    completed within the memory ceiling."""


class StopSearch(Exception):  # noqa: N818 (control flow, not an error)
    """Ends the search early: ``why`` is ``"budget"`` (no room for the next trial) or
    ``"target"`` (a setting reached the target: costlier ones are not screened)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


class Run:
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
        interrupts: Interrupts | None = None,
    ) -> None:
        self.evaluate, self.budget_s, self.planned = evaluate, budget_s, planned
        self.target, self.tolerance = target, tolerance
        self.max_memory, self.max_pairs = max_memory, max_pairs
        self.clock, self.on_trial = clock, on_trial
        self.interrupts = interrupts if interrupts is not None else Interrupts()
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
            StopSearch: ``"budget"`` when the budget has no room for the trial.
        """
        key = tuple(params[p] for p in PARAMS)
        if key in self.cache:
            return self.cache[key]
        remaining = self.budget_s - self.elapsed()
        if remaining < self.min_slice:
            raise StopSearch("budget")
        trial = self._measure(params, self._share(remaining))
        self.used += 1
        self.cache[key] = trial
        return trial

    def _share(self, remaining: float) -> float:
        """A screening trial's time: the remaining budget over the shares still planned."""
        share = remaining / max(self.planned - self.used, _LAST_SHARES)
        return min(max(share, self.min_slice), remaining)

    def pair(self, first: dict[str, Any], second: dict[str, Any], *, stretch: float = 1) -> bool:
        """One pair of paired rounds, ``first`` then ``second``, each ``stretch`` times half a
        share (within the remaining budget); whether both completed.

        Raises:
            StopSearch: ``"budget"`` when the budget has no room for the pair.
        """
        remaining = self.budget_s - self.elapsed()
        if remaining < 2 * self.min_slice:
            raise StopSearch("budget")
        share = min(stretch * self._share(remaining) / 2, remaining / 2)
        self.used += 1
        number, self.pairs = self.pairs, self.pairs + 1
        rounds = [self._measure(p, share, pair=number) for p in (first, second)]
        return all(t.ok for t in rounds)

    def _measure(self, params: dict[str, Any], time_limit: float, pair: int | None = None) -> Trial:
        self.interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was swallowed ends it here
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
                if getattr(exc, STEP_FAILED, False) or isinstance(exc, TuneError):
                    raise  # the user's step failed (as in training), or the factory is wrong
                error = f"{type(exc).__name__}: {exc}{failure_hint(exc)}"
                if not any(t.ok for t in self.trials):
                    raise TuneError(f"the loader failed with {describe(params)}: {error}") from exc
                trial = Trial(params=dict(params), seconds=self.clock() - begun, error=error)
            trial = self._step_alone(trial)
            if trial.ok and self.max_memory is not None and trial.peak_rss > self.max_memory:
                trial = replace(trial, refused=f"peak {format_size(trial.peak_rss)}, over the "
                                f"memory ceiling of {format_size(self.max_memory)}")  # fmt: skip
        if pair is not None:
            trial = replace(trial, pair=pair)
        self.trials.append(trial)
        if self.on_trial is not None:
            self.on_trial(trial)
        self.interrupts.check()
        return trial

    def _step_alone(self, trial: Trial) -> Trial:
        """``trial`` with the consumer's busy fraction counted at the step's own time, as the
        first trial without workers measured it: a step that took longer beside the workers
        (waiting for the GIL thread workers hold, or for a core) was not busy meanwhile; on a
        GPU that time would leave it idle. NVML's utilization needs no such correction.
        Without such a trial (a search space without 0 workers), the quickest step beside
        process workers, which hold no GIL of the training process, is the step's own time."""
        ok = [t for t in self.trials if t.ok and t.step_ms > 0]
        alone = next((t.step_ms for t in ok if t.params["num_workers"] == 0), 0.0)
        beside_processes = [t.step_ms for t in ok if t.params.get("worker_method") != "thread"]
        alone = alone or min(beside_processes, default=0.0)
        slower = alone * (1 + self.tolerance) < trial.step_ms  # beyond the noise of a step
        if not trial.ok or trial.gpu_util is not None or not alone > 0 or not slower:
            return trial
        return replace(trial, busy=trial.busy * alone / trial.step_ms)

    def predicted_rss(self, params: dict[str, Any]) -> float | None:
        """The peak RSS ``params`` would reach, extrapolated from the trials with fewer
        workers of its worker method (or none) at the largest growth per worker seen between
        two measured worker counts (None with fewer than two worker counts measured, or none
        fewer than asked)."""
        peaks: dict[int, int] = {}
        method = params.get("worker_method")
        for t in self.trials:  # thread workers grow by far less than processes: not mixed
            same = t.params["num_workers"] == 0 or t.params.get("worker_method") == method
            if t.peak_rss > 0 and same:
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
