"""``fastdata tune`` against an exhaustive grid of its own search space, in the same run.

Two data sets, each through the pipeline a user would tune, against a simulated step (a
sleep: the CPU stays free for the workers, as during a GPU step):

- ``demo``: the ``fastdata tune`` demo (``conftest.demo_stream``): 256 ImageNet-like JPEGs
  (``synthetic.make_images``: shorter side 300-500 px, photo-like texture, ~0.55 bytes per
  pixel) listed 16 times per pass, decoded into 224 px random-resized crops with flips, in
  batches of 32; a 30 ms step (the CLI's default ``--step-ms``). Decode-bound.
- ``tokens``: a pre-tokenized Parquet corpus (``synthetic.make_tokens``: document lengths
  lognormal, median 256 tokens, log-sd 1.0, 4 files, row groups of 4,096 documents), its
  ``tokens`` column packed by ``fastdata.pack`` into batches of 8 x 2,048 tokens; a 5 ms step.
  Reading and packing cost less than handing a batch over from a worker, so workers do not
  pay here: the tuner has to find that out.

For each, the grid measures every setting of the search space (``num_workers`` 0 .. 2 x the
cores, at most 8, or 4 in short mode; ``worker_method`` threads and processes;
``prefetch_factor`` 2 .. 8) three times, in three
sweeps (ascending, descending, ascending), each measurement a trial as the tuner measures one
(:func:`fastdata.tune.measure.measure`: steady state, up to ``TRIAL_S`` seconds, ended early
once its interval is within 3%); the grid's best is the setting with the highest mean. The
tuner (:func:`fastdata.tune.tune`, its default rules, a ``BUDGET_S`` budget) runs first, on
the same loaders. Two groups per data set:

Both search thread and process workers (``worker_method``), so the grid has twice the
settings with workers it had before thread workers existed.

- ``tune-vs-grid-<data>``: the tuner's pick (``fastdata``) against the grid's best
  (``baseline:grid-best``), each measured as a trial, in ``ROUNDS`` alternating rounds; the
  rate is the median. The must-show: the pick at >= 0.95x of the grid's best.
- ``tune-vs-grid-time-<data>``: the tuner's wall time (``fastdata``) against the grid's
  (``baseline:grid``), as rates of one search: the ratio is grid time / tuner time. The
  must-show: the tuner in <= 0.35x of the grid's time, a ratio >= 2.86x.

``extra_info`` holds both settings, every grid mean, both times, the tuner's reason and the
data's properties.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean, median
from typing import Any

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import fastdata as fd
from fastdata.tune import SimulatedStep, TuneResult, tune
from fastdata.tune.measure import Trial, measure
from fastdata.tune.space import PARAMS, SearchSpace

from conftest import MODE, demo_stream, scaled

TRIAL_S = 0.5 if MODE == "short" else 2.5
"""A grid measurement's time limit: about a screening trial's share of the tuner's budget."""
BUDGET_S = scaled(10, 60)
REPEATS = 3
ROUNDS = scaled(5, 9)
STEP_MS = {"demo": 30.0, "tokens": 5.0}
DATA = list(STEP_MS)


