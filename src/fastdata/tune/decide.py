"""The decision rule: which measured trial to recommend, telling signal from noise.

Every trial has a 95% confidence interval of its throughput (:attr:`Trial.interval`). Two
trials whose intervals overlap cannot be told apart by these measurements: preferring the
one whose point estimate happens to be higher would let noise choose. So, over the search's
trials:

1. Candidates: the trials that completed within ``max_memory`` (if none did, the one that
   used the least memory is chosen, and the reason says so).
2. Cores: a trial with more workers than the usable ``cores`` is a candidate only when it is
   faster than every trial with at most ``cores`` workers beyond both intervals (its
   interval lies wholly above theirs) — a pipeline that waits on I/O rather than on the CPU
   can do that. The reason then names the two measurements.
3. The fastest candidate, and every candidate *equivalent* to it: its interval overlaps the
   fastest one's (indistinguishable), or its throughput is within ``tolerance`` of it (too
   small a difference to be worth a worker), or it reaches the ``target`` busy fraction
   (the consumer is fed; more is not needed).
4. Of those, the cheapest: the fewest workers, then the smallest ``prefetch_factor``, then
   ``pin_memory`` off.

A trial's own interval misses one kind of noise: the machine changing between trials (other
jobs starting and stopping), which can make a setting look slower than it is. So the search
ends with *paired rounds* (trials with a ``pair`` number): the choice's rival (the fastest
setting with the next fewer workers; for a choice past the cores, the fastest within them;
with neither, the fastest cheaper one) and the fastest setting, measured back to back, in
alternating order.
A change of the machine's speed hits both rounds of a pair alike, so their ratio is free of
it: when the pairs put the rival within ``tolerance`` of the fastest (or faster), the rival
is chosen, as cheaper and no worse. (Their 95% interval, Student's t over the pairs, is
reported; with three pairs it is wide, and the search's own measurements are evidence too,
so the pairs decide by their estimate rather than by whether the interval reaches 1.)

Pure functions of the trials, so the rule is tested on made-up measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, stdev
from typing import Any

from fastdata.tune.measure import Trial, t95
from fastdata.tune.report import describe, format_size

__all__ = ["Decision", "Paired", "cost", "decide", "equivalent", "explain", "overlap", "paired"]


@dataclass(frozen=True)
class Paired:
    """The paired rounds of two settings: ``cheap``'s throughput over ``fast``'s.

    Attributes:
        cheap, fast: the two settings, as :func:`cost` keys.
        ratio: the geometric mean of the per-pair ratios.
        low, high: its 95% interval (Student's t over the pairs' log-ratios).
        pairs: the number of complete pairs.
    """

    cheap: tuple[int, int, bool]
    fast: tuple[int, int, bool]
    ratio: float
    low: float
    high: float
    pairs: int


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose and the facts the reason is built from (trial indices).

    Attributes:
        chosen: the recommended trial.
        fastest: the fastest candidate (None when no trial fits ``max_memory``).
        tied: candidates other than ``fastest`` whose interval overlaps its interval.
        reached: candidates reaching the target busy fraction.
        within_cores: the fastest trial with at most ``cores`` workers, when ``chosen`` has
            more (the measurement that justified going past the cores), else None.
        held_back: trials with more workers than cores, faster than ``within_cores`` by
            their point estimate but not beyond the intervals, left out by rule 2.
        rival: the search's trial of the setting the paired rounds compared with the
            fastest (None without paired rounds).
        confirmation: those rounds' ratio; ``chosen`` is ``rival`` when it put the rival
            within the tolerance of the fastest.
    """

    chosen: int
    fastest: int | None
    tied: tuple[int, ...] = ()
    reached: tuple[int, ...] = ()
    within_cores: int | None = None
    held_back: tuple[int, ...] = ()
    rival: int | None = None
    confirmation: Paired | None = None


def overlap(a: Trial, b: Trial) -> bool:
    """Whether the throughput intervals of ``a`` and ``b`` overlap (cannot be told apart)."""
    (a_low, a_high), (b_low, b_high) = a.interval, b.interval
    return a_low <= b_high and b_low <= a_high


