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
compare it again. A cheaper setting whose own trial is slower than the fastest's, or any
other measured setting's, by more than the tolerance *beyond both 95% intervals*, each widened
by the largest *drift* seen so far (how far the median of a setting's later paired rounds lay
outside its trial's interval: :func:`~fastdata.tune._statistics.drift`), needs no pairs: it is
slower even if every trial was measured at the machine's worst (or best) moment seen. Slower
than any measured setting, it is slower than the fastest too, which measured at least as
fast; so a fastest trial with a wide interval (a stall in it) cannot keep a setting half as
fast in the running.
The drift is known once one setting has been measured twice, so the first comparison is made
before any setting is ruled out by its trial (with every cheaper setting apart, with the
fastest of them). A paired round whose own interval has no upper bound (a relative half-width
of 1 or more: a stall swallowed it) does not count, and its pair is measured again.

**What the choice is when the comparisons are cut short.** A comparison that the budget ends
before its verdict (fewer than two pairs, or an interval containing the line after fewer than
:data:`MAX_PAIRS`) has shown nothing, so it has not shown the cheaper setting slower: the
cheaper setting is kept, as the rule says. Unless a finished comparison showed a cheaper
setting as good (it is chosen), the choice is the cheapest setting whose comparison
did not finish and whose own trial is not slower than any measured setting's beyond both
intervals (:func:`apart`, the trials' own intervals: the drift widens them only to decide what
need not be compared, and one load spike late in a run can widen it past 40%, which would
keep a setting measured at 41% of the fastest's rate); failing that (every
cheaper setting shown slower, by pairs or by its trial), the fastest. The reason says which
comparison did not finish and how many of its pairs counted.
:attr:`Decision.next` says which comparison would come next; :mod:`.search` makes it while the
budget lasts.

Trials refused for memory (:attr:`~fastdata.tune.measure.Trial.refused`, or a peak RSS over
``max_memory``) and failed ones are never chosen. Pure functions of the trials, so the rule is
tested on recorded trial tables. The statistics it reads (intervals, paired rounds, drift) are
:mod:`fastdata.tune._statistics`; the reason in words, :mod:`fastdata.tune._reason`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastdata.tune._statistics import Paired, apart, drift, paired, pairs_of
from fastdata.tune._trial import Trial
from fastdata.tune.space import cost

__all__ = ["MAX_PAIRS", "Decision", "Paired", "Verdict", "decide"]

MAX_PAIRS = 8
"""Pairs after which a comparison that cannot tell its settings apart ends (and says so)."""


@dataclass(frozen=True)
class Verdict:
    """What the rule found about one setting cheaper than the fastest.

    Attributes:
        trial: the index of the search's trial of the setting.
        outcome: ``"within"``, ``"slower"`` or ``"undecided"`` (the paired rounds' verdict,
            :meth:`Paired.verdict`); ``"apart"`` (its trial is slower than ``against``'s
            beyond the intervals and the drift, no pairs needed); ``"open"`` (unfinished:
            fewer than two pairs, or an interval containing the line in fewer than
            ``max_pairs``).
        rounds: the paired rounds the outcome comes from (None with fewer than two pairs).
        against: the index of the search's trial of the other setting of those rounds: the
            fastest, or for ``"slower"`` and ``"apart"`` any setting it was shown slower than
            (the fastest is at least as fast).
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
        drift: the largest relative distance by which the median of a setting's paired
            rounds lay outside its trial's interval (None before any setting was measured
            twice).
        reached: trials whose :attr:`~fastdata.tune.measure.Trial.utilization` reaches the
            target.
        refused: trials refused for memory.
        fallback: the comparisons did not finish, and ``chosen`` is the cheaper setting whose
            comparison was cut short (see the module docstring).
        passed: where the comparisons did not finish, the cheaper settings passed over
            because their trials are slower than ``against``'s beyond both intervals (their
            own, without the drift): before ``chosen`` with ``fallback``, or all of them where
            the fastest is kept.
    """

    chosen: int
    fastest: int
    verdicts: tuple[Verdict, ...] = ()
    next: int | None = None
    drift: float | None = None
    reached: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    fallback: bool = False
    passed: tuple[Verdict, ...] = ()


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
        elif pairs_of(trials, i, fastest) == 0 and (
            (other := _apart_from(trials, i, pool, fastest, tolerance, seen)) is not None
        ):
            verdicts.append(Verdict(i, "apart", against=other))
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
    fallback, passed = False, []
    if following is not None and chosen == fastest:  # unfinished: keep the cheapest not shown
        for v in verdicts:  # slower, by pairs or by its trial's own interval
            other = None if v.outcome != "open" else _apart_from(
                trials, v.trial, pool, fastest, tolerance, None)  # fmt: skip
            if v.outcome == "open" and other is None:
                chosen, fallback = v.trial, True
                break
            if other is not None:
                passed.append(Verdict(v.trial, "apart", against=other))
    return Decision(
        chosen=chosen,
        fastest=fastest,
        verdicts=tuple(verdicts),
        next=following,
        drift=seen,
        reached=tuple(i for i in pool if trials[i].utilization >= target),
        refused=tuple(over),
        fallback=fallback,
        passed=tuple(passed),
    )


def _apart_from(
    trials: Sequence[Trial],
    cheap: int,
    pool: Sequence[int],
    fastest: int,
    tolerance: float,
    drift: float | None,
) -> int | None:
    """The setting of ``pool`` (the fastest first, then the faster first) that the trial of
    ``trials[cheap]`` is slower than by more than ``tolerance`` beyond both intervals widened
    by ``drift``
    (:func:`~fastdata.tune._statistics.apart`; none known counts as 0), or None. Slower than
    any measured setting, it is slower than the fastest too, which measured at least as fast:
    a fastest trial measured with a wide interval (a stall in it) hides nothing then."""
    for other in (fastest, *sorted(pool, key=lambda i: -trials[i].throughput)):
        if other != cheap and apart(trials[cheap], trials[other], tolerance, drift or 0.0):
            return other
    return None


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
