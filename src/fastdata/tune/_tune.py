"""The tuning itself: :func:`tune` measures candidate loaders and chooses their settings.

It checks the arguments, turns what it was given into a factory of loaders
(:mod:`fastdata.tune._factory`), builds the search space (:mod:`.space`), the consumer
(:mod:`fastdata.tune._consumer`), the GPU and memory probes, then lets the search
(:mod:`.search`) measure (:mod:`.measure`) and decide (:mod:`.decide`); the answer is a
:class:`~fastdata.tune.report.TuneResult` with the machine and the noise it was measured with.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from statistics import median
from typing import Any

from fastdata.config import LoaderConfig
from fastdata.tune import machine
from fastdata.tune._consumer import Transfer, consumer_step, cuda_sync, describe_step
from fastdata.tune._factory import as_factory, checked, describe_data, worker_methods
from fastdata.tune._memory import MemoryGuard
from fastdata.tune._nvml import nvml_for_device
from fastdata.tune._replicas import (
    NONE_LEFT,
    REPEATS,
    TUNE_RATES,
    RepeatedItemsWarning,
    repeats_advice,
)
from fastdata.tune._run import TuneError
from fastdata.tune._trial import Trial
from fastdata.tune.measure import measure
from fastdata.tune.report import TuneResult
from fastdata.tune.search import search
from fastdata.tune.space import PARAMS, SearchSpace

__all__ = ["tune"]


def tune(
    loader_factory: Callable[..., Iterable[Any]] | Any,
    /,
    *,
    step: Callable[[Any], Any] | None = None,
    step_ms: float | None = None,
    budget_s: float = 60,
    target_utilization: float = 0.95,
    max_memory: int | str | None = None,
    search_space: Mapping[str, Iterable[Any]] | None = None,
    device: Any = None,
    loader_kwargs: Mapping[str, Any] | None = None,
    tolerance: float = 0.05,
    on_trial: Callable[[Trial], None] | None = None,
    data: str | None = None,
) -> TuneResult:
    """Measure candidate loaders and choose the cheapest that keeps the consumer busy.

    Args:
        loader_factory: ``loader_factory(num_workers=..., prefetch_factor=...,
            pin_memory=...)`` returns a ``torch.utils.data.DataLoader`` (typically a
            ``fastdata.DataLoader``) built with them; ``prefetch_factor`` is None when
            ``num_workers`` is 0.
            A factory with a ``worker_method`` parameter is also passed
            ``worker_method="thread"`` or ``"multiprocessing"`` and both are searched;
            one without it is searched with process workers only (a ``**kwargs`` factory
            gets ``worker_method`` when ``search_space`` names it). Or a dataset: loaders
            are then ``fastdata.DataLoader(dataset, **loader_kwargs, **settings)``, threads
            and processes searched.
        step: the consumer's work on one batch, e.g. a training step. On a CUDA ``device``
            the tuner synchronizes after it, so the GPU time counts as step time.
        step_ms: instead of ``step``, a :class:`SimulatedStep` of this many milliseconds.
            With neither, the consumer does nothing and the tuner maximizes raw throughput
            (the busy fraction is then ~0 and the target is never reached).
        budget_s: seconds for all measurements together.
        target_utilization: the consumer's utilization at which screening stops (costlier
            settings cannot feed it more): its busy fraction, step / (step + data wait), or
            on CUDA the GPU utilization NVML measures where ``nvidia-ml-py`` is installed.
        max_memory: a ceiling on the summed RSS of the main process plus workers, in bytes,
            as a string like ``"8GiB"``, or as a share of the available memory like
            ``"50%"``; default: what this process uses plus 80% of the memory available at
            the start. A trial that would pass it is not started, one that passes it (or
            leaves the machine under 5% of its memory available) is stopped, and either is
            reported as refused for memory.
        search_space: values to try per setting, e.g. ``{"num_workers": [0, 2, 4, 8]}``;
            defaults: ``num_workers`` 0 .. 2 x cores, ``worker_method`` ``"thread"`` and
            ``"multiprocessing"`` (see ``loader_factory``), ``prefetch_factor`` 2 .. 8
            (torch's default and up; ask for 1 here),
            ``pin_memory`` both when ``device`` is an accelerator, else False only.
        device: where the consumer moves each batch (e.g. ``"cuda"``); the transfer counts as
            data wait (the tuner waits for the copy). On CUDA with ``nvidia-ml-py``
            installed, GPU utilization is sampled during each trial's steady state.
        loader_kwargs: with a dataset, the other DataLoader arguments (``batch_size``, ...).
        tolerance: a cheaper setting whose paired comparison with the fastest puts it
            within this fraction of it counts as equally good (see :mod:`.decide`).
        on_trial: called with each :class:`Trial` as it completes (for progress output).
        data: what the loaders read, in words, for the result file (default: the dataset's
            or the factory's name).

    Returns:
        Every trial, the chosen :class:`LoaderConfig`, the reason, and the machine, data and
        noise the answer was measured with. The choice is the cheapest setting (fewest
        workers, then threads before processes, then smallest prefetch_factor, then
        pin_memory off) that a paired
        comparison with the fastest setting measured cannot tell apart from it within
        ``tolerance`` (:mod:`.decide`). Ctrl-C during the search returns the best so far
        (``result.stopped == "interrupted"``).

    Raises:
        ValueError, TypeError: invalid arguments (the message lists valid values).
        RuntimeError: ``device`` names an accelerator this machine does not have.
        TuneError: the loader failed on the first configuration measured, no setting
            fits in the memory ceiling, or the factory returned something other than a
            torch DataLoader, or one without the settings it was passed, or every setting
            searched has 2 or more workers and its dataset repeats its items once per worker
            (the message says so and what to do; :class:`~fastdata.RepeatedItemsWarning` is
            also raised).
    """
    import torch

    from fastdata._validate import check_device, check_number

    consumer = consumer_step(step, step_ms)
    check_number("budget_s", budget_s, minimum=0, exclusive_minimum=True)
    check_number("target_utilization", target_utilization, minimum=0, maximum=1,
                 exclusive_minimum=True)  # fmt: skip
    check_number("tolerance", tolerance, minimum=0, maximum=0.99)
    memory_limit, memory_from = machine.ceiling(max_memory)
    factory = as_factory(loader_factory, loader_kwargs, torch)
    dev = check_device("device", device)
    cores = machine.usable_cores()
    given, factory = worker_methods(loader_factory, factory, search_space, torch)
    seen: dict[str, Any] = {}  # of the loaders measured, for the advice (loader_facts)
    factory = checked(factory, loader_factory, torch, seen)
    space = SearchSpace.build(given, cores=cores, device_used=dev is not None and dev.type != "cpu")
    sync = cuda_sync(dev) if dev is not None and dev.type == "cuda" else None
    transfer = None if dev is None else Transfer(dev, sync)
    gpu = nvml_for_device(dev)
    guard = MemoryGuard(memory_limit, floor=machine.floor())
    facts = machine.describe(cores, dev)

    def evaluate(params: dict[str, Any], time_limit: float) -> Trial:
        per_round = max(params["num_workers"], 1)
        trial = measure(
            factory,
            params,
            step=consumer,
            time_limit=time_limit,
            warmup=per_round,
            block=per_round,
            transfer=transfer,
            sync=sync,
            gpu=gpu,
            guard=guard,
            stop_on_repeats=True,
        )
        # its batches repeat per worker: a rate of repeated batches is no evidence for workers
        if trial.repeats and trial.ok:
            repeated.append(trial)
            return replace(trial, error=REPEATS)
        return trial

    repeated: list[Trial] = []
    start = time.monotonic()
    try:
        outcome = search(
            evaluate,
            space,
            budget_s=budget_s,
            target=target_utilization,
            tolerance=tolerance,
            max_memory=memory_limit,
            cores=cores,
            on_trial=on_trial,
        )
    except TuneError as exc:
        if not repeated:
            raise
        # every setting left had 2+ workers: the error's "see the failed trials" is no help
        advice = repeats_advice(NONE_LEFT)
        warnings.warn(advice, RepeatedItemsWarning, stacklevel=2)
        generic = str(exc).startswith("no setting completed")  # "(see the failed trials)"
        raise TuneError(f"{'no setting completed' if generic else exc}: {advice}") from exc
    finally:
        if gpu is not None:
            gpu.close()
    if any(t.repeats for t in outcome.trials):
        warnings.warn(repeats_advice(TUNE_RATES), RepeatedItemsWarning, stacklevel=2)
    chosen = outcome.trials[outcome.chosen].params
    intervals = [t.rel_ci for t in outcome.trials if t.ok and t.pair is None]
    noise = {
        "median_ci": median(intervals) if intervals and not math.isinf(median(intervals)) else None,
        "drift": outcome.drift,
        "load_average": [facts["load_average"], machine.load_average()],
    }
    return TuneResult(
        trials=tuple(outcome.trials),
        chosen=outcome.chosen,
        config=LoaderConfig(**{p: chosen[p] for p in PARAMS}),
        reason=outcome.reason,
        stopped=outcome.stopped,
        target_utilization=target_utilization,
        budget_s=float(budget_s),
        tolerance=tolerance,
        max_memory=memory_limit,
        step=describe_step(step, step_ms),
        step_ms=None if step_ms is None else float(step_ms),
        device=None if dev is None else str(dev),
        cores=cores,
        elapsed_s=time.monotonic() - start,
        data=data if data is not None else describe_data(loader_factory),
        machine=facts,
        noise=noise,
        max_memory_from=memory_from,
        loader=seen,
    )
