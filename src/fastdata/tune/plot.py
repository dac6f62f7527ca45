"""The picture of a tuning run: every trial's throughput (with its 95% interval) and the
consumer's busy fraction (against the target), one panel each, every trial labelled with its
settings. Needs matplotlib (the ``plot`` extra)."""

from __future__ import annotations

import os
from pathlib import Path

from fastdata.tune.report import TuneResult
from fastdata.tune.space import cost

__all__ = ["plot"]

CHOSEN = "#d62728"
OTHER = "#1f77b4"


def plot(result: TuneResult, path: str | os.PathLike[str], /) -> Path:
    """Draw ``result`` to ``path`` (a PNG) and return the path: throughput, and what the target
    is checked against (the consumer's busy fraction, or NVML's GPU utilization).

    The search's trials are ordered from the cheapest setting to the costliest (workers, then
    prefetch_factor, then pin_memory), one bar each; the paired rounds are black dots spread
    across their settings' bars; failed and refused trials are left out. The chosen one is red.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: no trial completed.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    chosen = result.chosen_trial
    searched = (t for t in result.trials if t.ok and t.pair is None)
    trials = sorted(searched, key=lambda t: cost(t.params))
    column = {cost(t.params): i for i, t in enumerate(trials)}
    pairs = [t for t in result.trials if t.ok and t.pair is not None and cost(t.params) in column]
    if not trials:
        raise ValueError("no completed trial to plot")
    x = range(len(trials))
    colors = [CHOSEN if t is chosen else OTHER for t in trials]
    fig, (rate, busy) = plt.subplots(
        2, 1, sharex=True, figsize=(max(6.0, 0.9 * len(trials) + 2), 6.2), layout="constrained"
    )
    low = [t.throughput - t.interval[0] for t in trials]
    high = [min(t.interval[1], 2 * t.throughput) - t.throughput for t in trials]
    rate.bar(x, [t.throughput for t in trials], color=colors, width=0.6)
    rate.errorbar(x, [t.throughput for t in trials], yerr=[low, high], fmt="none",
                  ecolor="black", capsize=4, label="95% interval")  # fmt: skip
    if pairs:
        rate.scatter(_spread([column[cost(t.params)] for t in pairs]),
                     [t.throughput for t in pairs], color="black", marker="o", s=14, zorder=3,
                     label="paired rounds (back to back)")  # fmt: skip
    rate.set_ylabel("throughput\n(batches/s, steady state)")
    over = [i for i, t in enumerate(trials) if t.params["num_workers"] > result.cores]
    for axis in (rate, busy) if over else ():
        axis.axvspan(over[0] - 0.5, len(trials) - 0.5, color="#e8e8e8", zorder=0)
    handles = [
        Patch(color=CHOSEN, label="chosen"),
        Patch(color=OTHER, label="other trials"),
        *rate.get_legend_handles_labels()[0],
    ]
    if over:
        handles.append(Patch(color="#e8e8e8", label=f"more workers than the {result.cores} cores"))
    rate.legend(handles=handles, loc="upper left", fontsize=8, ncols=3)
    tops = [t.interval[1] if t.interval[1] < 2 * t.throughput else t.throughput for t in trials]
    rate.set_ylim(0, max(tops + [t.throughput for t in pairs]) * 1.3)
    busy.bar(x, [100 * t.utilization for t in trials], color=colors, width=0.6)
    busy.axhline(100 * result.target_utilization, color="black", linestyle="--", linewidth=1,
                 label=f"target: busy {result.target_utilization:.0%}")  # fmt: skip
    busy.set_ylim(0, 112)
    nvml = any(t.gpu_util is not None for t in trials)
    busy.set_ylabel("GPU utilization\n(NVML, %)" if nvml else "consumer busy\n(% of the time)")
    busy.legend(loc="upper left", fontsize=8)
    busy.set_xticks(list(x), [_label(t.params) for t in trials], fontsize=8)
    busy.set_xlabel("trial settings, cheapest first")
    busy.set_xlim(-0.5, len(trials) - 0.5)
    for axis in (rate, busy):
        axis.grid(axis="y", alpha=0.3)
        axis.set_axisbelow(True)
    step = result.step + (f", device {result.device}" if result.device else "")
    rate.set_title(
        f"fastdata tune: {len(result.trials)} trials on {result.cores} core(s), {step}\n"
        f"chosen: {_label(chosen.params).replace(chr(10), ', ')}",
        fontsize=10,
    )
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _spread(columns: list[int]) -> list[float]:
    """An x position for each round, in measured order, spread evenly across its bar."""
    count = {c: columns.count(c) for c in set(columns)}
    seen: dict[int, int] = {}
    xs = []
    for c in columns:
        k = seen[c] = seen.get(c, -1) + 1
        xs.append(c - 0.25 + 0.5 * (k + 0.5) / count[c])
    return xs


def _label(params: dict[str, object]) -> str:
    prefetch = params.get("prefetch_factor")
    return "\n".join(
        [
            f"workers {params['num_workers']}"
            + (" (threads)" if params.get("worker_method") == "thread" else ""),
            f"prefetch {'-' if prefetch is None else prefetch}",
            f"pin {'on' if params.get('pin_memory') else 'off'}",
        ]
    )
