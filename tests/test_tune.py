"""Tests of fastdata.config and fastdata.tune: the config, the arithmetic, the search, the CLI.

The measurement arithmetic runs on an injected clock, so busy fraction, throughput and
start-up are checked exactly; the search runs on synthetic response surfaces (a fake
``evaluate`` returning trials from formulas), so its choices are deterministic. A few tests
then run real loaders end to end with short budgets: a sleep-bound dataset whose optimal
``num_workers`` is known analytically, a tiny ImageStream, and the command line.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import fastdata
from fastdata.config import LoaderConfig, load_config
from fastdata.tune import SimulatedStep, Trial, TuneError, TuneResult, tune
from fastdata.tune.measure import Sampler, measure, nvml_for_device, open_nvml, rss_reader
from fastdata.tune.report import format_size, parse_size
from fastdata.tune.search import SearchSpace, choose, search

GiB = 1024**3

# ------------------------------------------------------------------------------ LoaderConfig


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_workers": -1}, r"num_workers=-1: expected an integer >= 0"),
        ({"num_workers": True}, r"num_workers=True: expected an integer"),
        ({"num_workers": 2.0}, r"num_workers=2.0: expected an integer"),
        ({"num_workers": 2, "prefetch_factor": 0}, r"prefetch_factor=0: expected an integer >= 1"),
        ({"prefetch_factor": 2}, r"prefetch_factor=2 with num_workers=0: .* use prefetch_factor"),
        ({"pin_memory": "yes"}, r"pin_memory='yes': expected True or False"),
        ({"persistent_workers": True}, r"persistent_workers=True with num_workers=0"),
    ],
)
def test_config_rejects_invalid_values_listing_valid_ones(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        LoaderConfig(**kwargs)


def test_config_loader_kwargs_are_what_torch_accepts() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=4, pin_memory=False)
    assert config.loader_kwargs() == {
        "num_workers": 2,
        "prefetch_factor": 4,
        "pin_memory": False,
        "persistent_workers": False,
    }
    loader = torch.utils.data.DataLoader(range(8), batch_size=4, **config.loader_kwargs())
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    zero = LoaderConfig().loader_kwargs()
    assert torch.utils.data.DataLoader(range(3), **zero).prefetch_factor is None


def test_config_merged_lets_explicit_arguments_win() -> None:
    config = LoaderConfig(num_workers=2, prefetch_factor=4, persistent_workers=True)
    assert config.merged({}) == config.loader_kwargs()
    assert config.merged({"pin_memory": True, "batch_size": 8}) == {
        **config.loader_kwargs(),
        "pin_memory": True,
        "batch_size": 8,
    }
    no_workers = config.merged({"num_workers": 0})
    assert no_workers == {
        "num_workers": 0,
        "prefetch_factor": None,
        "pin_memory": False,
        "persistent_workers": False,
    }
    assert torch.utils.data.DataLoader(range(4), **no_workers).num_workers == 0
    assert config.merged({"num_workers": 0, "prefetch_factor": 3})["prefetch_factor"] == 3


configs = st.integers(0, 64).flatmap(
    lambda w: st.builds(
        LoaderConfig,
        num_workers=st.just(w),
        prefetch_factor=st.none() if w == 0 else st.none() | st.integers(1, 16),
        pin_memory=st.booleans(),
        persistent_workers=st.just(False) if w == 0 else st.booleans(),
    )
)


@given(configs)
def test_config_round_trips_through_dicts_and_json(config: LoaderConfig) -> None:
    assert LoaderConfig.from_dict(config.to_dict()) == config
    assert LoaderConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_config_from_dict_names_unknown_keys_and_valid_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown .*'workers'.*valid settings are num_workers"):
        LoaderConfig.from_dict({"workers": 2})
    assert LoaderConfig.from_dict({"num_workers": 3}) == LoaderConfig(num_workers=3)


def test_config_save_load_and_every_load_config_form(tmp_path: Path) -> None:
    config = LoaderConfig(num_workers=3, prefetch_factor=4, persistent_workers=True)
    path = config.save(tmp_path / "c.json")
    assert json.loads(path.read_text())["format"] == "fastdata.LoaderConfig"
    assert LoaderConfig.load(path) == config
    flat = tmp_path / "flat.json"
    flat.write_text('{"num_workers": 3, "prefetch_factor": 4, "persistent_workers": true}')
    result = _result([Trial(params=_params(3, 4), throughput=1.0)], config=config)
    forms: list[Any] = [
        config,
        config.to_dict(),
        {"config": config.to_dict()},
        str(path),
        path,
        flat,
        result,
        result.save(tmp_path / "result.json"),
    ]
    for form in forms:
        assert load_config(form) == config, form
    with pytest.raises(TypeError, match=r"expected a LoaderConfig, a TuneResult, a mapping"):
        load_config(3)


def test_config_load_names_the_bad_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad.json: not a fastdata loader config"):
        LoaderConfig.load(bad)
    bad.write_text('{"config": {"num_workers": -2}}')
    with pytest.raises(ValueError, match=r"bad.json: .*num_workers=-2"):
        LoaderConfig.load(bad)


# ------------------------------------------------------------------------------ measurement


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def paced(clock: FakeClock, costs: Callable[[int], float], n: int) -> Iterator[int]:
    """A loader of ``n`` items; item ``i`` keeps the consumer waiting ``costs(i)`` seconds."""
    for i in range(n):
        clock.advance(costs(i))
        yield i


class Passes:
    """Re-iterable: every pass yields one batch per cost."""

    def __init__(self, clock: FakeClock, costs: list[float]) -> None:
        self.clock, self.costs = clock, costs

    def __iter__(self) -> Iterator[int]:
        return paced(self.clock, self.costs.__getitem__, len(self.costs))


def test_busy_fraction_throughput_and_startup_are_exact_on_a_fake_clock() -> None:
    clock = FakeClock()
    wait, step = 0.030, 0.010

    def factory(**params: Any) -> Iterator[int]:
        clock.advance(0.5)  # building the loader: part of start-up
        return paced(clock, lambda i: 0.2 if i == 0 else wait, 1000)

    trial = measure(
        factory,
        {"num_workers": 0},
        step=lambda batch: clock.advance(step),
        time_limit=60,
        memory=lambda: 42.0,
        clock=clock,
    )
    assert trial.busy == pytest.approx(step / (wait + step), rel=1e-9)
    assert trial.throughput == pytest.approx(1 / (wait + step), rel=1e-9)
    assert trial.startup_s == pytest.approx(0.5 + 0.2)  # the first batch is start-up, not steady
    assert (trial.wait_ms, trial.step_ms) == (pytest.approx(30.0), pytest.approx(10.0))
    assert trial.peak_rss == 42
    assert trial.rel_ci == pytest.approx(0, abs=1e-9)  # constant: stable after 6 blocks
    assert trial.batches == 6


def test_warm_up_of_every_pass_is_discarded_and_passes_repeat() -> None:
    clock = FakeClock()
    # Each pass: 5 batches; the first 2 (warm-up: the first round of 2 workers) are slow.
    trial = measure(
        lambda **p: Passes(clock, costs=[1.0, 0.5, 0.01, 0.01, 0.01]),
        {"num_workers": 2},
        step=None,
        time_limit=60,
        warmup=2,
        block=2,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.throughput == pytest.approx(100.0)
    assert trial.busy == 0.0
    assert trial.startup_s == pytest.approx(1.0)
    assert trial.batches == 12  # 6 blocks of 2, taken 3 per pass over 4 passes


def test_a_trial_may_end_during_the_warm_up_of_a_later_pass() -> None:
    clock = FakeClock()
    # Pass 1 measures 3 batches of 1 s (3.1 s in all); time is up in pass 2's warm-up batch.
    trial = measure(
        lambda **p: Passes(clock, costs=[0.1, 1.0, 1.0, 1.0]),
        {"num_workers": 1},
        step=None,
        time_limit=3.15,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.batches == 3
    assert trial.throughput == pytest.approx(1.0)


def test_a_trial_stops_at_its_time_limit_when_the_estimate_stays_unstable() -> None:
    clock = FakeClock()
    trial = measure(
        lambda **p: paced(clock, lambda i: 0.01 if i % 2 else 0.05, 10**6),
        {"num_workers": 0},
        step=None,
        time_limit=3.0,
        rel_ci=0.0,  # never stable enough
        memory=lambda: 1.0,
        clock=clock,
    )
    assert 3.0 <= trial.seconds < 3.0 + 0.05
    assert 0 < trial.rel_ci < 0.2  # alternating times: the CI shrinks but never to 0
    assert trial.throughput == pytest.approx(1 / 0.03, rel=0.01)


@pytest.mark.parametrize("batches", [0, 2])
def test_loaders_too_short_to_measure_say_so(batches: int) -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match=rf"yielded {batches} batch\(es\) in a pass, all warm-up"):
        measure(
            lambda **p: Passes(clock, [0.01] * batches),
            {"num_workers": 2},
            step=None,
            time_limit=1.0,
            warmup=2,
            memory=lambda: 1.0,
            clock=clock,
        )


def test_sampler_collects_until_stopped_then_takes_a_last_sample() -> None:
    values = iter(range(1000))
    with Sampler(lambda: float(next(values)), interval=0.001) as sampler:
        time.sleep(0.05)
    assert len(sampler.values) >= 2
    assert sampler.values == sorted(sampler.values)
    assert not sampler.running


def test_rss_reader_counts_this_process_and_its_children() -> None:
    read = rss_reader(refresh_s=0.0)
    alone = read()
    assert alone is not None and alone >= psutil.Process().memory_info().rss * 0.9
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        deadline = time.monotonic() + 10
        while psutil.Process(child.pid).memory_info().rss < 1 << 20:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with_child = read()
        assert with_child is not None and with_child > alone + (1 << 20)
    finally:
        child.kill()
        child.wait()


def test_simulated_step_sleeps_and_leaves_the_cpu_free() -> None:
    step = SimulatedStep(30)
    wall, cpu = time.perf_counter(), time.process_time()
    step(None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= 0.030
    assert cpu < 0.010  # a sleep, not a spin: workers get the core
    with pytest.raises(ValueError, match=r"step_ms=-1: expected a duration >= 0"):
        SimulatedStep(-1)


# ------------------------------------------------------------------------------ NVML


def fake_pynvml(utilization: list[int], *, fail_init: bool = False) -> types.ModuleType:
    """A stand-in for ``pynvml`` (nvidia-ml-py) that records its calls in ``calls``."""

    class NVMLError(Exception):
        pass

    calls: list[tuple[Any, ...]] = []
    readings = iter(utilization)

    def record(name: str, result: Any = None) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            calls.append((name, *args))
            if name == "nvmlInit" and fail_init:
                raise NVMLError("driver not loaded")
            return result() if callable(result) else result

        return call

    module = types.ModuleType("pynvml")
    module.__dict__.update(
        calls=calls,
        NVMLError=NVMLError,
        nvmlInit=record("nvmlInit"),
        nvmlShutdown=record("nvmlShutdown"),
        nvmlDeviceGetHandleByIndex=record("byIndex", "handle"),
        nvmlDeviceGetHandleByPciBusId=record("byPci", "handle"),
        nvmlDeviceGetUtilizationRates=record(
            "utilization", lambda: types.SimpleNamespace(gpu=next(readings, utilization[-1]))
        ),
    )
    return module


def test_nvml_reads_utilization_through_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = fake_pynvml([40, 60])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpu = open_nvml(1)
    assert gpu is not None
    assert (gpu.read(), gpu.read()) == (0.4, 0.6)
    gpu.close()
    assert [c[0] for c in fake.calls] == [
        "nvmlInit",
        "byIndex",
        "utilization",
        "utilization",
        "nvmlShutdown",
    ]
    assert fake.calls[1] == ("byIndex", 1)
    open_nvml(0, "00000000:3b:00.0")
    assert ("byPci", "00000000:3b:00.0") in fake.calls


def test_nvml_is_optional(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    assert open_nvml(0) is None
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([0], fail_init=True))
    assert open_nvml(0) is None
    assert nvml_for_device(None) is None
    assert nvml_for_device("cpu") is None
    if not torch.cuda.is_available():
        assert nvml_for_device("cuda") is None


def test_gpu_utilization_is_averaged_over_the_steady_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml([50]))
    clock = FakeClock()
    trial = measure(
        lambda **p: paced(clock, lambda i: 0.01, 100),
        {"num_workers": 0},
        step=lambda b: time.sleep(0.002),  # real time passes, so the sampler samples
        time_limit=1e9,
        gpu=open_nvml(0),
        sample_interval=0.001,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.gpu_util == 0.5
    plain = measure(
        lambda **p: paced(clock, lambda i: 0.01, 100),
        {"num_workers": 0},
        step=None,
        time_limit=1e9,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert plain.gpu_util is None


# ------------------------------------------------------------------------------ search


def _params(workers: int, prefetch: int | None = 2, pin: bool = False) -> dict[str, Any]:
    return {
        "num_workers": workers,
        "prefetch_factor": None if workers == 0 else prefetch,
        "pin_memory": pin,
    }


def _result(trials: list[Trial], config: LoaderConfig | None = None) -> TuneResult:
    return TuneResult(
        trials=tuple(trials),
        chosen=0,
        config=config or LoaderConfig(),
        reason="test",
    )


class Surface:
    """A synthetic response surface: trials computed from formulas, on a fake clock."""

    def __init__(
        self,
        rate: Callable[[dict[str, Any]], float],
        *,
        step_s: float = 0.02,
        memory: Callable[[dict[str, Any]], float] = lambda p: GiB + p["num_workers"] * GiB / 2,
        cost_s: float | None = None,
    ) -> None:
        self.rate, self.step_s, self.memory, self.cost_s = rate, step_s, memory, cost_s
        self.clock = FakeClock()
        self.calls: list[dict[str, Any]] = []

    def __call__(self, params: dict[str, Any], time_limit: float) -> Trial:
        self.calls.append(params)
        # A trial uses its share of the budget, or ``cost_s`` whatever its share (a loader
        # whose first batch alone outlasts the share).
        self.clock.advance(time_limit if self.cost_s is None else self.cost_s)
        rate = self.rate(params)
        return Trial(
            params=params,
            throughput=rate,
            busy=min(rate * self.step_s, 1.0),
            peak_rss=int(self.memory(params)),
            batches=100,
            rel_ci=0.01,
        )

    def search(self, space: SearchSpace, **options: Any) -> Any:
        options.setdefault("budget_s", 1000)
        options.setdefault("target", 0.95)
        return search(self, space, clock=self.clock, **options)


def space(workers: int = 16, prefetch: int = 8, pin: bool = False) -> SearchSpace:
    return SearchSpace.build(
        {"num_workers": range(workers + 1), "prefetch_factor": range(1, prefetch + 1)},
        cores=1,
        device_used=pin,
    )


def saturating(params: dict[str, Any]) -> float:
    """8 batches/s in the main process; 10 per worker up to 45 (e.g. cores run out)."""
    w = params["num_workers"]
    return 8.0 if w == 0 else min(10.0 * w, 45.0)


def test_search_finds_the_fewest_workers_on_a_plateau_in_far_fewer_trials_than_a_grid() -> None:
    surface = Surface(saturating)  # consumer ceiling 50/s: busy <= 90% < target
    outcome = surface.search(space())
    chosen = outcome.trials[outcome.chosen]
    assert chosen.params["num_workers"] == 5  # the cheapest point of the 45/s plateau
    assert outcome.stopped == "complete"
    grid = 17 * 8
    assert len(surface.calls) <= 20 < grid
    assert len({tuple(p.values()) for p in surface.calls}) == len(surface.calls)  # no repeats
    assert "fewest workers" in outcome.reason and "None reached the target" in outcome.reason


def test_reason_does_not_deny_a_target_reached_by_a_costlier_trial() -> None:
    """2 workers: 46/s (busy 92%); 3 workers: 48/s (busy 96%, the target) is within the 5%
    tolerance, so 2 workers are chosen, and the reason says the target was reached."""
    rates = {0: 8.0, 1: 30.0, 2: 46.0}
    outcome = Surface(lambda p: rates.get(p["num_workers"], 48.0)).search(space())
    chosen = outcome.trials[outcome.chosen]
    assert chosen.params["num_workers"] == 2 and chosen.busy < 0.95
    assert any(t.busy >= 0.95 for t in outcome.trials)
    assert "None reached the target" not in outcome.reason
    assert "trial(s) reached the target" in outcome.reason


def test_search_finds_a_peak_and_stays_within_tolerance_of_it() -> None:
    def peaked(params: dict[str, Any]) -> float:  # best at 11 workers, falling off both sides
        return 100.0 - 4.0 * abs(params["num_workers"] - 11)

    outcome = Surface(peaked, step_s=0.001).search(space(24), tolerance=0.02)
    chosen = outcome.trials[outcome.chosen]
    assert chosen.throughput >= 0.98 * 100.0
    assert chosen.params["num_workers"] == 11


def test_search_stops_early_at_the_target_with_the_fewest_workers_reaching_it() -> None:
    surface = Surface(lambda p: 8.0 if p["num_workers"] == 0 else 16.0 * p["num_workers"])
    outcome = surface.search(space(), target=0.95)  # 0.95 / 0.02 s = 47.5/s: 3 workers
    chosen = outcome.trials[outcome.chosen]
    assert outcome.stopped == "target"
    assert chosen.params == _params(3)
    assert chosen.busy >= 0.95
    assert [p["num_workers"] for p in surface.calls] == [0, 1, 2, 4, 3]  # no prefetch stage
    assert "Stopped early" in outcome.reason


def test_search_respects_max_memory() -> None:
    surface = Surface(lambda p: 10.0 * p["num_workers"] + 1, step_s=0.001)
    outcome = surface.search(space(), max_memory=3 * GiB)  # 1 GiB + 0.5 GiB per worker
    chosen = outcome.trials[outcome.chosen]
    assert chosen.params["num_workers"] == 4
    assert chosen.peak_rss <= 3 * GiB
    assert max(p["num_workers"] for p in surface.calls) <= 8  # stopped climbing at 8
    assert "over max_memory=3 GiB excluded" in outcome.reason


def test_when_nothing_fits_max_memory_the_least_memory_is_chosen_and_said() -> None:
    outcome = Surface(saturating).search(space(4), max_memory=GiB // 2)
    assert outcome.trials[outcome.chosen].params["num_workers"] == 0
    assert "No trial stayed within max_memory=512 MiB" in outcome.reason


def test_search_stops_when_the_budget_is_used() -> None:
    shares = Surface(saturating)
    outcome = shares.search(space(), budget_s=35)
    assert outcome.stopped == "complete"
    assert shares.clock.now - 100.0 <= 35 + 1e-9  # trials that keep to their share fit
    overrunning = Surface(saturating, cost_s=10.0)
    outcome = overrunning.search(space(), budget_s=35)
    assert outcome.stopped == "budget"
    assert len(outcome.trials) == 4  # started at 0, 10, 20 and 30 s; none after 35
    assert "35 s budget" in outcome.reason


def test_ctrl_c_mid_search_returns_the_best_so_far() -> None:
    surface = Surface(saturating)

    def interrupted(params: dict[str, Any], time_limit: float) -> Trial:
        if len(surface.calls) == 3:
            raise KeyboardInterrupt
        return surface(params, time_limit)

    outcome = search(interrupted, space(), budget_s=100, target=0.95, clock=surface.clock)
    assert outcome.stopped == "interrupted"
    assert [t.params["num_workers"] for t in outcome.trials] == [0, 1, 2]
    assert outcome.trials[outcome.chosen].params["num_workers"] == 2
    assert "Interrupted (Ctrl-C)" in outcome.reason


def test_ctrl_c_before_any_trial_is_not_swallowed() -> None:
    def interrupted(params: dict[str, Any], time_limit: float) -> Trial:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        search(interrupted, space(), budget_s=100, target=0.95)


def test_a_failing_first_trial_raises_and_later_failures_are_recorded() -> None:
    def broken(params: dict[str, Any], time_limit: float) -> Trial:
        raise OSError("no such file")

    with pytest.raises(TuneError, match=r"failed with num_workers=0.*no such file"):
        search(broken, space(), budget_s=100, target=0.95)

    surface = Surface(saturating)

    def oom_above_two(params: dict[str, Any], time_limit: float) -> Trial:
        if params["num_workers"] > 2:
            raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Killed")
        return surface(params, time_limit)

    outcome = search(oom_above_two, space(), budget_s=100, target=0.95, clock=surface.clock)
    failed = [t for t in outcome.trials if not t.ok]
    assert failed and "killed by signal" in (failed[0].error or "")
    assert outcome.trials[outcome.chosen].params["num_workers"] == 2


def test_pin_memory_is_searched_only_when_a_device_is_used() -> None:
    assert space().pin_memory == (False,)
    surface = Surface(lambda p: saturating(p) + (1.0 if p["pin_memory"] else 0.0))
    outcome = surface.search(space(pin=True))
    assert any(p["pin_memory"] for p in surface.calls)
    assert outcome.trials[outcome.chosen].params["pin_memory"] is False  # within tolerance


def test_choose_prefers_fewest_workers_then_least_memory() -> None:
    trials = [
        Trial(params=_params(4), throughput=100.0, peak_rss=4),
        Trial(params=_params(2, 8), throughput=97.0, peak_rss=3),
        Trial(params=_params(2, 1), throughput=96.0, peak_rss=2),
        Trial(params=_params(1), throughput=50.0, peak_rss=1),
        Trial(params=_params(0), error="boom"),
    ]
    assert choose(trials, 0.95, 0.05, None) == 2
    assert choose(trials, 0.95, 0.01, None) == 0


def test_search_space_validation_and_defaults() -> None:
    default = SearchSpace.build(None, cores=2, device_used=False)
    assert default.num_workers == (0, 1, 2, 3, 4)
    assert default.prefetch_factor == tuple(range(1, 9))
    assert default.pin_memory == (False,)
    assert SearchSpace.build(None, cores=2, device_used=True).pin_memory == (False, True)
    given_space = SearchSpace.build({"num_workers": [8, 2, 2]}, cores=2, device_used=False)
    assert given_space.num_workers == (2, 8)
    assert given_space.base(0) == _params(0)
    with pytest.raises(ValueError, match=r"unknown setting\(s\) 'workers': valid settings"):
        SearchSpace.build({"workers": [1]}, cores=2, device_used=False)
    with pytest.raises(ValueError, match=r"search_space\['num_workers'\]=\[-1\]: .*>= 0"):
        SearchSpace.build({"num_workers": [-1]}, cores=2, device_used=False)
    with pytest.raises(ValueError, match=r"non-empty list of integers >= 1"):
        SearchSpace.build({"prefetch_factor": []}, cores=2, device_used=False)


def test_sizes_parse_and_format() -> None:
    assert parse_size("8GiB") == 8 * GiB
    assert parse_size("512 MB") == 512 * 10**6
    assert parse_size("2g") == 2 * 10**9
    assert parse_size("1e9") == 10**9
    assert parse_size(123) == 123
    for bad in ("lots", "-1GB", "0", "5iB"):
        with pytest.raises(ValueError, match=r"expected a size|positive|needs a unit"):
            parse_size(bad)
    assert format_size(3 * GiB) == "3 GiB"
    assert format_size(612 * 2**20) == "612 MiB"
    assert format_size(1.5 * GiB) == "1.5 GiB"


# ------------------------------------------------------------------------------ tune()


def list_factory(**params: Any) -> list[int]:
    """A loader without processes: a list (re-iterable, instant batches)."""
    return list(range(200))


def test_tune_validates_its_arguments() -> None:
    with pytest.raises(ValueError, match=r"step= \(your step\) or step_ms="):
        tune(list_factory, step=print, step_ms=3)
    with pytest.raises(ValueError, match=r"budget_s=0"):
        tune(list_factory, budget_s=0)
    with pytest.raises(ValueError, match=r"target_utilization=1.5"):
        tune(list_factory, target_utilization=1.5)
    with pytest.raises(TypeError, match=r"expected a loader factory"):
        tune(42)
    with pytest.raises(ValueError, match=r"loader_kwargs= goes with a dataset"):
        tune(list_factory, loader_kwargs={"batch_size": 2})
    with pytest.raises(ValueError, match=r"loader_kwargs sets num_workers, which the tuner"):
        tune(torch.utils.data.TensorDataset(torch.zeros(4)), loader_kwargs={"num_workers": 2})
    with pytest.raises(ValueError, match=r"expected a size"):
        tune(list_factory, max_memory="lots")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device='cuda': CUDA is not available"):
            tune(list_factory, device="cuda")


def test_tune_returns_the_best_so_far_on_ctrl_c() -> None:
    def factory(**params: Any) -> Paced:
        if params["num_workers"] == 2:
            raise KeyboardInterrupt
        return Paced(300, 0.004 / (params["num_workers"] + 1))  # faster with more "workers"

    result = tune(factory, budget_s=10, search_space={"num_workers": [0, 1, 2, 3]})
    assert result.stopped == "interrupted"
    assert [t.params["num_workers"] for t in result.trials] == [0, 1]
    assert result.config.num_workers == 1


class Paced:
    """A re-iterable loader without processes: ``n`` items, ``cost_s`` of sleep each."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            time.sleep(self.cost_s)
            yield i


