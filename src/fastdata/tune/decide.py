"""The decision rule: which measured setting to recommend, telling signal from noise.

**The rule.** The answer is the cheapest setting (fewest workers, then the smallest
``prefetch_factor``, then ``pin_memory`` off: :func:`~fastdata.tune.space.cost`) that a
*paired comparison* against the fastest setting measured cannot tell apart from it within the
tolerance. So ``prefetch_factor`` above torch's default of 2, more workers, or pinning are
chosen only when the cheaper setting is measurably slower.

**Paired comparisons.** A trial's own 95% interval misses the largest noise of a shared
machine: its speed changing between trials (other jobs starting and stopping; the same setting
can measure 1.5x apart a minute later). So a cheaper setting is compared with the fastest in
*pairs* of rounds measured back to back, in alternating order (cheap-fast, fast-cheap, ...).
A change of the machine hits both rounds of a pair alike, so the per-pair ratio is free of it;
their geometric mean and its 95% interval (Student's t over the pairs' log-ratios,
:class:`Paired`) give one of three verdicts, with ``1 - tolerance`` as the line (95% for the
default 5%):

- the whole interval at or above the line: *within the tolerance* — the cheaper setting is as
  good, and is chosen;
- the whole interval below the line: *slower by more than the tolerance* — the next cheaper
  setting is compared;
- the interval contains the line: *could not tell apart* — more pairs, up to :data:`MAX_PAIRS`;
  then the comparison could not tell them apart, and the cheaper setting is chosen, as the
  rule says.

**Which settings are compared.** Cheapest first. A setting that paired rounds showed slower
than *any* measured setting by more than the tolerance is slower than the fastest too (the
fastest is at least as fast), so a later stage that finds a new fastest setting does not
compare it again. A cheaper setting whose own trial is slower than the fastest's by more than
the tolerance *beyond both 95% intervals*, each widened by the largest *drift* seen so far
(how far a setting's trial was from the median of its later paired rounds), needs no pairs:
it is slower even if every trial was measured at the machine's worst (or best) moment seen.
The drift is known once one setting has been measured twice, so the first comparison is made
before any setting is ruled out by its trial (with every cheaper setting apart, with the
fastest of them). A paired round whose own interval has no upper bound (a relative half-width
of 1 or more: a stall swallowed it) does not count, and its pair is measured again.

**What the choice is when the comparisons are cut short.** A comparison that the budget ends
before its verdict (fewer than two pairs, or an interval containing the line after fewer than
:data:`MAX_PAIRS`) has shown nothing. The choice is then the cheapest setting whose
comparison did finish as good; failing that, the fastest setting's workers with torch's
defaults for the rest (``prefetch_factor=2``, ``pin_memory`` off), when that setting was
measured and not shown slower — settings above torch's defaults only when they measurably
help —; failing that, the fastest. The reason says which comparison did not finish.
:attr:`Decision.next` says which comparison would come next; :mod:`.search` makes it while the
budget lasts.

Trials refused for memory (:attr:`~fastdata.tune.measure.Trial.refused`, or a peak RSS over
``max_memory``) and failed ones are never chosen. Pure functions of the trials, so the rule is
tested on recorded trial tables.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean, median, stdev
from typing import Any

from fastdata.tune.measure import Trial, t95
from fastdata.tune.space import cost, torch_defaults
from fastdata.tune.words import describe, format_size, percent

__all__ = [
    "MAX_PAIRS",
    "Decision",
    "Paired",
    "Verdict",
    "apart",
    "decide",
    "equivalent",
    "explain",
    "overlap",
    "paired",
]

MAX_PAIRS = 8
"""Pairs after which a comparison that cannot tell its settings apart ends (and says so)."""


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


@dataclass(frozen=True)
class Verdict:
    """What the rule found about one setting cheaper than the fastest.

    Attributes:
        trial: the index of the search's trial of the setting.
        outcome: ``"within"``, ``"slower"`` or ``"undecided"`` (the paired rounds' verdict,
            :meth:`Paired.verdict`); ``"apart"`` (its trial is slower beyond the intervals
            and the drift, no pairs needed); ``"open"`` (unfinished: fewer than two pairs, or
            an interval containing the line in fewer than ``max_pairs``).
        rounds: the paired rounds the outcome comes from (None with fewer than two pairs).
        against: the index of the search's trial of the other setting of those rounds: the
            fastest, or for ``"slower"`` any setting it was shown slower than (the fastest
            is at least as fast).
    """

    trial: int
    outcome: str
    rounds: Paired | None = None
    against: int | None = None


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose and the facts the reason is built from (trial indices).

    Attributes:
        chosen: the recommended trial.
        fastest: the fastest trial within the memory ceiling.
        verdicts: the settings cheaper than the fastest that the rule went through, cheapest
            first, up to the chosen one (or the one to compare next).
        next: the trial whose setting is to be compared with the fastest next (None: the
            decision is final).
        drift: the largest relative difference between a setting's trial and the median of
            its paired rounds (None before any setting was measured twice).
        reached: trials whose :attr:`~fastdata.tune.measure.Trial.utilization` reaches the
            target.
        refused: trials refused for memory.
        fallback: the comparisons did not finish, and ``chosen`` is the fastest setting's
            workers with torch's defaults for the rest (see the module docstring).
    """

    chosen: int
    fastest: int
    verdicts: tuple[Verdict, ...] = ()
    next: int | None = None
    drift: float | None = None
    reached: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    fallback: bool = False


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
    below ``1 - tolerance`` of the bottom of the fastest's, over ``1 + drift``."""
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


