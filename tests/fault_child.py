"""Run by tests/test_faults.py in a fresh process: iterate a loader with worker processes or
worker threads, make worker 0 fail at a chosen moment — ended by a signal or ``os._exit``
(processes), its dataset raising or blocked in C code (either method) — and print what the
loader did, as JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
import traceback
from pathlib import Path

import torch.utils.data as tud

import fastdata as fd

SIGNALS = {"segv": signal.SIGSEGV, "kill": signal.SIGKILL, "term": signal.SIGTERM}


def stream(root: Path, kind: str):
    if kind == "parquet":
        return fd.ParquetStream(root / "pq", batch_size=16)
    image = {"size": 32, "crop": "center", "batch_size": 2, "decode_threads": 2}
    if kind == "images":
        return fd.ImageStream.from_folder(root / "img", **image)
    return fd.ImageStream.from_tar(root / "tar", **image)


class ExitOnRequest:
    """worker_init_fn: worker 0 calls os._exit(3) as soon as ``flag`` exists."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __call__(self, worker_id: int) -> None:
        if worker_id != 0:
            return

        def watch() -> None:
            while not os.path.exists(self.flag):
                time.sleep(0.005)
            os._exit(3)

        threading.Thread(target=watch, daemon=True).start()


class FailOnRequest:
    """worker_init_fn: once ``flag`` exists, worker 0's dataset raises before its next item
    (``how="raise"``: a file gone bad) or blocks in a read nobody answers (``how="stuck"``:
    a hung network file system) — in the worker's own copy of the dataset, a process's or a
    thread's alike."""

    def __init__(self, flag: str, how: str) -> None:
        self.flag, self.how = flag, how

    def __call__(self, worker_id: int) -> None:
        if worker_id != 0:
            return
        dataset = tud.get_worker_info().dataset
        flag, how = self.flag, self.how

        class Failing(type(dataset)):
            def __iter__(self):
                for item in super().__iter__():
                    if os.path.exists(flag):
                        fail(how)
                    yield item

        dataset.__class__ = Failing


def fail(how: str) -> None:
    if how == "raise":
        raise OSError("worker 0 cannot read its next file")
    read, write = os.pipe()
    os.read(read, 1)  # blocks in C for good: nothing is ever written to ``write``
    os.close(write)


def threads_left(before: set[threading.Thread], staying: set[str]) -> list[str]:
    """The thread workers (not in ``before``) still alive once the failed iterator is gone,
    after a few seconds for those not in ``staying`` to end."""
    deadline = time.monotonic() + 5
    while True:
        names = sorted(
            t.name
            for t in threading.enumerate()
            if t.name.startswith("fastdata-worker") and t not in before
        )
        if set(names) <= staying or time.monotonic() > deadline:
            return names
        time.sleep(0.05)


def run_case(root: Path, kind: str, how: str, moment: str, timeout: float, method: str) -> None:
    """Make worker 0 fail ``how`` at ``moment`` and print what the loader did, as JSON."""
    flag = str(root / f"exit-{os.getpid()}-{kind}-{moment}")
    init = {"exit": ExitOnRequest(flag), "raise": FailOnRequest(flag, how)}
    init["stuck"] = init["raise"]
    before = set(threading.enumerate())
    loader = fd.DataLoader(
        stream(root, kind),
        batch_size=None,
        num_workers=2,
        timeout=timeout,
        persistent_workers=moment == "idle",
        worker_init_fn=init.get(how),
        worker_method=method,
    )

    def end_worker_0(pid: int | None) -> float:
        if how in init:
            Path(flag).touch()
        elif how == "stop":
            os.kill(pid, signal.SIGSTOP)
        else:
            os.kill(pid, SIGNALS[how])
        return time.monotonic()

    at = time.monotonic()
    batches = 0
    try:
        iterator = iter(loader)
        next(iterator)
        pid = iterator._workers[0].pid if method == "multiprocessing" else None
        if moment == "decoding":
            at = end_worker_0(pid)
        elif moment == "blocked":
            time.sleep(1.0)  # the workers fill their prefetch slots and wait on the queue
            at = end_worker_0(pid)
        else:  # idle: persistent workers between epochs
            for _ in iterator:
                pass
            at = end_worker_0(pid)
            time.sleep(0.3)
            iterator = iter(loader)
        for _ in iterator:
            batches += 1
        outcome = {"outcome": "finished"}
    except Exception as exc:  # what the test inspects
        message = str(exc)
        outcome = {"outcome": "error", "type": type(exc).__name__, "message": message[:400]}
        outcome["last_line"] = message.strip().splitlines()[-1]
        # The re-raise's frame holds the error, whose traceback holds that frame and the
        # iterator: cleared, the iterator goes when dropped, not whenever the cycle collector
        # runs — during a later case, where worker processes' shutdown then finds their
        # queues closed by the collector and waits 5 s for each worker.
        traceback.clear_frames(exc.__traceback__)
    outcome.update(kind=kind, moment=moment, seconds=time.monotonic() - at, batches=batches)
    if how in ("raise", "stuck"):  # the failed iterator goes before the next case starts
        iterator = loader = None
    if method == "thread":
        stuck = {"fastdata-worker-0"} if how == "stuck" else set()  # no thread can be stopped
        outcome["threads_left"] = threads_left(before, stuck)
    if how == "stop":  # the killed workers' SIGCHLD must not raise in code that goes on
        time.sleep(0.5)
    print(json.dumps(outcome), flush=True)
    if how == "stop":
        os.kill(pid, signal.SIGKILL)


def main() -> None:
    """``fault_child.py ROOT KIND[,KIND...] HOW MOMENT[,MOMENT...] TIMEOUT METHOD``: one case
    per kind and moment, one after the other, a JSON line each."""
    root, kinds, how, moments = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    for kind in kinds.split(","):
        for moment in moments.split(","):
            run_case(root, kind, how, moment, float(sys.argv[5]), sys.argv[6])


if __name__ == "__main__":
    main()
