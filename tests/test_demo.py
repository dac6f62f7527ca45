"""Tests of fastdata.demo: run_demo writes (or reuses) the synthetic dataset, streams it for a
few epochs and reports what it measured, exactly-once delivery included."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastdata.demo import INTEGER_MINIMA, DemoResult, run_demo


def test_run_demo_reports_what_it_streamed(tmp_path: Path) -> None:
    result = run_demo(rows=2_000, batch_size=300, epochs=2, data=tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == [
        f"part-{i:05d}.parquet" for i in range(4)
    ]
    assert (result.data, result.rows, result.batch_size) == (str(tmp_path), 2_000, 300)
    assert (result.num_workers, result.epochs, result.exactly_once) == (0, 2, True)
    assert result.first_batch_s > 0 and result.rows_per_s > 0


def test_run_demo_with_workers_sees_each_row_once(tmp_path: Path) -> None:
    result = run_demo(rows=1_000, batch_size=128, num_workers=2, epochs=1, data=tmp_path)
    assert (result.rows, result.num_workers, result.exactly_once) == (1_000, 2, True)


def test_run_demo_reuses_a_folder_that_holds_parquet(tmp_path: Path) -> None:
    run_demo(rows=700, batch_size=100, epochs=1, data=tmp_path)
    written = {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.parquet")}
    again = run_demo(rows=50, batch_size=100, epochs=1, data=tmp_path)
    assert again.rows == 700  # the folder's rows, not the asked-for 50
    assert {p: p.stat().st_mtime_ns for p in tmp_path.glob("*.parquet")} == written


def test_run_demo_without_a_folder_uses_a_temporary_one() -> None:
    result = run_demo(rows=500, batch_size=250, epochs=1)
    assert (result.data, result.rows, result.exactly_once) == ("a temporary folder", 500, True)


def test_run_demo_notices_rows_that_come_twice(tmp_path: Path) -> None:
    ids = [0, 1, 1, 2, 4, 5]  # row 1 twice, row 3 never
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "label": pa.array([0] * len(ids), pa.int32()),
            "x": pa.array([0.5] * len(ids), pa.float32()),
        }
    )
    pq.write_table(table, tmp_path / "dup.parquet")
    result = run_demo(batch_size=4, epochs=1, data=tmp_path)
    assert (result.rows, result.exactly_once) == (6, False)
    assert "every row exactly once per epoch: NO" in result.report()


def test_run_demo_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match=r"rows='10': expected an integer >= 1, got str"):
        run_demo(rows="10")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"epochs=0: expected an integer >= 1"):
        run_demo(epochs=0)


@pytest.mark.parametrize("name", sorted(INTEGER_MINIMA))
def test_each_integer_argument_has_its_minimum(name: str) -> None:
    below = INTEGER_MINIMA[name] - 1
    with pytest.raises(ValueError, match=rf"{name}={below}: expected an integer >= "):
        run_demo(**{name: below})  # type: ignore[arg-type]


def test_the_report_says_what_was_measured() -> None:
    result = DemoResult(
        data="/data/demo",
        rows=1_234_567,
        batch_size=4096,
        num_workers=3,
        epochs=2,
        first_batch_s=0.01234,
        rows_per_s=2_500_000.4,
        exactly_once=True,
    )
    assert result.report().splitlines() == [
        "fastdata demo: 1,234,567 rows from /data/demo",
        "  batch_size=4096 num_workers=3 epochs=2",
        "  time to first batch: 12.3 ms",
        "  throughput: 2,500,000 rows/s (median over epochs)",
        "  every row exactly once per epoch: yes",
    ]
    failed = dataclasses.replace(result, exactly_once=False).report()
    assert failed.splitlines()[-1] == "  every row exactly once per epoch: NO"
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.rows = 0  # type: ignore[misc]
