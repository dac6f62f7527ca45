"""Thread workers against process workers under a training step that holds the GIL (issue 31).

Thread workers share the training process's interpreter: whatever Python their pipeline runs
waits for the GIL while the training step runs Python of its own (module calls, hooks,
logging, the optimizer's loop over parameters), and the step waits for them in turn. Process
workers have interpreters of their own and only compete for the cores. Where threads stop
winning depends on how much of the step is Python; these scenarios make it a knob.

Data: the ``fastdata tune`` demo pipeline (``conftest.demo_stream``): 256 ImageNet-like JPEGs
(``synthetic.make_images``: shorter side 300-500 px, photo-like texture, ~0.55 bytes per
pixel) listed 16 times per pass, decoded into 224 px random-resized crops with flips, in
batches of 32, through ``fastdata.DataLoader(num_workers=2, batch_size=None)``. The step,
:class:`GilStep`, lasts ``STEP_MS`` when it runs alone: a share of it (0%, 20%, 50%) is a
pure-Python loop of a fixed number of iterations, calibrated at the start of the run (so,
like real Python work, it takes longer when worker threads take the GIL from it), the rest a
sleep (GPU work the Python thread waits for, GIL released). Every side is measured as the
tuner measures a trial (:func:`fastdata.tune.measure.measure`: batches per second through
the step, steady state), in alternating rounds.

- ``gil-step-<share>``: thread workers (``fastdata``) against process workers
  (``baseline:process-workers``), same worker count and prefetch: the ratio is how much
  faster (> 1) or slower (< 1) threads feed this step, the geometric mean of the rounds'
  ratios (a machine whose speed drifts between rounds changes both sides of a round alike;
  the rates shown are the medians of each side).
- ``gil-step-tuner-<share>``: :func:`fastdata.tune.tune`, asked to choose the worker method
  for this step (``search_space={"worker_method": ["thread", "multiprocessing"]}``, workers
  and prefetch fixed), its pick's rate (``fastdata``) against the faster method's
  (``baseline:faster-method``), both from the rounds above: 1.00x when the tuner picks the
  faster method, and otherwise what picking wrong costs (the rule picks threads, the cheaper,
  when the two are within the 5% tolerance).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

import fastdata as fd
from fastdata.tune import tune
from fastdata.tune.measure import measure

from conftest import MODE, demo_stream, scaled

STEP_MS = 30.0  # the CLI's default simulated step
SHARES = (0, 20, 50)  # percent of the step spent in Python, holding the GIL
WORKERS = 2
ROUNDS = scaled(5, 9)
TRIAL_S = scaled(2, 4)
TUNE_BUDGET_S = scaled(12, 40)
METHODS = ("thread", "multiprocessing")


def _python_work(iterations: int) -> int:
    total = 0
    for i in range(iterations):  # bytecode: the interpreter holds the GIL, yielding it only
        total += i  # at its switch interval, as a real step's Python does
    return total


def _calibrate() -> float:
    """Loop iterations per millisecond on this machine, alone (the best of five)."""
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        _python_work(200_000)
        best = max(best, 200_000 / ((time.perf_counter() - start) * 1000))
    return best


class GilStep:
    """A training step of ``ms`` milliseconds when alone: ``share`` of it Python (a loop of
    a fixed number of iterations, holding the GIL), the rest a sleep (the GPU's work)."""

    def __init__(self, ms: float, share: float, per_ms: float) -> None:
        self.iterations = round(ms * share * per_ms)
        self.sleep_s = ms * (1 - share) / 1000
        self.ms, self.share = ms, share

    def __call__(self, batch: Any) -> None:
        _python_work(self.iterations)
        time.sleep(self.sleep_s)

    def __repr__(self) -> str:
        return f"GilStep({self.ms:g} ms, {self.share:.0%} Python)"


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Any:
    stream = demo_stream(tmp_path_factory.mktemp("bench-gil"), 256, samples=4096)

    def make(**params: Any) -> fd.DataLoader:
        return fd.DataLoader(stream, batch_size=None, **params)

    return make


@pytest.fixture(scope="module")
def per_ms() -> float:
    return _calibrate()


def settings(method: str) -> dict[str, Any]:
    return {"num_workers": WORKERS, "worker_method": method, "prefetch_factor": 2,
            "pin_memory": False}  # fmt: skip


def record(
    benchmark: Any, group: str, rate: float, baseline: str, ratio: float, facts: dict[str, Any]
) -> None:
    """Record fastdata's ``rate`` (batches/s) and the baseline's as ``rate / ratio``, so that
    ``compare.py`` shows the paired ``ratio`` (see :class:`Contest`)."""
    benchmark.group = group
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": 1,
            "unit": "batches",
            "mode": MODE,
            "median_s": 1 / rate,
            "paired": {f"baseline:{baseline}": ratio / rate},
            **facts,
        }
    )


