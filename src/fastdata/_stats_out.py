"""Loader statistics out of Python: flat scalar names for metric loggers, and a log record.

``fastdata.DataLoader.stats()`` is a nested dict (stages inside it); loggers such as
TensorBoard's ``SummaryWriter``, Lightning's ``log_dict`` or a metrics service want flat
``{"name": number}`` pairs. Standard library only.
"""

from __future__ import annotations

import logging
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["flatten_stats", "log_stats"]

LOGGER = "fastdata"
"""The logger :func:`log_stats` writes to unless given another."""


def flatten_stats(stats: Mapping[str, Any], /, prefix: str = "data") -> dict[str, float]:
    """Every number of a nested ``stats`` dict under a ``/``-joined name, as a float.

    ``{"wait_fraction": 0.1, "stages": {"decode": {"seconds": 2.5}}}`` becomes
    ``{"data/wait_fraction": 0.1, "data/stages/decode/seconds": 2.5}``. Keys of nested
    mappings (and positions in lists) become path components; strings, None and booleans are
    left out: they are not measurements. ``prefix=""`` gives names without one.

    Raises:
        TypeError: ``stats`` is not a mapping.
    """
    if not isinstance(stats, Mapping):
        raise TypeError(f"stats={stats!r}: expected a mapping such as DataLoader.stats()")
    flat: dict[str, float] = {}
    _walk(stats, prefix, flat)
    return flat


def _walk(value: Any, name: str, flat: dict[str, float]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, f"{name}/{key}" if name else str(key), flat)
    elif isinstance(value, Sequence) and not isinstance(value, str | bytes):
        for i, item in enumerate(value):
            _walk(item, f"{name}/{i}" if name else str(i), flat)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        flat[name] = float(value)


def log_stats(
    stats: Mapping[str, Any],
    /,
    logger: logging.Logger | None = None,
    *,
    level: int = logging.INFO,
    prefix: str = "data",
) -> dict[str, float]:
    """Log ``stats`` as one record of ``name=value`` pairs (:func:`flatten_stats` names).

    The record goes to ``logger`` (default: the ``"fastdata"`` logger) at ``level``; its
    ``stats`` attribute holds the flat dict, for handlers that want the numbers rather than
    the text. Returns the flat dict.
    """
    flat = flatten_stats(stats, prefix)
    target = logger if logger is not None else logging.getLogger(LOGGER)
    if target.isEnabledFor(level):
        text = " ".join(f"{name}={value:.6g}" for name, value in flat.items())
        target.log(level, "loader stats: %s", text, extra={"stats": flat})
    return flat
