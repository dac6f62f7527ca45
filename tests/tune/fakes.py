"""Fakes shared by the tuner's tests: a clock that moves only when told, paced loaders,
made-up trials, memory readings and ``pynvml``. Nothing here sleeps except :class:`Paced` (a
loader without processes)."""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fastdata.cli import main
from fastdata.tune._memory import MemoryGuard
from fastdata.tune._trial import Trial

GiB = 1024**3


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


def settings(
    workers: int, prefetch: int | None = 2, pin: bool = False, method: str = "multiprocessing"
) -> dict[str, Any]:
    """The searched settings, with torch's rule: no prefetch_factor without workers."""
    return {
        "num_workers": workers,
        "worker_method": method,
        "prefetch_factor": None if workers == 0 else prefetch,
        "pin_memory": pin,
    }


class Paced:
    """A re-iterable loader without processes: ``n`` items, ``cost_s`` of sleep each."""

    def __init__(self, n: int, cost_s: float) -> None:
        self.n, self.cost_s = n, cost_s

    def __iter__(self) -> Iterator[int]:
        for i in range(self.n):
            time.sleep(self.cost_s)
            yield i


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
    """A guard that reads ``readings`` (memory, available memory, processes) and records its
    kills there instead of killing."""
    return MemoryGuard(ceiling, floor=floor, read_rss=readings.rss,
                       read_available=lambda: readings.available,
                       processes=lambda: set(readings.processes),
                       kill=readings.killed.append, clock=clock or FakeClock())  # fmt: skip


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


def trial(workers: int, rate: float, ci: float = 0.03, **kwargs: object) -> Trial:
    """A made-up trial of ``workers`` at ``rate`` batches/s with relative interval ``ci``
    (``prefetch=``, ``pin=``, ``busy=`` and Trial's fields as keywords)."""
    prefetch = kwargs.pop("prefetch", 2)
    pin = kwargs.pop("pin", False)
    return Trial(
        params=settings(workers, prefetch, pin),  # type: ignore[arg-type]
        throughput=rate,
        rel_ci=ci,
        busy=kwargs.pop("busy", 0.5),  # type: ignore[arg-type]
        **kwargs,  # type: ignore[arg-type]
    )


def rounds(
    cheap: Trial, fast: Trial, rates: list[tuple[float, float]], first: int = 0
) -> list[Trial]:
    """Paired rounds of the settings of ``cheap`` and ``fast`` at these rates (alternating
    order, as the search measures them), numbered from ``first``."""
    out = []
    for k, (a, b) in enumerate(rates):
        pair = [(cheap, a), (fast, b)] if k % 2 == 0 else [(fast, b), (cheap, a)]
        out += [Trial(params=t.params, throughput=r, rel_ci=0.02, pair=first + k) for t, r in pair]
    return out


def exits(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``fastdata ARGV`` in this process: the exit status (argparse's too) and stderr."""
    try:
        status = main(list(argv))
    except SystemExit as exited:
        status = int(exited.code or 0)
    return status, capsys.readouterr().err
