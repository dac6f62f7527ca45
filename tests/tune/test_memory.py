"""Tests of fastdata.tune._memory: the summed RSS of this process and its children, and the
guard that keeps a trial under a memory ceiling (fake readings, then real workers)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
import torch

from fastdata.tune._memory import MemoryGuard, rss_reader
from fastdata.tune.measure import measure

from .fakes import FakeClock, GiB, Readings, guarded


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
