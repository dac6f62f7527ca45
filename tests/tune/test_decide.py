"""Tests of fastdata.tune.decide: the decision rule on made-up measurements (no timing).

A trial's interval is ``throughput / (1 +- rel_ci)``, so each case below sets throughputs and
relative half-widths that make the intervals overlap or stand apart, and checks the choice
and the words of the reason.
"""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdata.tune import Trial
from fastdata.tune.decide import Decision, decide, explain, overlap

from fakes import settings


def trial(workers: int, rate: float, ci: float = 0.03, **kwargs: object) -> Trial:
    prefetch = kwargs.pop("prefetch", 2)
    pin = kwargs.pop("pin", False)
    return Trial(
        params=settings(workers, prefetch, pin),  # type: ignore[arg-type]
        throughput=rate,
        rel_ci=ci,
        busy=kwargs.pop("busy", 0.5),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def choose(trials: list[Trial], **options: object) -> Decision:
    options = {"target": 0.95, "tolerance": 0.0, **options}
    return decide(trials, **options)  # type: ignore[arg-type]


def reason(trials: list[Trial], **options: object) -> str:
    options = {"target": 0.95, "tolerance": 0.0, **options}
    return " ".join(explain(choose(trials, **options), trials, **options))  # type: ignore[arg-type]


def test_the_interval_is_the_throughput_over_one_plus_and_minus_the_relative_ci() -> None:
    assert trial(2, 20.0, 0.25).interval == (16.0, pytest.approx(80 / 3))
    assert trial(2, 20.0, math.inf).interval == (20.0, 20.0)  # no interval: the point
    assert trial(2, 20.0, 1.5).interval == (8.0, math.inf)
    assert overlap(trial(1, 10.0, 0.1), trial(2, 11.5, 0.1))  # 9.1-11.1 and 10.5-12.8
    assert not overlap(trial(1, 10.0, 0.05), trial(2, 11.5, 0.05))  # 9.5-10.5, 11.0-12.1


def test_overlapping_best_trials_choose_the_fewest_workers_and_say_it_is_noise() -> None:
    trials = [trial(0, 8.0), trial(1, 15.0), trial(2, 19.5, 0.05), trial(3, 20.3, 0.05)]
    decision = choose(trials)
    assert decision.chosen == 2  # 2 workers: 18.6-20.5 overlaps 3 workers' 19.3-21.4
    assert decision.fastest == 3 and decision.tied == (2,)
    text = reason(trials)
    assert "2 trials cannot be told apart from the fastest (num_workers=3" in text
    assert "It measured fastest, and 1 other trial(s) cannot be told apart" in reason(
        [*trials[:2], trial(2, 20.3, 0.05), trial(3, 19.5, 0.05)]
    )
    assert "95% intervals overlap, so the differences between them are noise" in text
    assert "(95% CI 18.6-20.5)" in text


def test_separated_trials_choose_the_faster_even_with_more_workers() -> None:
    trials = [trial(0, 8.0), trial(1, 15.0), trial(2, 18.0, 0.02), trial(3, 20.3, 0.02)]
    decision = choose(trials)
    assert decision.chosen == 3 and decision.tied == ()  # 17.6-18.4 below 19.9-20.7
    assert "It is the fastest, and no other trial's 95% interval overlaps" in reason(trials)


def test_among_the_indistinguishable_the_smallest_prefetch_then_pin_memory_off() -> None:
    trials = [
        trial(2, 20.0, 0.05, prefetch=4),
        trial(2, 20.5, 0.05, prefetch=8),
        trial(2, 19.8, 0.05, prefetch=3, pin=True),
        trial(2, 19.9, 0.05, prefetch=3),
        trial(2, 12.0, 0.05, prefetch=1),  # separated: slower beyond the noise
    ]
    assert choose(trials).chosen == 3  # prefetch 3 (not 1: separated), pinning off
    assert choose(trials[:3]).chosen == 2  # prefetch 3 with pinning beats prefetch 4


def test_the_tolerance_and_the_target_widen_what_counts_as_good() -> None:
    trials = [trial(1, 18.0, 0.01), trial(2, 18.8, 0.01)]  # separated, 4% apart
    assert choose(trials).chosen == 1
    assert choose(trials, tolerance=0.05).chosen == 0
    reached = [trial(1, 18.0, 0.01, busy=0.96), trial(2, 30.0, 0.01, busy=0.99)]
    assert choose(reached).chosen == 0 and choose(reached).reached == (0, 1)


def test_more_workers_than_cores_only_when_faster_beyond_the_intervals() -> None:
    within = [trial(0, 5.0), trial(1, 9.0), trial(2, 17.0, 0.05)]  # 2 cores: 16.2-17.9
    noisy = [*within, trial(4, 18.5, 0.05)]  # 17.6-19.5: overlaps, so not justified
    decision = choose(noisy, tolerance=0.05, cores=2)
    assert decision.chosen == 2 and decision.held_back == (3,)
    assert "1 trial(s) with more workers than the 2 core(s) measured faster, but not beyond" in (
        reason(noisy, tolerance=0.05, cores=2)
    )
    # Without the core rule they tie too (2 workers: the cheaper of two overlapping).
    assert choose(noisy, tolerance=0.05).chosen == 2
    io_bound = [*within, trial(4, 24.0, 0.05), trial(6, 31.0, 0.05)]  # 22.9-25.3, 29.5-32.6
    decision = choose(io_bound, tolerance=0.05, cores=2)
    assert decision.chosen == 4 and decision.within_cores == 2
    text = reason(io_bound, tolerance=0.05, cores=2)
    assert "It uses more workers than the 2 usable core(s): it measured 31.0 batches/s" in text
    assert "against 17.0 batches/s (95% CI 16.2-17.9) for the fastest trial with at most 2" in text


def test_a_space_without_trials_within_the_cores_says_so() -> None:
    trials = [trial(8, 10.0), trial(16, 10.1)]
    decision = choose(trials, cores=2)
    assert decision.chosen == 0 and decision.within_cores is None
    assert "because no trial with at most that many was measured" in reason(trials, cores=2)


def test_memory_failures_and_an_empty_choice() -> None:
    trials = [
        trial(0, 8.0, peak_rss=100),
        trial(2, 20.0, peak_rss=300),
        Trial(params={}, error="x"),
    ]
    assert choose(trials, max_memory=200).chosen == 0
    assert choose(trials, max_memory=50) == Decision(chosen=0, fastest=None)
    paired_only = [Trial(params=settings(1), throughput=1.0, pair=0)]
    with pytest.raises(ValueError, match="no completed trial"):
        choose(paired_only)  # paired rounds confirm; they are not the search
    assert "No trial stayed within max_memory" in reason(trials, max_memory=50)
    with pytest.raises(ValueError, match="no completed trial"):
        choose([Trial(params={}, error="x")])


rates = st.floats(1.0, 100.0)
widths = st.floats(0.0, 0.5)


@given(st.lists(st.tuples(st.integers(0, 8), st.sampled_from([1, 2, 4]), rates, widths),
                min_size=1, max_size=12))  # fmt: skip
def test_the_choice_is_never_beaten_beyond_the_noise_by_a_cheaper_setting(
    specs: list[tuple[int, int, float, float]],
) -> None:
    trials = [trial(w, r, c, prefetch=p) for w, p, r, c in specs]
    decision = choose(trials, cores=8)
    pick, fastest = trials[decision.chosen], trials[decision.fastest]  # type: ignore[index]
    assert overlap(pick, fastest)  # the choice is as good as the fastest, by the intervals
    for other in trials:  # and nothing cheaper is
        cheaper = (other.params["num_workers"], other.params["prefetch_factor"] or 0) < (
            pick.params["num_workers"],
            pick.params["prefetch_factor"] or 0,
        )
        assert not (cheaper and overlap(other, fastest))


def pairs(cheap: Trial, fast: Trial, rates: list[tuple[float, float]]) -> list[Trial]:
    """Paired rounds of the settings of ``cheap`` and ``fast`` at these rates."""
    return [
        Trial(params=t.params, throughput=r, rel_ci=0.02, pair=k)
        for k, (a, b) in enumerate(rates)
        for t, r in ((cheap, a), (fast, b))
    ]


def test_paired_rounds_choose_the_rival_when_they_put_it_within_the_tolerance() -> None:
    search = [trial(0, 8.0, 0.02), trial(1, 20.0, 0.02), trial(2, 25.0, 0.02)]
    assert choose(search, tolerance=0.05).chosen == 2  # 2 workers, measured in a quiet moment
    rounds = pairs(search[1], search[2], [(20.0, 21.0), (19.5, 20.5), (21.0, 21.5)])
    decision = choose(search + rounds, tolerance=0.05)
    logs = [math.log(20 / 21), math.log(19.5 / 20.5), math.log(21 / 21.5)]
    mean, sd = sum(logs) / 3, statistics.stdev(logs)
    confirmation = decision.confirmation
    assert confirmation is not None and confirmation.pairs == 3
    assert confirmation.ratio == pytest.approx(math.exp(mean))  # 96%
    assert confirmation.high == pytest.approx(math.exp(mean + 4.302653 * sd / math.sqrt(3)))
    assert decision.chosen == 1 and decision.rival == 1
    text = reason(search + rounds, tolerance=0.05)
    assert "In 3 pairs of back-to-back rounds, num_workers=1" in text
    assert "ran at 96% of the rate of num_workers=2" in text
    assert "within the 5% tolerance, and cheaper, so it is chosen" in text
    assert choose(search + rounds, tolerance=0.0).chosen == 2  # 4% slower is slower


def test_paired_rounds_keep_the_choice_when_they_put_the_rival_further_behind() -> None:
    search = [trial(1, 20.0, 0.02), trial(2, 25.0, 0.02)]
    # Each pair has the rival behind, by 25% to 60%: the machine swings, the pairs say "slower"
    # even where three pairs give a t interval that reaches 1.
    rounds = pairs(search[0], search[1], [(15.0, 27.7), (9.0, 23.2), (8.9, 11.6)])
    decision = choose(search + rounds, tolerance=0.05)
    assert decision.chosen == 1 and decision.confirmation is not None
    assert decision.confirmation.high > 1 > decision.confirmation.ratio
    assert "slower by more than the 5% tolerance, so the cheaper setting is not enough" in (
        reason(search + rounds, tolerance=0.05)
    )
    faster = pairs(search[0], search[1], [(21.0, 20.0), (20.5, 20.0), (22.0, 21.0)])
    assert choose(search + faster).chosen == 0  # the rival is even faster in pairs


def test_one_pair_or_pairs_of_other_settings_decide_nothing() -> None:
    search = [trial(1, 20.0, 0.02), trial(2, 25.0, 0.02), trial(3, 24.0, 0.02)]
    one = pairs(search[0], search[1], [(20.0, 20.0)])
    assert choose(search + one).confirmation is None  # one pair: no interval
    other = pairs(search[0], search[2], [(20.0, 20.0), (20.0, 20.0)])  # not the fastest
    assert choose(search + other).confirmation is None and choose(search + other).chosen == 1
