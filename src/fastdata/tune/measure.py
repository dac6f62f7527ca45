"""Measuring one loader configuration: start-up, steady throughput, busy fraction, memory, GPU.

A trial builds the loader, times the first batch (start-up: worker processes starting and
the first batch travelling through the whole pipeline), discards the first round of batches
(one per worker: they were produced in parallel while the consumer waited for the first one),
then records for every batch the consumer's *wait* (blocked in ``next()`` plus the transfer
to the device) and its *step*. From those:

- steady throughput = batches / (sum of waits + sum of steps);
- busy fraction = sum of steps / (sum of steps + sum of waits): the share of time the
  consumer (the GPU, in training) does useful work rather than waiting for data.

A trial ends when its throughput is known well enough — the 95% confidence interval of the
mean batch time, estimated from means over blocks of ``block`` batches (batches arrive in
bursts of one per worker, so single batches are not independent), is within ``rel_ci`` of
the mean — or when its time limit is used, but never before ``min_blocks`` blocks are
measured, so that every trial has an interval (the tuner compares trials by it); a loader
too slow to give that many within twice its time limit stops there once its interval has an
upper bound (a relative half-width under 1: a paired round without one does not count, so a
shorter one would be measured for nothing), and at four times its limit with what it has. When the
loader runs out of data it is iterated again; each new pass starts like the first (its warm-up
is discarded, not counted as steady).

Memory: the peak summed RSS of the main process and its workers (:func:`rss_reader`, sampled
by a background thread), kept under a ceiling by a :class:`MemoryGuard` (see
:mod:`fastdata.tune._memory`). GPU utilization: NVML's, sampled during the steady state on a
CUDA device (:class:`NvmlUtilization`); where it is measured it is the trial's
:attr:`Trial.utilization` (else the consumer's busy fraction). A trial's interval comes from
:class:`~fastdata.tune._statistics.BlockStats`.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from statistics import fmean
from typing import Any

from fastdata.tune._memory import MemoryGuard, rss_reader
from fastdata.tune._nvml import NvmlUtilization
from fastdata.tune._replicas import Replicas
from fastdata.tune._statistics import MIN_BLOCKS, BlockStats
from fastdata.tune._trial import Trial
from fastdata.tune.words import describe

STEP_FAILED = "_fastdata_raised_by_step"
"""The attribute set on an exception of the consumer's step, which propagates unchanged: the
search ends with it, as training would (it is not the measured setting's failure, which the
search records and goes on from)."""

__all__ = ["MemoryGuard", "NvmlUtilization", "Sampler", "Trial", "measure", "rss_reader"]

# The warning torch emits when num_workers exceeds the usable cores. The tuner tries such
# counts on purpose (I/O-bound pipelines can use them), so it is silenced in its own trials.
WORKER_COUNT_WARNING = r"This DataLoader will create \d+ worker processes"


class Sampler:
    """Calls ``read()`` every ``interval`` seconds on a daemon thread between :meth:`start`
    and :meth:`stop` (or in a ``with`` block); the numbers it returns are in :attr:`values`
    (None means no sample)."""

    def __init__(self, read: Callable[[], float | None], interval: float) -> None:
        self.read, self.interval = read, interval
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fastdata-tune-sampler", daemon=True)

    @property
    def running(self) -> bool:
        """Whether the sampling thread is alive."""
        return self._thread.is_alive()

    def start(self) -> None:
        """Start sampling (the first sample is taken at once)."""
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling, then take one last sample, so a short run still has one."""
        self._stop.set()
        self._thread.join()
        self._sample()

    def _sample(self) -> None:
        value = self.read()
        if value is not None:
            self.values.append(value)

    def _run(self) -> None:
        while True:
            self._sample()
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def measure(
    loader_factory: Callable[..., Iterable[Any]],
    params: Mapping[str, Any],
    /,
    *,
    step: Callable[[Any], Any] | None,
    time_limit: float,
    warmup: int = 1,
    block: int = 1,
    rel_ci: float = 0.03,
    min_blocks: int = 6,
    transfer: Callable[[Any], Any] | None = None,
    sync: Callable[[], None] | None = None,
    gpu: NvmlUtilization | None = None,
    memory: Callable[[], float | None] | None = None,
    guard: MemoryGuard | None = None,
    sample_interval: float = 0.05,
    one_pass: bool = False,
    stop_on_repeats: bool = False,
    clock: Callable[[], float] = time.perf_counter,
) -> Trial:
    """Measure the loader ``loader_factory(**params)`` as the module docstring describes.

    Args:
        loader_factory, params: build the loader to measure.
        step: the consumer's work on each batch (None: no work, a pure loader benchmark).
        time_limit: seconds the trial may take, start-up included; checked after each batch
            once ``min_blocks`` blocks of steady batches are measured (so a slow start-up
            overruns it rather than measuring nothing); at twice the limit the trial stops
            once its interval has an upper bound, at four times once it has one block.
        warmup: batches of each pass not counted as steady (the first round: one per worker).
        block: batches per block of the confidence interval (the number of workers).
        rel_ci: stop once the CI's half-width is within this fraction of the mean batch time.
        min_blocks: blocks needed before the CI is trusted.
        transfer: moves a batch to the device (timed as data wait); sync: waits for the
            device after a step (timed as step), so asynchronous GPU work is counted.
        gpu: NVML utilization to sample during the steady state.
        memory: returns the memory in use (bytes) for the peak; default :func:`rss_reader`.
        guard: keeps the trial under a memory ceiling (its reading replaces ``memory``); a
            trial it stops is returned with ``refused`` set, whatever the loader raised.
        sample_interval: seconds between background samples.
        one_pass: end the trial when the loader's first pass ends (once it has measured a
            steady batch), rather than iterating it again.
        stop_on_repeats: end the trial as soon as the loader shows a dataset that repeats its
            items once per worker (:class:`~fastdata.tune._replicas.Replicas`; the trial's
            ``repeats`` is set either way).
        clock: the time source (injectable, so tests can make the arithmetic exact).

    Raises:
        ValueError: a pass of the loader yields only warm-up batches (or none).
        Whatever the loader raises.
    """
    if guard is not None:
        guard.start()
        read_memory = guard.read
    else:
        read_memory = memory if memory is not None else rss_reader()
    start = clock()
    deadlines = (start + time_limit, start + 2 * time_limit, start + 4 * time_limit)
    waits: list[float] = []
    steps: list[float] = []
    startup: float | None = None
    stats = BlockStats(block)
    gpu_sampler = None if gpu is None else Sampler(gpu.read, sample_interval)
    replicas: Replicas | None = None
    try:
        with Sampler(read_memory, sample_interval) as mem, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=WORKER_COUNT_WARNING, category=UserWarning)
            try:
                loader = loader_factory(**params)
                replicas = Replicas(loader)
                done = False
                while not done:
                    iterator = iter(loader)
                    in_pass = 0
                    batches = _timed_batches(iterator, step, transfer, sync, clock, replicas.see)
                    for t0, t1, t2 in batches:
                        in_pass += 1
                        if stop_on_repeats and replicas.found:
                            done = True
                            break
                        if startup is None:
                            startup = t1 - start
                        if in_pass > warmup:
                            waits.append(t1 - t0)
                            steps.append(t2 - t1)
                            stats.add(t2 - t0)
                            if gpu_sampler is not None and not gpu_sampler.running:
                                gpu_sampler.start()
                        if guard is not None and guard.tripped:
                            if guard.stop():  # killed: let the loader raise it here, caught
                                _drain(iterator)
                            done = True
                            break
                        if _trial_done(stats, t2, deadlines, rel_ci, min_blocks):
                            done = True
                            break
                    del batches, iterator  # a multi-process iterator shuts its workers down
                    if not done and in_pass <= warmup:  # the pass ran out in its warm-up
                        raise ValueError(
                            f"the loader built with {describe(params)} yielded {in_pass} batch(es) "
                            f"in a pass, all warm-up (the first {warmup}): too few to measure "
                            "a steady state; give it more data or smaller batches"
                        )
                    done = done or (one_pass and bool(waits))
            except Exception:
                if guard is None or guard.tripped is None:
                    raise  # stopped by the guard: the loader's error is its killed workers
    finally:
        if gpu_sampler is not None and gpu_sampler.running:
            gpu_sampler.stop()
    total_wait, total_step = math.fsum(waits), math.fsum(steps)
    total = total_wait + total_step
    n = max(len(waits), 1)
    return Trial(
        params=dict(params),
        throughput=len(waits) / total if total > 0 else (math.inf if waits else 0.0),
        busy=total_step / total if total > 0 else 0.0,
        startup_s=startup or 0.0,
        peak_rss=int(max(mem.values, default=0)),
        gpu_util=fmean(gpu_sampler.values) if gpu_sampler and gpu_sampler.values else None,
        wait_ms=1000 * total_wait / n,
        step_ms=1000 * total_step / n,
        batches=len(waits),
        rel_ci=stats.relative_ci(),
        seconds=clock() - start,
        refused=None if guard is None else guard.tripped,
        repeats=replicas is not None and replicas.found,
    )


