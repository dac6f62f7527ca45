"""Shared set-up of the benchmarks: the size mode and the result record of each scenario.

Every scenario is a group of pytest-benchmark tests: one ``fastdata`` test and one or more
``baseline:<name>`` tests over the same data in the same run (or one test timing both sides
alternately, :func:`measure_interleaved`, where the two should time the same).
``bench/compare.py`` turns the JSON into the side-by-side table and checks the floors in
``bench/floors.toml``.

``FASTDATA_BENCH=short`` (the default, used by CI) keeps the whole run to a few minutes on a
2-core machine; ``FASTDATA_BENCH=full`` uses the sizes quoted in docs/benchmarks.md.
"""

from __future__ import annotations

import os
import statistics
import time
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


def measure_interleaved(
    benchmark: Any,
    fastdata: Callable[[], Any],
    baseline: Callable[[], Any],
    *,
    name: str,
    items: int,
    rounds: int = 15,
    unit: str = "items",
) -> tuple[Any, Any]:
    """Time ``fastdata`` and the baseline ``name`` alternately, round by round, in one test.

    For scenarios whose two sides should time the same (an overhead that must be near
    zero), the usual one-test-per-side layout measures drift as much as difference: the
    machine can change speed between the two blocks of rounds. Here each round runs both,
    in alternating order, and the record carries both medians (``median_s`` and
    ``paired``), which ``compare.py`` uses instead of the round time.
    """
    times: dict[str, list[float]] = {"fastdata": [], name: []}
    sides = [("fastdata", fastdata), (name, baseline)]
    results: dict[str, Any] = {}

    def one_round() -> None:
        for side, fn in sides if len(times["fastdata"]) % 2 else sides[::-1]:
            start = time.perf_counter()
            results[side] = fn()
            times[side].append(time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": items,
            "unit": unit,
            "mode": MODE,
            # the warm-up round is not counted
            "median_s": statistics.median(times["fastdata"][1:]),
            "paired": {f"baseline:{name}": statistics.median(times[name][1:])},
        }
    )
    return results["fastdata"], results[name]


@pytest.fixture(scope="session")
def bench_mode() -> str:
    return MODE