def test_tune_result_json_round_trip_and_report(tmp_path: Path) -> None:
    trials = [
        Trial(params=_params(0), throughput=5.0, busy=0.15, peak_rss=GiB, startup_s=0.2),
        Trial(params=_params(2), throughput=12.0, busy=0.4, rel_ci=math.inf, gpu_util=0.35),
        Trial(params=_params(4), error="RuntimeError('killed')"),
    ]
    result = TuneResult(
        trials=tuple(trials),
        chosen=1,
        config=LoaderConfig(num_workers=2, prefetch_factor=2),
        reason="because",
        step="simulated 30 ms step",
        step_ms=30.0,
        cores=2,
    )
    again = TuneResult.load(result.save(tmp_path / "r.json"))
    assert again == result
    table = again.report()
    assert "simulated 30 ms step" in table
    lines = table.splitlines()
    assert lines[4].startswith(">") and "12.0" in lines[4] and "35%" in lines[4]
    assert "failed: RuntimeError('killed')" in lines[5]
    assert "chosen: num_workers=2, prefetch_factor=2" in table
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match=r"other.json: not a fastdata tune result"):
        TuneResult.load(tmp_path / "other.json")


def test_the_transfer_moves_every_tensor_of_a_nested_batch() -> None:
    from collections import namedtuple

    from fastdata.tune import _Transfer

    Pair = namedtuple("Pair", ["image", "label"])
    synced = []
    move = _Transfer(torch.device("meta"), lambda: synced.append(True))
    moved = move({"pair": Pair(torch.zeros(2), [torch.ones(1), "text"]), "n": 3})
    assert moved["pair"].image.device.type == "meta"
    assert isinstance(moved["pair"], Pair)
    assert moved["pair"].label[0].device.type == "meta" and moved["pair"].label[1] == "text"
    assert moved["n"] == 3
    assert synced == [True]  # waited once for the copies


