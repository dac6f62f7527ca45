"""Worker failure is never silent and never a hang (run in child processes, each bounded).

For every stream kind, worker 0 fails while the pipeline decodes, while the workers are
blocked on a full queue (thread workers: waiting for their next task), and while persistent
workers are idle between epochs. Under both worker methods, its dataset raises: the loop
ends with that error, its type and the worker named, and no thread worker is left. A worker
stuck in C code (a read that never returns) must not outlast ``timeout=``.

Worker processes alone are also ended by SIGSEGV, SIGKILL, SIGTERM or ``os._exit``, or stopped
(SIGSTOP): the loop must end with an error that names the worker within 10 s (or at the
timeout). These have no thread analogue: a signal is delivered to the process, not to one of
its threads, and a thread that segfaults, calls ``os._exit`` or is killed for memory takes the
whole training process with it — nothing is left to report the error (SIGSTOP stops every
thread, the consumer's included).
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fastdata as fd

from conftest import WORKER_METHODS

HERE = Path(__file__).parent
KINDS = ("parquet", "images", "tar")
HOWS = ("segv", "kill", "term", "exit")  # worker processes only (see above)
MOMENTS = ("decoding", "blocked", "idle")
PROCESS = "multiprocessing"
STUCK_MOMENTS = ("decoding", "blocked")
# The child processes, each running its cases one after the other: (kinds, how, moments,
# timeout, worker method). A killed or stopped worker process gets a child of its own (the
# failed iterator's SIGCHLD handler must not fire in a case after it); the cases that end
# no process share one per fault and method.
ALONE = [
    *[((k,), "stop", (m,), 3, PROCESS) for k in KINDS for m in STUCK_MOMENTS],
    *[((k,), h, (m,), 0, PROCESS) for k in KINDS for h in HOWS for m in MOMENTS],
]
# The first test waits for every child (the module's fixture): about a minute and a half on
# an idle 2-core machine, past pytest's 300 s under the load of parallel work; each child is
# bounded by its own 180 s, so a hang still fails.
pytestmark = pytest.mark.timeout(900)
SHARED = [
    *[(KINDS, "stuck", STUCK_MOMENTS, 3, w) for w in WORKER_METHODS],
    *[(KINDS, "raise", MOMENTS, 0, w) for w in WORKER_METHODS],
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    fd.synthetic.make_parquet(root / "pq", 20_000, files=2)
    small = {"min_short": 64, "max_short": 96}
    fd.synthetic.make_images(root / "img", 160, **small)
    fd.synthetic.make_tar_shards(root / "tar", 160, shards=4, **small)
    return root


def run_child(data: Path, kinds, how: str, moments, timeout: float, method: str) -> dict:
    """What the loader did in each case of the child, by the key the tests look it up with."""
    cases = ",".join(kinds), how, ",".join(moments), str(timeout), method
    found: dict[tuple, dict] = {}
    try:
        out = subprocess.run(
            [sys.executable, str(HERE / "fault_child.py"), str(data), *cases],
            capture_output=True,
            text=True,
            timeout=180,
        )
        for line in out.stdout.splitlines():
            if line.startswith("{"):
                result = json.loads(line)
                found[result["kind"], result["moment"]] = result
        missing = {"outcome": f"no result (rc={out.returncode})", "stderr": out.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        missing = {"outcome": "hang (no result within 180 s)"}
    return {
        (k, how, m, timeout, method): found.get((k, m), missing) for k in kinds for m in moments
    }


@pytest.fixture(scope="module")
def results(data: Path) -> dict:
    """Every case, in child processes a few at a time (they mostly wait): those of their own
    three at a time, the shared ones (waiting on timeouts, mostly) beside them, all at once."""
    with ThreadPoolExecutor(3) as alone, ThreadPoolExecutor(len(SHARED)) as shared:
        running = [shared.submit(run_child, data, *child) for child in SHARED]
        running += [alone.submit(run_child, data, *child) for child in ALONE]
        return {case: result for child in running for case, result in child.result().items()}


@pytest.mark.slow
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_dying_worker_ends_the_loop_with_an_error(results, kind, how, moment) -> None:
    result = results[kind, how, moment, 0, PROCESS]
    assert result["outcome"] == "error", f"{kind}/{how}/{moment}: finished silently: {result}"
    assert result["type"] == "RuntimeError", result
    assert "worker" in result["message"] and "pid" in result["message"], result
    assert result["seconds"] < 10, result


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("moment", ["decoding", "blocked"])
def test_a_stopped_worker_does_not_outlast_the_timeout(results, kind, moment) -> None:
    assert_timed_out(results[kind, "stop", moment, 3, PROCESS])


def assert_timed_out(result: dict) -> None:
    assert result["outcome"] == "error", result
    assert "timed out after 3.0 seconds" in result["message"], result
    assert result["seconds"] < 3 + 5, result


@pytest.mark.slow
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_whose_dataset_raises_ends_the_loop_with_its_error(
    results, kind, moment, worker_method
) -> None:
    result = results[kind, "raise", moment, 0, worker_method]
    assert result["outcome"] == "error", f"{kind}/{moment}: finished silently: {result}"
    assert result["type"] == "OSError", result
    where = "thread" if worker_method == "thread" else "process"
    assert f"Caught OSError in DataLoader worker {where} 0" in result["message"], result
    assert result["last_line"] == "OSError: worker 0 cannot read its next file", result
    assert result["seconds"] < 10, result
    if worker_method == "thread":
        assert result["threads_left"] == [], result


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("moment", ["decoding", "blocked"])
def test_a_worker_stuck_in_c_code_does_not_outlast_the_timeout(
    results, kind, moment, worker_method
) -> None:
    result = results[kind, "stuck", moment, 3, worker_method]
    assert_timed_out(result)
    if worker_method == "thread":
        # A thread cannot be stopped from outside: the stuck one stays (a daemon, it does not
        # hold up the interpreter's exit, as the child's exit shows); every other one ended.
        assert result["threads_left"] == ["fastdata-worker-0"], result
