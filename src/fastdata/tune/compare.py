"""Your loader against the same loader with fastdata's settings: both rates and the ratio.

:func:`compare` takes a function returning your ``torch.utils.data.DataLoader`` as you build
it today, and rebuilds that loader — same dataset, batching, sampler, collate function — as a
``fastdata.DataLoader`` with a tuned :class:`~fastdata.config.LoaderConfig`. It then times
the two in alternating rounds against the same (simulated or real) step, the way
:func:`fastdata.tune.measure.measure` times a trial, and reports each rate and the ratio
with 95% intervals. Rounds alternate (yours, fastdata's, fastdata's, yours, ...) so that a
machine that slows down or speeds up during the run affects both sides alike; the ratio's
interval comes from the per-round ratios. Rates and ratio are geometric means with their
intervals on the log scale, so an interval cannot reach below zero (a rate cannot), and the
ratio is exactly the ratio of the two rates.
"""

from __future__ import annotations

import math
import textwrap
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from statistics import fmean, stdev
from typing import Any

from fastdata.config import LoaderConfig, load_config
from fastdata.tune._consumer import consumer_step, describe_step
from fastdata.tune._factory import loader_facts, made
from fastdata.tune._interrupt import Interrupts
from fastdata.tune._replicas import RepeatedItemsWarning, repeats_advice
from fastdata.tune._statistics import t95
from fastdata.tune._trial import Trial
from fastdata.tune.measure import measure
from fastdata.tune.words import describe, thread_caveat

__all__ = ["Comparison", "compare", "rebuild"]

SETTINGS = ("num_workers", "worker_method", "prefetch_factor", "pin_memory")
"""The settings a round is labelled with (the tuner's, in its cost order)."""


@dataclass(frozen=True)
class Comparison:
    """Rounds of your loader and of fastdata's, measured alternately.

    Attributes:
        yours, fastdata: one :class:`Trial` per round and side (round ``i`` of each was
            measured back to back).
        config: the settings fastdata's loader used.
        step: the consumer's step in words.
        worker_init_fn: the name of your loader's ``worker_init_fn``, or None: with thread
            workers it runs inside the training process, which the report warns about.
        repeats: the sides (``"your loader"``, ``"fastdata"``) whose loader repeated its
            items once per worker (:mod:`fastdata.tune._replicas`): their rates count the
            repeated batches, which the report warns about.
    """

    yours: tuple[Trial, ...]
    fastdata: tuple[Trial, ...]
    config: LoaderConfig
    step: str
    worker_init_fn: str | None = None
    repeats: tuple[str, ...] = ()

    @property
    def ratio(self) -> float:
        """fastdata's throughput over yours: the geometric mean of the per-round ratios."""
        return math.exp(fmean(self._log_ratios()))

    @property
    def ratio_interval(self) -> tuple[float, float]:
        """The 95% interval of :attr:`ratio` (from the spread of the per-round ratios)."""
        return _geometric_interval(self._log_ratios())[1:]

    def _log_ratios(self) -> list[float]:
        pairs = zip(self.yours, self.fastdata, strict=True)
        return [math.log(f.throughput / y.throughput) for y, f in pairs]

    def report(self) -> str:
        """Both rates with their intervals, then the ratio with its interval; for thread
        workers, what they mean for random numbers
        (:func:`~fastdata.tune.words.thread_caveat`)."""
        rows = [("your loader", self.yours), ("fastdata", self.fastdata)]
        width = max(len(describe(trials[0].params)) for _, trials in rows)
        lines = [
            f"fastdata bench: {len(self.yours)} rounds of each loader, alternating; {self.step}"
        ]
        for name, trials in rows:
            rate, low, high = _geometric_interval([math.log(t.throughput) for t in trials])
            busy = fmean(t.busy for t in trials)
            lines.append(
                f"  {name:<11}  {describe(trials[0].params):<{width}}  {rate:8.1f} batches/s "
                f"(95% CI {low:.1f} to {high:.1f}), consumer busy {busy:.0%}"
            )
        low, high = self.ratio_interval
        lines.append(f"  fastdata / yours: {self.ratio:.2f}x (95% CI {low:.2f}x to {high:.2f}x)")
        if low <= 1 <= high:
            lines.append("  the interval includes 1x: no difference these rounds can show")
        if self.config.num_workers and self.config.worker_method == "thread":
            lines.append(thread_caveat(self.worker_init_fn))
        if self.repeats:
            advice = repeats_advice(self._repeated_rates(" above"))
            lines.append("\n".join(textwrap.wrap(f"warning: {advice}", 96)))
        return "\n".join(lines)

    def _repeated_rates(self, where: str = "") -> str:
        """What the repeats did to the rates (of the rounds ``where``: " above" in the
        report), for :func:`repeats_advice`."""
        which = " and ".join(f"{side}'s" for side in self.repeats)
        return (
            f"the rates of {which} rounds{where} count every repeated batch (and so does the "
            "ratio): they overstate the data delivered"
        )