def search_space() -> SearchSpace:
    """The tuner's default space on this machine (on 2 cores: 0 .. 4 workers, threads and
    processes, prefetch 2 .. 8), workers capped at 8 (4 in short mode) so that the grid stays
    affordable."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    default = SearchSpace.build(None, cores=cores or 1, device_used=False)
    top = 4 if MODE == "short" else 8
    return SearchSpace.build(
        {"num_workers": [w for w in default.num_workers if w <= top],
         "worker_method": default.worker_method,
         "prefetch_factor": default.prefetch_factor},
        cores=1, device_used=False,
    )  # fmt: skip


def key(params: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(params[p] for p in PARAMS)


def trial(factory: Callable[..., Iterable[Any]], params: dict[str, Any], step_ms: float) -> Trial:
    """One measurement of ``params``, as the tuner measures a trial."""
    per_round = max(params["num_workers"], 1)
    return measure(factory, params, step=SimulatedStep(step_ms), time_limit=TRIAL_S,
                   warmup=per_round, block=per_round)  # fmt: skip


@dataclass(frozen=True)
class Contest:
    """The tuner and the grid on the same loaders, one after the other."""

    factory: Callable[..., Iterable[Any]]
    step_ms: float
    data: dict[str, Any]
    result: TuneResult
    tune_s: float
    grid: dict[tuple[Any, ...], list[float]]
    grid_s: float

    @property
    def pick(self) -> dict[str, Any]:
        return self.result.chosen_trial.params

    @property
    def best(self) -> dict[str, Any]:
        top = max(self.grid, key=lambda k: fmean(self.grid[k]))
        return dict(zip(PARAMS, top, strict=True))


def contest(factory: Callable[..., Iterable[Any]], step_ms: float, data: dict[str, Any]) -> Contest:
    space = search_space()
    start = time.perf_counter()
    result = tune(factory, step_ms=step_ms, budget_s=BUDGET_S, data=data["description"],
                  search_space={"num_workers": space.num_workers,
                                "worker_method": space.worker_method,
                                "prefetch_factor": space.prefetch_factor})  # fmt: skip
    tune_s = time.perf_counter() - start
    settings = space.grid()
    grid: dict[tuple[Any, ...], list[float]] = {key(p): [] for p in settings}
    start = time.perf_counter()
    for sweep in range(REPEATS):
        for params in settings if sweep % 2 == 0 else settings[::-1]:
            grid[key(params)].append(trial(factory, params, step_ms).throughput)
    return Contest(factory, step_ms, data, result, tune_s, grid, time.perf_counter() - start)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Contest:
    stream = demo_stream(tmp_path_factory.mktemp("tune-grid-demo"), 256, samples=4096)

    def factory(**params: Any) -> fd.DataLoader:
        return fd.DataLoader(stream, batch_size=None, **params)

    data = {"description": "demo: 256 JPEGs x 16 per pass, 224 px crops, batches of 32",
            "images": 256, "samples_per_pass": 4096, "batch_size": 32}  # fmt: skip
    return contest(factory, STEP_MS["demo"], data)


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Contest:
    root: Path = tmp_path_factory.mktemp("tune-grid-tokens")
    rows = scaled(60_000, 400_000)
    fd.synthetic.make_tokens(root, rows, files=4, row_group_size=4096)
    lengths = pc.list_value_length(ds.dataset(root).to_table(columns=["tokens"])["tokens"])
    stream = fd.pack(fd.ParquetStream(root, columns=["tokens"]), seq_len=2048, rows=8)

    def factory(**params: Any) -> fd.DataLoader:
        return fd.DataLoader(stream, batch_size=None, **params)

    data = {"description": f"tokens: {rows:,} documents packed into 8 x 2,048",
            "documents": rows, "tokens": int(pc.sum(lengths).as_py()),
            "tokens_median": float(pc.approximate_median(lengths).as_py()),
            "seq_len": 2048, "rows": 8}  # fmt: skip
    return contest(factory, STEP_MS["tokens"], data)


def record(benchmark: Any, contest: Contest) -> None:
    """The contest's facts, for every record of its data set."""
    benchmark.extra_info.update(
        {
            "mode": MODE,
            "data": contest.data,
            "step_ms": contest.step_ms,
            "pick": contest.pick,
            "grid_best": contest.best,
            "same_setting": key(contest.pick) == key(contest.best),
            "grid_means": {str(k): round(fmean(v), 2) for k, v in contest.grid.items()},
            "tune_s": contest.tune_s,
            "grid_s": contest.grid_s,
            "time_ratio": contest.tune_s / contest.grid_s,
            "tune_trials": len(contest.result.trials),
            "grid_trials": REPEATS * len(contest.grid),
            "reason": contest.result.reason,
        }
    )


@pytest.mark.parametrize("data", DATA)
def test_the_tuners_pick_against_the_grids_best(benchmark: Any, data: str, request: Any) -> None:
    game: Contest = request.getfixturevalue(data)
    sides = {"fastdata": game.pick, "grid-best": game.best}
    rates: dict[str, list[float]] = {name: [] for name in sides}

    def one_round() -> None:  # alternating order, as the tuner's paired rounds
        order = list(sides) if len(rates["fastdata"]) % 2 == 0 else list(sides)[::-1]
        for name in order:
            rates[name].append(trial(game.factory, sides[name], game.step_ms).throughput)

    benchmark.group = f"tune-vs-grid-{data}"
    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1, warmup_rounds=0)
    record(benchmark, game)
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": 1,
            "unit": "batches",
            "median_s": 1 / median(rates["fastdata"]),
            "paired": {"baseline:grid-best": 1 / median(rates["grid-best"])},
            "rates": rates,
        }
    )


@pytest.mark.parametrize("data", DATA)
def test_the_tuners_time_against_the_grids(benchmark: Any, data: str, request: Any) -> None:
    game: Contest = request.getfixturevalue(data)
    benchmark.group = f"tune-vs-grid-time-{data}"
    # Both were timed by the fixture, back to back; this records them as the group's rates.
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    record(benchmark, game)
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": 1,
            "unit": "searches",
            "median_s": game.tune_s,
            "paired": {"baseline:grid": game.grid_s},
        }
    )
    assert all(len(rates) == REPEATS for rates in game.grid.values())  # every setting, 3 times
