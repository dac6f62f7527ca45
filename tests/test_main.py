"""Tests of fastdata.__main__: ``python -m fastdata`` is the command line, and its help
comes without importing torch, numpy or pyarrow."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import fastdata

SUBCOMMANDS = ("demo", "convert", "tune", "bench")
"""The subcommands `fastdata --help` lists (a new one is added here too)."""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python *args`` on this fastdata (the one these tests import)."""
    src = str(Path(fastdata.__file__).parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, env=env
    )


def test_help_exits_0_and_names_every_subcommand() -> None:
    done = run("-m", "fastdata", "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: fastdata ")
    lines = done.stdout.splitlines()
    listed = {line.split()[0] for line in lines if line[:4] == "    " and line[4:5].strip()}
    assert listed == set(SUBCOMMANDS)


def test_without_a_subcommand_the_help_goes_to_stderr_with_status_2() -> None:
    done = run("-m", "fastdata")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("usage: fastdata ")


def test_version() -> None:
    done = run("-m", "fastdata", "--version")
    assert (done.returncode, done.stdout.strip()) == (0, f"fastdata {fastdata.__version__}")


def test_help_imports_no_heavy_library() -> None:
    script = (
        "import runpy, sys\n"
        "sys.argv = ['fastdata', '--help']\n"
        "try:\n"
        "    runpy.run_module('fastdata', run_name='__main__')\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(sorted(m for m in ('torch', 'numpy', 'pyarrow') if m in sys.modules))\n"
    )
    done = run("-c", script)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[]"