class SleepyBatches(torch.utils.data.IterableDataset):
    """Batches that each cost ``cost_s`` of sleeping in the worker (I/O-bound, no CPU)."""

    def __init__(self, batches: int, cost_s: float) -> None:
        self.batches, self.cost_s = batches, cost_s

    def __iter__(self) -> Iterator[torch.Tensor]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        for _ in range(worker, self.batches, workers):
            time.sleep(self.cost_s)
            yield torch.zeros(16)


@pytest.mark.slow
def test_tune_finds_the_analytic_num_workers_of_an_io_bound_loader() -> None:
    # Each batch costs 120 ms of waiting in a worker; the step takes 50 ms. w workers supply
    # w / 0.12 batches/s, the consumer takes 20: ceil(120 / 50) = 3 workers keep it busy.
    dataset = SleepyBatches(10_000, 0.120)

    def factory(**params: Any) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(dataset, batch_size=None, **params)

    result = tune(
        factory,
        step_ms=50,
        budget_s=30,
        target_utilization=0.9,
        search_space={"num_workers": range(7)},
    )
    chosen = result.chosen_trial
    assert abs(result.config.num_workers - 3) <= 1, result.report()
    assert chosen.busy >= 0.9, result.report()
    assert result.stopped == "target", result.report()


@pytest.fixture(scope="module")
def tiny_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("images")
    fastdata.synthetic.make_images(root, 48, classes=3, seed=0, min_short=96, max_short=128)
    return root


