"""bench/compare.py and bench/plot.py on a small pytest-benchmark JSON built here."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


@pytest.fixture(scope="module")
def compare() -> ModuleType:
    sys.path.insert(0, str(BENCH))  # bench/ is a folder of scripts, not a package
    try:
        return importlib.import_module("compare")
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def plot(compare: ModuleType) -> ModuleType:
    sys.path.insert(0, str(BENCH))
    try:
        return importlib.import_module("plot")
    finally:
        sys.path.remove(str(BENCH))


def bench(group: str | None, name: str, median: float, **info: Any) -> dict[str, Any]:
    """One benchmark record as pytest-benchmark writes it (only the fields the tools read)."""
    return {
        "group": group,
        "name": name,
        "stats": {"median": median, "mean": median * 1.1, "min": median * 0.9},
        "extra_info": info,
    }


RESULTS: dict[str, Any] = {
    "datetime": "2026-12-02T13:00:00.123456+00:00",
    "machine_info": {
        "system": "Linux",
        "machine": "x86_64",
        "python_version": "3.11.7",
        "cpu": {"count": 2, "brand_raw": "Test CPU"},
    },
    "benchmarks": [
        # 1000 items in 0.5 s = 2000/s against 1000 in 2 s = 500/s and 1000 in 0.25 s = 4000/s
        bench("scan", "test_fast", 0.5, role="fastdata", items=1000, unit="rows", mode="short"),
        bench("scan", "test_slow", 2.0, role="baseline:slow", items=1000, unit="rows"),
        bench("scan", "test_quick", 0.25, role="baseline:quick", items=1000, unit="rows"),
        # items differ between the two sides: rates, not times, are compared
        bench("decode", "test_fd", 1.0, role="fastdata", items=300, unit="images"),
        bench("decode", "test_pil", 1.0, role="baseline:pil", items=100, unit="images"),
        # no group: the name is the group
        bench(None, "test_lonely", 1.0, role="fastdata", items=10),
        # both sides timed alternately in one test: its own medians, not the round time
        bench(
            "overhead",
            "test_pair",
            9.0,
            role="fastdata",
            items=100,
            median_s=0.5,
            paired={"baseline:torch": 0.4},
        ),
        # a group without a fastdata side, and a benchmark without a role: both ignored
        bench("orphan", "test_orphan", 1.0, role="baseline:x", items=10),
        bench("scan", "test_unrelated", 1.0),
    ],
}


def test_pairs_every_baseline_with_the_fastdata_result_of_its_group(compare) -> None:
    rows = compare.load_rows(RESULTS)
    assert [(r.group, r.baseline) for r in rows] == [
        ("decode", "pil"),
        ("overhead", "torch"),
        ("scan", "quick"),
        ("scan", "slow"),
    ]
    by_key = {r.key: r for r in rows}
    slow = by_key["scan/slow"]
    assert slow.fastdata_items_s == pytest.approx(2000)
    assert slow.baseline_items_s == pytest.approx(500)
    assert slow.ratio == pytest.approx(4.0)
    assert slow.unit == "rows"
    assert by_key["scan/quick"].ratio == pytest.approx(0.5)
    assert by_key["decode/pil"].ratio == pytest.approx(3.0)
    paired = by_key["overhead/torch"]
    assert (paired.fastdata_items_s, paired.baseline_items_s) == (200, 250)
    assert paired.ratio == pytest.approx(0.8)


def test_floors_missed_and_absent_are_reported(compare) -> None:
    rows = compare.load_rows(RESULTS)
    floors = {"scan/slow": 3.0, "scan/quick": 0.8, "images/torchvision": 1.5}
    problems = compare.check_floors(rows, floors)
    assert problems == [
        "scan/quick: ratio 0.50x is below the floor 0.8x",
        "images/torchvision: no result (the scenario did not run)",
    ]
    assert compare.check_floors(rows, {"scan/slow": 4.0, "decode/pil": 1}) == []


def test_markdown_table(compare) -> None:
    table = compare.markdown(compare.load_rows(RESULTS), {"scan/slow": 3.0})
    lines = table.splitlines()
    assert lines[0] == "| scenario | baseline | fastdata | baseline rate | ratio | floor |"
    assert lines[1] == "|---|---|---|---|---|---|"
    assert lines[2] == "| decode | pil | 300 images/s | 100 images/s | 3.00x |  |"
    assert lines[3] == "| overhead | torch | 200 items/s | 250 items/s | 0.80x |  |"
    assert lines[5] == "| scan | slow | 2,000 rows/s | 500 rows/s | 4.00x | >= 3x |"
    assert len(lines) == 6


def test_compare_cli_exit_status_and_markdown_file(compare, tmp_path: Path, capsys) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    ok, missed = tmp_path / "ok.toml", tmp_path / "missed.toml"
    ok.write_text('[floors]\n"scan/slow" = 3.5\n')
    missed.write_text('[floors]\n"scan/slow" = 5\n"absent/x" = 1\n')
    out = tmp_path / "table.md"
    assert compare.main([str(results), "--floors", str(ok), "--markdown", str(out)]) == 0
    assert "| scan | slow |" in capsys.readouterr().out
    expected = compare.markdown(compare.load_rows(RESULTS), {"scan/slow": 3.5})
    assert out.read_text() == expected + "\n"
    assert compare.main([str(results), "--floors", str(missed)]) == 1
    err = capsys.readouterr().err
    assert "FLOOR MISSED: scan/slow: ratio 4.00x is below the floor 5x" in err
    assert "FLOOR MISSED: absent/x: no result" in err


def test_describe_run_names_date_machine_and_mode(plot) -> None:
    assert plot.describe_run(RESULTS) == (
        "2026-12-02 13:00:00, Linux x86_64, 2 CPUs, Test CPU, Python 3.11.7, FASTDATA_BENCH=short"
    )
    assert plot.describe_run({"benchmarks": []}) == "unknown date"


def test_plot_writes_a_png_and_the_same_markdown_table(plot, compare, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    floors = tmp_path / "floors.toml"
    floors.write_text('[floors]\n"scan/quick" = 0.8\n[targets]\n"scan/slow" = 2\n')
    png, table = tmp_path / "img" / "bench.png", tmp_path / "table.md"
    argv = [str(results), "--out", str(png), "--markdown", str(table), "--floors", str(floors)]
    assert plot.main(argv) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 5_000
    expected = compare.markdown(compare.load_rows(RESULTS), {"scan/quick": 0.8})
    assert table.read_text() == f"Measured {plot.describe_run(RESULTS)}.\n\n{expected}\n"


def test_plot_markdown_only_and_nothing_to_plot(plot, tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    results.write_text(json.dumps(RESULTS))
    png = tmp_path / "never.png"
    argv = [str(results), "--no-png", "--out", str(png), "--markdown", str(tmp_path / "t.md")]
    assert plot.main(argv) == 0
    assert not png.exists()
    with pytest.raises(ValueError, match="nothing to plot"):
        plot.plot([], {}, png)


def test_a_huge_ratio_is_cut_and_the_chart_still_drawn(plot, compare, tmp_path: Path) -> None:
    rows = [compare.Row("rows", "per-row", 1e7, 80.0, "items"), *compare.load_rows(RESULTS)]
    png = plot.plot(rows, {"rows/per-row": 100}, tmp_path / "c.png", targets={"scan/slow": 2})
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert rows[0].ratio > plot.RATIO_CAP


def scenario_table() -> list[tuple[str, list[str], list[str]]]:
    """docs/benchmarks.md's table of scenarios: (group, baselines, cells) per row."""
    page = (BENCH.parent / "docs" / "benchmarks.md").read_text().splitlines()
    start = next(i for i, line in enumerate(page) if line.startswith("| scenario / baseline |"))
    rows = []
    for line in page[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        group, baselines = cells[0].split(" / ")
        rows.append((group, baselines.split(", "), cells))
    return rows


def test_the_benchmarks_page_quotes_the_floors_ci_enforces(compare) -> None:
    """docs/benchmarks.md's table of scenarios shows the floors of bench/floors.toml."""
    floors = compare.load_floors(BENCH / "floors.toml")
    quoted = {}
    for group, names, cells in scenario_table():
        for name, floor in zip(names, cells[-1].split("; "), strict=True):
            quoted[f"{group}/{name}"] = None if floor == "none" else float(floor.rstrip("x"))
    assert {k: v for k, v in quoted.items() if v is not None} == floors


def test_the_targets_charted_are_those_the_benchmarks_page_states(compare) -> None:
    """bench/floors.toml's [targets] are the page's ">= Nx" targets of rate ratios."""
    stated = {}
    for group, names, cells in scenario_table():
        goals = cells[-2].split("; ")
        for name, goal in zip(names, goals if len(goals) == len(names) else goals * len(names),
                              strict=True):  # fmt: skip
            if goal.startswith(">= ") and "less" not in goal:
                stated[f"{group}/{name}"] = float(goal.removeprefix(">= ").split("x")[0])
    assert compare.load_targets(BENCH / "floors.toml") == stated
