"""fastdata.writer._pool: shard-writing workers never outlive the conversion (parent killed
by any signal, the portable fallback where prctl is missing, a parent gone before its worker
watched it), and an interrupted parent stops its workers at once, leaving no temporary
file."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import fastdata as fd
from fastdata.writer import folder_samples, write_shards

from .writer_helpers import SMALL, stop_midway


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 small images: 400 shards of one, far more than a few seconds' work."""
    root = tmp_path_factory.mktemp("pool") / "many"
    fd.synthetic.make_images(root, 400, classes=2, **SMALL)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("watch", ["prctl", "polling"])
def test_workers_exit_when_the_parent_is_killed(many: Path, tmp_path: Path, watch: str) -> None:
    # SIGKILL leaves the parent no say: each worker has to notice by itself (they wrote on,
    # reparented to init, for minutes), with the kernel's help or by polling its parent.
    script = tmp_path / "convert.py"
    script.write_text(
        textwrap.dedent(f"""
        import fastdata as fd
        if {watch == "polling"}:
            from fastdata.writer import _pool
            _pool._exit_with_parent = lambda: False  # as where prctl is missing
        samples, _ = fd.writer.folder_samples({str(many)!r})
        fd.write_shards(samples, {str(tmp_path / "out")!r}, format="tar",
                        target_shard_bytes=1, workers=2)
    """)
    )
    stopped = stop_midway([sys.executable, str(script)], tmp_path / "out", "SIGKILL")
    assert stopped.status == -9
    assert stopped.workers_left == []
    assert stopped.temporary == []  # each deleted the file of the shard it was writing


def test_a_worker_whose_parent_died_before_it_watched_exits() -> None:
    # The parent can die between the fork and prctl, which then watches init: the worker
    # checks its parent is still the pool's owner once the kernel watches it.
    code = "from fastdata.writer._pool import watch_parent; watch_parent(1, 'fork'); print('on')"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (run.returncode, run.stdout, run.stderr) == (143, "", "")


def test_a_sigterm_inside_a_weakref_callback_stops_the_shard_without_a_traceback() -> None:
    # A SIGKILLed parent's workers got SIGTERM while a weakref callback ran (the garbage
    # collector's): the _Stop raised there was printed as "Exception ignored in ...", and
    # the shard was written on to its end. Now it is delivered again, unwinds the shard (its
    # finally runs) and the worker exits quietly.
    code = textwrap.dedent("""
        import os, signal, time, weakref
        from fastdata.writer import _pool

        def write_shard(task):
            class Thing: pass
            def callback(ref):  # SIGTERM's handler runs inside the callback
                signal.raise_signal(signal.SIGTERM)  # to this thread: handled in the loop
                for _ in range(1000): pass
            thing = Thing()
            ref = weakref.ref(thing, callback)
            try:
                del thing
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:  # the rest of the shard
                    time.sleep(0.001)
                print("written on to the end", flush=True)
            finally:
                print("unwound", flush=True)

        _pool.watch_parent(os.getppid(), "fork")
        _pool.write_shard = write_shard
        _pool._write(None)
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stdout, run.stderr) == (143, "unwound\n", "")


def test_an_interrupt_stops_the_workers_at_once(many: Path, tmp_path: Path) -> None:
    samples, _ = folder_samples(many)
    workers: list[psutil.Process] = []
    before = {child.pid for child in psutil.Process().children()}  # the suite's own (servers)

    def interrupt(progress: object) -> None:
        workers.extend(c for c in psutil.Process().children() if c.pid not in before)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_shards(samples, tmp_path / "out", format="tar", target_shard_bytes=1, workers=2,
                     on_progress=interrupt)  # fmt: skip
    assert workers and not [w for w in workers if w.is_running()]
    names = [p.name for p in (tmp_path / "out").iterdir()]
    assert not [name for name in names if ".tmp-" in name]
    assert len(names) < 100  # not the 400 shards: the workers stopped, not just the parent
