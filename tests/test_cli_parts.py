"""Tests of fastdata._cli, the pieces every subcommand shares: help that shows defaults,
argument checks that end in argparse's ``error:`` line (status 2), importing a user's
``MODULE:FUNCTION``, writing to stderr, and SIGTERM raised as an exception."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fastdata._cli import (
    HelpFormatter,
    Terminated,
    check,
    fail,
    import_function,
    say,
    sigterm_raises,
)


def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="fastdata test", formatter_class=HelpFormatter)


def test_help_shows_defaults_only_where_they_say_something() -> None:
    p = parser()
    p.add_argument("--rows", type=int, default=500, help="rows to write")
    p.add_argument("--format", default="parquet", help="one of parquet, tar")
    p.add_argument("--data", default=None, help="a folder (a temporary one if left out)")
    p.add_argument("--quiet", action="store_true", help="no progress")
    p.add_argument("--seed", type=int, default=0, help="the seed (%(default)s by default)")
    p.add_argument("--hidden", default=3, help=argparse.SUPPRESS)
    p.add_argument("src", nargs="?", default="here", help="where to read")
    text = " ".join(p.format_help().split())
    assert "--rows ROWS rows to write (default: 500)" in text
    assert "--format FORMAT one of parquet, tar (default: parquet)" in text
    assert "--data DATA a folder (a temporary one if left out) --quiet" in text
    assert "--quiet no progress --seed" in text
    assert text.endswith("--seed SEED the seed (0 by default)")  # not shown twice
    assert "--hidden" not in text
    assert "src where to read" in text and "read (default" not in text  # not for positionals
    assert text.count("(default:") == 2


def test_check_returns_the_checked_value() -> None:
    assert check(parser(), "check_int", "--rows", 5, minimum=1) == 5
    assert check(parser(), lambda option, value, scale: value * scale, "--x", 2, scale=3) == 6


@pytest.mark.parametrize("kind", [TypeError, ValueError, RuntimeError])
def test_check_turns_the_checkers_error_into_an_argparse_error(
    kind: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    def refuse(option: str, value: Any) -> None:
        raise kind(f"{option}={value}: no")

    with pytest.raises(SystemExit) as exited:
        check(parser(), refuse, "--x", 1)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == "fastdata test: error: --x=1: no"
    assert "Traceback" not in err


def test_check_by_name_uses_fastdatas_checks(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        check(parser(), "check_int", "--rows", -5, minimum=1)
    assert capsys.readouterr().err.splitlines()[-1] == (
        "fastdata test: error: --rows=-5: expected an integer >= 1"
    )


def test_check_lets_other_errors_through() -> None:
    def broken(option: str, value: Any) -> None:
        raise KeyError(option)

    with pytest.raises(KeyError):
        check(parser(), broken, "--x", 1)


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module of the user's in the current directory (not on sys.path)."""
    name = f"user_loader_{tmp_path.name}"
    (tmp_path / f"{name}.py").write_text("def make():\n    return 42\n\nCONSTANT = 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield name
    sys.modules.pop(name, None)


def test_import_function_finds_a_function_in_the_current_directory(user_module: str) -> None:
    function = import_function(parser(), "--loader", f"{user_module}:make")
    assert function() == 42


def test_import_function_takes_a_file_path_relative_or_absolute(
    user_module: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """./train.py:make_loader was a raw TypeError from importlib (a 'relative import')."""
    assert import_function(parser(), "--loader", f"./{user_module}.py:make")() == 42
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert import_function(parser(), "--loader", f"../{user_module}.py:make")() == 42
    assert import_function(parser(), "--loader", f"{tmp_path / user_module}.py:make")() == 42
    assert sys.modules[user_module].__file__ == str(tmp_path / f"{user_module}.py")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("train", "--loader 'train': {usage}"),
        (":make", "--loader ':make': {usage}"),
        ("train:", "--loader 'train:': {usage}"),
        (
            "nowhere_xyz:make",
            "--loader 'nowhere_xyz:make': cannot import nowhere_xyz: No module named 'nowhere_xyz'",
        ),
        ("{module}:missing", "--loader '{module}:missing': {module} has no function 'missing'"),
        ("{module}:CONSTANT", "--loader '{module}:CONSTANT': {module} has no function 'CONSTANT'"),
        (
            ".{module}:make",
            "--loader '.{module}:make': .{module} is a relative module name, which needs a "
            "package to be relative to: give the module ({module}:make) or its file "
            "(./{module}.py:make)",
        ),
        ("./nowhere.py:make", "--loader './nowhere.py:make': no such file './nowhere.py'"),
        (
            "./{module}.py:missing",
            "--loader './{module}.py:missing': ./{module}.py has no function 'missing'",
        ),
    ],
)
def test_import_function_names_the_option_and_the_problem(
    spec: str, message: str, user_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        import_function(parser(), "--loader", spec.format(module=user_module))
    assert exited.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    usage = (
        "expected MODULE:FUNCTION or PATH.py:FUNCTION, e.g. train:make_loader or "
        "./train.py:make_loader"
    )
    assert last == "fastdata test: error: " + message.format(module=user_module, usage=usage)


def test_say_writes_a_line_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    say("3 shards written")
    assert capsys.readouterr() == ("", "3 shards written\n")


def test_fail_reports_and_returns_the_status(capsys: pytest.CaptureFixture[str]) -> None:
    assert fail("convert", "no images in /data", 1) == 1
    assert capsys.readouterr() == ("", "fastdata convert: error: no images in /data\n")


def test_sigterm_raises_terminated_inside_and_ends_the_process_again_after() -> None:
    # (an earlier test in this process may have left a handler: ray.init installs one)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        with pytest.raises(Terminated), sigterm_raises():
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises as soon as it returns
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_sigterm_raises_leaves_a_handler_of_its_own_and_other_threads_alone() -> None:
    def handler(signum: int, frame: object) -> None:
        pass

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        with sigterm_raises():
            assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(_inside()))
    thread.start()
    thread.join()
    assert seen == [previous]  # off the main thread: the handler in place, untouched


def _inside() -> object:
    with sigterm_raises():
        return signal.getsignal(signal.SIGTERM)
