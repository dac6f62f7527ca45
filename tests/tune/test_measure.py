"""Tests of fastdata.tune.measure: the arithmetic of one trial on an injected clock (busy
fraction, throughput, start-up and the interval checked exactly), the samplers and NVML."""

from __future__ import annotations

import math
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
import torch

from fastdata.tune import SimulatedStep, Trial
from fastdata.tune.measure import (
    MemoryGuard,
    Sampler,
    measure,
    nvml_for_device,
    open_nvml,
    rss_reader,
)

from fakes import FakeClock, GiB, Passes, paced


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
        min_blocks=3,
        memory=lambda: 1.0,
        clock=clock,
    )
    assert trial.batches == 3
    assert trial.throughput == pytest.approx(1.0)


def endless(cost: Callable[[int], float], **options: Any) -> Trial:
    """One trial, in the main process, of an endless loader whose batch ``i`` costs
    ``cost(i)`` seconds of a fake clock."""
    clock = FakeClock()
    return measure(
        lambda **p: paced(clock, cost, 10**6),
        {"num_workers": 0},
        step=None,
        memory=lambda: 1.0,
        clock=clock,
        **options,
    )


def test_a_trial_measures_enough_blocks_for_an_interval_past_its_time_limit() -> None:
    # Batch times alternate 30 and 10 ms: the time limit (100 ms) is up after four batches,
    # but the trial goes on to min_blocks=6 blocks (150 ms), so its interval exists.
    trial = endless(lambda i: 0.01 if i % 2 else 0.03, time_limit=0.1, rel_ci=0.0)
    assert trial.batches == 6
    # Blocks of one batch, 10 and 30 ms three times each: mean 20 ms; t with 5 df: 2.5706.
    mean, sd = 0.02, (6 * 0.01**2 / 5) ** 0.5
    assert trial.rel_ci == pytest.approx(2.570582 * sd / 6**0.5 / mean, rel=3e-3)  # t expansion
    low, high = trial.interval
    assert low == pytest.approx(trial.throughput / (1 + trial.rel_ci))
    assert high == pytest.approx(trial.throughput / (1 - trial.rel_ci))


def test_a_loader_too_slow_for_the_blocks_stops_at_twice_its_time_limit() -> None:
    trial = endless(lambda i: 1.0 + 0.1 * (i % 2), time_limit=2.0)
    assert trial.seconds == pytest.approx(4.2)  # start-up batch, then 3 measured: past 4 s
    assert trial.batches == 3
    assert 0 < trial.rel_ci < math.inf  # 3 blocks: an interval, a wide one (t with 2 df)


def test_a_trial_stops_at_its_time_limit_when_the_estimate_stays_unstable() -> None:
    trial = endless(lambda i: 0.01 if i % 2 else 0.05, time_limit=3.0, rel_ci=0.0)  # never stable
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
    with pytest.raises(ValueError, match=r"step_ms=-1: expected a number >= 0"):
        SimulatedStep(-1)
    with pytest.raises(TypeError, match=r"step_ms='30': expected a number >= 0, got str"):
        SimulatedStep("30")


# ------------------------------------------------------------------------------ memory


class Readings:
    """Memory readings that grow by ``step`` bytes per read, and the processes killed."""

    def __init__(self, start: float, step: float, available: float = 1e12) -> None:
        self.value, self.step, self.available = start, step, available
        self.killed: list[int] = []
        self.processes = {11, 12}  # already running when the trial starts

    def rss(self) -> float:
        self.value += self.step
        return self.value


def guarded(
    readings: Readings, ceiling: int | None, floor: int | None = None, clock: Any = None
) -> MemoryGuard:
    return MemoryGuard(ceiling, floor=floor, read_rss=readings.rss,
                       read_available=lambda: readings.available,
                       processes=lambda: set(readings.processes),
                       kill=readings.killed.append, clock=clock or FakeClock())  # fmt: skip


def test_the_guard_stops_a_trial_over_the_ceiling_at_the_next_batch() -> None:
    readings = Readings(start=GiB, step=GiB / 4)
    clock = FakeClock()
    guard = guarded(readings, ceiling=2 * GiB, clock=clock)

    def factory(**params: Any) -> Iterator[int]:
        readings.processes |= {21, 22}  # the trial's workers

        def batches() -> Iterator[int]:
            for i in range(10**6):
                clock.advance(0.01)
                guard.read()  # the sampler's reading, made deterministic here
                yield i

        return batches()

    trial = measure(factory, {"num_workers": 2}, step=None, time_limit=60, guard=guard,
                    clock=clock, sample_interval=60)  # fmt: skip
    assert trial.refused == "used 2.25 GiB, over the memory ceiling of 2 GiB"
    assert not trial.ok and trial.error is None
    assert trial.batches < 10  # stopped at the next batch, not at the time limit
    assert readings.killed == []  # stopped by itself: its workers shut down, none killed
    guard.start()
    assert guard.tripped is None  # a new trial starts afresh


