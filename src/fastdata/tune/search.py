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
   over the worker counts with thread workers (the first line measured process workers,
   torch's default), up to the answer's count if it reached the target, else up to the
   largest count measured: threads may keep up with fewer workers, or help where processes
   do not. Where a process worker failed or was over the memory ceiling, threads run on
   their own range (every count), and the reason says why processes were left out.
   ``prefetch_factor`` is skipped without workers, ``pin_memory`` unless batches go to a
   device.
2. **Comparisons**: :func:`~fastdata.tune.decide.decide` names the cheaper setting to compare
   with the fastest measured, and the two are measured in pairs of back-to-back rounds in
   alternating order until the rule's verdict is in (see :mod:`.decide`), then the next,
   until the decision is final. A pair with a round that does not count (no interval) is
   measured again with rounds twice as long, so the same short rounds are never repeated.
   Its choice is the answer the next setting starts from.

The budget is shared out as it goes: a screening trial gets what remains of it over the shares
still planned (the screening trials of every stage, and :data:`PLANNED_PAIRS` pairs per stage),
a paired round half a share, so trials that finish early leave time to later ones; the search
stops when the budget has no room for the next one. Before a trial starts,
its memory is predicted from the trials with fewer workers (the largest growth per worker
seen so far); a setting predicted over ``max_memory`` is refused without starting it, and a
running trial that goes over is stopped (:class:`~fastdata.tune.measure.MemoryGuard`).
Ctrl-C returns the best so far: SIGINT is recorded (:mod:`fastdata.tune._interrupt`) and
checked at every trial and round boundary, so an interrupt swallowed where it landed (in an
at-fork hook as a worker starts) still ends the search there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from fastdata.tune._explain import describe_refused, explain
from fastdata.tune._interrupt import Interrupts
from fastdata.tune._line import coarse, line, processes_left_out, thread_workers, varying
from fastdata.tune._replicas import TUNE_RATES, repeats_advice
from fastdata.tune._run import Evaluate, Run, StopSearch, TuneError
from fastdata.tune._statistics import attempts, pairs_of
from fastdata.tune._trial import Trial
from fastdata.tune.decide import MAX_PAIRS, Decision
from fastdata.tune.space import SETTINGS, SearchSpace
from fastdata.tune.words import argument, describe

__all__ = ["Outcome", "SearchSpace", "TuneError", "search"]

PLANNED_PAIRS = 4
"""Pairs of paired rounds planned per stage when the budget is shared out (a comparison
takes as many as its verdict needs, up to :data:`~fastdata.tune.decide.MAX_PAIRS`)."""

_MAX_STRETCH = 3
"""A pair measured again because a round did not count gets rounds twice as long each time,
up to 2 ** this."""


class Outcome(NamedTuple):
    """What :func:`search` found: every trial in order, the chosen one's index, why, how the
    search ended (``"complete"``, ``"target"``, ``"budget"`` or ``"interrupted"``), and the
    drift: how far a setting's paired rounds lay outside its trial's interval (None: no
    setting was measured twice)."""

    trials: list[Trial]
    chosen: int
    reason: str
    stopped: str
    drift: float | None = None


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
    with Interrupts() as interrupts:
        return _search(
            evaluate, space, budget_s=budget_s, target=target, tolerance=tolerance,
            max_memory=max_memory, cores=cores, max_pairs=max_pairs, clock=clock,
            on_trial=on_trial, interrupts=interrupts,
        )  # fmt: skip


def _search(
    evaluate: Evaluate,
    space: SearchSpace,
    /,
    *,
    budget_s: float,
    target: float,
    tolerance: float,
    max_memory: int | None,
    cores: int | None,
    max_pairs: int,
    clock: Callable[[], float],
    on_trial: Callable[[Trial], None] | None,
    interrupts: Interrupts,
) -> Outcome:
    """:func:`search`, with Ctrl-C recorded by ``interrupts``."""
    run = Run(
        evaluate,
        budget_s=budget_s,
        planned=_planned(space),
        target=target,
        tolerance=tolerance,
        max_memory=max_memory,
        max_pairs=max_pairs,
        clock=clock,
        on_trial=on_trial,
        interrupts=interrupts,
    )
    stopped = "complete"
    try:
        stopped = _stages(run, space)
    except StopSearch as stop:
        stopped = stop.why
    except KeyboardInterrupt:
        if not any(run.fits(t) for t in run.trials):
            raise
        stopped = "interrupted"
    if not any(run.fits(t) for t in run.trials):
        raise TuneError(_nothing_fits(run))
    decision = run.decision()
    return Outcome(
        run.trials, decision.chosen, _reason(run, decision, stopped, cores, space), stopped,
        decision.drift,
    )  # fmt: skip


def _stages(run: Run, space: SearchSpace) -> str:
    """Screen and compare one setting at a time (the module docstring); returns how the search
    ended: ``"target"`` when a setting reached the target, else ``"complete"``.

    Raises:
        TuneError: nothing fits after the first line (see :func:`_nothing_fits`).
        StopSearch: ``"budget"`` when the budget ends.
    """
    reached = False
    for setting in SETTINGS:
        if setting.name == "num_workers":
            values: Sequence[Any] = space.num_workers
            params_for: Callable[[Any], dict[str, Any]] = space.base
        else:
            start = run.trials[run.decision().chosen].params
            if setting.name == "worker_method":
                if start["worker_method"] == "thread" or "thread" not in space.worker_method:
                    continue  # screened with threads already, or not searched
                values, params_for = thread_workers(run, space, start, reached)
                if not values:
                    continue  # no worker count to try threads at
            elif setting.needs_workers and start["num_workers"] == 0:
                continue
            else:
                values = space.values(setting.name)
                if reached:  # costlier values cannot feed the consumer more
                    now = setting.rank(start[setting.name])
                    values = [v for v in values if setting.rank(v) <= now]
                params_for = varying(start, setting.name)
        try:
            line(run, values, params_for)
        except StopSearch as stop:
            if stop.why != "target":
                raise
            reached = True
        if not any(run.fits(t) for t in run.trials):
            raise TuneError(_nothing_fits(run))
        _compare(run)
    return "target" if reached else "complete"


def _compare(run: Run) -> None:
    """The comparisons :func:`decide` asks for, until its decision is final.

    Raises:
        StopSearch: ``"budget"`` when the budget has no room for the next pair.
    """
    while (decision := run.decision()).next is not None:
        cheap, fast = run.trials[decision.next].params, run.trials[decision.fastest].params
        done = pairs_of(run.trials, decision.next, decision.fastest)
        void = attempts(run.trials, decision.next, decision.fastest) - done
        order = (cheap, fast) if done % 2 == 0 else (fast, cheap)
        if not run.pair(*order, stretch=2 ** min(void, _MAX_STRETCH)):
            return  # a round failed or was refused: the rule decides on what is there


def _planned(space: SearchSpace) -> int:
    """A generous count of the shares of the budget the search takes: its screening trials
    and :data:`PLANNED_PAIRS` pairs per stage (two half-share rounds each)."""
    planned = 2 * len(coarse(len(space.num_workers))) + PLANNED_PAIRS
    if space.num_workers[-1] > 0:
        for setting in SETTINGS[1:]:
            n = len(space.values(setting.name))
            if setting.name == "worker_method" and n > 1:  # a line over the worker counts
                n = len(space.num_workers)
            if n > 1:
                planned += len(coarse(n)) - 1 + 2 * (n > 2) + PLANNED_PAIRS
    return planned


def _nothing_fits(run: Run) -> str:
    """Why no setting can be chosen: every one failed or was refused for memory."""
    refused = [t for t in run.trials if t.refused is not None]
    if refused:
        first = refused[0]
        return (
            f"{describe(first.params)} was refused for memory ({first.refused}): no setting "
            f"fits; raise {argument('max_memory', '--max-memory')} or free memory"
        )
    return "no setting completed (see the failed trials)"


def _reason(
    run: Run, decision: Decision, stopped: str, cores: int | None, space: SearchSpace
) -> str:
    """Why the chosen trial was chosen, what the search left out, and how it ended, in a few
    sentences."""
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
    if any(t.repeats for t in trials):
        lines.append(repeats_advice(TUNE_RATES))
    lines += _processes_left_out(run, space)
    lines += _left_out(run, decision, space)
    n = f"{len(trials)} trial{'' if len(trials) == 1 else 's'}"
    if run.pairs:
        n += f" ({run.pairs} pair{'' if run.pairs == 1 else 's'} of paired rounds among them)"
    fed = next((describe(t.params) for t in trials if t.pair is None and run.reaches(t)), "")
    lines.append(
        {
            "complete": f"Search complete: {n} in {run.elapsed():.0f} s.",
            "target": f"Search complete: {n} in {run.elapsed():.0f} s; {fed} reached the "
            "target, so no costlier setting was screened after it.",
            "budget": f"Stopped after {n} when the {run.budget_s:g} s budget was used; a "
            "larger budget measures more settings and finishes the comparisons.",
            "interrupted": f"Interrupted (Ctrl-C): the best of {n} so far.",
        }[stopped]
    )
    return " ".join(lines)


def _processes_left_out(run: Run, space: SearchSpace) -> list[str]:
    """Why process workers are not in the answer where one failed or was over the memory
    ceiling, and whether threads, which the processes' failure says nothing of, were measured
    in their place (:func:`~fastdata.tune._line.thread_workers`)."""
    left = processes_left_out(run)
    if not left or "thread" not in space.worker_method:
        return []
    first = left[0]
    why = (
        f"failed ({first.error.strip().splitlines()[-1].strip()})"
        if first.error is not None
        else "was over the memory ceiling (see the refused settings)"
    )
    threads = sorted({t.params["num_workers"] for t in run.trials
                      if t.params.get("worker_method") == "thread"})  # fmt: skip
    measured = (
        f"thread workers, which run in this process (nothing forked, no second interpreter), "
        f"were measured on their own range instead (num_workers={', '.join(map(str, threads))})"
        if threads
        else "thread workers were not measured before the search ended: a larger budget "
        "measures them"
    )
    return [f"Process workers were left out: {describe(first.params)} {why}; {measured}."]


def _left_out(run: Run, decision: Decision, space: SearchSpace) -> list[str]:
    """What the answer may owe to the search's limits: thread workers never measured (the
    budget ended first), or a worker count at the top of the range searched."""
    chosen = run.trials[decision.chosen].params
    workers = chosen["num_workers"]
    if workers == 0:
        return []
    lines = []
    threads = any(t.params.get("worker_method") == "thread" for t in run.trials)
    if "thread" in space.worker_method and not threads and not processes_left_out(run):
        lines.append(
            f"Thread workers were not measured before the search ended: "
            f"worker_method={chosen['worker_method']!r} is the default, not a comparison; a "
            "larger budget measures them."
        )
    top = space.num_workers[-1]
    if workers == top:
        lines.append(
            f"{top} workers is the largest count searched: more may be faster still (a "
            "pipeline that waits on storage or the network can use more workers than cores); "
            "search further with "
            + argument(
                f"search_space={{'num_workers': range({2 * top + 1})}}", f"--max-workers {2 * top}"
            )
            + "."
        )
    return lines
