"""A loader's resume state: made from the facts of an epoch, checked, and turned into a plan.

Pure functions over plain values: :func:`make_state` takes what the loader is
(:class:`~fastdata.loader._resume_checks.Layout`) and what its current epoch handed out (a
:class:`~fastdata.loader._record.Record`); :func:`plan` takes a loaded state and the loader
that loads it and returns what the next iteration must do (:class:`Plan`), or a
:class:`~fastdata.ResumeError` naming the field that does not fit. A state is untrusted input
(a file a user edited, another job's checkpoint): everything is checked here, once
(its sections by :mod:`fastdata.loader._resume_checks`).

A state is one of two moments, as torchdata's ``StatefulDataLoader`` has them:

- **between epochs** (``"epoch_done": true``): before the first iteration, or after the
  consumer saw an epoch end (``StopIteration``). The next iteration starts a new epoch from
  the generators as they were (``"generators"``, ``"rng"``); with persistent workers, from
  the workers' states as they were (their seed and snapshots).
- **within an epoch**: the next iteration continues the epoch — also when every batch was
  handed out but the end was not seen: that iteration is then empty, and the one after it
  starts the next epoch. A map-style loader's sampler replays the epoch's order from the
  randomness captured at its first draw and skips the ``items`` consumed (or restores its
  own ``state_dict()``); each worker restores its snapshot and skips what it delivered after
  it (:mod:`fastdata.loader._worker_side`); the workers keep their seed, and the first batch
  comes from the worker whose turn it was.

The main process's global generators (``"rng"``) are restored when the state is loaded: a
training step's random draws continue as they would have, and so do the loader's own draws
from them (a sampler without a generator, the workers' seed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastdata._state_checks import require_int, require_mapping, short
from fastdata._validate import is_int
from fastdata.errors import ResumeError
from fastdata.loader import _rng
from fastdata.loader._digest import COVERED
from fastdata.loader._digest import FIELD as DIGEST
from fastdata.loader._indices import IndexPlan, check_generators
from fastdata.loader._record import Position, Record
from fastdata.loader._resume_checks import (
    MAX_WORKERS,
    NEXT_EPOCH,
    Layout,
    check_sampler,
    flag,
    index_plan,
    next_epoch,
    next_epoch_states,
    present,
    warn_threads_replay,
    worker_plans,
)
from fastdata.loader._worker_side import WorkerPlan
from fastdata.sources.state import STATE_VERSION

__all__ = ["Plan", "make_state", "plan", "position_of"]


@dataclass(frozen=True)
class Plan:
    """What the next iteration does to continue a loaded state."""

    state: dict[str, Any]  # as loaded: state_dict() gives it back until an iteration starts
    rng: dict[str, Any]
    generators: list[str]
    epoch_done: bool
    batches: int = 0
    base_seed: int | None = None
    first_worker: int = 0
    workers: dict[int, WorkerPlan] = field(default_factory=dict)
    reports: list[dict[str, Any] | None] = field(default_factory=list)
    indices: IndexPlan | None = None
    sampler_epoch: int | None = None
    sampler_states: dict[str, Any] | None = None  # between epochs: the samplers' own


def make_state(
    layout: Layout,
    record: Record | None,
    *,
    rng: dict[str, Any],
    generators: list[str],
    start: dict[str, Any] | None = None,
    in_process: dict[str, Any] | None = None,
    stream: dict[str, Any] | None = None,
    between: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The state of a loader shaped as ``layout`` whose current epoch's facts are ``record``
    (None: it never iterated).

    Args:
        rng / generators: the main process's global generators and the loader's and
            sampler's torch generators, now.
        start: a map-style sampler's randomness at this epoch's first draw.
        in_process: the dataset's snapshot taken now (``num_workers=0``).
        stream: the fields of a fastdata stream's state (``kind="stream"``).
        between: the own states of the samplers that have ``state_dict()``, saved when
            the state is between epochs (:data:`NEXT_EPOCH`).

    Raises:
        ResumeError: a worker's state cannot be stored (JSON cannot hold it, or the
            dataset's ``state_dict()`` failed).
    """
    # A stream's position tells the epoch's start itself: only a seen end is "done" there.
    epoch_done = record.finished if record is not None else layout.kind != "stream"
    state: dict[str, Any] = {
        "version": STATE_VERSION,
        "kind": layout.kind,
        "epoch_done": epoch_done,
        "batches": 0 if record is None or epoch_done else record.batches,
        "num_workers": layout.num_workers,
        "rng": rng,
        "generators": generators,
        # the seed of workers that go on (a new epoch's fresh workers draw their own)
        "base_seed": None
        if record is None or (epoch_done and not (layout.persistent and layout.num_workers))
        else record.base_seed,
    }
    if stream is not None:  # a stream's position is its own (see fastdata.loader._streams)
        state.update(stream)
        return state
    state.update(
        persistent_workers=layout.persistent,
        sampler=dict(layout.sampler),
        next_worker=0,
        workers=[],
    )
    if layout.kind == "map" and epoch_done and between:
        state["sampler"][NEXT_EPOCH] = between
    if record is None:
        return state
    # Between epochs, workers that live on (persistent ones, or the main process) keep their
    # state into the next epoch; fresh workers start from the dataset as the loader holds it.
    keep_workers = not epoch_done or layout.persistent or layout.num_workers == 0
    if keep_workers:
        state["workers"] = _workers(record, in_process)
        state["next_worker"] = record.next_worker
    if layout.kind == "map" and not epoch_done:
        prefix = record.prefix
        state["sampler"].update(
            start=start,
            tasks=prefix.tasks,
            units=prefix.units,
            done=record.beyond(),
            states=prefix.states,
        )
        # What a replay must draw again (fastdata.loader._digest): the digest that covers the
        # most units, up to the end of a range consumed out of order where one was.
        checked = [p for p in (prefix, *record.done.values()) if p.digest is not None]
        if checked:
            furthest = max(checked, key=lambda p: p.covered)
            state["sampler"][DIGEST] = furthest.digest
            if furthest.covered != prefix.units:
                state["sampler"][COVERED] = furthest.covered
    return state


