"""Tests of ``fastdata tune`` on the command line (fastdata.tune.cli)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fastdata.config import LoaderConfig
from fastdata.tune import TuneResult

CLI = textwrap.dedent(
    """
    import argparse, sys
    from fastdata.tune.cli import add_parser
    parser = argparse.ArgumentParser(prog="fastdata")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(sys.argv[1:])
    sys.exit(args.run(args))
    """
)


def fastdata_tune(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``fastdata tune ARGS`` in a fresh process (the subcommand as the lead wires it)."""
    return subprocess.run(
        [sys.executable, "-c", CLI, "tune", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_tunes_the_demo_and_writes_a_loadable_config(tmp_path: Path) -> None:
    done = fastdata_tune(
        "--budget-s", "8", "--demo-images", "32", "--max-workers", "1", "--out", "tuned.json",
        "--plot", "tuned.png", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "batches/s" in done.stdout and "chosen: num_workers=" in done.stdout
    assert "trial 1: num_workers=0" in done.stderr
    config = LoaderConfig.load(tmp_path / "tuned.json")
    assert config.num_workers in (0, 1)
    result = TuneResult.load(tmp_path / "tuned.json")
    assert "demo images (32 JPEGs" in result.extra["source"]
    assert (tmp_path / "tuned.png").stat().st_size > 1000


def in_process(*args: str) -> int:
    """``fastdata tune ARGS`` in this process (for sources that start no workers)."""
    import argparse

    from fastdata.tune.cli import add_parser

    parser = argparse.ArgumentParser(prog="fastdata")
    add_parser(parser.add_subparsers(dest="command"))
    parsed = parser.parse_args(["tune", *args])
    return parsed.run(parsed)


def test_cli_rejects_bad_arguments_with_a_clear_message(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for args, message in [
        (["--target", "2"], "argument --target: '2': must be in (0, 1]"),
        (["--max-memory", "lots"], "argument --max-memory: 'lots': expected a size"),
        (["--budget-s", "0"], "argument --budget-s/--budget: '0': must be > 0"),
        (["--data", "x", "--parquet", "y"], "not allowed with argument"),
    ]:
        with pytest.raises(SystemExit) as exited:
            in_process(*args)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err
    assert in_process("--factory", "no_colon") == 2
    assert "expected MODULE:FUNCTION" in capsys.readouterr().err


def test_cli_runs_a_user_factory_and_reports_a_failing_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tune_test_loaders.py").write_text(
        "def good(num_workers, prefetch_factor, pin_memory):\n"
        "    return list(range(500))\n"
        "def broken(**params):\n"
        "    raise OSError('cannot open shard-0003.tar')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tune_test_loaders", raising=False)
    assert in_process(
        "--factory", "tune_test_loaders:good", "--budget-s", "2", "--step-ms", "1",
        "--max-workers", "0", "--out", "out.json",
    ) == 0  # fmt: skip
    assert "chosen: num_workers=0" in capsys.readouterr().out
    assert LoaderConfig.load(tmp_path / "out.json") == LoaderConfig()
    assert in_process("--factory", "tune_test_loaders:broken", "--budget-s", "2") == 1
    err = capsys.readouterr().err
    assert "the loader failed with num_workers=0" in err
    assert "cannot open shard-0003.tar" in err
    assert in_process("--factory", "tune_test_loaders:missing") == 2
    assert "has no function 'missing'" in capsys.readouterr().err
