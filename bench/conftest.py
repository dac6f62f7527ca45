"""Shared set-up of the benchmarks: the size mode and the result record of each scenario.

Every scenario is a group of pytest-benchmark tests: one ``fastdata`` test and one or more
``baseline:<name>`` tests over the same data in the same run. ``bench/compare.py`` turns the
JSON into the side-by-side table and checks the floors in ``bench/floors.toml``.

``FASTDATA_BENCH=short`` (the default, used by CI) keeps the whole run to a few minutes on a
2-core machine; ``FASTDATA_BENCH=full`` uses the sizes quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

MODE = os.environ.get("FASTDATA_BENCH", "short")
if MODE not in ("short", "full"):
    raise ValueError(f"FASTDATA_BENCH={MODE!r}: expected 'short' or 'full'")


def scaled(short: int, full: int) -> int:
    """The size for the current mode."""
    return short if MODE == "short" else full


def measure(
    benchmark: Any,
    fn: Callable[[], Any],
    *,
    role: str,
    items: int,
    rounds: int = 5,
    unit: str = "items",
) -> Any:
    """Time ``fn`` (one call processes ``items`` items) and record its role in the scenario.

    ``role`` is ``"fastdata"`` or ``"baseline:<name>"``; the comparison script pairs each
    baseline with the fastdata test of the same benchmark group.
    """
    if role != "fastdata" and not role.startswith("baseline:"):
        raise ValueError(f"role={role!r}: expected 'fastdata' or 'baseline:<name>'")
    benchmark.extra_info.update({"role": role, "items": items, "unit": unit, "mode": MODE})
    return benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)


@pytest.fixture(scope="session")
def bench_mode() -> str:
    return MODE
