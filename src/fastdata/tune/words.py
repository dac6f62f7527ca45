"""The tuner's words for numbers and settings: percentages, sizes, settings in a sentence.

Shared by the search, the decision rule, the measurements and the report, so it imports
nothing of them (the memory guard words its refusals with :func:`format_size`).
"""

from __future__ import annotations

import contextlib
import math
import re
import textwrap
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

__all__ = [
    "argument",
    "command_line_words",
    "describe",
    "error_line",
    "format_size",
    "parse_size",
    "percent",
    "thread_caveat",
]

_COMMAND_LINE: ContextVar[bool] = ContextVar("fastdata_tune_command_line", default=False)


@contextlib.contextmanager
def command_line_words() -> Iterator[None]:
    """Inside, the tuner's messages name ``fastdata tune``'s options (:func:`argument`), as
    its command-line user wrote them, rather than :func:`~fastdata.tune.tune`'s arguments."""
    token = _COMMAND_LINE.set(True)
    try:
        yield
    finally:
        _COMMAND_LINE.reset(token)


def argument(python: str, command_line: str, /) -> str:
    """A setting as the user gave it: ``python`` (a ``tune()`` argument) or, inside
    :func:`command_line_words`, ``command_line`` (the option)."""
    return command_line if _COMMAND_LINE.get() else python


def percent(share: float, /) -> str:
    """A busy fraction or utilization as a whole percent, rounded *down*, so that a value
    under the target never shows as the target (0.9496 is ``"94%"``, not ``"95%"``)."""
    return f"{math.floor(share * 100 + 1e-9):d}%"


def error_line(error: str, /) -> str:
    """A failed trial's error in one line, for the table and the progress log: its last
    non-empty line (for an exception from a torch worker, the original exception under the
    worker's traceback), noting that the whole text is the trial's ``error``."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    if len(lines) <= 1:
        return lines[0] if lines else error
    return f"{lines[-1]} (traceback in the trial's error)"


def describe(params: Mapping[str, Any]) -> str:
    """``num_workers=2, worker_method=thread, prefetch_factor=2, pin_memory=False`` for a
    dict of settings. The worker method is named only for thread workers: processes are
    torch's default (as in :meth:`LoaderConfig.to_dict`), and without workers it means
    nothing."""
    threads = params.get("worker_method") == "thread" and params.get("num_workers")
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "worker_method" or threads)


def thread_caveat(worker_init_fn: str | None, /) -> str:
    """What a user of thread workers must know about random numbers, for ``fastdata tune`` and
    ``fastdata bench`` wherever they choose or report thread workers: the workers share the
    training process's global generators. ``worker_init_fn`` (the loader's, by name, or None)
    makes it a warning: the recipe it most likely follows reseeds the training process.
    """
    if worker_init_fn is None:
        text = (
            "note: thread workers share the training process's global random generators "
            "(random, numpy's, torch's). A worker_init_fn that seeds them (pytorch.org's "
            "seed_worker recipe) reseeds the training process, and augmentations drawn from "
            "them are not reproducible per worker: draw from fastdata.worker_generator() "
            "instead, or keep process workers (worker_method='multiprocessing')."
        )
    else:
        text = (
            f"warning: the loader's worker_init_fn ({worker_init_fn}) runs in each thread "
            "worker, inside the training process: if it seeds random, numpy or torch "
            "(pytorch.org's seed_worker recipe), it reseeds your training loop's generators "
            "each time the workers start (every epoch without persistent_workers). The threads "
            "share those generators, so augmentations drawn from them are not reproducible per "
            "worker either. With thread workers leave such a worker_init_fn out and draw from "
            "fastdata.worker_generator(), or keep process workers "
            "(worker_method='multiprocessing')."
        )
    return "\n".join(textwrap.wrap(text, 96))


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)(i?)b?\s*$", re.I)


def parse_size(value: int | str, /) -> int:
    """Bytes from an int or a string such as ``"8GiB"``, ``"512 MB"``, ``"2g"`` or ``"1e9"``.

    ``k``/``M``/``G``/``T`` are powers of 1000, ``Ki``/``Mi``/``Gi``/``Ti`` powers of 1024.

    Raises:
        ValueError: not a positive size in one of these forms.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise ValueError(f"{value!r}: expected a size in bytes such as 8GiB, 512MB, 2g or 1e9")
        digits, prefix, binary = match.groups()
        scale = _UNITS[prefix.lower()]
        if binary:
            if not prefix:
                raise ValueError(f"{value!r}: 'i' needs a unit before it, as in 8GiB")
            scale = 1024 ** "kmgt".index(prefix.lower()) * 1024
        number = int(float(digits) * scale)
    if number <= 0:
        raise ValueError(f"{value!r}: a size must be positive")
    return number


def format_size(n: float, /) -> str:
    """``n`` bytes in binary units: ``"512 MiB"``, ``"1.1 GiB"``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return (
                f"{int(n)} B"
                if unit == "B"
                else f"{n:.0f} {unit}"
                if n >= 100
                else f"{n:.3g} {unit}"
            )
        n /= 1024
    return f"{n:.3g} TiB" if n < 100 else f"{n:.0f} TiB"
