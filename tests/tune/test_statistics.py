"""Tests of fastdata.tune._statistics: Student's t, the interval of one trial from block
means, two trials' intervals compared, and paired rounds (their ratio, interval and verdict,
and the drift: how far a setting's rounds lay outside its trial's interval)."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fastdata.tune._statistics import (
    BlockStats,
    Paired,
    apart,
    counts,
    drift,
    equivalent,
    overlap,
    paired,
    pairs_of,
    t95,
)
from fastdata.tune._trial import Trial

from .fakes import rounds, settings, trial

T95_2 = 4.302652730  # Student's t, two-sided 95%, 2 degrees of freedom (three pairs)


def test_paired_rounds_give_the_geometric_mean_ratio_and_its_t_interval() -> None:
    cheap, fast = trial(1, 20.0), trial(2, 25.0)
    table = [cheap, fast, *rounds(cheap, fast, [(20.0, 21.0), (19.5, 20.5), (21.0, 21.5)])]
    logs = [math.log(20 / 21), math.log(19.5 / 20.5), math.log(21 / 21.5)]
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    result = paired(table, 0, 1)
    assert result is not None and result.pairs == 3
    assert result.ratio == pytest.approx(math.exp(mean))  # 96%
    assert result.low == pytest.approx(math.exp(mean - T95_2 * sd / math.sqrt(3)))
    assert result.high == pytest.approx(math.exp(mean + T95_2 * sd / math.sqrt(3)))
    one = [cheap, fast, *rounds(cheap, fast, [(20.0, 21.0)])]
    assert paired(one, 0, 1) is None  # one pair: no interval


@pytest.mark.parametrize(
    ("low", "high", "verdict"),
    [(0.96, 1.10, "within"), (0.95, 0.99, "within"), (0.80, 0.949, "slower"),
     (0.37, 1.14, "undecided"), (0.90, 0.95, "undecided"), (0.94, 0.96, "undecided")],
)  # fmt: skip
def test_the_verdict_is_where_the_interval_lies_against_one_minus_the_tolerance(
    low: float, high: float, verdict: str
) -> None:
    assert Paired((1,), (2,), (low * high) ** 0.5, low, high, 3).verdict(0.05) == verdict


def test_drift_is_how_far_a_settings_paired_rounds_lay_outside_its_trials_interval() -> None:
    cheap, fast = trial(1, 18.0), trial(2, 25.0)  # intervals 18 / (1 +- 0.03), 25 / (1 +- 0.03)
    assert drift([cheap, fast]) is None
    table = [cheap, fast, *rounds(cheap, fast, [(19.0, 20.0), (20.0, 21.0), (21.0, 22.0)])]
    # 2 workers: the bottom of the trial's interval, 25 / 1.03, over its rounds' median, 21
    assert drift(table) == pytest.approx(25 / 1.03 / 21 - 1)
    # Rounds within their trials' intervals: the machine did not move beyond the trials' noise
    within = [cheap, fast, *rounds(cheap, fast, [(18.2, 24.6), (17.8, 25.3), (18.1, 25.0)])]
    assert drift(within) == 0.0
    # A noisy trial (+-49%) whose rounds land inside its wide interval adds no drift either
    noisy = trial(1, 23.0, 0.49)
    assert drift([noisy, fast, *rounds(noisy, fast, [(30.4, 25.0), (30.0, 25.1)])]) == 0.0
    # apart: the trial's top, widened by the drift, under 95% of the fastest's widened bottom
    slow, best = trial(0, 10.0, 0.05), trial(2, 20.0, 0.05)
    assert apart(slow, best, 0.05, 0.0)
    assert not apart(slow, best, 0.05, 0.5)  # a drift of 50%: it might not be slower
    # A trial of too few batches for an interval counts as its rate alone: with a slow
    # loader the many-worker trials rarely get one (rdc: 0 workers at 0.83/s against 2
    # workers' 1.63/s measured on 2 batches must not keep 0 workers in the running)
    one, two = trial(0, 0.83, 0.024), trial(2, 1.63, math.inf)
    assert apart(one, two, 0.05, 0.0) and not apart(two, one, 0.05, 0.0)


def test_t95_is_exact_for_few_degrees_of_freedom_and_close_beyond() -> None:
    assert t95(1) == pytest.approx(12.706204736)
    assert t95(3) == pytest.approx(3.182446305)
    exact = {4: 2.776445105, 5: 2.570581836, 10: 2.228138852, 30: 2.042272456}
    for df, value in exact.items():
        assert t95(df) == pytest.approx(value, rel=3e-3)
    assert t95(10**6) == pytest.approx(1.959963985, rel=1e-5)  # the normal quantile
    values = [t95(df) for df in range(1, 60)]
    assert values == sorted(values, reverse=True)  # more data, a narrower interval


@given(st.lists(st.floats(0.001, 1.0), min_size=2, max_size=12), st.integers(1, 4))
def test_block_stats_give_the_t_interval_of_the_block_totals(
    blocks: list[float], size: int
) -> None:
    stats = BlockStats(size)
    for total in blocks:  # each block: ``size`` equal batch times adding up to ``total``
        for _ in range(size):
            stats.add(total / size)
    if size > 1:
        stats.add(1e6)  # an unfinished block is not counted
    assert stats.blocks == len(blocks)
    assert stats.mean == pytest.approx(statistics.fmean(blocks))
    half = t95(len(blocks) - 1) * statistics.stdev(blocks) / math.sqrt(len(blocks))
    assert stats.relative_ci() == pytest.approx(half / statistics.fmean(blocks), abs=1e-9)
    assert stats.relative_ci(min_blocks=len(blocks) + 1) == math.inf  # too few blocks asked


def test_an_interval_needs_two_blocks() -> None:
    stats = BlockStats(0)  # a block of at least one batch
    assert stats.relative_ci() == math.inf
    stats.add(0.1)
    assert (stats.blocks, stats.relative_ci(min_blocks=0)) == (1, math.inf)
    stats.add(0.1)
    assert stats.relative_ci() == 0.0  # two equal blocks: no spread


def test_intervals_that_overlap_or_rates_within_the_tolerance_are_equivalent() -> None:
    assert overlap(trial(1, 10.0, 0.1), trial(2, 11.5, 0.1))  # 9.1-11.1 and 10.5-12.8
    assert not overlap(trial(1, 10.0, 0.05), trial(2, 11.5, 0.05))  # 9.5-10.5, 11.0-12.1
    fastest = trial(2, 20.0, 0.0)
    assert equivalent(trial(1, 19.0, 0.0), fastest, 0.05)  # 95%: within the tolerance
    assert not equivalent(trial(1, 18.9, 0.0), fastest, 0.05)
    assert equivalent(trial(1, 18.0, 0.12), fastest, 0.05)  # its interval reaches 20.5
    assert not apart(trial(1, 18.0, 0.12), fastest, 0.05, 0.0)


def test_only_completed_rounds_with_a_bounded_rate_count_as_pairs() -> None:
    cheap, fast = trial(1, 20.0), trial(2, 25.0)
    table = [cheap, fast, *rounds(cheap, fast, [(20.0, 21.0), (19.5, 20.5)])]
    assert pairs_of(table, 0, 1) == 2
    assert not counts(cheap)  # a search trial, not a paired round
    assert counts(table[2])
    assert not counts(Trial(params=settings(1), throughput=20.0, rel_ci=1.0, pair=5))
    assert not counts(Trial(params=settings(1), throughput=20.0, error="x", pair=5))
    half = [*table, Trial(params=cheap.params, throughput=20.0, rel_ci=0.02, pair=9)]
    assert pairs_of(half, 0, 1) == 2  # a pair missing its other round is not complete
