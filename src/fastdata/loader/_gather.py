"""Every rank's loader state on every rank: what resumes a fastdata stream exactly whether
or not the ranks went in lockstep (see :meth:`fastdata.DataLoader.load_state_dict`), and the
one a loader over a user's dataset takes from that list (its own rank's)."""

from __future__ import annotations

from typing import Any, Protocol

import torch.distributed as dist

from fastdata._env import in_process_group
from fastdata.errors import ResumeError

__all__ = ["gather_state", "own_rank_state"]


class _Saving(Protocol):
    def state_dict(self) -> dict[str, Any]: ...


def gather_state(loader: _Saving | dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``loader.state_dict()`` (or the state passed), in rank order, on every
    rank (a collective: all ranks of the ``torch.distributed`` group must call it; a list of
    one in a single process).

    A fastdata stream's state from one rank resumes exactly when the ranks went in lockstep,
    as DDP training does; the list of every rank's state resumes exactly in any case, under
    any world size and ``num_workers``: pass it to :meth:`DataLoader.load_state_dict`. A
    loader over your own dataset takes its own rank's state from the list.
    """
    own = loader if isinstance(loader, dict) else loader.state_dict()
    if not in_process_group():
        return [own]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, own)
    return states


def own_rank_state(states: list[Any]) -> Any:
    """This rank's state from every rank's (:func:`gather_state`'s list, in rank order): a
    loader over a user's dataset (map-style with a ``DistributedSampler``, or iterable)
    resumes from its own rank's position, which differs from rank to rank.

    Raises:
        ResumeError: the list is not one state per rank of this job.
    """
    if len(states) == 1:
        return states[0]
    if not in_process_group():
        raise ResumeError(
            f"cannot resume: a list of {len(states)} ranks' states, but this process is in no "
            "torch.distributed group: load the state of the rank this process stands for"
        )
    world, rank = dist.get_world_size(), dist.get_rank()
    if len(states) != world:
        raise ResumeError(
            f"cannot resume: a list of {len(states)} ranks' states, but this job has {world} "
            "ranks; a loader over your own dataset resumes with the world size it was saved "
            "with (a fastdata stream resumes under any)"
        )
    return states[rank]
