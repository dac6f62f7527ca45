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
too slow to give that many within twice its time limit stops there with a wider one. When the
loader runs out of data it is iterated again; each new pass starts like the first (its warm-up
is discarded, not counted as steady).

Memory: the peak resident set size of the main process plus all its descendants (the
workers), sampled by a background thread. RSS counts pages shared between processes (forked
workers share the parent's pages copy-on-write) once per process, so it overstates the true
total: a safe upper bound for ``max_memory``. With a :class:`MemoryGuard` the same samples
keep the trial under a ceiling: past it (or when the machine's available memory runs low) the
guard kills the processes the trial started and the trial ends *refused*, before the machine
swaps or the OOM killer picks a victim. GPU utilization: NVML's utilization rate (the
fraction of time a kernel was running), sampled in a background thread during the steady
state, only on CUDA devices with ``nvidia-ml-py`` installed; where it is measured it is the
trial's :attr:`Trial.utilization` (else the consumer's busy fraction).
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from statistics import fmean
from typing import Any

__all__ = [
    "MemoryGuard",
    "NvmlUtilization",
    "Sampler",
    "Trial",
    "measure",
    "open_nvml",
    "rss_reader",
    "t95",
]

# The warning torch emits when num_workers exceeds the usable cores. The tuner tries such
# counts on purpose (I/O-bound pipelines can use them), so it is silenced in its own trials.
WORKER_COUNT_WARNING = r"This DataLoader will create \d+ worker processes"

_Z95 = 1.959963984540054  # two-sided 95% quantile of the standard normal
_MIN_BLOCKS = 2  # the fewest blocks an interval is computed from (one degree of freedom)
_T95_SMALL = {1: 12.706204736, 2: 4.302652730, 3: 3.182446305}  # exact, df 1..3


@dataclass(frozen=True)
class Trial:
    """What one measured configuration did.

    Attributes:
        params: the loader keyword arguments measured (num_workers, prefetch_factor,
            pin_memory).
        throughput: steady-state batches per second.
        busy: the consumer's busy fraction, step / (step + data wait), in [0, 1].
        startup_s: seconds from building the loader to its first batch.
        peak_rss: peak resident memory of the main process plus workers, in bytes.
        gpu_util: mean NVML GPU utilization in [0, 1] over the steady state, or None.
        wait_ms, step_ms: mean data wait and step per steady-state batch, in ms.
        batches: steady-state batches measured.
        rel_ci: half-width of the 95% confidence interval of the mean batch time, relative
            to it (``inf`` with too few batches to tell).
        seconds: wall time the trial took, start-up included.
        error: why the loader failed, for a trial that did not complete; None otherwise.
        refused: why the trial was refused for memory (stopped over the ceiling, or not
            started because it would have gone over); None otherwise.
        pair: for a paired round, the number of the pair of back-to-back rounds it belongs
            to (see :mod:`fastdata.tune.search`); None for the search's trials.
    """

    params: dict[str, Any]
    throughput: float = 0.0
    busy: float = 0.0
    startup_s: float = 0.0
    peak_rss: int = 0
    gpu_util: float | None = None
    wait_ms: float = 0.0
    step_ms: float = 0.0
    batches: int = 0
    rel_ci: float = math.inf
    seconds: float = 0.0
    error: str | None = None
    refused: str | None = None
    pair: int | None = None

    @property
    def ok(self) -> bool:
        """Whether the trial completed within the memory ceiling (no ``error``, not
        ``refused``)."""
        return self.error is None and self.refused is None

    @property
    def utilization(self) -> float:
        """What the target is checked against: the GPU's utilization where NVML measured it,
        else the consumer's busy fraction."""
        return self.busy if self.gpu_util is None else self.gpu_util

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% confidence interval of ``throughput`` in batches/s.

        ``rel_ci`` bounds the mean batch time, t (1 +- rel_ci); throughput is 1 / t, so its
        interval is ``throughput / (1 + rel_ci) .. throughput / (1 - rel_ci)`` (unbounded above
        once ``rel_ci`` reaches 1). A trial stopped before it had an interval (``rel_ci`` of
        ``inf``) has only its point estimate: ``(throughput, throughput)``.
        """
        if math.isinf(self.rel_ci):
            return (self.throughput, self.throughput)
        high = self.throughput / (1 - self.rel_ci) if self.rel_ci < 1 else math.inf
        return (self.throughput / (1 + self.rel_ci), high)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (``rel_ci`` of ``inf`` becomes None)."""
        data = asdict(self)
        data["rel_ci"] = None if math.isinf(self.rel_ci) else self.rel_ci
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], /) -> Trial:
        """The trial :meth:`to_dict` described."""
        values = dict(data)
        if values.get("rel_ci") is None:
            values["rel_ci"] = math.inf
        return cls(**values)


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