@pytest.mark.slow
def test_tune_end_to_end_on_an_image_stream(tiny_images: Path, tmp_path: Path) -> None:
    stream = fastdata.ImageStream.from_folder(tiny_images, size=64, batch_size=4)
    result = tune(
        stream,
        loader_kwargs={"batch_size": None},
        step_ms=5,
        budget_s=6,
        search_space={"num_workers": [0, 1], "prefetch_factor": [2]},
        device="cpu",  # batches are "moved" (a no-op) and the transfer timed as data wait
    )
    assert result.device == "cpu"
    assert {t.params["num_workers"] for t in result.trials} == {0, 1}
    for trial in result.trials:
        assert trial.ok and trial.throughput > 0 and trial.batches > 0
        assert 0 < trial.busy < 1 and trial.startup_s > 0
        assert trial.peak_rss > psutil.Process().memory_info().rss / 2
    assert result.config == load_config(TuneResult.load(result.save(tmp_path / "t.json")))
    assert result.reason.startswith("Chose num_workers=")
    loader = torch.utils.data.DataLoader(
        stream, batch_size=None, **LoaderConfig.load(tmp_path / "t.json").loader_kwargs()
    )
    assert sum(len(labels) for _, labels in loader) == 48


CLI = textwrap.dedent(
    """
    import argparse, sys
    from fastdata.tune.cli import add_parser
    parser = argparse.ArgumentParser(prog="fastdata")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.run(args))
    """
)


