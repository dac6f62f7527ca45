"""Plot pytest-benchmark JSON: fastdata against each baseline, items/s per scenario.

Usage::

    python bench/plot.py results.json [--out docs/img/benchmarks.png] [--markdown table.md]
                                      [--floors bench/floors.toml]

One PNG, the ratio chart: a bar per scenario and baseline (``group vs baseline``) from 1x to
fastdata's items/s over the baseline's (medians of the same run), with the floor CI enforces
and the design target of ``floors.toml`` marked on it. The rows, the ratios and the Markdown
table are ``bench/compare.py``'s; ``--markdown`` writes that table preceded by a line saying
when and where the run was made. Needs matplotlib (the ``plot`` extra); the Markdown table
alone does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from compare import Row, load_floors, load_rows, load_targets, markdown

FASTER_COLOR = "#1f77b4"
SLOWER_COLOR = "#9ecae1"
MISSED_COLOR = "#c0392b"
TARGET_COLOR = "#2ca02c"
RATIO_CAP = 200.0
"""Bars of larger ratios are cut here (a per-row reader 100,000x slower would squash the rest)."""


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


def plot(
    rows: list[Row],
    floors: dict[str, float],
    out: Path,
    *,
    targets: dict[str, float] | None = None,
    title: str = "",
) -> Path:
    """Write the ratio chart of ``rows`` to ``out`` (PNG) and return the path.

    One horizontal bar per scenario and baseline, from 1x (as fast as the baseline) to the
    measured ratio, on a log axis (ratios are multiplicative: 2x and 0.5x are as far from 1x);
    a black tick marks the floor CI enforces, a green diamond the design target. Bars past
    :data:`RATIO_CAP` are cut there and labelled with their value. A missed floor is red.
    """
    if not rows:
        raise ValueError("no fastdata/baseline pairs in the results: nothing to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    targets = targets or {}
    fig, ax = plt.subplots(figsize=(10, 1.3 + 0.34 * len(rows)), layout="constrained")
    ys = range(len(rows))[::-1]  # the first row at the top
    marks = [v for r in rows for v in (floors.get(r.key), targets.get(r.key)) if v]
    left = min([0.5, *(r.ratio / 1.5 for r in rows), *(m / 1.5 for m in marks)])
    for y, r in zip(ys, rows, strict=True):
        floor, target = floors.get(r.key), targets.get(r.key)
        missed = floor is not None and r.ratio < floor
        color = MISSED_COLOR if missed else FASTER_COLOR if r.ratio >= 1 else SLOWER_COLOR
        shown = min(r.ratio, RATIO_CAP)
        ax.barh(y, shown - 1, left=1, height=0.62, color=color)
        label = f"{r.ratio:,.0f}x" if r.ratio >= 100 else f"{r.ratio:.2f}x"
        ax.annotate(
            label + (f" (bar cut at {RATIO_CAP:g}x)" if r.ratio > RATIO_CAP else ""),
            (max(shown, 1), y),
            xytext=(4, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
            color=MISSED_COLOR if missed else "black",
            fontweight="bold" if missed else "normal",
        )
        if floor is not None:
            ax.plot([floor, floor], [y - 0.45, y + 0.45], color="black", linewidth=2.5)
        if target is not None:
            ax.plot(target, y, marker="D", color=TARGET_COLOR, markersize=6)
    ax.axvline(1, color="#888888", linewidth=1, linestyle="--", zorder=0)
    ax.set_xscale("log")
    ax.set_xlim(left, RATIO_CAP * 12)  # room for the labels
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200) if left <= t <= RATIO_CAP]
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.set_yticks(list(ys))
    ax.set_yticklabels([f"{r.group} vs {r.baseline}" for r in rows], fontsize=8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_xlabel(
        "fastdata's rate / the baseline's, same run (log scale; right of 1x: fastdata faster)"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.set_axisbelow(True)
    legend = [
        Patch(color=FASTER_COLOR, label="fastdata faster"),
        Patch(color=SLOWER_COLOR, label="fastdata slower, above its floor"),
        Patch(color=MISSED_COLOR, label="below its floor"),
        Line2D([], [], color="black", linewidth=2.5, label="floor (CI fails below)"),
        Line2D([], [], color=TARGET_COLOR, marker="D", linestyle="none", label="target"),
    ]
    fig.legend(handles=legend, loc="outside lower center", ncols=5, fontsize=8)
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
    floors, targets = load_floors(args.floors), load_targets(args.floors)
    run = describe_run(results)
    if args.markdown:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(f"Measured {run}.\n\n{markdown(rows, floors)}\n")
        print(f"wrote {args.markdown}")
    if not args.no_png:
        print(f"wrote {plot(rows, floors, args.out, targets=targets, title=run)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