def rss_reader(refresh_s: float = 0.2) -> Callable[[], float | None]:
    """A function returning the summed RSS (bytes) of this process and its descendants.

    Finding the descendants scans every process on the machine (milliseconds), so the list
    is refreshed only every ``refresh_s`` seconds (often enough that a trial's new workers
    count within a fifth of a second, which the memory ceiling relies on); reading the memory
    of known processes is cheap (microseconds each), so the sampler barely loads a core.
    """
    import psutil

    me = psutil.Process()
    known: list[Any] = []
    refreshed = -math.inf

    def read() -> float | None:
        nonlocal known, refreshed
        if time.monotonic() - refreshed >= refresh_s:
            known, refreshed = me.children(recursive=True), time.monotonic()
        total = me.memory_info().rss
        for child in known:
            try:
                total += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue  # a worker that exited
        return float(total)

    return read


class MemoryGuard:
    """Keeps each trial under a memory ceiling, so that no trial swaps or meets the OOM killer.

    :func:`measure` reads the memory through :meth:`read` (every sample of its background
    thread). Once the summed RSS of this process and its descendants passes ``ceiling``, the
    guard *trips*: it records why in :attr:`tripped`, and :func:`measure` ends the trial after
    the batch in progress, shutting its workers down (a worker makes at most
    ``prefetch_factor`` batches ahead, so stopping the requests stops the growth) and
    reporting it refused. When the trial has not stopped :data:`GRACE_S` seconds after the
    trip (a worker stuck making one huge batch), or at once when the machine's available
    memory falls below ``floor`` (other programs use memory too), the guard kills the
    processes started since :meth:`start` (the trial's workers), which makes the loader fail.
    A trial without workers cannot be stopped mid-batch: it ends after the batch in progress.

    Args:
        ceiling: bytes of summed RSS a trial may reach (None: no ceiling).
        floor: bytes of available memory the machine must keep (None: not checked).
        read_rss: the summed RSS (default :func:`rss_reader`).
        read_available: the machine's available memory (default psutil's).
        processes: the process ids of this process's descendants (default psutil's).
        kill: kills one process id (default ``SIGKILL``).
        clock: the time source of the grace period.
    """

    GRACE_S = 0.5
    """Seconds a tripped trial has to stop by itself before its workers are killed."""

    def __init__(
        self,
        ceiling: int | None,
        *,
        floor: int | None = None,
        read_rss: Callable[[], float | None] | None = None,
        read_available: Callable[[], float] | None = None,
        processes: Callable[[], set[int]] | None = None,
        kill: Callable[[int], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling, self.floor = ceiling, floor
        self._read_rss = read_rss if read_rss is not None else rss_reader()
        self._read_available = read_available or _available_memory
        self._processes = processes or _descendants
        self._kill = kill or _kill
        self._clock = clock
        self._lock = threading.Lock()
        self._before: set[int] = set()
        self._tripped_at = 0.0
        self._stopped = False
        self.tripped: str | None = None
        self.killed: list[int] = []

    def start(self) -> None:
        """A new trial: forget the last one's trip and note the processes already running."""
        with self._lock:
            self.tripped, self.killed, self._stopped = None, [], False
            self._before = self._processes()

    def stop(self) -> bool:
        """The trial stops by itself (no kill from now on); whether the guard already killed
        its workers (the loader then fails, and its error is the guard's doing)."""
        with self._lock:
            self._stopped = True
            return bool(self.killed)

    def read(self) -> float | None:
        """The summed RSS; trips the guard (once) when a limit is passed, and kills the
        trial's workers when it must (see the class docstring)."""
        from fastdata.tune.words import format_size

        rss = self._read_rss()
        low = self.floor is not None and (available := self._read_available()) < self.floor
        with self._lock:
            if self.tripped is None and self.ceiling is not None and (rss or 0) > self.ceiling:
                self.tripped = (
                    f"used {format_size(rss or 0)}, over the memory ceiling of "
                    f"{format_size(self.ceiling)}"
                )
                self._tripped_at = self._clock()
            if self.tripped is None and low:
                self.tripped = (
                    f"the machine's available memory fell to {format_size(available)}, under "
                    f"the floor of {format_size(self.floor or 0)}"
                )
                self._tripped_at = self._clock()
            late = self.tripped is not None and self._clock() - self._tripped_at >= self.GRACE_S
            if (low or late) and self.tripped is not None and not self._stopped:
                self._kill_new()
        return rss

    def _kill_new(self) -> None:
        for pid in sorted(self._processes() - self._before - set(self.killed)):
            with contextlib.suppress(OSError):
                self._kill(pid)
                self.killed.append(pid)


def _available_memory() -> float:
    import psutil

    return float(psutil.virtual_memory().available)


def _descendants() -> set[int]:
    import psutil

    with contextlib.suppress(psutil.Error):
        return {p.pid for p in psutil.Process().children(recursive=True)}
    return set()


def _kill(pid: int) -> None:
    import os
    import signal

    os.kill(pid, signal.SIGKILL)


class NvmlUtilization:
    """One GPU's utilization through NVML (``pynvml`` from ``nvidia-ml-py``).

    Use :func:`open_nvml` to make one; :meth:`read` gives the utilization in [0, 1] (None when
    NVML fails), :meth:`close` shuts NVML down.
    """

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._pynvml, self._handle = pynvml, handle

    def read(self) -> float | None:
        """NVML's current utilization rate of the GPU as a fraction, or None on an NVML error."""
        try:
            return self._pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu / 100.0
        except self._pynvml.NVMLError:
            return None

    def close(self) -> None:
        """Release NVML (pairs the ``nvmlInit`` of :func:`open_nvml`)."""
        with contextlib.suppress(self._pynvml.NVMLError):
            self._pynvml.nvmlShutdown()


def open_nvml(index: int, pci_bus_id: str | None = None) -> NvmlUtilization | None:
    """NVML access to one GPU, or None when ``nvidia-ml-py`` is missing or NVML fails.

    The GPU is found by its PCI bus id when given (CUDA and NVML may number GPUs differently,
    e.g. under ``CUDA_VISIBLE_DEVICES``), else by NVML index ``index``.
    """
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    try:
        if pci_bus_id is not None:
            handle = pynvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        else:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    except pynvml.NVMLError:
        pynvml.nvmlShutdown()
        return None
    return NvmlUtilization(pynvml, handle)


def nvml_for_device(device: Any) -> NvmlUtilization | None:
    """NVML access to the CUDA device ``device`` (None for no device, a non-CUDA one, or no
    NVML)."""
    if device is None:
        return None
    import torch

    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    bus = getattr(props, "pci_bus_id", None)
    pci = None
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        pci = f"{domain:08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return open_nvml(index, pci)


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
    clock: Callable[[], float] = time.perf_counter,
) -> Trial:
    """Measure the loader ``loader_factory(**params)`` as the module docstring describes.

    Args:
        loader_factory, params: build the loader to measure.
        step: the consumer's work on each batch (None: no work, a pure loader benchmark).
        time_limit: seconds the trial may take, start-up included; checked after each batch
            once ``min_blocks`` blocks of steady batches are measured (so a slow start-up
            overruns it rather than measuring nothing); at twice the limit the trial stops
            once it has one block.
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
    deadline, hard_deadline = start + time_limit, start + 2 * time_limit
    waits: list[float] = []
    steps: list[float] = []
    startup: float | None = None
    stats = _BlockStats(block)
    gpu_sampler = None if gpu is None else Sampler(gpu.read, sample_interval)
    try:
        with Sampler(read_memory, sample_interval) as mem, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=WORKER_COUNT_WARNING, category=UserWarning)
            try:
                loader = loader_factory(**params)
                done = False
                while not done:
                    iterator = iter(loader)
                    in_pass = 0
                    for t0, t1, t2 in _timed_batches(iterator, step, transfer, sync, clock):
                        in_pass += 1
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
                        if _trial_done(stats, t2, deadline, hard_deadline, rel_ci, min_blocks):
                            done = True
                            break
                    del iterator  # a multi-process iterator shuts its workers down
                    if not done and in_pass <= warmup:  # the pass ran out in its warm-up
                        raise ValueError(
                            f"the loader built with {dict(params)} yielded {in_pass} batch(es) "
                            f"in a pass, all warm-up (the first {warmup}): too few to measure "
                            "a steady state; give it more data or smaller batches"
                        )
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
    stats: _BlockStats,
    now: float,
    deadline: float,
    hard_deadline: float,
    rel_ci: float,
    min_blocks: int,
) -> bool:
    """Whether a trial has measured enough (see :func:`measure`)."""
    if stats.blocks >= max(min_blocks, _MIN_BLOCKS):
        return now >= deadline or stats.relative_ci(min_blocks) <= rel_ci
    return stats.blocks > 0 and now >= hard_deadline


def _timed_batches(
    iterator: Iterator[Any],
    step: Callable[[Any], Any] | None,
    transfer: Callable[[Any], Any] | None,
    sync: Callable[[], None] | None,
    clock: Callable[[], float],
) -> Iterator[tuple[float, float, float]]:
    """Consume ``iterator``, yielding ``(asked, got, stepped)`` times for each batch."""
    while True:
        asked = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            return
        if transfer is not None:
            batch = transfer(batch)
        got = clock()
        if step is not None:
            step(batch)
        if sync is not None:
            sync()
        del batch
        yield asked, got, clock()


class _BlockStats:
    """Running mean and variance (Welford) of the totals of consecutive ``block`` batch times,
    for the confidence interval of the mean batch time in O(1) per batch."""

    def __init__(self, block: int) -> None:
        self.block = max(block, 1)
        self.blocks, self.mean, self.m2 = 0, 0.0, 0.0
        self._total, self._filled = 0.0, 0

    def add(self, seconds: float) -> None:
        """Add one batch time."""
        self._total += seconds
        self._filled += 1
        if self._filled == self.block:
            self.blocks += 1
            delta = self._total - self.mean
            self.mean += delta / self.blocks
            self.m2 += delta * (self._total - self.mean)
            self._total, self._filled = 0.0, 0

    def relative_ci(self, min_blocks: int = _MIN_BLOCKS) -> float:
        """Half-width of the 95% CI of the mean over the mean; inf with too few blocks."""
        if self.blocks < max(min_blocks, _MIN_BLOCKS) or self.mean <= 0:
            return math.inf
        sd = math.sqrt(self.m2 / (self.blocks - 1))
        return t95(self.blocks - 1) * sd / math.sqrt(self.blocks) / self.mean


def t95(df: int) -> float:
    """Two-sided 95% quantile of Student's t with ``df`` >= 1 degrees of freedom.

    Exact for ``df`` 1..3; beyond, a Cornish-Fisher expansion around the normal quantile,
    within 0.3% of the exact value (2.769 vs 2.776 at 4), far below the noise it judges.
    """
    if df in _T95_SMALL:
        return _T95_SMALL[df]
    z = _Z95
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )
