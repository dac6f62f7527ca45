"""The machine a tuning runs on: what the result file records of it, and the memory ceiling.

A tuning's answer holds for the machine it was measured on, as it was then: the result file
keeps the cores, memory, load and library versions next to the answer (:func:`describe`), so
a reader can tell whether it applies to their machine. The memory ceiling (:func:`ceiling`)
defaults to a share of the memory available when the tuning starts, so that no trial can push
the machine into swap or the OOM killer (:class:`~fastdata.tune.measure.MemoryGuard`).
"""

from __future__ import annotations

import os
import platform
import sys
from typing import Any

__all__ = [
    "DEFAULT_MEMORY_SHARE",
    "MEMORY_FLOOR_SHARE",
    "ceiling",
    "describe",
    "floor",
    "load_average",
    "share",
    "usable_cores",
]

DEFAULT_MEMORY_SHARE = 0.8
"""The default ceiling: what the tuning process already uses plus this share of the memory
available when it starts."""
MEMORY_FLOOR_SHARE = 0.05
"""A trial also stops when the machine's available memory falls below this share of its total
(other programs grow too)."""


def ceiling(max_memory: int | str | None, /) -> tuple[int, str]:
    """The memory ceiling in bytes, and where it comes from in words.

    Args:
        max_memory: None for the default (:data:`DEFAULT_MEMORY_SHARE` of the available
            memory), a share such as ``"50%"`` (of the available memory), or a size in bytes
            or as a string such as ``"8GiB"`` (:func:`~fastdata.tune.words.parse_size`).

    Raises:
        ValueError: not a size or a share in (0%, 100%].
    """
    from fastdata.tune.words import format_size, parse_size

    if max_memory is None or (isinstance(max_memory, str) and max_memory.strip().endswith("%")):
        fraction = DEFAULT_MEMORY_SHARE if max_memory is None else share(max_memory)
        import psutil

        from fastdata.tune._memory import rss_reader

        available = psutil.virtual_memory().available
        in_use = int(rss_reader()() or 0)
        limit = in_use + int(fraction * available)
        return limit, (
            f"{format_size(limit)}: {format_size(in_use)} in use plus {fraction:.0%} of the "
            f"{format_size(available)} available at the start"
        )
    limit = parse_size(max_memory)
    return limit, f"{format_size(limit)} (max_memory)"


def floor() -> int:
    """The available memory a trial must leave the machine: :data:`MEMORY_FLOOR_SHARE` of
    its total."""
    import psutil

    return int(MEMORY_FLOOR_SHARE * psutil.virtual_memory().total)


def share(text: str) -> float:
    """The share a text such as ``"50%"`` gives, in (0, 1].

    Raises:
        ValueError: not a percentage in (0%, 100%].
    """
    try:
        share = float(text.strip()[:-1]) / 100
    except ValueError:
        share = 0.0
    if not 0 < share <= 1:
        raise ValueError(f"{text!r}: expected a share of the available memory in (0%, 100%]")
    return share


def load_average() -> float | None:
    """The machine's 1-minute load average (runnable processes), or None where the OS has
    none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def describe(cores: int, device: Any = None) -> dict[str, Any]:
    """The facts of this machine a tuning result records: CPU, usable cores, memory, load,
    the accelerator (for a CUDA ``device``) and the versions of Python, torch and fastdata."""
    import psutil
    import torch

    from fastdata._version import __version__

    memory = psutil.virtual_memory()
    facts: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": cores,
        "memory_total": memory.total,
        "memory_available": memory.available,
        "load_average": load_average(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "fastdata": __version__,
        "gpu": None,
    }
    if device is not None and getattr(device, "type", None) == "cuda":
        facts["gpu"] = torch.cuda.get_device_name(device)
    return facts


def _cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
