"""Tests of fastdata.tune._explain: the sentences of a decision, each following from the
numbers (the recorded cases of test_decide check them with the rule), and the memory
refusals named."""

from __future__ import annotations

from fastdata.tune._explain import describe_refused, explain
from fastdata.tune._statistics import Paired
from fastdata.tune._trial import Trial
from fastdata.tune.decide import Decision, Verdict, decide

from .fakes import GiB, rounds, settings, trial


def words(decision: Decision, trials: list[Trial], **options: object) -> str:
    options = {"target": 0.95, "tolerance": 0.05, **options}
    return " ".join(explain(decision, trials, **options))  # type: ignore[arg-type]


def test_memory_refusals_are_named_with_why() -> None:
    search = [
        trial(0, 8.0, peak_rss=GiB),
        trial(2, 20.0, peak_rss=3 * GiB),  # completed, but over a 2.5 GiB ceiling
        Trial(params=settings(8), refused="not started: predicted 7 GiB, over the ceiling"),
    ]
    text = describe_refused(search, (1, 2), int(2.5 * GiB))
    assert text.startswith("2 setting(s) refused for memory: num_workers=2,")
    assert "(peak 3 GiB over 2.5 GiB)" in text and "not started: predicted 7 GiB" in text


def test_the_choice_is_said_with_its_rate_and_interval_or_without_one() -> None:
    search = [trial(1, 20.0, 0.25, busy=0.5)]
    text = words(decide(search, target=0.95, tolerance=0.05), search)
    assert text.startswith(
        "Chose num_workers=1, prefetch_factor=2, pin_memory=False: 20.0 batches/s "
        "(95% CI 16.0-26.7), consumer busy 50% (target 95%)."
    )
    unsure = [Trial(params=settings(1), throughput=20.0, busy=0.5)]
    text = words(decide(unsure, target=0.95, tolerance=0.05), unsure)
    assert "20.0 batches/s (no interval: too few batches)" in text


def test_a_bound_under_the_line_never_reads_as_the_line() -> None:
    """The pairs' interval is rounded down like the verdict's line: 94.96% reads 94%, so an
    interval that contains the line is never shown as starting at it."""
    cheap, fast = trial(1, 20.0), trial(2, 21.0)
    table = [cheap, fast, *rounds(cheap, fast, [(20.0, 21.0)] * 3)]
    close = Paired((1,), (2,), 0.97, 0.9496, 1.01, 8)
    decision = Decision(chosen=0, fastest=1, verdicts=(Verdict(0, "undecided", close, 1),))
    text = words(decision, table)
    assert "ran at 97% of the rate of the fastest (95% CI 94%-101%)" in text
    assert "could not tell them apart within the 5% tolerance in 8 pairs" in text
