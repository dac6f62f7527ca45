"""The one place fastdata reads the distributed environment.

Rank and world size come, in order of precedence, from explicit arguments, an initialized
``torch.distributed`` process group, the ``RANK``/``WORLD_SIZE`` variables that ``torchrun``
sets, and finally a single process (0, 1).
"""

from __future__ import annotations

import os


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``(rank, world_size)`` for this process; see the module docstring for the precedence."""
    if (rank is None) != (world_size is None):
        raise ValueError(
            f"rank={rank}, world_size={world_size}: pass both or neither "
            "(neither reads torch.distributed or RANK/WORLD_SIZE)"
        )
    if rank is None or world_size is None:
        rank, world_size = _from_environment()
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}, world_size={world_size}: need 0 <= rank < world_size")
    return rank, world_size


def _from_environment() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if env_rank is not None and env_world is not None:
        try:
            return int(env_rank), int(env_world)
        except ValueError:
            raise ValueError(
                f"RANK={env_rank!r}, WORLD_SIZE={env_world!r}: expected integers"
            ) from None
    return 0, 1


def in_process_group() -> bool:
    """Whether this process is one of several ranks of an initialized ``torch.distributed``
    group (a collective such as ``all_gather_object`` then needs every rank)."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def worker_slot() -> tuple[int, int]:
    """``(worker id, number of workers)`` of the current DataLoader worker; (0, 1) outside."""
    from torch.utils.data import get_worker_info

    info = get_worker_info()
    return (0, 1) if info is None else (info.id, info.num_workers)