def fastdata_tune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fastdata tune ARGS`` in a fresh process (the subcommand as the lead wires it)."""
    return subprocess.run(
        [sys.executable, "-c", CLI, "tune", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_tunes_the_demo_and_writes_a_loadable_config(tmp_path: Path) -> None:
    done = fastdata_tune(
        "--budget-s", "8", "--demo-images", "32", "--max-workers", "1", "--out", "tuned.json",
        "--plot", "tuned.png", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "batches/s" in done.stdout and "chosen: num_workers=" in done.stdout
    assert "trial 1: num_workers=0" in done.stderr
    config = LoaderConfig.load(tmp_path / "tuned.json")
    assert config.num_workers in (0, 1)
    result = TuneResult.load(tmp_path / "tuned.json")
    assert "demo images (32 JPEGs" in result.extra["source"]
    assert (tmp_path / "tuned.png").stat().st_size > 1000


def in_process(*args: str) -> int:
    """``fastdata tune ARGS`` in this process (for sources that start no workers)."""
    import argparse

    from fastdata.tune.cli import add_parser

    parser = argparse.ArgumentParser(prog="fastdata")
    add_parser(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["tune", *args])
    return parsed.run(parsed)


def test_cli_rejects_bad_arguments_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for args, message in [
        (["--target", "2"], "argument --target: '2': must be in (0, 1]"),
        (["--max-memory", "lots"], "argument --max-memory: 'lots': expected a size"),
        (["--budget-s", "0"], "argument --budget-s/--budget: '0': must be > 0"),
        (["--data", "x", "--parquet", "y"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit) as exited:
            in_process(*args)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert in_process("--factory", "no_colon") == 2
    assert "expected MODULE:FUNCTION" in capsys.readouterr().err


def test_cli_runs_a_user_factory_and_reports_a_failing_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tune_test_loaders.py").write_text(
        "def good(num_workers, prefetch_factor, pin_memory):\n"
        "    return list(range(500))\n"
        "def broken(**params):\n"
        "    raise OSError('cannot open shard-0003.tar')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tune_test_loaders", raising=False)
    assert in_process(
        "--factory", "tune_test_loaders:good", "--budget-s", "2", "--step-ms", "1",
        "--max-workers", "0", "--out", "out.json",
    ) == 0  # fmt: skip
    assert "chosen: num_workers=0" in capsys.readouterr().out
    assert LoaderConfig.load(tmp_path / "out.json") == LoaderConfig()
    assert in_process("--factory", "tune_test_loaders:broken", "--budget-s", "2") == 1
    err = capsys.readouterr().err
    assert "the loader failed with num_workers=0" in err
    assert "cannot open shard-0003.tar" in err
    assert in_process("--factory", "tune_test_loaders:missing") == 2
    assert "has no function 'missing'" in capsys.readouterr().err
