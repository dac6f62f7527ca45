"""Worker death is never silent and never a hang (run in child processes, each bounded).

For every stream kind, worker 0 is ended by SIGSEGV, SIGKILL, SIGTERM or ``os._exit`` while
the pipeline decodes, while the workers are blocked on a full queue, and while persistent
workers are idle between epochs: the loop must end with an error that names the worker
within 10 s. A stopped worker (SIGSTOP) must not outlast ``timeout=``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fastdata as fd

HERE = Path(__file__).parent
KINDS = ("parquet", "images", "tar")
HOWS = ("segv", "kill", "term", "exit")
MOMENTS = ("decoding", "blocked", "idle")
CASES = [(k, h, m, 0) for k in KINDS for h in HOWS for m in MOMENTS] + [
    (k, "stop", m, 3) for k in KINDS for m in ("decoding", "blocked")
]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("faults")
    fd.synthetic.make_parquet(root / "pq", 20_000, files=2)
    small = {"min_short": 64, "max_short": 96}
    fd.synthetic.make_images(root / "img", 160, **small)
    fd.synthetic.make_tar_shards(root / "tar", 160, shards=4, **small)
    return root


def run_child(data: Path, kind: str, how: str, moment: str, timeout: float) -> dict:
    args = [sys.executable, str(HERE / "fault_child.py"), str(data), kind, how, moment]
    try:
        out = subprocess.run([*args, str(timeout)], capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"outcome": "hang (no result within 120 s)"}
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"outcome": f"no result (rc={out.returncode})", "stderr": out.stderr[-2000:]}
    return json.loads(lines[-1])


@pytest.fixture(scope="module")
def results(data: Path) -> dict:
    """Every case, run in child processes a few at a time (they mostly wait)."""
    with ThreadPoolExecutor(3) as pool:
        found = pool.map(lambda case: run_child(data, *case), CASES)
        return dict(zip(CASES, found, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("moment", MOMENTS)
@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_dying_worker_ends_the_loop_with_an_error(results, kind, how, moment) -> None:
    result = results[kind, how, moment, 0]
    assert result["outcome"] == "error", f"{kind}/{how}/{moment}: finished silently: {result}"
    assert result["type"] == "RuntimeError", result
    assert "worker" in result["message"] and "pid" in result["message"], result
    assert result["seconds"] < 10, result


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("moment", ["decoding", "blocked"])
def test_a_stopped_worker_does_not_outlast_the_timeout(results, kind, moment) -> None:
    result = results[kind, "stop", moment, 3]
    assert result["outcome"] == "error", result
    assert "timed out after 3.0 seconds" in result["message"], result
    assert result["seconds"] < 3 + 5, result