def equivalent(trial: Trial, fastest: Trial, tolerance: float) -> bool:
    """Whether ``trial`` is as good as ``fastest``: intervals overlap or within ``tolerance``."""
    return overlap(trial, fastest) or trial.throughput >= (1 - tolerance) * fastest.throughput


def cost(params: dict[str, Any]) -> tuple[int, int, bool]:
    """What a setting costs, for ordering: workers, then prefetch_factor, then pinning."""
    return (params["num_workers"], params.get("prefetch_factor") or 0, bool(params["pin_memory"]))


def paired(trials: Sequence[Trial]) -> Paired | None:
    """The ratio of the two settings of the paired rounds in ``trials`` (None with fewer than
    two complete pairs, for no interval can come from one)."""
    pairs: dict[int, dict[tuple[int, int, bool], float]] = {}
    for t in trials:
        if t.pair is not None and t.ok and t.throughput > 0:
            pairs.setdefault(t.pair, {})[cost(t.params)] = t.throughput
    complete = [p for p in pairs.values() if len(p) == 2]
    if len(complete) < 2:
        return None
    cheap, fast = sorted(complete[0])
    logs = [math.log(p[cheap] / p[fast]) for p in complete if set(p) == {cheap, fast}]
    if len(logs) < 2:
        return None
    half = t95(len(logs) - 1) * stdev(logs) / math.sqrt(len(logs))
    mean = fmean(logs)
    return Paired(cheap, fast, math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                  len(logs))  # fmt: skip


def decide(
    trials: Sequence[Trial],
    *,
    target: float,
    tolerance: float,
    max_memory: int | None = None,
    cores: int | None = None,
) -> Decision:
    """Apply the rule of the module docstring to ``trials`` (``cores`` None: no core rule).

    Raises:
        ValueError: no trial of the search completed.
    """
    ok = [i for i, t in enumerate(trials) if t.ok and t.pair is None]
    if not ok:
        raise ValueError("no completed trial to choose from")
    fits = [i for i in ok if max_memory is None or trials[i].peak_rss <= max_memory]
    if not fits:
        return Decision(chosen=min(ok, key=lambda i: trials[i].peak_rss), fastest=None)

    def rate(i: int) -> float:
        return trials[i].throughput

    pool, within = fits, None
    held_back: tuple[int, ...] = ()
    if cores is not None:
        inside = [i for i in fits if trials[i].params["num_workers"] <= cores]
        if inside:
            within = max(inside, key=rate)
            top = trials[within].interval[1]
            beyond = [i for i in fits if trials[i].params["num_workers"] > cores]
            justified = [i for i in beyond if trials[i].interval[0] > top]
            held_back = tuple(i for i in beyond if i not in justified and rate(i) > rate(within))
            pool = inside + justified
    fastest = max(pool, key=rate)
    best = trials[fastest]
    reached = tuple(i for i in pool if trials[i].busy >= target)
    good = [i for i in pool if i in reached or equivalent(trials[i], best, tolerance)]
    chosen = min(good, key=lambda i: (cost(trials[i].params), i))
    rival, confirmation = None, paired(trials)
    if confirmation is not None and confirmation.fast == cost(best.params):
        rival = next((i for i in fits if cost(trials[i].params) == confirmation.cheap), None)
        if rival is None:
            confirmation = None
        elif confirmation.ratio >= 1 - tolerance:
            chosen = min(chosen, rival, key=lambda i: (cost(trials[i].params), i))
    else:
        confirmation = None
    over = cores is not None and trials[chosen].params["num_workers"] > cores
    return Decision(
        chosen=chosen,
        fastest=fastest,
        tied=tuple(i for i in pool if i != fastest and overlap(trials[i], best)),
        reached=reached,
        within_cores=within if over else None,
        held_back=held_back,
        rival=rival,
        confirmation=confirmation,
    )


