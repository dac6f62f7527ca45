"""Every rank's loader state on every rank: what resumes a fastdata stream exactly whether
or not the ranks went in lockstep (see :meth:`fastdata.DataLoader.load_state_dict`)."""

from __future__ import annotations

from typing import Any

from fastdata.loader._loader import DataLoader

__all__ = ["gather_state"]


def gather_state(loader: DataLoader | dict[str, Any]) -> list[dict[str, Any]]:
    """Every rank's ``loader.state_dict()`` (or the state passed), in rank order, on every
    rank (a collective: all ranks of the ``torch.distributed`` group must call it; a list of
    one in a single process).

    A fastdata stream's state from one rank resumes exactly when the ranks went in lockstep,
    as DDP training does; the list of every rank's state resumes exactly in any case, under
    any world size and ``num_workers``: pass it to :meth:`DataLoader.load_state_dict`.
    """
    import torch.distributed as dist

    own = loader if isinstance(loader, dict) else loader.state_dict()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [own]
    states: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(states, own)
    return states
