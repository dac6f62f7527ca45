"""Tuning benchmark: the loader ``fastdata tune`` configures against torch's default loader.

- ``tune-images``: the ``fastdata tune`` demo pipeline — ImageNet-like JPEGs (shorter side
  300-500 px, ``fastdata.synthetic.make_images``) decoded into 224 px random-resized crops
  with flips, in batches of 32, by ``ImageStream`` — consumed by a training loop whose step
  is simulated by a 20 ms sleep (the time a GPU step leaves the CPU free). fastdata:
  ``fastdata.DataLoader(stream, batch_size=None, config=tuned)`` with the config that
  ``fastdata.tune`` chose, once per module, on a small budget. Baseline ``default-loader``:
  ``torch.utils.data.DataLoader(stream, batch_size=None)``, torch's defaults
  (``num_workers=0``). Items are images; a round is one pass over the stream, worker
  start-up included.

The pipeline is decode-bound, so the ratio is what choosing ``num_workers`` by measurement
(rather than keeping the default) buys on this machine; it grows with the core count. OpenCV
keeps its default thread pool in this module: the baseline decodes in the main process as a
default loader would.

- ``tune-stability``: ``fastdata tune`` run 5 times in a row on the same data, as a user runs
  it (the command line, its default 30 ms step, ``--budget-s`` 60, 40 in short mode): on the
  demo (``--demo --data DIR``: 256 ImageNet-like JPEGs, written by the first run and reused)
  and on a folder of 300 photo-like JPEGs in 10 classes (``synthetic.make_images``, seed 1:
  shorter side 300-500 px, ~0.55 bytes per pixel; their measured properties are in
  ``extra_info["data"]``). At least 4 of the 5 runs must choose the same setting (asserted:
  the answer's stability, not a speed). The record's time is the five runs'.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import torch

from fastdata import DataLoader, ImageStream
from fastdata.cli import main
from fastdata.config import LoaderConfig
from fastdata.synthetic import make_images
from fastdata.tune import SimulatedStep, tune

from conftest import demo_stream, describe_images, measure, scaled

STEP_MS = 20
BATCH = 32
IMAGES = scaled(1024, 4096)  # a multiple of every image count below


@pytest.fixture(scope="module")
def stream(tmp_path_factory: pytest.TempPathFactory) -> ImageStream:
    """The demo stream: distinct images listed several times over, for a realistic pass
    (``IMAGES`` images)."""
    root: Path = tmp_path_factory.mktemp("tune-images")
    return demo_stream(root, scaled(64, 256), samples=IMAGES, batch_size=BATCH)


@pytest.fixture(scope="module")
def tuned(stream: ImageStream) -> LoaderConfig:
    """What the tuner chooses for this machine (measured once, on a small budget)."""

    def factory(**settings: Any) -> DataLoader:
        return DataLoader(stream, batch_size=None, **settings)

    return tune(factory, step_ms=STEP_MS, budget_s=scaled(30, 60)).config


def one_pass(make_loader: Callable[[], Iterable[Any]]) -> int:
    """A training loop over one pass: every batch goes through the simulated step."""
    step, images = SimulatedStep(STEP_MS), 0
    for batch, labels in make_loader():
        step(batch)
        images += len(labels)
    return images


@pytest.mark.benchmark(group="tune-images")
def test_tune_images_fastdata(benchmark: Any, stream: ImageStream, tuned: LoaderConfig) -> None:
    benchmark.extra_info["config"] = tuned.to_dict()
    images = measure(
        benchmark,
        lambda: one_pass(lambda: DataLoader(stream, batch_size=None, config=tuned)),
        role="fastdata",
        items=IMAGES,
        rounds=3,
        unit="images",
    )
    assert images == IMAGES


@pytest.mark.benchmark(group="tune-images")
def test_tune_images_default_loader(benchmark: Any, stream: ImageStream) -> None:
    images = measure(
        benchmark,
        lambda: one_pass(lambda: torch.utils.data.DataLoader(stream, batch_size=None)),
        role="baseline:default-loader",
        items=IMAGES,
        rounds=3,
        unit="images",
    )
    assert images == IMAGES


RUNS = 5
STABILITY_BUDGET_S = scaled(40, 60)


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """300 photo-like JPEGs in 10 classes, as a user's folder of photos."""
    root: Path = tmp_path_factory.mktemp("photos")
    make_images(root, 300, classes=10, seed=1)
    return root


@pytest.mark.benchmark(group="tune-stability")
@pytest.mark.parametrize("data", ["demo", "photos"])
def test_five_runs_choose_the_same_setting(
    benchmark: Any, data: str, photos: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "demo" if data == "demo" else photos
    source = ["--demo", "--data", str(folder)] if data == "demo" else ["--data", str(folder)]
    choices: list[dict[str, Any]] = []

    def five_runs() -> None:
        for run in range(RUNS):
            out = tmp_path / f"run-{run}.json"
            argv = ["tune", *source, "--budget-s", str(STABILITY_BUDGET_S), "--quiet"]
            assert main([*argv, "--out", str(out)]) == 0
            choices.append(LoaderConfig.load(out).to_dict())

    benchmark.pedantic(five_runs, rounds=1, iterations=1)
    counts = Counter(json.dumps(c, sort_keys=True) for c in choices)
    agree = counts.most_common(1)[0][1]
    images = sorted(folder.rglob("*.jpg"))
    benchmark.extra_info.update(
        {
            "choices": choices,
            "agree": agree,
            "runs": RUNS,
            "budget_s": STABILITY_BUDGET_S,
            "data": {"name": data, **describe_images(p.read_bytes() for p in images)},
        }
    )
    assert agree >= RUNS - 1, f"{agree} of {RUNS} runs agree: {choices}"
