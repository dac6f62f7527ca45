"""Trial: what one measured loader configuration did, the record every part of the tuner reads.

:func:`~fastdata.tune.measure.measure` makes one per trial; the search, the decision rule, the
report, the progress lines and the comparison read it; the result file keeps it as plain data
(:meth:`Trial.to_dict`). It imports nothing of the tuner, so it can sit beneath all of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["Trial"]


@dataclass(frozen=True)
class Trial:
    """What one measured configuration did.

    Attributes:
        params: the loader keyword arguments measured (num_workers, prefetch_factor,
            pin_memory).
        throughput: steady-state batches per second.
        busy: the consumer's busy fraction, step / (step + data wait), in [0, 1].
        startup_s: seconds from building the loader to its first batch.
        peak_rss: peak resident memory of the main process plus workers, in bytes.
        gpu_util: mean NVML GPU utilization in [0, 1] over the steady state, or None.
        wait_ms, step_ms: mean data wait and step per steady-state batch, in ms.
        batches: steady-state batches measured.
        rel_ci: half-width of the 95% confidence interval of the mean batch time, relative
            to it (``inf`` with too few batches to tell).
        seconds: wall time the trial took, start-up included.
        error: why the loader failed, for a trial that did not complete; None otherwise.
        refused: why the trial was refused for memory (stopped over the ceiling, or not
            started because it would have gone over); None otherwise.
        pair: for a paired round, the number of the pair of back-to-back rounds it belongs
            to (see :mod:`fastdata.tune.search`); None for the search's trials.
        repeats: whether the loader's first batches showed a dataset that repeats its items
            once per worker (see :mod:`fastdata.tune._replicas`): its batches are not all
            distinct data, so its rate overstates what it delivers.
    """

    params: dict[str, Any]
    throughput: float = 0.0
    busy: float = 0.0
    startup_s: float = 0.0
    peak_rss: int = 0
    gpu_util: float | None = None
    wait_ms: float = 0.0
    step_ms: float = 0.0
    batches: int = 0
    rel_ci: float = math.inf
    seconds: float = 0.0
    error: str | None = None
    refused: str | None = None
    pair: int | None = None
    repeats: bool = False

    @property
    def ok(self) -> bool:
        """Whether the trial completed within the memory ceiling (no ``error``, not
        ``refused``)."""
        return self.error is None and self.refused is None

    @property
    def utilization(self) -> float:
        """What the target is checked against: the GPU's utilization where NVML measured it,
        else the consumer's busy fraction."""
        return self.busy if self.gpu_util is None else self.gpu_util

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% confidence interval of ``throughput`` in batches/s.

        ``rel_ci`` bounds the mean batch time, t (1 +- rel_ci); throughput is 1 / t, so its
        interval is ``throughput / (1 + rel_ci) .. throughput / (1 - rel_ci)`` (unbounded above
        once ``rel_ci`` reaches 1). A trial stopped before it had an interval (``rel_ci`` of
        ``inf``) has only its point estimate: ``(throughput, throughput)``.
        """
        if math.isinf(self.rel_ci):
            return (self.throughput, self.throughput)
        high = self.throughput / (1 - self.rel_ci) if self.rel_ci < 1 else math.inf
        return (self.throughput / (1 + self.rel_ci), high)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able data (``rel_ci`` of ``inf`` becomes None; ``repeats`` is left out
        when False, and :meth:`from_dict` reads its absence as False)."""
        data = asdict(self)
        data["rel_ci"] = None if math.isinf(self.rel_ci) else self.rel_ci
        if not self.repeats:  # written only when set: readers before it read every other file
            del data["repeats"]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], /) -> Trial:
        """The trial :meth:`to_dict` described."""
        values = dict(data)
        if values.get("rel_ci") is None:
            values["rel_ci"] = math.inf
        return cls(**values)