def explain(
    decision: Decision,
    trials: Sequence[Trial],
    *,
    target: float,
    tolerance: float,
    max_memory: int | None = None,
    cores: int | None = None,
) -> list[str]:
    """Why ``decision.chosen`` was chosen, as sentences (the search adds how it ended)."""
    pick = trials[decision.chosen]
    lines = [
        f"Chose {describe(pick.params)}: {_rate_ci(pick)}, consumer busy {pick.busy:.0%} "
        f"(target {target:.0%})."
    ]
    if decision.fastest is None:
        lines.append(
            f"No trial stayed within max_memory={format_size(max_memory or 0)}; this one "
            f"used the least memory ({format_size(pick.peak_rss)})."
        )
        return lines
    fastest = trials[decision.fastest]
    cheapest = "the cheapest (fewest workers, then smallest prefetch_factor, then pin_memory off)"
    rival_chosen = decision.rival is not None and decision.chosen == decision.rival
    if rival_chosen:  # the paired rounds decided: the sentence on them says why
        pass
    elif decision.tied and decision.chosen == decision.fastest:
        lines.append(
            f"It measured fastest, and {len(decision.tied)} other trial(s) cannot be told apart "
            "from it (their 95% intervals overlap: the differences are noise); it is also "
            f"{cheapest} of them."
        )
    elif decision.tied:
        lines.append(
            f"{len(decision.tied) + 1} trials cannot be told apart from the fastest "
            f"({describe(fastest.params)}: {_rate_ci(fastest)}): their 95% intervals overlap, "
            f"so the differences between them are noise. This is {cheapest} of the trials "
            f"that match the fastest or reach the target."
        )
    elif decision.chosen == decision.fastest:
        lines.append("It is the fastest, and no other trial's 95% interval overlaps its own.")
    else:
        lines.append(
            f"It is {cheapest} of the trials that reach the target or come within "
            f"{tolerance:.0%} of the fastest ({describe(fastest.params)}: {_rate_ci(fastest)})."
        )
    if decision.confirmation is not None and decision.rival is not None:
        lines.append(
            _confirmed(
                decision.confirmation,
                trials[decision.rival],
                fastest,
                chosen=rival_chosen,
                tolerance=tolerance,
            )
        )
    if decision.within_cores is not None:
        base = trials[decision.within_cores]
        lines.append(
            f"It uses more workers than the {cores} usable core(s): it measured {_rate_ci(pick)}"
            f" against {_rate_ci(base)} for the fastest trial with at most {cores} workers "
            f"({describe(base.params)}): faster beyond both intervals, so the extra workers "
            "pay for themselves here (a pipeline that waits, e.g. on I/O, can use more workers "
            "than cores)."
        )
    elif cores is not None and pick.params["num_workers"] > cores:
        lines.append(
            f"It uses more workers than the {cores} usable core(s) because no trial with at "
            "most that many was measured (see search_space)."
        )
    if decision.held_back:
        lines.append(
            f"{len(decision.held_back)} trial(s) with more workers than the {cores} core(s) "
            "measured faster, but not beyond the intervals: not worth the oversubscription."
        )
    if pick.busy < target:
        lines.append(
            f"{len(decision.reached)} trial(s) reached the target, none faster by more than "
            "the noise or the tolerance: their extra workers buy too little."
            if decision.reached
            else "None reached the target: the input pipeline, not the consumer, sets the pace."
        )
    return lines


def _confirmed(
    rounds: Paired, rival: Trial, fastest: Trial, *, chosen: bool, tolerance: float
) -> str:
    """The sentence on the paired rounds of the rival and the fastest."""
    measured = (
        f"In {rounds.pairs} pairs of back-to-back rounds, {describe(rival.params)} ran at "
        f"{rounds.ratio:.0%} of the rate of {describe(fastest.params)} (95% CI "
        f"{rounds.low:.0%}-{rounds.high:.0%})"
    )
    if chosen:
        verdict = "no slower" if rounds.ratio >= 1 else f"within the {tolerance:.0%} tolerance"
        return (
            f"{measured}: {verdict}, and cheaper, so it is chosen (pairs cancel the machine's "
            "changes between trials)."
        )
    return (
        f"{measured}: slower by more than the {tolerance:.0%} tolerance, so the cheaper "
        "setting is not enough (pairs cancel the machine's changes between trials)."
    )


def _rate_ci(trial: Trial) -> str:
    low, high = trial.interval
    if low == high:
        return f"{trial.throughput:.1f} batches/s (no interval: too few batches)"
    return f"{trial.throughput:.1f} batches/s (95% CI {low:.1f}-{high:.1f})"
