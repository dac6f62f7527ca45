"""The decision rule: which measured trial to recommend, telling signal from noise.

Every trial has a 95% confidence interval of its throughput (:attr:`Trial.interval`). Two
trials whose intervals overlap cannot be told apart by these measurements: preferring the
one whose point estimate happens to be higher would let noise choose. A trial's own interval
misses one kind of noise: the machine changing between trials (other jobs starting or
stopping). When some settings were measured more than once, the spread of their repeats
estimates it (:func:`drift`), and every interval is widened by it. Then:

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

Pure functions of the trials, so the rule is tested on made-up measurements.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fastdata.tune.measure import Trial
from fastdata.tune.report import describe, format_size

__all__ = ["Decision", "cost", "decide", "drift", "equivalent", "explain", "interval", "overlap"]

_Z95 = 1.959963984540054


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
        noise: the relative half-width added to every interval for the drift between
            trials (0 without repeated settings).
    """

    chosen: int
    fastest: int | None
    tied: tuple[int, ...] = ()
    reached: tuple[int, ...] = ()
    within_cores: int | None = None
    held_back: tuple[int, ...] = ()
    noise: float = 0.0


def interval(trial: Trial, noise: float = 0.0) -> tuple[float, float]:
    """``trial.interval`` widened by a relative half-width ``noise`` (added in quadrature)."""
    if noise == 0:
        return trial.interval
    within = 0.0 if math.isinf(trial.rel_ci) else trial.rel_ci
    rel = math.hypot(within, noise)
    high = trial.throughput / (1 - rel) if rel < 1 else math.inf
    return (trial.throughput / (1 + rel), high)


def overlap(a: Trial, b: Trial, noise: float = 0.0) -> bool:
    """Whether the throughput intervals of ``a`` and ``b`` overlap (cannot be told apart)."""
    (a_low, a_high), (b_low, b_high) = interval(a, noise), interval(b, noise)
    return a_low <= b_high and b_low <= a_high


def equivalent(trial: Trial, fastest: Trial, tolerance: float, noise: float = 0.0) -> bool:
    """Whether ``trial`` is as good as ``fastest``: intervals overlap or within ``tolerance``."""
    return (
        overlap(trial, fastest, noise) or trial.throughput >= (1 - tolerance) * fastest.throughput
    )


def drift(trials: Sequence[Trial]) -> float:
    """The relative 95% half-width of the noise between trials, from repeated settings.

    For every setting measured more than once, the deviations of its throughputs from their
    mean, relative to it, pooled into one standard deviation (``sum of squares / sum of
    (repeats - 1)``), times 1.96. 0 when no setting was repeated. A rough estimate from a
    few repeats, but of the noise that the trials' own intervals cannot see.
    """
    groups: dict[tuple[Any, ...], list[float]] = {}
    for t in trials:
        if t.ok and t.throughput > 0:
            groups.setdefault(cost(t.params), []).append(t.throughput)
    squares, df = 0.0, 0
    for rates in groups.values():
        if len(rates) > 1:
            mean = sum(rates) / len(rates)
            squares += sum(((r - mean) / mean) ** 2 for r in rates)
            df += len(rates) - 1
    return _Z95 * math.sqrt(squares / df) if df else 0.0


def cost(params: dict[str, Any]) -> tuple[int, int, bool]:
    """What a setting costs, for ordering: workers, then prefetch_factor, then pinning."""
    return (params["num_workers"], params.get("prefetch_factor") or 0, bool(params["pin_memory"]))


def decide(
    trials: Sequence[Trial],
    *,
    target: float,
    tolerance: float,
    max_memory: int | None = None,
    cores: int | None = None,
    noise: float | None = None,
) -> Decision:
    """Apply the rule of the module docstring to ``trials`` (``cores`` None: no core rule;
    ``noise`` None: :func:`drift` of the trials).

    Raises:
        ValueError: no trial completed.
    """
    ok = [i for i, t in enumerate(trials) if t.ok]
    if not ok:
        raise ValueError("no completed trial to choose from")
    fits = [i for i in ok if max_memory is None or trials[i].peak_rss <= max_memory]
    if not fits:
        return Decision(chosen=min(ok, key=lambda i: trials[i].peak_rss), fastest=None)

    noise = drift(trials) if noise is None else noise

    def rate(i: int) -> float:
        return trials[i].throughput

    pool, within, held_back = fits, None, ()
    if cores is not None:
        inside = [i for i in fits if trials[i].params["num_workers"] <= cores]
        if inside:
            within = max(inside, key=rate)
            top = interval(trials[within], noise)[1]
            beyond = [i for i in fits if trials[i].params["num_workers"] > cores]
            justified = [i for i in beyond if interval(trials[i], noise)[0] > top]
            held_back = tuple(i for i in beyond if i not in justified and rate(i) > rate(within))
            pool = inside + justified
    fastest = max(pool, key=rate)
    best = trials[fastest]
    reached = tuple(i for i in pool if trials[i].busy >= target)
    good = [i for i in pool if i in reached or equivalent(trials[i], best, tolerance, noise)]
    chosen = min(good, key=lambda i: (cost(trials[i].params), i))
    over = cores is not None and trials[chosen].params["num_workers"] > cores
    return Decision(
        chosen=chosen,
        fastest=fastest,
        tied=tuple(i for i in pool if i != fastest and overlap(trials[i], best, noise)),
        reached=reached,
        within_cores=within if over else None,
        held_back=held_back,
        noise=noise,
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

    def _rate_ci(trial: Trial) -> str:
        return _rate_interval(trial, decision.noise)

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
    if decision.noise:
        lines.append(
            "Settings measured more than once differed between their runs (the machine "
            f"changing between trials): every interval is widened by +-{decision.noise:.0%}."
        )
    cheapest = "the cheapest (fewest workers, then smallest prefetch_factor, then pin_memory off)"
    if decision.tied and decision.chosen == decision.fastest:
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


def _rate_interval(trial: Trial, noise: float) -> str:
    low, high = interval(trial, noise)
    if low == high:
        return f"{trial.throughput:.1f} batches/s (no interval: too few batches)"
    return f"{trial.throughput:.1f} batches/s (95% CI {low:.1f}-{high:.1f})"
