"""Tests of fastdata.tune.machine: the memory ceiling and floor, the facts a result file
records, the usable cores."""

from __future__ import annotations

import os

import psutil
import pytest
import torch

from fastdata.tune import machine

from .fakes import GiB


def test_the_default_ceiling_is_a_share_of_the_available_memory() -> None:
    limit, words = machine.ceiling(None)
    available = psutil.virtual_memory().available
    assert 0.7 * available < limit < psutil.virtual_memory().total
    assert "in use plus 80% of the" in words and "available at the start" in words
    half, words = machine.ceiling("50%")
    assert half < limit and "plus 50% of the" in words
    assert machine.ceiling("8GiB") == (8 * GiB, "8 GiB (max_memory)")
    for bad in ("0%", "150%", "x%"):
        with pytest.raises(ValueError, match="expected a share of the available memory"):
            machine.ceiling(bad)
    facts = machine.describe(2)
    assert facts["usable_cores"] == 2 and facts["memory_total"] > 0 and facts["gpu"] is None
    assert facts["torch"] == torch.__version__


def test_a_share_is_a_percentage_of_the_available_memory() -> None:
    assert machine.share("50%") == 0.5
    assert machine.share(" 100% ") == 1.0
    for bad in ("0%", "101%", "half%", "%"):
        with pytest.raises(ValueError, match=r"expected a share of the available memory in"):
            machine.share(bad)


def test_the_floor_is_a_share_of_the_total_memory() -> None:
    total = psutil.virtual_memory().total
    assert machine.floor() == int(machine.MEMORY_FLOOR_SHARE * total)


def test_usable_cores_follow_the_affinity_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    if hasattr(os, "sched_getaffinity"):
        assert machine.usable_cores() == len(os.sched_getaffinity(0))
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 3}, raising=False)
        assert machine.usable_cores() == 2
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert machine.usable_cores() == 6  # no affinity mask: every core
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert machine.usable_cores() == 1


def test_the_load_average_is_none_where_the_os_has_none(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "getloadavg", lambda: (1.5, 1.0, 0.5), raising=False)
    assert machine.load_average() == 1.5

    def missing() -> tuple[float, float, float]:
        raise OSError("no load average")

    monkeypatch.setattr(os, "getloadavg", missing, raising=False)
    assert machine.load_average() is None
