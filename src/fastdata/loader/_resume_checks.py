"""A loaded loader state's sections checked against the loader that loads them: what a
loader is (:class:`Layout`), its sampler's section, its workers' entries and their snapshots
(:mod:`fastdata.loader._resume` checks the rest and makes the plan).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from fastdata._state_checks import check_matches, require_int, require_mapping, short
from fastdata._validate import is_int
from fastdata.errors import ReplayWarning, ResumeError, warn_user
from fastdata.loader import _rng
from fastdata.loader._digest import COVERED, check_field
from fastdata.loader._digest import FIELD as DIGEST
from fastdata.loader._indices import IndexPlan, check_generators
from fastdata.loader._jsonable import decode
from fastdata.loader._record import epoch_start
from fastdata.loader._worker_side import WorkerPlan
from fastdata.sources.state import MAX_EPOCH

__all__ = [
    "MAX_WORKERS",
    "Kind",
    "Layout",
    "check_sampler",
    "flag",
    "index_plan",
    "next_epoch",
    "present",
    "warn_threads_replay",
    "worker_plans",
]

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
    # Thread workers over a dataset without state_dict(): an iterable one's resume replays it
    # under the process's global generators, which it cannot restore (warn_threads_replay).
    threads_replay: bool = False


def flag(state: Mapping[str, Any], name: str) -> bool:
    value = state.get(name)
    if not isinstance(value, bool):
        raise ResumeError(f"cannot resume: the state's {name}={short(value)} is not true or false")
    return value


def check_sampler(state: Mapping[str, Any], layout: Layout) -> dict[str, Any]:
    """The state's sampler section, checked against the loader's: the sampler's type, the
    dataset's length, ``drop_last`` and the sampler's settings must be the same (another
    ``batch_size`` resumes: the position is counted in the sampler's indices)."""
    sampler = dict(require_mapping(state.get("sampler"), "sampler"))
    present(sampler, tuple(layout.sampler), "sampler ")
    position = ("start", "states", "tasks", "units", "done")
    if layout.kind == "map" and not state["epoch_done"]:
        present(sampler, position, "sampler ")
    elif any(name in sampler for name in position):
        raise ResumeError(
            "cannot resume: the state's sampler holds a position within an epoch, but the "
            "state says it is between epochs (epoch_done=True); the state is corrupt"
        )
    if NEXT_EPOCH in sampler and not state["epoch_done"]:
        raise ResumeError(
            f"cannot resume: the state's sampler holds {NEXT_EPOCH} (saved between epochs), but "
            "the state says it is within an epoch (epoch_done=False); the state is corrupt"
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


NEXT_EPOCH = "next_epoch_states"
"""The sampler section's field, between epochs, of the own states of a sampler and batch
sampler that have ``state_dict()``: where their next epoch starts (torchdata's samplers move
to it when an epoch ends)."""


def next_epoch_states(
    sampler: Mapping[str, Any], stateful: tuple[str, ...]
) -> dict[str, Any] | None:
    """The state's :data:`NEXT_EPOCH` states, checked against the loader's samplers."""
    states = sampler.get(NEXT_EPOCH)
    if states is None:
        return None
    states = dict(require_mapping(states, f"sampler {NEXT_EPOCH}"))
    if set(states) != set(stateful):
        raise ResumeError(
            f"cannot resume: the state holds the states of {sorted(states)} between epochs, "
            f"this loader's samplers with state_dict() are {sorted(stateful)}; build the loader "
            "as when the state was saved"
        )
    _decodable(states, f"sampler {NEXT_EPOCH}")
    return states


def index_plan(
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
        present(start, ("iter", "draw"), "sampler start ")
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
        digest=check_field(sampler.get(DIGEST)),
        covered=_covered(sampler, done),
    )


def worker_plans(
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
        present(entry, ("batches", "items", "ended", "snapshot"), f"workers[{worker}] ")
        snapshot = entry.get("snapshot")
        if snapshot is not None:
            snapshot = _checked_snapshot(snapshot, worker)
        ended = flag(entry, "ended")
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
        )  # (a digest_v1 a release of 7 Dec saved here, of the batches delivered: ignored)
        reports.append({**entry, "worker": worker})
    counted = sum(p.batches for p in plans.values())
    if not state["epoch_done"] and counted != state["batches"]:
        raise ResumeError(
            f"cannot resume: the state's batches={state['batches']} but its workers made "
            f"{counted}; the state is corrupt"
        )
    first = require_int(state, "next_worker", maximum=len(saved) - 1)
    moved = (state["num_workers"] == 0) != (layout.num_workers == 0)
    if len(saved) == max(layout.num_workers, 1):
        if moved:  # 0 <-> 1 worker: the same position, the draws in another process
            warn_user(
                f"resuming a state saved with num_workers={state['num_workers']} with "
                f"num_workers={layout.num_workers}: every index and the dataset's state resume "
                "exactly, but the dataset's random draws move between the training process "
                "and a worker (seeded afresh), so they differ from an uninterrupted run"
            )
        return plans, reports, first
    if layout.kind == "iterable":
        raise ResumeError(
            f"cannot resume: the state was saved with num_workers={state['num_workers']}, "
            f"this loader has num_workers={layout.num_workers}; an iterable dataset splits "
            "its data by worker, so resume with the saved num_workers"
        )
    if moved or any(p.snapshot is not None for p in plans.values()):
        warn_user(
            f"resuming a state saved with num_workers={state['num_workers']} with "
            f"num_workers={layout.num_workers}: every index resumes exactly, but the workers' "
            "own state (random generators, the dataset's state_dict) starts afresh"
        )
    return {}, [], 0


def _covered(sampler: Mapping[str, Any], done: list[list[int]]) -> int | None:
    """The units a sampler's digest covers (None: its ``units``): from them to the end of
    the furthest range consumed out of order."""
    covered = sampler.get(COVERED)
    if covered is None:
        return None
    units = require_int(sampler, "units")
    reach = units + max((o + n for o, n in done), default=0)
    if sampler.get(DIGEST) is None or not (is_int(covered) and units <= covered <= reach):
        raise ResumeError(
            f"cannot resume: the state's sampler {COVERED}={short(covered)} does not fit its "
            f"units={units} and done ranges (or has no {DIGEST}); the state is corrupt"
        )
    return int(covered)


def _checked_snapshot(value: Any, worker: int) -> dict[str, Any]:
    """A worker's saved snapshot, checked (its user states decode, its generators are
    generators) here rather than in the worker."""
    where = f"workers[{worker}] snapshot"
    snapshot = dict(require_mapping(value, where))
    names = ("replay_rng",) if "replay_rng" in snapshot else ("dataset", "iterator", "rng")
    present(snapshot, ("batches", "items", *names), f"{where} ")
    require_int(snapshot, "batches")
    require_int(snapshot, "items")
    if "own" in snapshot:
        flag(snapshot, "own")
    for name in ("rng", "replay_rng"):
        if snapshot.get(name) is not None:
            _rng.check(snapshot[name])
    if snapshot.get("own_rng") is not None:
        check_generators([snapshot["own_rng"]], f"{where} own_rng")
    for name in ("dataset", "iterator"):
        _decodable(snapshot.get(name), f"{where} {name}")
    return snapshot


def present(section: Mapping[str, Any], names: tuple[str, ...], where: str) -> None:
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


def next_epoch(plan: WorkerPlan) -> WorkerPlan:
    """A worker's plan for the epoch after the one it ended: its final snapshot — the
    dataset's state and the generators; an iterator's ended with its epoch (unless the
    dataset is its own iterator) — and nothing to skip."""
    return WorkerPlan(snapshot=None if plan.snapshot is None else epoch_start(plan.snapshot))


MAX_WORKERS = 4096


def warn_threads_replay(workers: dict[int, WorkerPlan], layout: Layout) -> None:
    """Warn (:class:`~fastdata.ReplayWarning`) when loading a state makes thread workers
    replay an iterable dataset without ``state_dict()`` (``workers``: the plans of a state
    within an epoch): a worker with items to skip and no state of its dataset's or iterator's
    to restore runs its iterator again from the epoch's start, under the global generators
    that thread workers share and a resume cannot restore. Whether the dataset draws from
    them cannot be known here; the warning says when the replay is exact."""
    if not (layout.kind == "iterable" and layout.threads_replay and layout.num_workers):
        return
    replaying = {w: p.items for w, p in workers.items() if _replays_from_start(p)}
    if not replaying:
        return
    ids = ", ".join(map(str, replaying))
    warn_user(
        f"this resume replays your IterableDataset in thread workers: worker(s) {ids} run its "
        f"iterator again from the epoch's start and skip the {sum(replaying.values())} items "
        "they had delivered (it has no state_dict() to restore). The replay is exact only if "
        "the dataset's order and items do not depend on the global random generators (random, "
        "numpy, torch), which thread workers share and a resume cannot restore; if they do, "
        "items of the rest of the epoch are repeated and others missed. Then give the dataset "
        "state_dict() / load_state_dict(), draw its randomness from fastdata.worker_generator() "
        "(or a generator seeded from get_worker_info().seed), or use process workers "
        "(worker_method='multiprocessing').",
        ReplayWarning,
    )


def _replays_from_start(plan: WorkerPlan) -> bool:
    """Whether a worker resuming by ``plan`` runs its iterator again from the epoch's start to
    skip items (not restored from a snapshot of its dataset's or iterator's state)."""
    snapshot = plan.snapshot or {}
    restored = snapshot.get("dataset") is not None or snapshot.get("iterator") is not None
    return not plan.ended and not restored and plan.items > 0
