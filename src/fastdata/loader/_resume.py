"""A loader's resume state: made from the facts of an epoch, checked, and turned into a plan.

Pure functions over plain values: :func:`make_state` takes what the loader is
(:class:`Layout`) and what its current epoch handed out (a
:class:`~fastdata.loader._record.Record`); :func:`plan` takes a loaded state and the loader
that loads it and returns what the next iteration must do (:class:`Plan`), or a
:class:`~fastdata.ResumeError` naming the field that does not fit. A state is untrusted input
(a file a user edited, another job's checkpoint): everything is checked here, once.

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

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastdata._state_checks import check_matches, require_int, require_mapping, short
from fastdata._validate import is_int
from fastdata.errors import ResumeError
from fastdata.loader import _rng
from fastdata.loader._indices import IndexPlan, check_generators
from fastdata.loader._jsonable import decode
from fastdata.loader._record import Position, Record
from fastdata.loader._worker_side import WorkerPlan
from fastdata.sources.state import MAX_EPOCH, STATE_VERSION

__all__ = ["Layout", "Plan", "make_state", "plan"]

Kind = Literal["map", "iterable", "stream"]


@dataclass(frozen=True)
class Layout:
    """What a loader is, as far as its state is concerned."""

    kind: Kind
    num_workers: int
    persistent: bool
    generators: int = 0  # torch generators the sampler and the loader hold
    stateful: tuple[str, ...] = ()  # "sampler" / "batch_sampler": those with state_dict()
    unit_items: bool = True  # a map-style sampler's units are items (not a user's batches)
    sampler: dict[str, Any] = field(default_factory=dict)  # type, length, batching, epoch


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


def make_state(
    layout: Layout,
    record: Record | None,
    *,
    rng: dict[str, Any],
    generators: list[str],
    start: dict[str, Any] | None = None,
    in_process: dict[str, Any] | None = None,
    stream: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The state of a loader shaped as ``layout`` whose current epoch's facts are ``record``
    (None: it never iterated).

    Args:
        rng / generators: the main process's global generators and the loader's and
            sampler's torch generators, now.
        start: a map-style sampler's randomness at this epoch's first draw.
        in_process: the dataset's snapshot taken now (``num_workers=0``).
        stream: the fields of a fastdata stream's state (``kind="stream"``).

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
    return state


def _workers(record: Record, in_process: dict[str, Any] | None) -> list[dict[str, Any] | None]:
    """Each worker's counts and last snapshot (``in_process``: the snapshot taken now)."""
    found: list[dict[str, Any] | None] = []
    for worker, report in enumerate(record.workers):
        snapshot = in_process if in_process is not None else record.snapshots[worker]
        if snapshot is not None and "error" in snapshot:
            raise ResumeError(
                f"cannot save the state of DataLoader worker {worker}'s dataset: "
                f"{snapshot['error']}"
            )
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
    _present(state, _TOP, "")
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
    epoch_done = _flag(state, "epoch_done")
    generators = check_generators(state.get("generators"), "generators")
    _rng.check(state.get("rng"))
    saved_workers = require_int(state, "num_workers", maximum=_MAX_WORKERS)
    persistent = layout.kind != "stream" and _flag(state, "persistent_workers")
    if layout.kind != "stream" and persistent != layout.persistent:
        raise ResumeError(
            f"cannot resume: the state's persistent_workers={persistent} but this loader has "
            f"persistent_workers={layout.persistent}; build it with the saved value"
        )
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
        _present(state, ("batch_size", "drop_last", "dataset"), "")
        part = state["dataset"]
        readers = part.get("num_workers") if isinstance(part, dict) else None
        if readers != max(saved_workers, 1):
            raise ResumeError(
                f"cannot resume: the state's num_workers={saved_workers} disagrees with its "
                f"dataset's num_workers={short(readers)}; the state is corrupt"
            )
        return Plan(**common)
    _present(state, ("sampler", "next_worker", "workers"), "")
    if epoch_done and common["batches"]:
        raise ResumeError(
            f"cannot resume: the state says its epoch was done (epoch_done=True) yet counts "
            f"batches={common['batches']} of it; the state is corrupt"
        )
    sampler = _check_sampler(state, layout)
    workers, reports, first = _worker_plans(state, layout)
    if epoch_done:  # the next epoch starts from where each worker ended, with nothing to skip
        workers = {w: _next_epoch(p) for w, p in workers.items()}
        reports, first = [], 0
    indices = (
        None
        if epoch_done or layout.kind != "map"
        else _index_plan(sampler, layout.stateful, layout.generators)
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
    )


_KINDS = {
    "map": "a map-style dataset",
    "iterable": "an iterable dataset",
    "stream": "a fastdata stream",
}


def _flag(state: Mapping[str, Any], name: str) -> bool:
    value = state.get(name)
    if not isinstance(value, bool):
        raise ResumeError(f"cannot resume: the state's {name}={short(value)} is not true or false")
    return value


