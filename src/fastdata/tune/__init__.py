"""fastdata.tune: pick num_workers, the worker method, prefetch_factor and pin_memory by
measuring the consumer.

Guessing ``num_workers`` fails both ways: too few and the GPU waits for data, too many and
workers fight over cores and memory (32 workers can be slower than 4). :func:`tune` builds
candidate loaders, measures how busy they keep the consumer (:mod:`.measure`), screens the
settings coarse to fine and compares the cheap ones with the fastest in paired rounds
(:mod:`.search`, :mod:`.decide`), and returns a :class:`TuneResult` (:mod:`.report`) whose
config ``fastdata.DataLoader(config=...)`` accepts.

Importing this package is cheap (standard library only); torch and psutil load when
:func:`tune` runs.
"""

from __future__ import annotations

import inspect
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from statistics import median
from typing import Any

from fastdata.config import LoaderConfig
from fastdata.tune.measure import MemoryGuard, Trial, measure, nvml_for_device
from fastdata.tune.report import TuneResult
from fastdata.tune.search import TuneError, search
from fastdata.tune.space import PARAMS, SearchSpace

__all__ = ["LoaderConfig", "SimulatedStep", "Trial", "TuneError", "TuneResult", "tune"]


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
            pin_memory=...)`` returns an iterable of batches (typically a
            ``fastdata.DataLoader``); ``prefetch_factor`` is None when ``num_workers`` is 0.
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
        TuneError: the loader failed on the first configuration measured, or no setting
            fits in the memory ceiling.
    """
    import torch

    from fastdata._validate import check_device, check_number
    from fastdata.tune import machine

    consumer = _consumer_step(step, step_ms)
    check_number("budget_s", budget_s, minimum=0, exclusive_minimum=True)
    check_number("target_utilization", target_utilization, minimum=0, maximum=1,
                 exclusive_minimum=True)  # fmt: skip
    check_number("tolerance", tolerance, minimum=0, maximum=0.99)
    memory_limit, memory_from = machine.ceiling(max_memory)
    factory = _as_factory(loader_factory, loader_kwargs, torch)
    dev = check_device("device", device)
    cores = _usable_cores()
    given, factory = _worker_methods(loader_factory, factory, search_space, torch)
    space = SearchSpace.build(given, cores=cores, device_used=dev is not None and dev.type != "cpu")
    sync = _cuda_sync(dev) if dev is not None and dev.type == "cuda" else None
    transfer = None if dev is None else _Transfer(dev, sync)
    gpu = nvml_for_device(dev)
    guard = MemoryGuard(memory_limit, floor=machine.floor())
    facts = machine.describe(cores, dev)

    def evaluate(params: dict[str, Any], time_limit: float) -> Trial:
        per_round = max(params["num_workers"], 1)
        return measure(
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
        )

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
    finally:
        if gpu is not None:
            gpu.close()
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
        step=_describe_step(step, step_ms),
        step_ms=None if step_ms is None else float(step_ms),
        device=None if dev is None else str(dev),
        cores=cores,
        elapsed_s=time.monotonic() - start,
        data=data if data is not None else _describe_data(loader_factory),
        machine=facts,
        noise=noise,
        max_memory_from=memory_from,
    )


def _consumer_step(
    step: Callable[[Any], Any] | None, step_ms: float | None
) -> Callable[[Any], Any] | None:
    if step is not None and step_ms is not None:
        raise ValueError("pass step= (your step) or step_ms= (a simulated one), not both")
    if step is not None and not callable(step):
        raise TypeError(f"step={step!r}: expected a callable taking a batch")
    return step if step_ms is None else SimulatedStep(step_ms)


def _describe_step(step: Callable[[Any], Any] | None, step_ms: float | None) -> str:
    if step_ms is not None:
        return f"simulated {step_ms:g} ms step"
    if step is not None:
        return f"step {getattr(step, '__qualname__', None) or type(step).__name__}"
    return "no step"


def _describe_data(obj: Any) -> str:
    """The dataset's type, or the loader factory's name, for the result file."""
    name = getattr(obj, "__qualname__", None)
    return f"loaders from {name}" if name else f"a {type(obj).__name__}"


def _as_factory(
    obj: Any, loader_kwargs: Mapping[str, Any] | None, torch: Any
) -> Callable[..., Iterable[Any]]:
    """``obj`` if it is a loader factory; for a dataset, a factory of fastdata.DataLoaders."""
    if isinstance(obj, torch.utils.data.Dataset):
        fixed = dict(loader_kwargs or {})
        clash = sorted(set(fixed) & set(PARAMS))
        if clash:
            raise ValueError(
                f"loader_kwargs sets {', '.join(clash)}, which the tuner searches: leave them "
                "out, or restrict them with search_space={...}"
            )
        from fastdata.loader import DataLoader

        def factory(**params: Any) -> Iterable[Any]:
            return DataLoader(obj, **fixed, **params)

        return factory
    if not callable(obj):
        raise TypeError(
            f"{obj!r}: expected a loader factory (a callable taking num_workers=..., "
            "prefetch_factor=..., pin_memory=...) or a torch Dataset"
        )
    if loader_kwargs is not None:
        raise ValueError(
            "loader_kwargs= goes with a dataset; a loader factory sets its own arguments"
        )
    return obj


def _worker_methods(
    obj: Any,
    factory: Callable[..., Iterable[Any]],
    search_space: Mapping[str, Iterable[Any]] | None,
    torch: Any,
) -> tuple[dict[str, Iterable[Any]], Callable[..., Iterable[Any]]]:
    """The search space with the worker methods ``obj`` can be measured with, and the factory
    to call: thread workers are searched by default for a dataset (the tuner builds
    fastdata's loaders) and for a factory that names a ``worker_method`` parameter; a
    ``**kwargs`` factory gets ``worker_method`` only when ``search_space`` asks for it (it may
    pass its keywords to torch's DataLoader, which has none). Otherwise only process workers
    are measured, and the factory is never passed ``worker_method``.

    Raises:
        ValueError: ``search_space`` asks for thread workers from a factory that cannot take
            ``worker_method``.
    """
    given = dict(search_space or {})
    if isinstance(obj, torch.utils.data.Dataset):
        return given, factory
    try:
        parameters = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):  # no signature to read: treat it as taking none
        parameters = []
    named = any(p.name == "worker_method" for p in parameters)
    open_ended = any(p.kind is p.VAR_KEYWORD for p in parameters)
    if named or (open_ended and "worker_method" in given):
        return given, factory
    if "worker_method" in given and set(given["worker_method"]) != {"multiprocessing"}:
        raise ValueError(
            f"search_space['worker_method']={list(given['worker_method'])!r}, but the loader "
            "factory has no worker_method parameter: add one and pass it to fastdata.DataLoader"
        )
    given["worker_method"] = ("multiprocessing",)

    def without_method(**params: Any) -> Iterable[Any]:
        params.pop("worker_method", None)
        return factory(**params)

    return given, without_method


def _usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask, where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class _Transfer:
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


def _cuda_sync(device: Any) -> Callable[[], None]:
    import torch

    return lambda: torch.cuda.synchronize(device)
