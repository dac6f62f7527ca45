"""Tests of fastdata.flatten_stats and fastdata.log_stats: a loader's nested stats as flat
scalar names, and as one log record."""

from __future__ import annotations

import logging

import numpy as np
import pytest

import fastdata as fd

NESTED = {
    "batches": 6,
    "wait_fraction": 0.25,
    "stages": {"decode": {"seconds": 1.5, "count": np.int64(48)}, "read": {"seconds": 0.5}},
    "per_worker": [0.1, 0.2],
    "note": "text",
    "flag": True,
    "missing": None,
}


def test_every_number_gets_a_slash_joined_name() -> None:
    assert fd.flatten_stats(NESTED) == {
        "data/batches": 6.0,
        "data/wait_fraction": 0.25,
        "data/stages/decode/seconds": 1.5,
        "data/stages/decode/count": 48.0,
        "data/stages/read/seconds": 0.5,
        "data/per_worker/0": 0.1,
        "data/per_worker/1": 0.2,
    }
    flat = fd.flatten_stats(NESTED, prefix="")
    assert "wait_fraction" in flat and "stages/decode/seconds" in flat
    assert all(type(v) is float for v in flat.values())
    with pytest.raises(TypeError, match=r"expected a mapping such as DataLoader.stats\(\)"):
        fd.flatten_stats([1, 2])  # type: ignore[arg-type]


def test_a_real_loaders_stats_flatten_to_its_keys() -> None:
    loader = fd.DataLoader(list(range(10)), batch_size=2, stats=True)
    for _ in loader:
        pass
    stats = loader.stats()
    flat = fd.flatten_stats(stats)
    assert flat["data/batches"] == stats["batches"] == 5
    assert flat["data/wait_fraction"] == stats["wait_fraction"]
    assert flat["data/stages/collate/count"] == 5


def test_log_stats_writes_one_record_with_the_numbers_attached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="fastdata"):
        flat = fd.log_stats(NESTED)
    (record,) = caplog.records
    assert record.name == "fastdata" and record.levelno == logging.INFO
    assert record.getMessage().startswith("loader stats: data/batches=6 data/wait_fraction=0.25")
    assert record.stats == flat == fd.flatten_stats(NESTED)  # type: ignore[attr-defined]
    caplog.clear()
    mine = logging.getLogger("train")
    with caplog.at_level(logging.WARNING, logger="train"):
        fd.log_stats(NESTED, mine, level=logging.DEBUG)  # below the level: nothing
        fd.log_stats(NESTED, mine, level=logging.WARNING, prefix="val")
    (record,) = caplog.records
    assert record.name == "train" and "val/stages/read/seconds=0.5" in record.getMessage()
