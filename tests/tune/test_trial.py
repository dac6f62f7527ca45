"""Tests of fastdata.tune._trial: a trial's interval, what its target is checked against, and
its plain-data round trip."""

from __future__ import annotations

import json
import math

import pytest

from fastdata.tune._trial import Trial

from .fakes import settings, trial


def test_the_interval_is_the_throughput_over_one_plus_and_minus_the_relative_ci() -> None:
    assert trial(2, 20.0, 0.25).interval == (16.0, pytest.approx(80 / 3))
    assert trial(2, 20.0, math.inf).interval == (20.0, 20.0)  # no interval: the point
    assert trial(2, 20.0, 1.5).interval == (8.0, math.inf)


def test_the_target_is_checked_against_the_gpu_where_nvml_measured_it() -> None:
    assert trial(1, 10.0, busy=0.6).utilization == 0.6
    assert trial(1, 10.0, busy=0.6, gpu_util=0.9).utilization == 0.9


def test_only_a_trial_without_error_or_refusal_is_ok() -> None:
    assert trial(1, 10.0).ok
    assert not Trial(params=settings(1), error="OSError('x')").ok
    assert not Trial(params=settings(1), refused="over the memory ceiling").ok


def test_a_trial_is_plain_json_and_comes_back_the_same() -> None:
    measured = trial(2, 12.5, 0.04, busy=0.7, peak_rss=3 << 30, pair=4, gpu_util=0.5)
    unsure = Trial(params=settings(0), throughput=3.0)  # no interval: rel_ci is inf
    for original in (measured, unsure):
        data = json.loads(json.dumps(original.to_dict(), allow_nan=False))
        assert Trial.from_dict(data) == original
    assert unsure.to_dict()["rel_ci"] is None