def rebuild(loader: Any, /, **settings: Any) -> Any:
    """``loader`` (a ``torch.utils.data.DataLoader``) as a ``fastdata.DataLoader`` with the
    same dataset, batching, sampler, collate function, timeout, worker init, multiprocessing
    context and generator; ``settings`` (num_workers, prefetch_factor, pin_memory,
    persistent_workers, and fastdata's worker_method) replace its own. Its multiprocessing
    context is left out where ``settings`` have no worker processes (none, or threads), as
    :meth:`~fastdata.config.LoaderConfig.without_idle_options` says: torch rejects it there.

    Raises:
        TypeError: ``loader`` is not a torch DataLoader.
    """
    import torch

    from fastdata.loader import DataLoader

    if not isinstance(loader, torch.utils.data.DataLoader):
        raise TypeError(
            f"expected a torch.utils.data.DataLoader to rebuild, got {type(loader).__name__}"
        )
    kwargs: dict[str, Any] = {
        "collate_fn": loader.collate_fn,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "in_order": getattr(loader, "in_order", True),
    }
    if isinstance(loader.dataset, torch.utils.data.IterableDataset):
        kwargs.update(batch_size=loader.batch_size, drop_last=loader.drop_last)
    elif loader.batch_size is not None:  # automatic batching over the loader's sampler
        kwargs.update(sampler=loader.sampler, batch_size=loader.batch_size)
        kwargs["drop_last"] = loader.drop_last
    elif loader.batch_sampler is not None:
        kwargs.update(batch_sampler=loader.batch_sampler)
    else:  # batch_size=None: items as they are
        kwargs.update(sampler=loader.sampler, batch_size=None)
    return DataLoader(
        loader.dataset, **LoaderConfig.without_idle_options({**kwargs, **settings}, keep=settings)
    )


def compare(
    make_loader: Callable[[], Iterable[Any]],
    /,
    *,
    config: Any,
    step: Callable[[Any], Any] | None = None,
    step_ms: float | None = None,
    rounds: int = 5,
    budget_s: float = 30.0,
    on_trial: Callable[[Trial], None] | None = None,
) -> Comparison:
    """Time ``make_loader()`` against :func:`rebuild` of it with ``config``'s settings.

    Args:
        make_loader: returns your DataLoader as you build it (called once per round).
        config: what ``fastdata.DataLoader(config=...)`` accepts: a
            :class:`~fastdata.config.LoaderConfig`, a :class:`~fastdata.tune.TuneResult`, a
            mapping or the path of a JSON file from ``fastdata tune --out``.
        step: the consumer's work on a batch, as for :func:`fastdata.tune.tune`.
        step_ms: instead of ``step``, a simulated step of this many milliseconds.
        rounds: rounds per side (at least 2, for the intervals).
        budget_s: seconds for all rounds together, split equally (start-up included).
        on_trial: called with each round's :class:`Trial`, as it completes.

    Each round runs for its share of ``budget_s`` (so that what a loader does now and then,
    a new file, a collection, is sampled), or to the end of the loader's pass if that comes
    first. A round whose loader repeats its items once per worker (an IterableDataset that
    does not split them between workers) is kept, and the report and a
    :class:`~fastdata.RepeatedItemsWarning` say its rate counts the repeats.
    Ctrl-C ends it (a ``KeyboardInterrupt``) at the latest when the round under way ends,
    even where its ``KeyboardInterrupt`` was swallowed (:mod:`fastdata.tune._interrupt`).

    Raises:
        TypeError, ValueError: invalid arguments.
        TuneError: ``make_loader()`` raised, or returned something other than a torch
            DataLoader (the message names it).
    """
    from fastdata._validate import check_int, check_number

    settings = load_config(config).to_dict()
    rounds = check_int("rounds", rounds, minimum=2)
    check_number("budget_s", budget_s, minimum=0, exclusive_minimum=True)
    consumer = consumer_step(step, step_ms)
    make = made(make_loader)
    share = budget_s / (2 * rounds)
    sides: dict[str, list[Trial]] = {"yours": [], "fastdata": []}
    seen: dict[str, Any] = {}
    with Interrupts() as interrupts:
        for i in range(rounds):
            order = ("yours", "fastdata") if i % 2 == 0 else ("fastdata", "yours")
            for side in order:
                interrupts.check()  # a Ctrl-C whose KeyboardInterrupt was swallowed ends it
                loader = make()
                seen = loader_facts(loader, seen)
                if side == "fastdata":
                    loader = rebuild(loader, **settings)
                trial = _time(loader, consumer, share)
                sides[side].append(trial)
                if on_trial is not None:
                    on_trial(trial)
        interrupts.check()
    names = {"yours": "your loader", "fastdata": "fastdata"}
    comparison = Comparison(
        yours=tuple(sides["yours"]),
        fastdata=tuple(sides["fastdata"]),
        config=LoaderConfig.from_dict(settings),
        step=describe_step(step, step_ms),
        worker_init_fn=seen.get("worker_init_fn"),
        repeats=tuple(names[s] for s, trials in sides.items() if any(t.repeats for t in trials)),
    )
    if comparison.repeats:
        advice = repeats_advice(comparison._repeated_rates())
        warnings.warn(advice, RepeatedItemsWarning, stacklevel=2)
    return comparison


def _time(loader: Any, step: Callable[[Any], Any] | None, time_limit: float) -> Trial:
    """One round: ``loader`` measured as a tuner trial, labelled with its settings."""
    params = {name: getattr(loader, name, None) for name in SETTINGS}
    params["worker_method"] = params["worker_method"] or "multiprocessing"  # torch's loader
    per_round = max(params["num_workers"] or 0, 1)
    return measure(
        lambda **_: loader,
        params,
        step=step,
        time_limit=time_limit,
        warmup=per_round,
        block=per_round,
        rel_ci=0.0,  # never precise enough to stop early: the round runs for its share
        one_pass=True,
    )


def _geometric_interval(logs: list[float]) -> tuple[float, float, float]:
    """The geometric mean of the values whose logarithms are ``logs``, and its 95% interval
    (Student's t on the log scale): positive, however few and spread the rounds."""
    mean = fmean(logs)
    half = t95(len(logs) - 1) * stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)