def test_a_trial_that_does_not_stop_within_the_grace_has_its_new_processes_killed() -> None:
    readings = Readings(start=3 * GiB, step=0)
    clock = FakeClock()
    guard = guarded(readings, ceiling=2 * GiB, clock=clock)
    guard.start()
    readings.processes |= {21, 22}
    guard.read()  # trips
    assert guard.tripped is not None and readings.killed == []
    clock.advance(MemoryGuard.GRACE_S)  # no batch came: a worker is stuck making one
    guard.read()
    assert readings.killed == [21, 22]  # not 11 and 12: they were there before the trial
    assert guard.stop()  # the trial learns its workers were killed


def test_the_guard_kills_at_once_when_the_machine_runs_low_on_memory() -> None:
    readings = Readings(start=GiB, step=0, available=GiB / 2)
    guard = guarded(readings, ceiling=None, floor=GiB)
    guard.start()
    readings.processes |= {21}
    guard.read()
    assert guard.tripped == (
        "the machine's available memory fell to 512 MiB, under the floor of 1 GiB"
    )
    assert readings.killed == [21]
    stopped = guarded(Readings(start=GiB, step=0), ceiling=GiB // 2)
    stopped.start()
    stopped.read()
    assert not stopped.stop()  # stopped by itself before the grace: nothing killed


def test_a_loader_error_after_the_guard_tripped_is_a_refusal_not_a_failure() -> None:
    readings = Readings(start=3 * GiB, step=0)
    guard = guarded(readings, ceiling=2 * GiB)

    def factory(**params: Any) -> Iterator[int]:
        guard.read()
        raise RuntimeError("DataLoader worker (pid 21) is killed by signal: Killed.")

    trial = measure(factory, {"num_workers": 1}, step=None, time_limit=1, guard=guard,
                    sample_interval=60)  # fmt: skip
    assert trial.refused is not None and trial.error is None and trial.batches == 0
    unguarded = MemoryGuard(None, read_rss=lambda: 1.0, processes=set, kill=print)
    with pytest.raises(RuntimeError, match="killed by signal"):
        measure(factory, {"num_workers": 1}, step=None, time_limit=1, guard=unguarded)


class Leaky(torch.utils.data.IterableDataset):
    """Batches of 64 MiB that the worker keeps (a leak): its memory grows without bound."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        kept = []
        while True:
            kept.append(torch.ones(16 * 2**20))  # 64 MiB, touched
            yield torch.zeros(1)


class Hoarder(torch.utils.data.IterableDataset):
    """A worker stuck making its first batch, taking 64 MiB more every 50 ms meanwhile."""

    def __iter__(self) -> Iterator[torch.Tensor]:
        kept = []
        while True:
            kept.append(torch.ones(16 * 2**20))
            time.sleep(0.05)
        yield torch.zeros(1)  # never reached


@pytest.mark.slow
@pytest.mark.parametrize("dataset", [Leaky, Hoarder])
def test_a_real_worker_over_the_ceiling_is_stopped_and_gone(dataset: type) -> None:
    """A worker that leaks stops at the next batch (its workers shut down); one stuck making a
    batch is killed after the grace period. Either way the trial is refused, no error
    escapes (torch's "worker killed" included), and no worker is left."""
    ceiling = int(psutil.Process().memory_info().rss + 1.5 * GiB)
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # e.g. a test server
    trial = measure(
        lambda **p: torch.utils.data.DataLoader(dataset(), batch_size=None, **p),
        {"num_workers": 1, "prefetch_factor": 2},
        step=None,
        time_limit=120,
        rel_ci=0.0,  # no early end: the trial runs until the guard stops it
        guard=MemoryGuard(ceiling),
        sample_interval=0.01,
    )
    assert trial.refused is not None and "over the memory ceiling" in trial.refused
    assert trial.peak_rss < ceiling + 2 * GiB  # stopped within a few samples of the ceiling
    assert trial.seconds < 60
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before  # the worker is gone
    time.sleep(0.2)  # a late SIGCHLD would raise here, in the test, if it were not handled


def test_the_default_ceiling_is_a_share_of_the_available_memory() -> None:
    from fastdata.tune import machine

    limit, words = machine.ceiling(None)
    available = psutil.virtual_memory().available
    assert 0.7 * available < limit < psutil.virtual_memory().total
    assert "in use plus 80% of the" in words and "available at the start" in words
    half, words = machine.ceiling("50%")
    assert half < limit and "plus 50% of the" in words
    assert machine.ceiling("8GiB") == (8 * GiB, "8 GiB (max_memory)")
    for bad in ("0%", "150%", "x%"):
        with pytest.raises(ValueError, match="expected a share of the available memory"):
            machine.ceiling(bad)
    facts = machine.describe(2)
    assert facts["usable_cores"] == 2 and facts["memory_total"] > 0 and facts["gpu"] is None
    assert facts["torch"] == torch.__version__


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
