"""Loading a stream's resume state: the checks a loaded one must pass, and where it puts the
next iteration.

A state is untrusted input (a file a user edited, a checkpoint of another job), so it is
validated field by field before anything uses it: every problem is a
:class:`fastdata.ResumeError` naming the field, the saved and the current value, and what to
do — never an ``IndexError`` from inside a worker, never a silently partial epoch. What a state
holds, and how one is made, is :mod:`fastdata.sources.state`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import get_worker_info

from fastdata._state_checks import (
    check_matches,
    fail,
    require_int,
    require_mapping,
    short,
    state_int,
)
from fastdata.errors import ResumeError
from fastdata.sources.elastic import Handover, remaining
from fastdata.sources.state import MAX_EPOCH, STATE_VERSION, Resume, StreamFacts

__all__ = ["Pending", "check_state", "resume_point", "validate"]


def validate(state: Any, *, type_name: str) -> dict[str, Any]:
    """The stream state ``state`` checked for shape and types (not yet against a stream)."""
    state = require_mapping(state, "state")
    if state.get("version") != STATE_VERSION:
        raise ResumeError(
            f"cannot resume: state version {short(state.get('version'))}, this fastdata reads "
            f"version {STATE_VERSION}; was the state saved by another fastdata release?"
        )
    if state.get("type") != type_name:
        raise ResumeError(
            f"cannot resume: the state was saved by a {short(state.get('type'))}, this is a "
            f"{type_name}; load each stream's own state"
        )
    world = require_int(state, "world_size", minimum=1)
    readers = require_int(state, "num_workers", minimum=1)
    out: dict[str, Any] = {
        "epoch": require_int(state, "epoch", maximum=MAX_EPOCH),
        "rank": require_int(state, "rank", maximum=world - 1),
        "world_size": world,
        "num_workers": readers,
        "batches": _counts(state.get("batches"), "batches", world),
        "consumed": _counts(state.get("consumed"), "consumed", world * readers),
        "rotations": _counts(state.get("rotations"), "rotations", world, maximum=readers - 1),
        "offsets": _counts(state.get("offsets"), "offsets", world * readers),
    }
    known = state.get("known")
    if not isinstance(known, list) or not known or len(set(map(repr, known))) != len(known):
        raise fail("known", known, "is not a list of distinct ranks; the state is corrupt")
    out["known"] = sorted(state_int("known", r, maximum=world - 1) for r in known)
    handovers = state.get("handovers")
    if not isinstance(handovers, list):
        raise fail("handovers", handovers, "is not a list; the state is corrupt")
    out["handovers"] = [_handover(h) for h in handovers]
    for section in ("settings", "data"):
        if section not in state:
            raise ResumeError(f"cannot resume: the state has no {section!r}; is it complete?")
        out[section] = dict(require_mapping(state[section], section))
    return out


def _counts(value: Any, field: str, size: int, *, maximum: int | None = None) -> list[int]:
    if not isinstance(value, list):
        raise fail(field, value, "is not a list of counts; the state is corrupt")
    if len(value) != size:
        raise fail(field, value, f"has {len(value)} counts where the layout has {size}")
    return [state_int(field, v, maximum=maximum) for v in value]


def _handover(value: Any) -> Handover:
    """A saved layout change, checked."""
    data = require_mapping(value, "handovers entry")
    world = require_int(data, "world_size", minimum=1)
    readers = require_int(data, "num_workers", minimum=1)
    return Handover(
        world, readers, tuple(_counts(data.get("consumed"), "consumed", world * readers))
    )


def check_state(stream: StreamFacts, state: Any) -> dict[str, Any]:
    """``state`` validated and checked against ``stream``, with ``"slot_rows"`` added: the
    rows each saved slot reads, per rank."""
    checked = validate(state, type_name=type(stream).__name__)
    check_matches(checked["settings"], stream.settings, "settings")
    check_matches(checked["data"], stream.reader.identity(), "data")
    world, readers = checked["world_size"], checked["num_workers"]
    where = {"epoch": checked["epoch"], "world_size": world}
    handovers = tuple(checked["handovers"])
    checked["slot_rows"] = [
        stream.slot_rows(readers, rank=r, handovers=handovers, **where) for r in range(world)
    ]
    if any(checked["offsets"]) and not stream.varying:
        raise ResumeError(
            f"cannot resume: the state's offsets={short(checked['offsets'])} but this stream "
            "reads whole rows per item (offsets are for packing); the state is corrupt"
        )
    flat = [n for rows in checked["slot_rows"] for n in rows]
    for slot, (done, rows, into) in enumerate(
        zip(checked["consumed"], flat, checked["offsets"], strict=True)
    ):
        if done > rows or (into and done == rows):
            raise ResumeError(
                f"cannot resume: the state's consumed[{slot}]={done}, but slot {slot} reads "
                f"only {rows} rows in epoch {checked['epoch']}; the state is corrupt or was "
                "saved for other data"
            )
    return checked


def resume_point(
    stream: StreamFacts, checked: dict[str, Any], num_workers: int, end_continues: bool = True
) -> tuple[int, tuple[Handover, ...], Resume | None]:
    """The epoch, its layout changes and this rank's position of a state loaded on
    ``stream`` read by ``num_workers`` readers (``checked``: the state as
    :func:`check_state` returned it); None when the epoch is over and ``end_continues`` (the
    next one begins)."""
    rank, world = stream.rank_and_world_size()
    epoch, handovers = checked["epoch"], tuple(checked["handovers"])
    saved = (checked["world_size"], checked["num_workers"])
    everyone = checked["known"] == list(range(saved[0]))
    if saved == (world, num_workers):
        if rank not in checked["known"]:
            raise ResumeError(
                f"cannot resume: the state knows the position of rank(s) {checked['known']} "
                f"only (a stream of a varying number of rows per item), this is rank {rank}; "
                "load every rank's state (fastdata.gather_state)"
            )
        mine = slice(rank * num_workers, (rank + 1) * num_workers)
        resume = Resume(
            num_workers,
            tuple(checked["consumed"][mine]),
            checked["rotations"][rank],
            tuple(checked["offsets"][mine]),
        )
        flat = [n for rows in checked["slot_rows"] for n in rows]
        finished = everyone and checked["consumed"] == flat
    else:  # another layout: what is left is shared anew
        if not everyone or any(checked["offsets"]):
            raise ResumeError(
                "cannot resume under another layout: "
                + (
                    "the state knows only its own rank's position; load every rank's state "
                    "(fastdata.gather_state)"
                    if not everyone
                    else "the state is in the middle of a document (packing), which only the "
                    "same layout can take up; resume with the saved world size and num_workers"
                )
            )
        handovers += (Handover(*saved, tuple(checked["consumed"])),)
        resume = Resume(num_workers, (0,) * num_workers, 0, (0,) * num_workers)
        finished = not remaining(stream.unit_rows(epoch), stream.policy, epoch, handovers)
    if finished and epoch + 1 > MAX_EPOCH:
        raise ResumeError(f"cannot resume: the state's epoch={epoch} is the last one")
    return epoch, handovers, None if finished and end_continues else resume


class Pending:
    """A loaded position that the next iteration's readers take, each once.

    Read in this process (``num_workers=0``), the stream itself is the reader. DataLoader
    workers read copies of the stream, which fork makes without asking it, so a copy made
    for a later iteration still holds the position: each reader marks it taken, with its
    iteration's base seed (``seed - id``, the same for every worker of one iteration), in
    memory that every copy shares; a later iteration's readers find it taken, even a reader
    whose namesake in the earlier iteration never started.
    """

    def __init__(self, resume: Resume) -> None:
        self.resume = resume
        # [taken, base seed of the iteration that took it, taken by reader w ...]
        self._claims = torch.zeros(2 + resume.num_workers, dtype=torch.int64).share_memory_()

    @property
    def taken(self) -> bool:
        """Whether an iteration started from the position."""
        return bool(self._claims[0])

    def take(self, worker: int, num_workers: int) -> Resume | None:
        """The position for reader ``worker`` of ``num_workers``; None once taken by an
        earlier iteration.

        Raises:
            ResumeError: the position was loaded for another number of readers.
        """
        info = get_worker_info()
        claims = self._claims.numpy()
        base = 0 if info is None else info.seed - info.id
        if claims[0] and claims[1] != base:
            return None
        if self.resume.num_workers != num_workers:
            raise ResumeError(
                f"cannot resume: the state was loaded for {self.resume.num_workers} reader(s) "
                f"per rank, and {num_workers} read; load it with "
                "fastdata.DataLoader.load_state_dict, which knows its num_workers"
            )
        if claims[2 + worker]:
            return None
        claims[0], claims[1], claims[2 + worker] = 1, base, 1
        return self.resume