class Contest:
    """Both methods measured under one step, and the tuner's pick for it."""

    def __init__(self, factory: Any, step: GilStep) -> None:
        result = tune(factory, step=step, budget_s=TUNE_BUDGET_S, data="demo images",
                      search_space={"num_workers": [WORKERS], "prefetch_factor": [2],
                                    "worker_method": list(METHODS)})  # fmt: skip
        self.pick = result.config.worker_method
        self.reason = result.reason
        self.rates: dict[str, list[float]] = {m: [] for m in METHODS}
        for turn in range(ROUNDS):
            for method in METHODS[:: 1 if turn % 2 == 0 else -1]:
                trial = measure(factory, settings(method), step=step, time_limit=TRIAL_S,
                                warmup=WORKERS, block=WORKERS)  # fmt: skip
                assert trial.ok, trial
                self.rates[method].append(trial.throughput)
        self.medians = {m: statistics.median(v) for m, v in self.rates.items()}
        # Threads over processes, round by round: a machine that speeds up or slows down
        # between rounds changes both sides of a round alike, and the geometric mean of the
        # rounds' ratios is free of it (the medians of each side are not).
        self.paired = statistics.geometric_mean(
            t / p for t, p in zip(self.rates["thread"], self.rates["multiprocessing"], strict=True)
        )
        self.faster = "thread" if self.paired >= 1 else "multiprocessing"
        self.facts = {
            "data": "demo: 256 JPEGs x 16 per pass, 224 px crops, batches of 32",
            "step": repr(step),
            "step_python_iterations": step.iterations,
            "rates": self.rates,
            "tuner_pick": self.pick,
            "faster": self.faster,
            "threads_over_processes_paired": self.paired,
            "reason": self.reason,
        }


@pytest.fixture(scope="module")
def contests(factory: Any, per_ms: float) -> Callable[[int], Contest]:
    """The contest of each share, measured once for both of its groups."""
    cache: dict[int, Contest] = {}

    def get(share: int) -> Contest:
        if share not in cache:
            cache[share] = Contest(factory, GilStep(STEP_MS, share / 100, per_ms))
        return cache[share]

    return get


@pytest.mark.parametrize("share", SHARES)
def test_threads_against_processes(benchmark: Any, contests: Any, share: int) -> None:
    game: Contest = contests(share)
    rate = game.medians["thread"]
    record(benchmark, f"gil-step-{share}", rate, "process-workers", game.paired, game.facts)
    assert all(len(v) == ROUNDS for v in game.rates.values())


@pytest.mark.parametrize("share", SHARES)
def test_the_tuners_method_against_the_faster(benchmark: Any, contests: Any, share: int) -> None:
    game: Contest = contests(share)
    # 1.00x when the tuner picked the faster method, else the slower's share of the faster
    ratio = 1.0 if game.pick == game.faster else min(game.paired, 1 / game.paired)
    rate = game.medians[game.pick]
    record(benchmark, f"gil-step-tuner-{share}", rate, "faster-method", ratio, game.facts)
    assert game.pick in METHODS
