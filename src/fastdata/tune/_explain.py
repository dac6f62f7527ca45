"""The decision in words: why :func:`~fastdata.tune.decide.decide` chose what it chose.

Every sentence follows from the numbers of the trials and of the paired rounds: the choice's
rate and interval, each comparison's verdict with its interval against the line
(``1 - tolerance``), the settings ruled out by their trials, workers beyond the cores, and
whether the target was reached. Percentages round down (:func:`~fastdata.tune.words.percent`),
so a bound under the line never reads as the line. The search adds the memory refusals
(:func:`describe_refused`) and how it ended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import median

from fastdata.tune._statistics import Paired, attempts, counts, pairs_of
from fastdata.tune._trial import Trial
from fastdata.tune.decide import Decision, Verdict
from fastdata.tune.words import describe, format_size, percent

__all__ = ["describe_refused", "explain"]


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
    again = [t.throughput for t in trials if counts(t) and t.params == pick.params]
    rounds_seen = (
        f"; its {len(again)} paired round{'s' if len(again) != 1 else ''} ran at a median of "
        f"{median(again):.1f} batches/s"
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
        cut = _cut_short(trials, unfinished, decision.fastest, by_outcome, line)
    over = "; ".join(_apart_words(v, trials, decision.fastest) for v in decision.passed)
    if decision.fallback:
        kept = (
            "so it is kept" if decision.chosen == unfinished else
            f"so the cheaper {describe(pick.params)}, whose comparison did not finish either, "
            "is kept"
        )  # fmt: skip
        if decision.passed:
            kept = (
                f"and without a finished comparison a setting is passed over when its trial is "
                f"slower than another's by more than the tolerance beyond both 95% intervals "
                f"({over}); {describe(pick.params)}, whose comparison did not finish either, is "
                "not, so it is kept"
            )
        lines.append(
            f"The fastest setting measured is {describe(best.params)}: {_rate_ci(best)}; "
            f"{cut}. A cheaper setting is given up only when shown slower, {kept}."
        )
    elif mine is None:
        if unfinished is not None and decision.passed:
            lines.append(
                f"It measured fastest; {cut}. Without a finished comparison a setting is passed "
                "over when its trial is slower than another's by more than the tolerance beyond "
                f"both 95% intervals ({over}), so the fastest is kept."
            )
        elif unfinished is not None:
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
    far = [v for v in decision.verdicts if v.outcome == "apart"]
    if far:
        allowing = (
            f", even allowing for a drift of {decision.drift:.0%} (the most that a setting's "
            "paired rounds lay outside its trial's interval)"
            if decision.drift
            else ""
        )
        listed = "; ".join(_apart_words(v, trials, decision.fastest) for v in far)
        lines.append(
            f"{len(far)} cheaper setting(s) measured slower than the fastest, or than another "
            f"setting measured, by more than the tolerance beyond both 95% intervals{allowing} "
            f"({listed})."
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


def _cut_short(
    trials: Sequence[Trial], cheap: int, fastest: int, by_outcome: dict[int, Verdict], line: str
) -> str:
    """The comparison of ``trials[cheap]`` with the fastest that the search ended before its
    verdict, with the pairs it measured and the pairs that counted (as the table shows them)."""
    rounds = by_outcome[cheap].rounds if cheap in by_outcome else None
    measured = attempts(trials, cheap, fastest)
    if rounds is not None:
        so_far = (
            f"could not decide in the {rounds.pairs} pairs it got ({percent(rounds.ratio)} "
            f"of the fastest's rate, 95% CI {_interval(rounds)}, which contains {line})"
        )
    elif measured == 0:
        so_far = "was not started"
    else:
        counted = pairs_of(trials, cheap, fastest)
        so_far = (
            f"measured {measured} pair(s) of rounds, {counted} of which counted (a round "
            "without an interval, shown as ? in the table, does not count; two pairs are needed)"
        )
    return (
        f"the comparison of the cheaper {describe(trials[cheap].params)} with the fastest "
        f"{so_far} before the search ended"
    )


def _apart_words(verdict: Verdict, trials: Sequence[Trial], fastest: int) -> str:
    """One setting ruled out by its trial, with the trial it is slower than."""
    assert verdict.against is not None
    slow, other = trials[verdict.trial], trials[verdict.against]
    than = "the fastest" if verdict.against == fastest else describe(other.params)
    bare = [t for t in (slow, other) if math.isinf(t.rel_ci)]
    alone = (
        f"; {' and '.join(f'{t.throughput:.1f}' for t in bare)} measured too few batches for "
        "an interval, so the rate alone counts"
        if bare
        else ""
    )
    return (
        f"{describe(slow.params)}: {slow.throughput:.1f} batches/s, against {than}'s "
        f"{other.throughput:.1f}{alone}"
    )


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