def _workers(record: Record, in_process: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    """Each worker's counts and last snapshot (``in_process``: the snapshot taken now)."""
    found: list[dict[str, Any] | None] = []
    for worker, report in enumerate(record.workers):
        snapshot = in_process if in_process is not None else record.snapshots[worker]
        if snapshot is not None and "error" in snapshot:
            whose = (
                "the dataset" if in_process is not None else f"DataLoader worker {worker}'s dataset"
            )
            raise ResumeError(f"cannot save the state of {whose}: {snapshot['error']}")
        if report is None and snapshot is None:
            found.append(None)
            continue
        report = report or {}
        found.append(
            {
                "batches": report.get("batches", 0),
                "items": report.get("items", 0),
                "ended": bool(report.get("ended", False)),
                "snapshot": snapshot,
            }
        )
    return found


def plan(state: Any, layout: Layout) -> Plan:
    """The plan that continues ``state`` on a loader shaped as ``layout``.

    Raises:
        ResumeError: the state is malformed or does not fit the loader (naming the field,
            the saved and the current value).
    """
    state = dict(require_mapping(state, "state"))
    present(state, _TOP, "")
    if state.get("version") != STATE_VERSION:
        raise ResumeError(
            f"cannot resume: state version {short(state.get('version'))}, this fastdata reads "
            f"version {STATE_VERSION}; was the state saved by another fastdata release?"
        )
    if state.get("kind") != layout.kind:
        kind = state.get("kind")
        saved = _KINDS.get(kind, f"kind={short(kind)}") if isinstance(kind, str) else "?"
        raise ResumeError(
            f"cannot resume: the state was saved for {saved}, this loader reads "
            f"{_KINDS[layout.kind]}"
        )
    epoch_done = flag(state, "epoch_done")
    generators = check_generators(state.get("generators"), "generators")
    _rng.check(state.get("rng"))
    saved_workers = require_int(state, "num_workers", maximum=MAX_WORKERS)
    persistent = layout.kind != "stream" and flag(state, "persistent_workers")
    if persistent and not saved_workers:  # torch refuses them without workers
        raise ResumeError(
            "cannot resume: the state's persistent_workers=True with num_workers=0; the state "
            "is corrupt"
        )
    if persistent and epoch_done and not layout.persistent:
        # Saved between epochs, the workers that lived on held their seed and state for the
        # next epoch; this loader's next epoch starts fresh workers, as if saved without them.
        # (Within an epoch, either setting resumes it: its workers are started anew.)
        state.update(persistent_workers=False, base_seed=None, workers=[], next_worker=0)
        persistent = False
    if layout.kind != "stream" and len(generators) != layout.generators:
        raise ResumeError(
            f"cannot resume: the state has {len(generators)} generator(s), this loader's "
            f"sampler and generator= hold {layout.generators}; build the loader as when the "
            "state was saved (the same sampler, the same generator=)"
        )
    seed = state["base_seed"]
    if seed is not None and not (is_int(seed) and 0 <= seed < 2**63):  # as torch draws it
        raise ResumeError(f"cannot resume: the state's base_seed={short(seed)} is corrupt")
    if not epoch_done and require_int(state, "batches") > 0 and seed is None:
        raise ResumeError(
            "cannot resume: the state is within an epoch but holds no workers' seed "
            "(base_seed=None); the state is corrupt"
        )
    keeps = persistent or (layout.kind == "stream" and saved_workers > 0)
    if epoch_done and seed is not None and not (keeps and saved_workers):
        raise ResumeError(
            "cannot resume: the state keeps a workers' seed between epochs without persistent "
            "workers; the state is corrupt"
        )
    common = {
        "state": state,
        "rng": require_mapping(state.get("rng"), "rng"),
        "generators": generators,
        "epoch_done": epoch_done,
        "batches": require_int(state, "batches"),
        "base_seed": seed,
    }
    if layout.kind == "stream":
        present(state, ("batch_size", "drop_last", "in_order", "dataset"), "")
        part = state["dataset"]
        readers = part.get("num_workers") if isinstance(part, dict) else None
        if readers != max(saved_workers, 1):
            raise ResumeError(
                f"cannot resume: the state's num_workers={saved_workers} disagrees with its "
                f"dataset's num_workers={short(readers)}; the state is corrupt"
            )
        return Plan(**common)
    present(state, ("sampler", "next_worker", "workers"), "")
    if epoch_done and common["batches"]:
        raise ResumeError(
            f"cannot resume: the state says its epoch was done (epoch_done=True) yet counts "
            f"batches={common['batches']} of it; the state is corrupt"
        )
    sampler = check_sampler(state, layout)
    workers, reports, first = worker_plans(state, layout)
    if epoch_done:  # the next epoch starts from where each worker ended, with nothing to skip
        workers = {w: next_epoch(p) for w, p in workers.items()}
        reports, first = [], 0
    else:
        warn_threads_replay(workers, layout)
    indices = (
        None
        if epoch_done or layout.kind != "map"
        else index_plan(sampler, layout.stateful, layout.generators)
    )
    if indices is not None and (
        indices.tasks > indices.units if layout.unit_items else indices.tasks != indices.units
    ):
        raise ResumeError(
            f"cannot resume: the state's sampler tasks={indices.tasks} do not fit its "
            f"units={indices.units}; the state is corrupt"
        )
    if indices is not None and workers and layout.unit_items:
        delivered = sum(p.items for p in workers.values())
        if delivered != indices.units + sum(n for _, n in indices.done):
            raise ResumeError(
                f"cannot resume: the state's workers delivered {delivered} items, its sampler "
                f"position counts {indices.units}; the state is corrupt"
            )
    return Plan(
        **common,
        first_worker=first,
        workers=workers,
        reports=reports,
        indices=indices,
        sampler_epoch=sampler.get("epoch"),
        sampler_states=next_epoch_states(sampler, layout.stateful) if epoch_done else None,
    )


_KINDS = {
    "map": "a map-style dataset",
    "iterable": "an iterable dataset",
    "stream": "a fastdata stream",
}


_TOP = (
    "version",
    "kind",
    "epoch_done",
    "batches",
    "num_workers",
    "rng",
    "generators",
    "base_seed",
)


def position_of(plan: IndexPlan | None) -> Position | None:
    """The consumed prefix a resumed epoch's record starts from."""
    if plan is None:
        return None
    covered = plan.units if plan.covered is None else plan.covered
    return Position(plan.tasks, plan.units, 0, plan.states, plan.digest, covered)
