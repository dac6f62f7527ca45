"""Tests of fastdata.tune.progress: the per-trial lines, the live status line and --quiet,
written to a string stream on a fake clock."""

from __future__ import annotations

import io
import time

from fastdata.tune import Trial
from fastdata.tune.progress import Progress

from .fakes import FakeClock, settings


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_one_line_per_trial_and_no_status_line() -> None:
    log = io.StringIO()  # not a terminal
    with Progress(60, stream=log) as progress:
        progress(Trial(params=settings(2), throughput=20.0, rel_ci=0.05, busy=0.6, seconds=4.0))
        progress(Trial(params=settings(4), error="RuntimeError('killed')", seconds=1.0))
        progress(Trial(params=settings(8), refused="used 9 GiB, over the memory ceiling"))
    assert log.getvalue().splitlines() == [
        "  trial 1: num_workers=2, prefetch_factor=2, pin_memory=False -> 20.0 batches/s "
        "(95% CI 19.0-21.1), busy 60% (4.0 s)",
        "  trial 2: num_workers=4, prefetch_factor=2, pin_memory=False -> failed: "
        "RuntimeError('killed') (1.0 s)",
        "  trial 3: num_workers=8, prefetch_factor=2, pin_memory=False -> refused for memory: "
        "used 9 GiB, over the memory ceiling (0.0 s)",
    ]
    assert "\r" not in log.getvalue()


def test_the_status_line_shows_the_time_left_and_the_fastest_so_far() -> None:
    clock, screen = FakeClock(), Terminal()
    progress = Progress(60, stream=screen, clock=clock)
    assert progress.live
    assert progress.status() == "[....................] 0 s, at most 60 s left; trial 1"
    clock.advance(15)
    progress(Trial(params=settings(0), throughput=8.0, rel_ci=0.03))
    progress(Trial(params=settings(2, 3), throughput=19.5, rel_ci=0.03))
    assert progress.status() == (
        "[#####...............] 15 s, at most 45 s left; trial 3; "
        "fastest so far 19.5 batches/s (2 workers, prefetch 3)"
    )
    clock.advance(100)  # past the budget (a trial overran): full bar, nothing left
    assert progress.status().startswith("[####################] 115 s, at most 0 s left")
    # each trial line erases the status line first and redraws it after
    assert screen.getvalue().count("\r\x1b[K  trial ") == 2


def test_the_live_line_is_redrawn_while_a_trial_runs_and_erased_at_the_end() -> None:
    screen = Terminal()
    with Progress(60, stream=screen, interval=0.001):
        time.sleep(0.05)
    text = screen.getvalue()
    assert text.count("at most") >= 2  # redrawn
    assert text.endswith("\r\x1b[K")  # the terminal is left clean


def test_quiet_writes_nothing() -> None:
    screen = Terminal()
    with Progress(60, stream=screen, quiet=True, interval=0.001) as progress:
        progress(Trial(params=settings(1), throughput=1.0))
    assert screen.getvalue() == ""
    assert not progress.live and len(progress.trials) == 1
