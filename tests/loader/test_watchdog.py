"""fastdata.loader._watchdog: the watchdog that kills a multi-process iterator's workers once
a receive runs past its timeout, and how a worker's end is said."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest
from torch.utils.data import _utils as torch_utils

from fastdata.loader._watchdog import Watch, ended


class Worker:
    """What the watchdog sees of a worker process: its pid and exit code."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.pid = process.pid

    @property
    def exitcode(self) -> int | None:
        return self.process.poll()


@pytest.fixture
def worker() -> Any:
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield Worker(process)
    process.kill()
    process.wait()


def test_a_receive_past_its_deadline_kills_the_workers(worker: Worker) -> None:
    iterator_id = 10_000_001
    torch_utils.signal_handling._set_worker_pids(iterator_id, (worker.pid,))
    watch = Watch([worker], iterator_id)
    watch.deadline = time.monotonic() - 1
    watch.run()  # returns once it killed them
    assert watch.timed_out and watch.unregistered
    assert worker.process.wait(timeout=10) == -signal.SIGKILL


def test_a_watch_that_is_done_kills_nothing(worker: Worker) -> None:
    watch = Watch([worker], 10_000_002)
    watch.start()
    watch.done.set()
    time.sleep(0.6)  # more than one of its checks
    assert not watch.timed_out and worker.exitcode is None


@pytest.mark.parametrize(
    ("exitcode", "words"),
    [(1, "exited with code 1"), (-9, "was killed by SIGKILL"), (-99, "was killed by signal 99")],
)
def test_how_a_process_ended_is_said_in_words(exitcode: int, words: str) -> None:
    assert ended(exitcode) == words
