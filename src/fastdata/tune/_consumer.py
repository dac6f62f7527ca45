"""The consumer of a tuning's batches: the step it takes, and the transfer before it.

A trial times the consumer's *step* on each batch and its *wait* for the batch; with a device,
the wait includes moving the batch there (:class:`Transfer`), and on CUDA the step includes
waiting for the GPU (:func:`cuda_sync`). Without a step of the user's, a
:class:`SimulatedStep` stands in for one. :func:`fastdata.tune.tune` and
:func:`fastdata.tune.compare.compare` take the same ``step=`` / ``step_ms=`` arguments
(:func:`consumer_step`) and describe them alike (:func:`describe_step`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

__all__ = ["SimulatedStep", "Transfer", "consumer_step", "cuda_sync", "describe_step"]


class SimulatedStep:
    """A stand-in for a training step: occupies the consumer for ``ms`` milliseconds.

    It *sleeps* rather than spins. In GPU training the step's time is spent on the GPU while
    the Python thread mostly waits for it, so the CPU cores stay free for the loader's
    workers; a sleep reproduces exactly that. A busy-wait would burn a core for the whole
    step and, on a machine with few cores, starve the very workers being measured, so the
    tuner would under-rate every configuration with workers. If your step really is
    CPU-bound (CPU training), pass it as ``step=`` instead.
    """

    def __init__(self, ms: float) -> None:
        from fastdata._validate import check_number

        self.ms = check_number("step_ms", ms, minimum=0)

    def __call__(self, batch: Any) -> None:
        time.sleep(self.ms / 1000)

    def __repr__(self) -> str:
        return f"SimulatedStep({self.ms:g} ms)"


def consumer_step(
    step: Callable[[Any], Any] | None, step_ms: float | None
) -> Callable[[Any], Any] | None:
    """The consumer's work on each batch: ``step``, a :class:`SimulatedStep` of ``step_ms``,
    or None (no work: a pure loader benchmark).

    Raises:
        ValueError: both are given.
        TypeError: ``step`` is not callable.
    """
    if step is not None and step_ms is not None:
        raise ValueError("pass step= (your step) or step_ms= (a simulated one), not both")
    if step is not None and not callable(step):
        raise TypeError(f"step={step!r}: expected a callable taking a batch")
    return step if step_ms is None else SimulatedStep(step_ms)


def describe_step(step: Callable[[Any], Any] | None, step_ms: float | None) -> str:
    """The step in words, for the result file and the comparison's report."""
    if step_ms is not None:
        return f"simulated {step_ms:g} ms step"
    if step is not None:
        return f"step {getattr(step, '__qualname__', None) or type(step).__name__}"
    return "no step"


class Transfer:
    """Moves every tensor of a (nested) batch to ``device``, then waits for the copies (on
    CUDA), so the whole transfer counts as data wait and none of it leaks into the step.

    The batch is walked as :func:`fastdata.to_device` walks it (:func:`fastdata._tree.map_tensors`:
    mappings, sequences, named tuples and Ragged columns), so the tuner moves what training moves.
    """

    def __init__(self, device: Any, sync: Callable[[], None] | None) -> None:
        self.device, self.sync = device, sync

    def __call__(self, batch: Any) -> Any:
        from fastdata._tree import map_tensors

        moved = map_tensors(lambda t, _: t.to(self.device, non_blocking=True), batch)
        if self.sync is not None:
            self.sync()
        return moved


def cuda_sync(device: Any) -> Callable[[], None]:
    """Waits for the CUDA ``device`` to finish its work, so asynchronous GPU work is timed."""
    import torch

    return lambda: torch.cuda.synchronize(device)
