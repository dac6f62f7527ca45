"""Tests of fastdata.tune._consumer: the simulated step sleeps, the transfer moves every tensor
of a nested batch as training moves it, and ``step=`` / ``step_ms=`` are checked and described."""

from __future__ import annotations

import time
from typing import Any

import pytest
import torch

import fastdata
from fastdata.tune._consumer import SimulatedStep, Transfer, consumer_step, describe_step


def test_simulated_step_sleeps_and_leaves_the_cpu_free() -> None:
    step = SimulatedStep(30)
    wall, cpu = time.perf_counter(), time.process_time()
    step(None)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    assert wall >= 0.030
    assert cpu < 0.010  # a sleep, not a spin: workers get the core
    with pytest.raises(ValueError, match=r"step_ms=-1: expected a number >= 0"):
        SimulatedStep(-1)
    with pytest.raises(TypeError, match=r"step_ms='30': expected a number >= 0, got str"):
        SimulatedStep("30")


def nested_batch() -> dict[str, Any]:
    """A batch of every container the walk knows, with tensors and other leaves at each depth."""
    from collections import OrderedDict, namedtuple

    pair = namedtuple("Pair", ["image", "label"])
    tokens = fastdata.Ragged.from_rows([[1, 2, 3], None, [4]])
    return {
        "pair": pair(torch.zeros(2), [torch.ones(1), "text"]),
        "meta": OrderedDict(tokens=tokens, inner={"mask": torch.ones(3, dtype=torch.bool)}),
        "n": 3,
    }


def test_the_transfer_moves_every_tensor_of_a_nested_batch() -> None:
    batch = nested_batch()
    synced = []
    move = Transfer(torch.device("meta"), lambda: synced.append(True))
    moved = move(batch)
    assert type(moved["pair"]) is type(batch["pair"])
    assert moved["pair"].image.device.type == "meta"
    assert moved["pair"].label[0].device.type == "meta" and moved["pair"].label[1] == "text"
    assert type(moved["meta"]) is type(batch["meta"])  # an OrderedDict stays one
    tokens = moved["meta"]["tokens"]
    assert isinstance(tokens, fastdata.Ragged)
    assert {t.device.type for t in (tokens.values, tokens.offsets, tokens.valid)} == {"meta"}
    assert moved["meta"]["inner"]["mask"].device.type == "meta"
    assert moved["meta"]["inner"]["mask"].dtype == torch.bool
    assert moved["n"] == 3
    assert synced == [True]  # waited once for the copies


def test_the_transfer_moves_what_to_device_moves() -> None:
    from fastdata._tree import map_tensors

    def layout(batch: Any) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        map_tensors(lambda t, path: found.append((path, t.device.type, t.dtype)) or t, batch)
        return found

    tuned = Transfer(torch.device("meta"), None)(nested_batch())
    [trained] = list(fastdata.to_device([nested_batch()], "meta"))
    assert layout(tuned) == layout(trained)
    assert {device for _, device, _ in layout(tuned)} == {"meta"}
    assert len(layout(tuned)) == 6  # image, label[0], Ragged's three tensors, mask


def test_the_consumer_is_a_step_a_simulated_step_or_nothing_and_says_which() -> None:
    def train_step(batch: Any) -> None:
        pass

    assert consumer_step(train_step, None) is train_step
    simulated = consumer_step(None, 20)
    assert isinstance(simulated, SimulatedStep) and simulated.ms == 20
    assert consumer_step(None, None) is None
    with pytest.raises(ValueError, match=r"step= \(your step\) or step_ms="):
        consumer_step(train_step, 20)
    with pytest.raises(TypeError, match=r"step=3: expected a callable taking a batch"):
        consumer_step(3, None)  # type: ignore[arg-type]
    assert describe_step(None, 20) == "simulated 20 ms step"
    assert describe_step(train_step, None).startswith("step test_the_consumer_is_a_step")
    assert describe_step(SimulatedStep(5), None) == "step SimulatedStep"  # no __qualname__
    assert describe_step(None, None) == "no step"