def _counts(trial: Trial) -> bool:
    """Whether a paired round counts: it completed, and its own interval has an upper bound
    (a relative half-width under 1; a round with none measured noise, and is measured
    again)."""
    return trial.pair is not None and trial.ok and trial.throughput > 0 and trial.rel_ci < 1


def _rounds(trials: Sequence[Trial], keys: tuple[Any, Any]) -> list[tuple[float, float]]:
    """``(cheap, fast)`` throughputs of each complete pair of the two settings ``keys``."""
    pairs: dict[int | None, dict[Any, float]] = {}
    for t in trials:
        if _counts(t):
            pairs.setdefault(t.pair, {})[cost(t.params)] = t.throughput
    return [(p[keys[0]], p[keys[1]]) for p in pairs.values() if set(p) == set(keys)]


def drift(trials: Sequence[Trial]) -> float | None:
    """The largest relative difference, either way, between a setting's trial and the median
    of its paired rounds (None when no setting has both)."""
    rounds: dict[Any, list[float]] = {}
    for t in trials:
        if _counts(t):
            rounds.setdefault(cost(t.params), []).append(t.throughput)
    changes = [
        abs(math.log(t.throughput / median(rounds[key])))
        for t in trials
        if t.pair is None and t.ok and t.throughput > 0 and (key := cost(t.params)) in rounds
    ]
    return math.exp(max(changes)) - 1 if changes else None


