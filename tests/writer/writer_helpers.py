"""Sizes, readers and a conversion stopped midway, shared by the writer tests (and the
command line's)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import NamedTuple

import psutil

import fastdata

SMALL = {"texture": "smooth", "min_short": 32, "max_short": 64}  # small, cheap images


def tree_bytes(root: Path) -> dict[str, bytes]:
    """The files directly in ``root`` by name (the shards and the manifest)."""
    return {p.name: p.read_bytes() for p in sorted(root.iterdir()) if p.is_file()}


class Stopped(NamedTuple):
    """A conversion stopped midway by :func:`stop_midway`."""

    status: int  # its exit status (-N: killed by signal N)
    stderr: str
    workers_left: list[int]  # its child processes still running 30 s after it ended
    temporary: list[str]  # temporary files left in the destination


def stop_midway(command: list[str], out: Path, how: str) -> Stopped:
    """Run ``command`` (a conversion into ``out`` in a new process group) until its first
    shard exists, then stop it: ``how`` is a signal's name, or ``"Ctrl-C"`` (SIGINT to the
    whole process group, as a terminal sends it). Its worker processes are the children it
    has then; any still running at the end are killed."""
    env = {**os.environ, "PYTHONPATH": str(Path(fastdata.__file__).parents[1])}
    log = out.with_name(out.name + ".stderr")
    with open(log, "w") as stderr:  # a pipe would stay open while its workers run on
        run = subprocess.Popen(command, env=env, stderr=stderr, start_new_session=True)
    workers: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120  # imports on a loaded machine
        while not list(out.glob("shard-*")) and run.poll() is None:
            assert time.monotonic() < deadline, "no shard written in 120 s"
            time.sleep(0.01)
        assert run.poll() is None, f"it ended before it was stopped: {log.read_text()}"
        workers = psutil.Process(run.pid).children(recursive=True)
        assert workers, "no worker processes"
        if how == "Ctrl-C":
            os.killpg(run.pid, signal.SIGINT)
        else:
            run.send_signal(getattr(signal, how))
        status = run.wait(timeout=60)
        deadline = time.monotonic() + 30
        while (left := [w.pid for w in workers if _running(w)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        temporary = sorted(p.name for p in out.iterdir() if ".tmp-" in p.name)
        return Stopped(status, log.read_text(), left, temporary)
    finally:
        if run.poll() is None:
            run.kill()
        for process in workers:
            with contextlib.suppress(psutil.Error):  # gone (psutil checks the pid's start)
                process.kill()
        run.wait(timeout=60)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
