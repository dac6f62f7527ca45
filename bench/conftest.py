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
from collections.abc import Callable, Iterable
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
    baselines: dict[str, Callable[[], Any]],
    *,
    items: int,
    rounds: int = 15,
    unit: str = "items",
    baseline_items: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Time ``fastdata`` and each baseline in turn, round by round, in one test.

    On a shared machine the usual one-test-per-side layout measures drift as much as
    difference: the machine can change speed between two blocks of rounds. Here each round
    runs every side, the order rotating from round to round, and the record carries every
    side's median (``median_s``, and ``paired`` per baseline), which ``compare.py`` uses
    instead of the round time.

    ``baseline_items`` gives the items of a baseline's round where they differ from
    ``items``; its median is recorded scaled to ``items``, so that ``compare.py`` computes
    its rate as ``baseline_items[name] / median``.

    Returns:
        The last result of each side, by name (``"fastdata"`` and the baselines' names).
    """
    sides = [("fastdata", fastdata), *baselines.items()]
    times: dict[str, list[float]] = {name: [] for name, _ in sides}
    results: dict[str, Any] = {}

    def one_round() -> None:
        turn = len(times["fastdata"]) % len(sides)
        for name, fn in sides[turn:] + sides[:turn]:
            start = time.perf_counter()
            results[name] = fn()
            times[name].append(time.perf_counter() - start)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=1)
    # the warm-up round is not counted
    medians = {name: statistics.median(times[name][1:]) for name, _ in sides}
    own_items = baseline_items or {}
    benchmark.extra_info.update(
        {
            "role": "fastdata",
            "items": items,
            "unit": unit,
            "mode": MODE,
            "median_s": medians["fastdata"],
            "paired": {
                f"baseline:{name}": medians[name] * items / own_items.get(name, items)
                for name in baselines
            },
        }
    )
    return results


def describe_images(encoded: Iterable[bytes]) -> dict[str, float]:
    """The properties of a benchmark's image data that decide its decoding cost, for the
    record (``extra_info["data"]``): the count, JPEG bytes per pixel and mean file size."""
    from fastdata.decode import image_header

    sizes, pixels = [], 0
    for data in encoded:
        header = image_header(data)
        sizes.append(len(data))
        pixels += header.height * header.width
    return {
        "images": len(sizes),
        "bytes_per_pixel": round(sum(sizes) / pixels, 3),
        "mean_kb": round(sum(sizes) / len(sizes) / 1024, 1),
        "mean_megapixels": round(pixels / len(sizes) / 1e6, 3),
    }


def demo_stream(root: Any, images: int, *, samples: int, batch_size: int = 32) -> Any:
    """The ``fastdata tune`` demo pipeline over ``images`` ImageNet-like JPEGs written to
    ``root`` (``synthetic.make_images``, 8 classes, seed 0), listed over and over to
    ``samples`` per pass: 224 px random-resized crops with flips, in batches of 32."""
    import math

    from fastdata import ImageStream
    from fastdata.synthetic import make_images

    paths = make_images(root, images, classes=8, seed=0)
    repeat = math.ceil(samples / len(paths))
    classes = sorted({p.parent.name for p in paths})
    labels = [classes.index(p.parent.name) for p in paths]
    return ImageStream.from_files(paths * repeat, labels * repeat, size=224,
                                  crop="random-resized", flip=True,
                                  batch_size=batch_size)  # fmt: skip


@pytest.fixture(scope="session")
def bench_mode() -> str:
    return MODE


def _tests_conftest() -> Any:
    """tests/conftest.py, loaded under another name (both folders have a ``conftest``)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "tests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("fastdata_tests_conftest", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


s3_endpoint = _tests_conftest().s3_endpoint
"""The tests' local S3-protocol server (moto, in a process of its own) for the session."""


@pytest.fixture(scope="module")
def s3(s3_endpoint: str) -> Any:
    """A ``pyarrow.fs.S3FileSystem`` on the local S3 server."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=s3_endpoint, scheme="http", access_key="bench",
                             secret_key="bench", region="us-east-1",
                             allow_bucket_creation=True)  # fmt: skip
