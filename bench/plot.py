"""Plot pytest-benchmark JSON: fastdata against each baseline, items/s per scenario.

Usage::

    python bench/plot.py results.json [--out docs/img/benchmarks.png] [--markdown table.md]
                                      [--floors bench/floors.toml]

One PNG: a pair of horizontal bars per scenario (``group / baseline``), fastdata's items/s
and the baseline's, from the median times of the same run, on a log scale (scenarios
differ by orders of magnitude), each pair annotated with the ratio and its floor. The rows,
the ratios and the Markdown table are ``bench/compare.py``'s; ``--markdown`` writes that
table preceded by a line saying when and where the run was made. Needs matplotlib (the
``plot`` extra); the Markdown table alone does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from compare import Row, load_floors, load_rows, markdown

FASTDATA_COLOR = "#1f77b4"
BASELINE_COLOR = "#b0b0b0"


def describe_run(results: dict[str, Any]) -> str:
    """When, where and in which mode the benchmarks ran, from the JSON's own metadata."""
    machine = results.get("machine_info", {})
    cpu = machine.get("cpu", {})
    modes = sorted(
        {b.get("extra_info", {}).get("mode") for b in results.get("benchmarks", [])} - {None}
    )
    parts = [
        str(results.get("datetime", "unknown date")).split(".")[0].replace("T", " "),
        " ".join(p for p in (machine.get("system"), machine.get("machine")) if p),
        f"{cpu['count']} CPUs" if cpu.get("count") else "",
        cpu.get("brand_raw", ""),
        f"Python {machine['python_version']}" if machine.get("python_version") else "",
        f"FASTDATA_BENCH={'/'.join(modes)}" if modes else "",
    ]
    return ", ".join(p for p in parts if p)


def plot(rows: list[Row], floors: dict[str, float], out: Path, *, title: str = "") -> Path:
    """Write the bar chart of ``rows`` to ``out`` (PNG) and return the path."""
    if not rows:
        raise ValueError("no fastdata/baseline pairs in the results: nothing to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    height = 0.38
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.62 * len(rows)), layout="constrained")
    positions = range(len(rows))[::-1]  # the first row at the top
    fast = [r.fastdata_items_s for r in rows]
    base = [r.baseline_items_s for r in rows]
    ax.barh([p + height / 2 for p in positions], fast, height, color=FASTDATA_COLOR)
    ax.barh([p - height / 2 for p in positions], base, height, color=BASELINE_COLOR)
    ax.set_xscale("log")
    ax.set_yticks(list(positions))
    ax.set_yticklabels([f"{r.group}\nvs {r.baseline} ({r.unit}/s)" for r in rows], fontsize=8)
    right = max(fast + base)
    ax.set_xlim(min(fast + base) / 3, right * 40)  # room for the annotations
    for p, r in zip(positions, rows, strict=True):
        floor = floors.get(r.key)
        ratio = f"{r.ratio:,.0f}x" if r.ratio >= 100 else f"{r.ratio:.2f}x"
        note = ratio + ("" if floor is None else f"  (floor {floor:g}x)")
        missed = floor is not None and r.ratio < floor
        ax.annotate(
            note,
            (max(r.fastdata_items_s, r.baseline_items_s), p),
            xytext=(6, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color="#c0392b" if missed else "black",
            fontweight="bold" if missed else "normal",
        )
    ax.set_xlabel("items per second (median round, log scale; higher is better)")
    fig.legend(["fastdata", "baseline"], loc="outside lower center", ncols=2, fontsize=8)
    ax.grid(axis="x", which="major", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=9)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="pytest-benchmark --benchmark-json output")
    parser.add_argument("--out", type=Path, default=Path("bench/results/benchmarks.png"))
    parser.add_argument("--markdown", type=Path, help="also write the Markdown table here")
    parser.add_argument("--floors", type=Path, default=Path(__file__).with_name("floors.toml"))
    parser.add_argument("--no-png", action="store_true", help="only the Markdown table")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    rows = load_rows(results)
    floors = load_floors(args.floors)
    run = describe_run(results)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(f"Measured {run}.\n\n{markdown(rows, floors)}\n")
        print(f"wrote {args.markdown}")
    if not args.no_png:
        print(f"wrote {plot(rows, floors, args.out, title=run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
