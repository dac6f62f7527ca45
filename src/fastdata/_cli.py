"""Pieces every ``fastdata`` subcommand shares: help that shows defaults, argument checks
that end in argparse's own ``error:`` line (exit status 2, no traceback), importing a user's
``MODULE:FUNCTION``, writing to stderr, and SIGTERM as an exception. Standard library only,
so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = [
    "HelpFormatter",
    "Terminated",
    "check",
    "fail",
    "import_function",
    "say",
    "sigterm_raises",
]


class HelpFormatter(argparse.HelpFormatter):
    """Appends ``(default: X)`` to an option's help, unless the default is None or False
    (the help then says in words what leaving the option out means) or already shown."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" in text
            or not action.option_strings
            or action.default is None
            or action.default is False
            or action.default == argparse.SUPPRESS
        ):
            return text
        return f"{text} (default: %(default)s)"


def check(
    parser: argparse.ArgumentParser,
    checker: str | Callable[..., Any],
    option: str,
    value: Any,
    /,
    **limits: Any,
) -> Any:
    """``checker(option, value, **limits)``, its ``TypeError`` / ``ValueError`` /
    ``RuntimeError`` turned into ``parser.error``. A ``str`` names a check of
    :mod:`fastdata._validate` (imported only now: it needs numpy)."""
    function: Callable[..., Any] = (
        getattr(importlib.import_module("fastdata._validate"), checker)
        if isinstance(checker, str)
        else checker
    )
    try:
        return function(option, value, **limits)
    except (TypeError, ValueError, RuntimeError) as exc:
        parser.error(str(exc))


def import_function(parser: argparse.ArgumentParser, option: str, spec: str) -> Any:
    """The callable ``MODULE:FUNCTION`` names (``MODULE`` is imported from the current
    directory too), or ``PATH.py:FUNCTION`` (a file, relative to the current directory or
    absolute: ``./train.py:make_loader``); anything wrong is a ``parser.error`` naming
    ``option``."""
    module_name, sep, name = spec.rpartition(":")
    if not sep or not module_name or not name:
        parser.error(
            f"{option} {spec!r}: expected MODULE:FUNCTION or PATH.py:FUNCTION, e.g. "
            "train:make_loader or ./train.py:make_loader"
        )
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        module = _import_file(parser, option, spec, module_name)
    elif module_name.startswith("."):
        parser.error(
            f"{option} {spec!r}: {module_name} is a relative module name, which needs a "
            f"package to be relative to: give the module ({module_name.lstrip('.')}:{name}) "
            f"or its file (./{module_name.lstrip('.').replace('.', '/')}.py:{name})"
        )
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            parser.error(f"{option} {spec!r}: cannot import {module_name}: {exc}")
    function = getattr(module, name, None)
    if not callable(function):
        parser.error(f"{option} {spec!r}: {module_name} has no function {name!r}")
    return function


def _import_file(parser: argparse.ArgumentParser, option: str, spec: str, file: str) -> Any:
    """The module in ``file``, imported under its file's name with its folder on
    ``sys.path`` (as ``python file`` would have it), so that worker processes started by
    spawn import it, and its classes pickle, by that name."""
    import importlib.util

    path = os.path.abspath(file)
    if not os.path.isfile(path):
        parser.error(f"{option} {spec!r}: no such file {file!r}")
    if not path.endswith(".py"):
        parser.error(f"{option} {spec!r}: {file!r} is not a Python file (.py)")
    folder, stem = os.path.split(path[: -len(".py")])
    if folder not in sys.path:
        sys.path.insert(0, folder)
    loaded = sys.modules.get(stem)
    if loaded is not None and os.path.abspath(getattr(loaded, "__file__", "") or "") == path:
        return loaded
    if loaded is not None:
        parser.error(
            f"{option} {spec!r}: a module named {stem} is imported already from "
            f"{getattr(loaded, '__file__', None) or 'elsewhere'}: rename the file"
        )
    try:
        module = importlib.import_module(stem)
    except ImportError as exc:
        parser.error(f"{option} {spec!r}: cannot import {file}: {exc}")
    found = os.path.abspath(getattr(module, "__file__", "") or "")
    if found != path:
        parser.error(f"{option} {spec!r}: the module {stem} imports from {found}: rename the file")
    return module


def say(message: str) -> None:
    """A line for the person at the terminal (progress, notes): stderr, flushed."""
    print(message, file=sys.stderr, flush=True)


def fail(command: str, message: str, status: int) -> int:
    """Report an error found while running (not in the arguments); returns ``status``."""
    say(f"fastdata {command}: error: {message}")
    return status


class Terminated(BaseException):
    """SIGTERM came (what Slurm, Kubernetes and ``timeout`` send): raised in the main thread
    inside :func:`sigterm_raises`, as SIGINT raises ``KeyboardInterrupt``."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """Inside, SIGTERM raises :class:`Terminated` in the main thread instead of ending the
    process at once, so that ``finally`` blocks run (temporary files deleted, worker
    processes stopped) and the command reports where it stopped. Left alone off the main
    thread (Python delivers signals there only) and where SIGTERM already has a handler."""
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    owner = os.getpid()

    def handle(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:  # a child forked before it set its own handler
            os._exit(128 + signum)
        raise Terminated

    signal.signal(signal.SIGTERM, handle)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
