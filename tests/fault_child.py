"""Run by tests/test_faults.py in a fresh process: iterate a loader, end worker 0 by a signal
(or ``os._exit``) at a chosen moment, and print what the loader did, as JSON."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

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


def main() -> None:
    root, kind, how, moment = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    timeout = float(sys.argv[5])
    flag = str(root / f"exit-{os.getpid()}")
    loader = fd.DataLoader(
        stream(root, kind),
        batch_size=None,
        num_workers=2,
        timeout=timeout,
        persistent_workers=moment == "idle",
        worker_init_fn=ExitOnRequest(flag) if how == "exit" else None,
    )

    def end_worker_0(pid: int) -> float:
        if how == "exit":
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
        pid = iterator._workers[0].pid
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
        outcome = {"outcome": "error", "type": type(exc).__name__, "message": str(exc)[:400]}
    outcome.update(seconds=time.monotonic() - at, batches=batches)
    if how == "stop":  # the killed workers' SIGCHLD must not raise in code that goes on
        time.sleep(0.5)
    print(json.dumps(outcome), flush=True)
    if how == "stop":
        os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
