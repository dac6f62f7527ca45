"""The timeout watchdog of a multi-process iterator, and how a worker that died is named.

With ``timeout=``, torch's timer covers waiting for a batch but not receiving it: a worker
that is stopped (SIGSTOP) or hung with the GIL held after announcing a batch blocks the
receive forever. :class:`Watch` ends such a receive once the timeout has passed, by killing
the workers; the iterator then says the loader timed out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Any

from torch.utils.data import _utils as torch_utils

__all__ = ["Watch", "ended"]


class Watch:
    """Once a receive has run past its ``deadline`` (set around each receive), kill the
    workers; the receive then fails and the error says why (``timed_out``). Ends when
    ``done`` is set (the iterator shuts down).

    It sees only the workers and the iterator's id, never the iterator: holding it would keep
    an abandoned iterator, and so its workers, alive. Before killing, it takes the workers
    out of torch's SIGCHLD registry (``unregistered``, under ``lock``, which the iterator's
    shut-down takes too): torch's handler would otherwise raise "worker killed by signal" in
    the main thread wherever it is when they die, possibly after the timeout error was
    caught, in the caller's own code."""

    def __init__(self, workers: list[Any], iterator_id: int) -> None:
        self.workers = workers
        self.iterator_id = iterator_id
        self.deadline: float | None = None
        self.timed_out = False
        self.unregistered = False
        self.done = threading.Event()
        self.lock = threading.Lock()

    def start(self) -> None:
        threading.Thread(target=self.run, name="fastdata-timeout", daemon=True).start()

    def run(self) -> None:
        while not self.done.wait(0.25):
            deadline = self.deadline
            if deadline is None or time.monotonic() < deadline:
                continue
            with self.lock:
                if self.done.is_set():
                    return
                self.timed_out = True
                torch_utils.signal_handling._remove_worker_pids(self.iterator_id)
                self.unregistered = True
                for worker in self.workers:
                    if worker.pid is not None and worker.exitcode is None:
                        with contextlib.suppress(OSError):
                            os.kill(worker.pid, signal.SIGKILL)
            return


def ended(exitcode: int) -> str:
    """How a process with ``exitcode`` ended, in words."""
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"was killed by {name}"
    return f"exited with code {exitcode}"
