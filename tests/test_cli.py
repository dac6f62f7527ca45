"""Tests of the ``fastdata`` command (fastdata.cli) and ``fastdata demo``: no subcommand
prints the help and exits 2; bad arguments are one ``error:`` line and status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fastdata.cli import main


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
