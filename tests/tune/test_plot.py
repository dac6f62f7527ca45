"""Tests of fastdata.tune.plot: a PNG is drawn for any result with a completed trial."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from fastdata.config import LoaderConfig
from fastdata.tune import Trial, TuneResult
from fastdata.tune.plot import plot

from .fakes import settings


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def result(trials: list[Trial], chosen: int = 0) -> TuneResult:
    return TuneResult(
        trials=tuple(trials), chosen=chosen, config=LoaderConfig(), reason="", cores=2
    )


def test_every_trial_gets_a_column_and_more_trials_a_wider_picture(tmp_path: Path) -> None:
    few = [Trial(params=settings(w), throughput=10.0 + w, rel_ci=0.05, busy=0.5) for w in (0, 1)]
    many = [
        Trial(params=settings(w, p, pin), throughput=10.0 + w, rel_ci=r, busy=0.5)
        for w, p, pin, r in [
            (0, 2, False, 0.02),
            (1, 2, True, 0.05),
            (2, 1, False, 1.5),
            (3, 2, False, float("inf")),
            (4, 8, False, 0.1),
        ]
    ]  # fmt: skip  (an unbounded interval, and one without an interval)
    many.append(Trial(params=settings(8), error="boom"))
    small = png_size(plot(result(few), tmp_path / "few.png"))
    large = png_size(plot(result(many, chosen=2), tmp_path / "many.png"))
    assert large[0] > small[0] and large[1] == small[1]


def test_a_result_without_a_completed_trial_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no completed trial to plot"):
        plot(result([Trial(params=settings(0), error="boom")]), tmp_path / "x.png")
