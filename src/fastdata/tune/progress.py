"""What ``fastdata tune`` shows while it measures: a line per finished trial and, on a
terminal, a live status line with the time left. The command line's; the library prints
nothing (it calls ``on_trial``)."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from fastdata.tune._trial import Trial
from fastdata.tune.words import describe, error_line, percent

__all__ = ["Progress"]

_CLEAR = "\r\x1b[K"  # back to the start of the line and erase it


class Progress:
    """A ``with`` block around the search, and its ``on_trial`` callback.

    Args:
        budget_s: the search's budget: the bar fills over it, and the time left is what
            remains of it (the search may end sooner, when the target is reached).
        stream: where to write (stderr).
        live: redraw a status line every ``interval`` seconds; default: when ``stream``
            is a terminal (a log file gets only the per-trial lines).
        quiet: write nothing at all.
        clock: the time source (tests inject one).
    """

    def __init__(
        self,
        budget_s: float,
        *,
        stream: TextIO | None = None,
        live: bool | None = None,
        quiet: bool = False,
        clock: Callable[[], float] = time.monotonic,
        interval: float = 0.5,
    ) -> None:
        self.budget_s, self.clock, self.interval = budget_s, clock, interval
        self.stream = sys.stderr if stream is None else stream
        self.quiet = quiet
        self.live = not quiet and (self.stream.isatty() if live is None else live)
        self.start = clock()
        self.trials: list[Trial] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def status(self) -> str:
        """The live line: a bar over the budget, the time left, the best trial so far."""
        elapsed = self.clock() - self.start
        share = min(max(elapsed / self.budget_s, 0.0), 1.0)
        bar = "#" * round(20 * share) + "." * (20 - round(20 * share))
        left = max(self.budget_s - elapsed, 0.0)
        line = f"[{bar}] {elapsed:.0f} s, at most {left:.0f} s left; trial {len(self.trials) + 1}"
        done = [t for t in self.trials if t.ok]
        if done:
            best = max(done, key=lambda t: t.throughput)
            line += f"; fastest so far {best.throughput:.1f} batches/s ({_short(best.params)})"
        return line

    def __call__(self, trial: Trial) -> None:
        """``on_trial``: record the trial and write its line."""
        with self._lock:
            self.trials.append(trial)
            if self.quiet:
                return
            if trial.ok:
                low, high = trial.interval
                outcome = (
                    f"{trial.throughput:.1f} batches/s (95% CI {low:.1f}-{high:.1f}), "
                    f"busy {percent(trial.busy)}"
                )
            elif trial.refused is not None:
                outcome = f"refused for memory: {trial.refused}"
            else:
                outcome = f"failed: {error_line(trial.error or '')}"
            pair = "" if trial.pair is None else f" (pair {trial.pair + 1})"
            line = f"  trial {len(self.trials)}{pair}: {describe(trial.params)} -> {outcome} "
            line += f"({trial.seconds:.1f} s)"
            self._write((_CLEAR if self.live else "") + line + "\n")
            if self.live:
                self._write(self.status())

    def __enter__(self) -> Progress:
        if self.live:
            self._thread = threading.Thread(target=self._run, name="fastdata-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._write(_CLEAR)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._write(_CLEAR + self.status())

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


def _short(params: dict[str, Any]) -> str:
    pin = ", pinned" if params.get("pin_memory") else ""
    prefetch = params.get("prefetch_factor")
    threads = params.get("worker_method") == "thread" and params["num_workers"] > 0
    workers = f"{params['num_workers']} {'thread workers' if threads else 'workers'}"
    return workers + (f", prefetch {prefetch}" if prefetch else "") + pin
