"""Tests of the ``fastdata`` command (fastdata.cli) and ``fastdata demo``: no subcommand
prints the help and exits 2; bad arguments are one ``error:`` line and status 2; ``fastdata
convert`` stopped by SIGTERM, Ctrl-C or SIGKILL leaves no worker process, no temporary file
and (but for SIGKILL) one line and the conventional status, no traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import fastdata as fd
from fastdata.cli import main
from writer.writer_helpers import SMALL, stop_midway


def test_no_subcommand_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: fastdata")
    for command in ("demo", "tune", "bench"):
        assert command in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rows", "-5"], "fastdata demo: error: --rows=-5: expected an integer >= 1"),
        (["--batch-size", "0"], "error: --batch-size=0: expected an integer >= 1"),
        (["--num-workers", "-1"], "error: --num-workers=-1: expected an integer >= 0"),
        (["--workers", "-1"], "error: --num-workers=-1: expected an integer >= 0"),
        (["--epochs", "0"], "error: --epochs=0: expected an integer >= 1"),
        (["--rows", "many"], "error: argument --rows: invalid int value: 'many'"),
    ],
)
def test_bad_demo_arguments_exit_2_with_an_error_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", *args])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_console_script_reports_rows_minus_5_without_a_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "fastdata", "demo", "--rows", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        "fastdata demo: error: --rows=-5: expected an integer >= 1"
    )


def test_demo_help_shows_defaults_and_torch_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--num-workers NUM_WORKERS DataLoader num_workers (default: 0)" in out
    assert "--rows ROWS rows in the dataset (default: 500000)" in out
    assert "--workers" not in out  # the old spelling still works, hidden


def test_demo_runs_with_the_old_workers_spelling(
    tmp_path: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["demo", "--rows", "2000", "--batch-size", "500", "--workers", "0",
                 "--epochs", "1", "--data", str(tmp_path)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2,000 rows" in out and "every row exactly once per epoch: yes" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "status", "what"),
    [("SIGTERM", 143, "terminated"), ("Ctrl-C", 130, "interrupted"), ("SIGKILL", -9, None)],
)
def test_a_stopped_convert_leaves_no_worker_running(
    tmp_path: Path, how: str, status: int, what: str | None
) -> None:
    # SIGTERM is what Slurm, Kubernetes and `timeout` send; its workers ran on for minutes,
    # holding the terminal's (or `| tee log`'s) stderr open, and Ctrl-C printed a traceback.
    fd.synthetic.make_images(tmp_path / "train", 400, classes=2, **SMALL)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "fastdata", "convert", str(tmp_path / "train"), str(out),
               "--format", "tar", "--shard-size", "1", "--workers", "2", "--quiet"]  # fmt: skip
    stopped = stop_midway(command, out, how)
    assert stopped.workers_left == []
    assert stopped.temporary == []
    assert stopped.status == status
    if what is not None:
        pattern = rf"fastdata convert: {what}: .+; run the same command again to continue"
        assert re.fullmatch(pattern, stopped.stderr.strip()), stopped.stderr