def _drain(iterator: Iterator[Any], seconds: float = 10.0) -> None:
    """Consume ``iterator`` until it ends or raises, for at most ``seconds``: a loader whose
    workers were killed raises that here (torch notices within 5 s), rather than later
    wherever the main thread happens to be."""
    end = time.monotonic() + seconds
    with contextlib.suppress(Exception):
        for _ in iterator:
            if time.monotonic() > end:
                return


def _trial_done(
    stats: BlockStats,
    now: float,
    deadlines: tuple[float, float, float],
    rel_ci: float,
    min_blocks: int,
) -> bool:
    """Whether a trial has measured enough (see :func:`measure`): past its time limit
    (``deadlines[0]``) once it has ``min_blocks`` blocks, past twice the limit once its interval
    has an upper bound, past four times once it has a block."""
    deadline, hard, last = deadlines
    if stats.blocks >= max(min_blocks, MIN_BLOCKS):
        return now >= deadline or stats.relative_ci(min_blocks) <= rel_ci
    if now >= hard and stats.relative_ci() < 1:
        return True
    return stats.blocks > 0 and now >= last


def _timed_batches(
    iterator: Iterator[Any],
    step: Callable[[Any], Any] | None,
    transfer: Callable[[Any], Any] | None,
    sync: Callable[[], None] | None,
    clock: Callable[[], float],
    see: Callable[[int, Any], None],
) -> Iterator[tuple[float, float, float]]:
    """Consume ``iterator``, yielding ``(asked, got, stepped)`` times for each batch; each
    batch is shown to ``see`` with its number in the pass first."""
    for index in itertools.count():
        asked = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        if transfer is not None:
            batch = transfer(batch)
        got = clock()
        see(index, batch)
        if step is not None:
            try:
                step(batch)
            except Exception as exc:
                setattr(exc, STEP_FAILED, True)
                raise
        if sync is not None:
            sync()
        del batch
        yield asked, got, clock()