def _check_sampler(state: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    """The state's sampler section, checked against the loader's: the sampler's type, the
    dataset's length, ``drop_last`` and the sampler's settings must be the same (another
    ``batch_size`` resumes: the position is counted in the sampler's indices)."""
    sampler = dict(require_mapping(state.get("sampler"), "sampler"))
    _present(sampler, tuple(layout.sampler), "sampler ")
    position = ("start", "states", "tasks", "units", "done")
    if layout.kind == "map" and not state["epoch_done"]:
        _present(sampler, position, "sampler ")
    elif any(name in sampler for name in position):
        raise ResumeError(
            "cannot resume: the state's sampler holds a position within an epoch, but the "
            "state says it is between epochs (epoch_done=True); the state is corrupt"
        )
    for name, current in layout.sampler.items():
        saved = sampler.get(name, "<missing>")
        if name == "settings":
            check_matches(require_mapping(saved, "sampler settings"), current, "sampler")
        elif name == "epoch":  # a DistributedSampler's; set again on load
            if (saved is None) != (current is None) or (
                saved is not None and not (is_int(saved) and 0 <= saved <= MAX_EPOCH)
            ):
                raise ResumeError(
                    f"cannot resume: the state's sampler epoch={short(saved)} is corrupt"
                )
        elif saved != current:
            field = "sampler" if name == "type" else name
            shown = (saved, current) if name == "type" else (short(saved), short(current))
            raise ResumeError(
                f"cannot resume: the state's {field}={shown[0]} but this loader has "
                f"{field}={shown[1]}; build the loader as when the state was saved"
            )
    return sampler


def _index_plan(
    sampler: Mapping[str, Any], stateful: tuple[str, ...], generators: int
) -> IndexPlan | None:
    start = sampler.get("start")
    states = sampler.get("states")
    fresh = not sampler.get("tasks") and not sampler.get("units")
    if states is None and fresh and (start is None or stateful):
        return None  # saved before the sampler's first batch: the epoch starts as it would
    if start is None and states is None:
        raise ResumeError(
            "cannot resume: the state's sampler has neither its first-draw randomness nor its "
            "own state; is the state complete?"
        )
    done = sampler.get("done")
    if not isinstance(done, list) or not all(
        isinstance(d, list) and len(d) == 2 and all(is_int(v) and v >= 0 for v in d) for d in done
    ):
        raise ResumeError(f"cannot resume: the state's sampler done={short(done)} is corrupt")
    if start is not None:
        start = dict(require_mapping(start, "sampler start"))
        _present(start, ("iter", "draw"), "sampler start ")
        for moment in ("iter", "draw"):  # no "draw": saved before the sampler's first draw
            if moment == "draw" and start[moment] is None:
                if sampler.get("tasks") or sampler.get("units"):
                    raise ResumeError(
                        "cannot resume: the state's sampler consumed batches before its first "
                        "draw (sampler start draw=None); the state is corrupt"
                    )
                continue
            at = require_mapping(start[moment], f"sampler start {moment}")
            found = check_generators(at.get("generators"), f"sampler start {moment} generators")
            if len(found) != generators:
                raise ResumeError(
                    f"cannot resume: the state's sampler start {moment} holds {len(found)} "
                    f"generator state(s) where the loader has {generators}; it is corrupt"
                )
            _rng.check(at.get("rng"))
    if states is not None:
        states = dict(require_mapping(states, "sampler states"))
        if not states or not set(states) <= {"sampler", "batch_sampler", "iterator"}:
            raise ResumeError(
                f"cannot resume: the state's sampler states={short(states)} are not a "
                "sampler's, a batch sampler's or their iterator's; the state is corrupt"
            )
        _decodable(states, "sampler states")
    for name in stateful:
        if name not in (states or {}):
            raise ResumeError(
                f"cannot resume: this loader's {name} has state_dict(), but the state holds "
                f"no {name} state; build the loader as when the state was saved"
            )
    for name in states or {}:
        if name != "iterator" and name not in stateful:
            raise ResumeError(
                f"cannot resume: the state holds a {name} state, but this loader's {name} "
                "has no load_state_dict(); build the loader as when the state was saved"
            )
    return IndexPlan(
        start=start,
        states=states,
        tasks=require_int(sampler, "tasks"),
        units=require_int(sampler, "units"),
        done=tuple((int(o), int(n)) for o, n in done),
    )


def _worker_plans(
    state: Mapping[str, Any], layout: Layout
) -> tuple[dict[int, WorkerPlan], list[dict[str, Any] | None], int]:
    """Each worker's plan, their last reports and whose turn comes first."""
    saved = state.get("workers")
    if not isinstance(saved, list):
        raise ResumeError(f"cannot resume: the state's workers={short(saved)} is not a list")
    # Between epochs, workers that live on keep their state (none before any iteration).
    kept = not state["epoch_done"] or state["persistent_workers"] or state["num_workers"] == 0
    allowed = {max(state["num_workers"], 1) if kept else 0}
    if state["epoch_done"]:
        allowed.add(0)
    if len(saved) not in allowed:
        raise ResumeError(
            f"cannot resume: the state has {len(saved)} workers' entries for num_workers="
            f"{state['num_workers']}; the state is corrupt"
        )
    if not saved:
        return {}, [], 0
    plans: dict[int, WorkerPlan] = {}
    reports: list[dict[str, Any] | None] = []
    for worker, entry in enumerate(saved):
        if entry is None:
            reports.append(None)
            continue
        entry = require_mapping(entry, f"workers[{worker}]")
        _present(entry, ("batches", "items", "ended", "snapshot"), f"workers[{worker}] ")
        snapshot = entry.get("snapshot")
        if snapshot is not None:
            snapshot = _checked_snapshot(snapshot, worker)
        ended = _flag(entry, "ended")
        if ended and layout.kind == "map":
            raise ResumeError(
                f"cannot resume: the state's workers[{worker}] ended=True, but a map-style "
                "dataset's workers fetch what the sampler hands them and never end; the state "
                "is corrupt"
            )
        plans[worker] = WorkerPlan(
            snapshot=snapshot,
            batches=require_int(entry, "batches"),
            items=require_int(entry, "items"),
            ended=ended,
        )
        reports.append({**entry, "worker": worker})
    counted = sum(p.batches for p in plans.values())
    if not state["epoch_done"] and counted != state["batches"]:
        raise ResumeError(
            f"cannot resume: the state's batches={state['batches']} but its workers made "
            f"{counted}; the state is corrupt"
        )
    first = require_int(state, "next_worker", maximum=len(saved) - 1)
    if len(saved) == max(layout.num_workers, 1):
        return plans, reports, first
    if layout.kind == "iterable":
        raise ResumeError(
            f"cannot resume: the state was saved with num_workers={state['num_workers']}, "
            f"this loader has num_workers={layout.num_workers}; an iterable dataset splits "
            "its data by worker, so resume with the saved num_workers"
        )
    if any(p.snapshot is not None for p in plans.values()):
        warnings.warn(
            f"resuming a state saved with num_workers={state['num_workers']} with "
            f"num_workers={layout.num_workers}: every index resumes exactly, but the workers' "
            "own state (random generators, the dataset's state_dict) starts afresh",
            stacklevel=4,
        )
    return {}, [], 0


def _checked_snapshot(value: Any, worker: int) -> dict[str, Any]:
    """A worker's saved snapshot, checked (its user states decode, its generators are
    generators) here rather than in the worker."""
    where = f"workers[{worker}] snapshot"
    snapshot = dict(require_mapping(value, where))
    names = ("replay_rng",) if "replay_rng" in snapshot else ("dataset", "iterator", "rng")
    _present(snapshot, ("batches", "items", *names), f"{where} ")
    require_int(snapshot, "batches")
    require_int(snapshot, "items")
    if "own" in snapshot:
        _flag(snapshot, "own")
    for name in ("rng", "replay_rng"):
        if snapshot.get(name) is not None:
            _rng.check(snapshot[name])
    if snapshot.get("own_rng") is not None:
        check_generators([snapshot["own_rng"]], f"{where} own_rng")
    for name in ("dataset", "iterator"):
        _decodable(snapshot.get(name), f"{where} {name}")
    return snapshot


_MAX_WORKERS = 4096
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


def _present(section: Mapping[str, Any], names: tuple[str, ...], where: str) -> None:
    """Refuse a state that lacks one of ``names`` in ``section`` (named by ``where``)."""
    for name in names:
        if name not in section:
            raise ResumeError(
                f"cannot resume: the state's {where}has no {name!r}; is it a complete fastdata "
                "state?"
            )


def _decodable(value: Any, where: str) -> None:
    """Raise a ResumeError if a stored user state cannot be read back."""
    try:
        decode(value)
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, ResumeError) as exc:
        raise ResumeError(
            f"cannot resume: the state's {where} cannot be read back ({exc}); the state is corrupt"
        ) from None


def _next_epoch(plan: WorkerPlan) -> WorkerPlan:
    """A worker's plan for the epoch after the one it ended: its final snapshot — the
    dataset's state and the generators; an iterator's ended with its epoch (unless the
    dataset is its own iterator) — and nothing to skip."""
    if plan.snapshot is None:
        return WorkerPlan(snapshot=None)
    snapshot = {**plan.snapshot, "batches": 0, "items": 0}
    if not snapshot.get("own"):
        snapshot["iterator"] = None
    return WorkerPlan(snapshot=snapshot)


def position_of(plan: IndexPlan | None) -> Position | None:
    """The consumed prefix a resumed epoch's record starts from."""
    return None if plan is None else Position(plan.tasks, plan.units, 0, plan.states)
