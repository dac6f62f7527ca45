"""The tuner's statistics: how well a trial knows its throughput, and whether two settings
can be told apart.

- **One trial** (:class:`BlockStats`): the 95% confidence interval of the mean batch time,
  from means over blocks of batches (batches arrive in bursts of one per worker, so single
  batches are not independent), with Student's t (:func:`t95`).
- **Two trials** (:func:`overlap`, :func:`equivalent`, :func:`apart`): their intervals
  compared, as the search steers and as the rule rules a setting out without pairs.
- **Paired rounds** (:func:`paired`, :class:`Paired`): two settings measured back to back in
  pairs; the per-pair ratio is free of the machine's changes between pairs, and their
  geometric mean has a t interval over the log-ratios.
- **The drift** (:func:`drift`): how far the machine moved between a trial and its setting's
  later rounds, beyond what the trial's own interval allows.

Pure functions of numbers and :class:`~fastdata.tune.measure.Trial` records; the decision
rule (:mod:`.decide`) turns them into a choice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, median, stdev
from typing import Any

from fastdata.tune._trial import Trial
from fastdata.tune.space import cost

__all__ = [
    "MIN_BLOCKS",
    "BlockStats",
    "Paired",
    "apart",
    "attempts",
    "counts",
    "drift",
    "equivalent",
    "overlap",
    "paired",
    "pairs_of",
    "t95",
]

_Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
_T95_SMALL = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305}  # exact, df 1..3
MIN_BLOCKS = 2
"""The fewest blocks an interval is computed from (one degree of freedom)."""


def t95(df: int) -> float:
    """Two-sided 95% quantile of Student's t with ``df`` >= 1 degrees of freedom.

    Exact for ``df`` 1..3; beyond, a Cornish-Fisher expansion around the normal quantile,
    within 0.3% of the exact value (2.769 vs 2.776 at 4), far below the noise it judges.
    """
    if df in _T95_SMALL:
        return _T95_SMALL[df]
    z = _Z95
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


class BlockStats:
    """Running mean and variance (Welford) of the totals of consecutive ``block`` batch times,
    for the confidence interval of the mean batch time in O(1) per batch."""

    def __init__(self, block: int) -> None:
        self.block = max(block, 1)
        self.blocks, self.mean, self.m2 = 0, 0.0, 0.0
        self._total, self._filled = 0.0, 0

    def add(self, seconds: float) -> None:
        """Add one batch time."""
        self._total += seconds
        self._filled += 1
        if self._filled == self.block:
            self.blocks += 1
            delta = self._total - self.mean
            self.mean += delta / self.blocks
            self.m2 += delta * (self._total - self.mean)
            self._total, self._filled = 0.0, 0

    def relative_ci(self, min_blocks: int = MIN_BLOCKS) -> float:
        """Half-width of the 95% CI of the mean over the mean; inf with too few blocks."""
        if self.blocks < max(min_blocks, MIN_BLOCKS) or self.mean <= 0:
            return math.inf
        sd = math.sqrt(self.m2 / (self.blocks - 1))
        return t95(self.blocks - 1) * sd / math.sqrt(self.blocks) / self.mean


@dataclass(frozen=True)
class Paired:
    """The paired rounds of two settings: ``cheap``'s throughput over ``fast``'s.

    Attributes:
        cheap, fast: the two settings, as :func:`~fastdata.tune.space.cost` keys.
        ratio: the geometric mean of the per-pair ratios.
        low, high: its 95% interval (Student's t over the pairs' log-ratios).
        pairs: the number of complete pairs.
    """

    cheap: tuple[Any, ...]
    fast: tuple[Any, ...]
    ratio: float
    low: float
    high: float
    pairs: int

    def verdict(self, tolerance: float) -> str:
        """``"within"`` (the interval at or above ``1 - tolerance``), ``"slower"`` (wholly
        below it) or ``"undecided"`` (it contains the line)."""
        line = 1 - tolerance
        if self.low >= line:
            return "within"
        return "slower" if self.high < line else "undecided"


def overlap(a: Trial, b: Trial) -> bool:
    """Whether the throughput intervals of ``a`` and ``b`` overlap (cannot be told apart)."""
    (a_low, a_high), (b_low, b_high) = a.interval, b.interval
    return a_low <= b_high and b_low <= a_high


def equivalent(trial: Trial, fastest: Trial, tolerance: float) -> bool:
    """Whether ``trial`` is as good as ``fastest`` by their trials alone: the intervals
    overlap or the throughput is within ``tolerance`` (what the search steers by)."""
    return overlap(trial, fastest) or trial.throughput >= (1 - tolerance) * fastest.throughput


def apart(trial: Trial, fastest: Trial, tolerance: float, drift: float) -> bool:
    """Whether ``trial`` is slower than ``fastest`` by more than ``tolerance`` beyond both
    intervals, each widened by ``drift``: the top of its interval, times ``1 + drift``, is
    below ``1 - tolerance`` of the bottom of the fastest's, over ``1 + drift``. A trial with
    no interval (too few batches) counts as its rate alone
    (:attr:`~fastdata.tune.measure.Trial.interval`): with a slow loader the trials of many
    workers rarely get one, and the rate measured is then the best there is to go by (the
    reason says which rates had no interval)."""
    top = trial.interval[1] * (1 + drift)
    return top < (1 - tolerance) * fastest.interval[0] / (1 + drift)


def paired(trials: Sequence[Trial], cheap: int, fast: int) -> Paired | None:
    """The paired rounds of the settings of ``trials[cheap]`` and ``trials[fast]`` (None with
    fewer than two complete pairs: no interval comes from one)."""
    keys = (cost(trials[cheap].params), cost(trials[fast].params))
    rounds = _rounds(trials, keys)
    if len(rounds) < 2:
        return None
    logs = [math.log(a / b) for a, b in rounds]
    half = t95(len(logs) - 1) * stdev(logs) / math.sqrt(len(logs))
    mean = fmean(logs)
    return Paired(keys[0], keys[1], math.exp(mean), math.exp(mean - half), math.exp(mean + half),
                  len(logs))  # fmt: skip


def pairs_of(trials: Sequence[Trial], cheap: int, fast: int) -> int:
    """The number of complete pairs of the settings of ``trials[cheap]`` and ``trials[fast]``."""
    return len(_rounds(trials, (cost(trials[cheap].params), cost(trials[fast].params))))


def attempts(trials: Sequence[Trial], cheap: int, fast: int) -> int:
    """The number of pairs measured of the settings of ``trials[cheap]`` and ``trials[fast]``,
    whether their rounds count or not (:func:`pairs_of` counts only those that do)."""
    keys = {cost(trials[cheap].params), cost(trials[fast].params)}
    pairs: dict[int | None, set[Any]] = {}
    for t in trials:
        if t.pair is not None:
            pairs.setdefault(t.pair, set()).add(cost(t.params))
    return sum(1 for p in pairs.values() if p == keys)


def counts(trial: Trial) -> bool:
    """Whether a paired round counts: it completed, and its own interval has an upper bound
    (a relative half-width under 1; a round with none measured noise, and is measured
    again)."""
    return trial.pair is not None and trial.ok and trial.throughput > 0 and trial.rel_ci < 1


def _rounds(trials: Sequence[Trial], keys: tuple[Any, Any]) -> list[tuple[float, float]]:
    """``(cheap, fast)`` throughputs of each complete pair of the two settings ``keys``."""
    pairs: dict[int | None, dict[Any, float]] = {}
    for t in trials:
        if counts(t):
            pairs.setdefault(t.pair, {})[cost(t.params)] = t.throughput
    return [(p[keys[0]], p[keys[1]]) for p in pairs.values() if set(p) == set(keys)]


def drift(trials: Sequence[Trial]) -> float | None:
    """The least widening of the trials' 95% intervals that covers what the paired rounds
    measured later: the largest relative distance, either way, by which the median of a
    setting's paired rounds lies outside its trial's interval (0 when every median lies within;
    None when no setting has both). A difference the trial's own interval already allows is
    noise that interval measured, not a change of the machine: counting it again would widen
    every interval by the noisiest trial's width, and a setting twice as slow could then no
    longer be told apart by its trial."""
    rounds: dict[Any, list[float]] = {}
    for t in trials:
        if counts(t):
            rounds.setdefault(cost(t.params), []).append(t.throughput)
    changes = [
        _outside(t.interval, median(rounds[key]))
        for t in trials
        if t.pair is None and t.ok and t.throughput > 0 and (key := cost(t.params)) in rounds
    ]
    return math.exp(max(changes)) - 1 if changes else None


def _outside(interval: tuple[float, float], value: float) -> float:
    """How far ``value`` lies outside ``interval``, as a log-ratio (0 within it)."""
    low, high = interval
    if value > high:
        return math.log(value / high)
    return math.log(low / value) if value < low else 0.0