def decide(
    trials: Sequence[Trial],
    *,
    target: float,
    tolerance: float,
    max_memory: int | None = None,
    max_pairs: int = MAX_PAIRS,
) -> Decision:
    """Apply the rule of the module docstring to ``trials``: the choice if the search ended
    now, and the comparison to make next if it goes on.

    Raises:
        ValueError: no trial of the search completed within the memory ceiling.
    """
    searched = [i for i, t in enumerate(trials) if t.pair is None]
    over = [
        i
        for i in searched
        if trials[i].refused is not None
        or (trials[i].ok and max_memory is not None and trials[i].peak_rss > max_memory)
    ]
    pool = [i for i in searched if trials[i].ok and i not in over]
    if not pool:
        raise ValueError("no setting completed within the memory ceiling")
    fastest = max(pool, key=lambda i: trials[i].throughput)
    best = trials[fastest]
    seen = drift(trials)
    cheaper = sorted((i for i in pool if cost(trials[i].params) < cost(best.params)),
                     key=lambda i: cost(trials[i].params))  # fmt: skip
    verdicts: list[Verdict] = []
    chosen, following = fastest, None
    for i in cheaper:
        shown = _shown_slower(trials, i, pool, tolerance)
        if shown is not None and shown.against != fastest:
            verdicts.append(shown)
            continue
        rounds = paired(trials, i, fastest)
        if rounds is not None:
            outcome = rounds.verdict(tolerance)
            if outcome == "undecided" and rounds.pairs < max_pairs:
                outcome = "open"  # not finished: it shows nothing yet
            verdicts.append(Verdict(i, outcome, rounds, fastest))
        elif pairs_of(trials, i, fastest) == 0 and apart(trials[i], best, tolerance, seen or 0.0):
            verdicts.append(Verdict(i, "apart"))
        else:  # to compare, or a comparison under way
            verdicts.append(Verdict(i, "open"))
        outcome = verdicts[-1].outcome
        if outcome == "open" and following is None:
            following = i  # the cheapest unfinished comparison comes next
        elif outcome in ("within", "undecided"):  # finished: its setting is as good
            chosen = i
            break
    if following is None and seen is None and cheaper and chosen == fastest:
        # Every cheaper setting is apart by its trial alone, but no setting has been measured
        # twice: the drift is unknown. Compare the fastest of them first to learn it.
        following = max(cheaper, key=lambda i: trials[i].throughput)
    fallback = False
    if following is not None and chosen == fastest:  # unfinished: nothing shown better
        default = torch_defaults(best.params)
        sibling = next((i for i in cheaper if trials[i].params == default), None)
        if sibling is not None and not (
            _shown_slower(trials, sibling, pool, tolerance)
            or (seen is not None and apart(trials[sibling], best, tolerance, seen))
        ):  # a trial rules it out only once the drift is known
            chosen, fallback = sibling, True
    return Decision(
        chosen=chosen,
        fastest=fastest,
        verdicts=tuple(verdicts),
        next=following,
        drift=seen,
        reached=tuple(i for i in pool if trials[i].utilization >= target),
        refused=tuple(over),
        fallback=fallback,
    )


def _shown_slower(
    trials: Sequence[Trial], cheap: int, pool: Sequence[int], tolerance: float
) -> Verdict | None:
    """The first paired comparison showing the setting of ``trials[cheap]`` slower than
    another setting of ``pool`` by more than ``tolerance`` (None if none does)."""
    for other in pool:
        rounds = None if other == cheap else paired(trials, cheap, other)
        if rounds is not None and rounds.verdict(tolerance) == "slower":
            return Verdict(cheap, "slower", rounds, other)
    return None


