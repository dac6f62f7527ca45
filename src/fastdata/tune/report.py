"""TuneResult: every trial, the chosen config and why; its JSON file and its report table.

The JSON file keeps the chosen config under ``"config"``, like :meth:`LoaderConfig.save`, so
``fastdata.DataLoader(config="tuned.json")`` and :meth:`LoaderConfig.load` read either file.
Next to it the file records what the answer was measured on: the machine (CPU, cores,
memory, load, versions), the data, and the noise seen (the trials' intervals, the drift
between repeated measurements of a setting, the load average before and after).
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastdata._validate import constructor_keywords_checked
from fastdata.config import LoaderConfig
from fastdata.tune._trial import Trial
from fastdata.tune.words import describe, error_line, format_size, percent, thread_caveat

__all__ = ["RESULT_FORMAT", "TuneResult"]

RESULT_FORMAT = "fastdata.TuneResult"
"""The ``format`` tag of a saved result file."""
RESULT_VERSION = 3
_READABLE_VERSIONS = (1, 2, 3)  # 1 lacks data, machine, noise, max_memory_from; 2 lacks loader


@constructor_keywords_checked
@dataclass(frozen=True)
class TuneResult:
    """The outcome of :func:`fastdata.tune.tune`.

    Attributes:
        trials: every configuration measured, in order.
        chosen: the index of the chosen trial.
        config: the chosen settings, ready for ``fastdata.DataLoader(config=...)``.
        reason: why it was chosen and how the search ended, in words.
        stopped: ``"complete"``, ``"target"`` (reached early), ``"budget"`` or
            ``"interrupted"`` (Ctrl-C).
        target_utilization, budget_s, tolerance, max_memory: the settings of the search.
        step: the consumer's step in words: ``"simulated 30 ms step"``, ``"step
            train_step"`` (the caller's) or ``"no step"``.
        step_ms: the simulated step's length, or None (the caller's step, or none).
        device: where batches were sent, or None.
        cores: CPU cores this process could use.
        elapsed_s: seconds the search took.
        data: what was tuned on, in words (the CLI's data source, or the loader factory).
        machine: the machine's facts (:func:`fastdata.tune.machine.describe`).
        noise: what the run saw of the noise: ``median_ci`` (the median relative half-width
            of the trials' 95% intervals), ``drift`` (the largest relative distance by
            which the median of a setting's paired rounds lay outside its trial's interval;
            None when no setting was measured twice) and ``load_average`` (the machine's
            1-minute load at the start and the end).
        max_memory_from: where ``max_memory`` comes from, in words.
        loader: what the advice depends on of the loaders measured
            (:func:`fastdata.tune._factory.loader_facts`): ``worker_init_fn``, its name,
            where they have one.
    """

    trials: tuple[Trial, ...]
    chosen: int
    config: LoaderConfig
    reason: str
    stopped: str = "complete"
    target_utilization: float = 0.95
    budget_s: float = 60.0
    tolerance: float = 0.05
    max_memory: int | None = None
    step: str = "no step"
    step_ms: float | None = None
    device: str | None = None
    cores: int = 1
    elapsed_s: float = 0.0
    data: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    noise: dict[str, Any] = field(default_factory=dict)
    max_memory_from: str = ""
    loader: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    """Free-form notes a caller adds; saved as they are."""

    @property
    def chosen_trial(self) -> Trial:
        """The trial the config comes from."""
        return self.trials[self.chosen]

    def report(self) -> str:
        """The trials as a table, the chosen one marked ``>`` (``pair``: the paired rounds that
        end the search, numbered), then the config and the reason."""
        head = (
            f"fastdata tune: {len(self.trials)} trial(s) in {self.elapsed_s:.0f} s on "
            f"{self.cores} core(s); {self.step}; target busy {self.target_utilization:.0%}"
            + (f"; device {self.device}" if self.device else "")
        )
        facts = [f"data: {self.data}"] if self.data else []
        if self.max_memory_from:
            facts.append(f"memory ceiling: {self.max_memory_from}")
        if self.noise:
            facts.append(f"noise: {_noise_words(self.noise, self.cores)}")
        columns = [
            ("", "<"),
            ("workers", ">"),
            ("method", ">"),
            ("prefetch", ">"),
            ("pin", ">"),
            ("batches/s", ">"),
            ("CI±", ">"),
            ("busy", ">"),
            ("wait ms", ">"),
            ("step ms", ">"),
            ("GPU", ">"),
            ("peak RSS", ">"),
            ("start-up", ">"),
            ("pair", ">"),
        ]
        rows = [[name for name, _ in columns]]
        for i, t in enumerate(self.trials):
            p = t.params
            row = [
                ">" if i == self.chosen else " ",
                str(p["num_workers"]),
                _method(p),
                "-" if p.get("prefetch_factor") is None else str(p["prefetch_factor"]),
                "yes" if p.get("pin_memory") else "no",
            ]
            if not t.ok:
                why = (
                    f"refused: {t.refused}" if t.error is None else f"failed: {error_line(t.error)}"
                )
                rows.append([*row, why + ("" if t.pair is None else f" (pair {t.pair + 1})")])
                continue
            row += [
                _rate(t.throughput),
                "?" if math.isinf(t.rel_ci) else f"{t.rel_ci:.0%}",
                percent(t.busy),
                f"{t.wait_ms:.1f}",
                f"{t.step_ms:.1f}",
                "-" if t.gpu_util is None else percent(t.gpu_util),
                format_size(t.peak_rss),
                f"{t.startup_s:.2f} s",
                "" if t.pair is None else str(t.pair + 1),
            ]
            rows.append(row)
        full = [r for r in rows if len(r) == len(columns)]
        widths = [max(len(r[c]) for r in full) for c in range(len(columns))]
        lines = [head, *facts, ""]
        for row in rows:
            cells = [f"{v:{a}{w}}" for v, (_, a), w in zip(row, columns, widths, strict=False)]
            if len(row) != len(columns):  # failed or refused: its message runs on unpadded
                cells[-1] = row[-1]
            lines.append("  ".join(cells).rstrip())
        lines += ["", f"chosen: {describe(self.config.to_dict())}"]
        lines += textwrap.wrap(self.reason, 96)
        return "\n".join(lines)

    def how_to_apply(self, path: str | os.PathLike[str] | None = None) -> str:
        """How to use the answer: the keyword arguments for a ``DataLoader`` and, for the
        ``path`` the result was saved to, the ``config=`` line; for thread workers, what they
        mean for random numbers (:func:`~fastdata.tune.words.thread_caveat`)."""
        kwargs = ", ".join(
            f"{k}={v!r}" for k, v in self.config.to_dict().items()
            if v is not None and k != "persistent_workers"
        )  # fmt: skip
        lines = [
            "apply it:",
            f"  fastdata.DataLoader(dataset, ..., {kwargs})",
            "  (torch.utils.data.DataLoader takes the same keyword arguments)"
            if self.config.worker_method != "thread"
            else "  (thread workers need fastdata.DataLoader: torch's DataLoader has no "
            "worker_method)",
        ]
        if path is not None:
            lines.append(f"  fastdata.DataLoader(dataset, ..., config={os.fspath(path)!r})")
        if self.config.num_workers and self.config.worker_method == "thread":
            # before the lines to apply: the last line is the one users copy
            lines.insert(0, thread_caveat(self.loader.get("worker_init_fn")))
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data; :meth:`from_dict` reads it back."""
        return {
            "format": RESULT_FORMAT,
            "version": RESULT_VERSION,
            "config": self.config.to_dict(),
            "chosen": self.chosen,
            "reason": self.reason,
            "stopped": self.stopped,
            "target_utilization": self.target_utilization,
            "budget_s": self.budget_s,
            "tolerance": self.tolerance,
            "max_memory": self.max_memory,
            "step": self.step,
            "step_ms": self.step_ms,
            "device": self.device,
            "cores": self.cores,
            "elapsed_s": self.elapsed_s,
            "data": self.data,
            "machine": self.machine,
            "noise": self.noise,
            "max_memory_from": self.max_memory_from,
            "loader": self.loader,
            "extra": self.extra,
            "trials": [t.to_dict() for t in self.trials],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], /) -> TuneResult:
        """The result :meth:`to_dict` described.

        Raises:
            ValueError: not a saved TuneResult, or one of another version.
        """
        if data.get("format") != RESULT_FORMAT or data.get("version") not in _READABLE_VERSIONS:
            raise ValueError(
                f"format={data.get('format')!r} version={data.get('version')!r}: expected a "
                f"{RESULT_FORMAT} of version {' or '.join(map(str, _READABLE_VERSIONS))} "
                "(written by TuneResult.save)"
            )
        values = {k: v for k, v in data.items() if k not in ("format", "version")}
        values["config"] = LoaderConfig.from_dict(values["config"])
        values["trials"] = tuple(Trial.from_dict(t) for t in values["trials"])
        return cls(**values)

    def save(self, path: str | os.PathLike[str], /) -> Path:
        """Write the result as JSON to ``path`` (for :meth:`load` and ``DataLoader(config=)``)."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike[str], /) -> TuneResult:
        """The result :meth:`save` wrote to ``path``.

        Raises:
            ValueError: the file is not a saved TuneResult; the message names it.
        """
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{os.fspath(path)}: not a fastdata tune result: {exc}") from exc


def _noise_words(noise: Mapping[str, Any], cores: int) -> str:
    """The noise record in words, for the report's head."""
    parts = []
    if noise.get("median_ci") is not None:
        parts.append(f"trials' 95% intervals +-{noise['median_ci']:.0%} (median)")
    drift = noise.get("drift")
    parts.append(
        "no setting measured twice"
        if drift is None
        else f"a setting's paired rounds lay up to {drift:.0%} outside its trial's interval"
    )
    load = noise.get("load_average") or []
    if len(load) == 2 and None not in load:
        parts.append(f"load average {load[0]:.1f} -> {load[1]:.1f} on {cores} core(s)")
    return "; ".join(parts)


def _method(params: Mapping[str, Any]) -> str:
    """The worker method in the table: ``thread`` / ``process``, ``-`` without workers."""
    if not params["num_workers"]:
        return "-"
    return "thread" if params.get("worker_method") == "thread" else "process"


def _rate(value: float) -> str:
    return f"{value:.1f}" if value < 1000 else f"{value:,.0f}"