def explain(
    decision: Decision,
    trials: Sequence[Trial],
    *,
    target: float,
    tolerance: float,
    cores: int | None = None,
) -> list[str]:
    """Why ``decision.chosen`` was chosen, as sentences that each follow from the numbers
    (the search adds memory refusals and how it ended)."""
    pick, best = trials[decision.chosen], trials[decision.fastest]
    what = "GPU utilization (NVML)" if pick.gpu_util is not None else "consumer busy"
    again = [t.throughput for t in trials if _counts(t) and t.params == pick.params]
    rounds_seen = (
        f"; its {len(again)} paired rounds ran at a median of {median(again):.1f} batches/s"
        if again
        else ""
    )
    lines = [
        f"Chose {describe(pick.params)}: {_rate_ci(pick)}, {what} {percent(pick.utilization)} "
        f"(target {target:.0%}){rounds_seen}."
    ]
    line = f"{1 - tolerance:.0%}"
    by_outcome = {v.trial: v for v in decision.verdicts}
    mine = None if decision.fallback else by_outcome.get(decision.chosen)
    unfinished = decision.next  # the search ended before this comparison's verdict
    cut = ""
    if unfinished is not None:
        rounds = by_outcome[unfinished].rounds if unfinished in by_outcome else None
        so_far = (
            "did not get two pairs of rounds"
            if rounds is None
            else f"could not decide in the {rounds.pairs} pairs it got ({percent(rounds.ratio)} "
            f"of the fastest's rate, 95% CI {_interval(rounds)}, which contains "
            f"{line})"
        )
        cut = (
            f"the comparison of the cheaper {describe(trials[unfinished].params)} with the "
            f"fastest {so_far} before the search ended"
        )
    if decision.fallback:
        lines.append(
            f"The fastest setting measured is {describe(best.params)}: {_rate_ci(best)}; "
            f"{cut}. Settings above torch's defaults are chosen only when they measurably "
            "help, so torch's defaults are kept with the fastest setting's workers."
        )
    elif mine is None:
        if unfinished is not None:
            lines.append(f"It measured fastest; {cut}, so the fastest is kept.")
        elif decision.verdicts:
            lines.append(
                "It measured fastest, and every cheaper setting is slower by more than the "
                f"{tolerance:.0%} tolerance."
            )
        else:
            lines.append("It measured fastest, and no cheaper setting was measured.")
    else:
        lines.append(f"The fastest setting measured is {describe(best.params)}: {_rate_ci(best)}.")
        rounds = mine.rounds
        assert rounds is not None  # a chosen cheaper setting has its paired rounds
        measured = _paired_words(rounds, pick, "the fastest")
        if mine.outcome == "within":
            lines.append(
                f"{measured}: within the {tolerance:.0%} tolerance (the whole interval is at or "
                f"above {line}), and cheaper, so it is chosen."
            )
        else:
            lines.append(
                f"{measured}: the comparison could not tell them apart within the "
                f"{tolerance:.0%} tolerance in {rounds.pairs} pairs (the interval contains "
                f"{line}), so the cheaper is chosen."
            )
    if mine is not None and unfinished is not None:  # a cheaper one, still open
        lines.append(f"Cheaper still, {cut}.")
    slower = [v for v in decision.verdicts if v.outcome == "slower"]
    for v in slower:
        assert v.rounds is not None and v.against is not None
        other = (
            "the fastest" if v.against == decision.fastest else describe(trials[v.against].params)
        )
        words = _paired_words(v.rounds, trials[v.trial], other)
        lines.append(
            f"{words}: slower by more than the {tolerance:.0%} tolerance (the whole interval "
            f"is below {line})."
        )
    far = [trials[v.trial] for v in decision.verdicts if v.outcome == "apart"]
    if far:
        allowing = (
            f", even allowing for the {decision.drift:.0%} drift seen between a trial and the "
            "paired rounds of the same setting"
            if decision.drift
            else ""
        )
        listed = "; ".join(f"{describe(t.params)}: {t.throughput:.1f} batches/s" for t in far)
        lines.append(
            f"{len(far)} cheaper setting(s) measured slower than the fastest by more than the "
            f"tolerance beyond both 95% intervals{allowing} ({listed})."
        )
    if cores is not None and pick.params["num_workers"] > cores:
        settled = unfinished is None
        lines.append(
            f"It uses more workers than the {cores} usable core(s): "
            + (
                "every setting cheaper than it was shown slower (above)."
                if settled
                else "the comparison that could rule that out did not finish."
            )
        )
    reached = decision.reached
    if not reached:
        lines.append(
            f"No setting reached the {target:.0%} target: the input pipeline, not the consumer, "
            "sets the pace; the rule above chose by throughput."
        )
    elif pick.utilization < target:
        lines.append(
            f"{len(reached)} setting(s) reached the {target:.0%} target; the rule chooses by "
            "throughput against the fastest, as above."
        )
    return lines


def describe_refused(
    trials: Sequence[Trial], refused: Sequence[int], max_memory: int | None
) -> str:
    """The sentence on the settings refused for memory."""
    parts = []
    for i in refused:
        t = trials[i]
        why = t.refused or f"peak {format_size(t.peak_rss)} over {format_size(max_memory or 0)}"
        parts.append(f"{describe(t.params)} ({why})")
    return f"{len(parts)} setting(s) refused for memory: {'; '.join(parts)}."


def _paired_words(rounds: Paired, trial: Trial, fastest: str) -> str:
    return (
        f"In {rounds.pairs} pairs of back-to-back rounds, {describe(trial.params)} ran at "
        f"{percent(rounds.ratio)} of the rate of {fastest} (95% CI {_interval(rounds)})"
    )


def _interval(rounds: Paired) -> str:
    """The pairs' interval in percent, rounded down like the verdict's line (a bound under 95%
    never shows as 95%)."""
    return f"{percent(rounds.low)}-{percent(rounds.high)}"


def _rate_ci(trial: Trial) -> str:
    low, high = trial.interval
    if low == high:
        return f"{trial.throughput:.1f} batches/s (no interval: too few batches)"
    return f"{trial.throughput:.1f} batches/s (95% CI {low:.1f}-{high:.1f})"
