"""The options every stream takes, declared and documented once (:class:`StreamOptions`), and
their checks."""

from __future__ import annotations

from typing import TypedDict

from fastdata._env import resolve_rank
from fastdata._validate import check_bool, check_choice, check_int
from fastdata.sources.plan import EvenBatches, Policy

__all__ = ["StreamOptions", "checked_options"]


class StreamOptions(TypedDict, total=False):
    """The options of every stream (keyword-only; :class:`fastdata.PlannedStream` and each
    constructor that builds one: ``ParquetStream``, ``ImageStream.from_*``, ``mix``, ...).

    Attributes:
        batch_size: rows per yielded item (use it with ``DataLoader(batch_size=None)``);
            ``None`` (default) yields one item per row for the DataLoader's own batching
            (slower: Python work per row).
        shuffle: shuffle unit order and the rows within windows of ``shuffle_buffer`` rows
            (default False).
        seed: with the epoch (``set_epoch``), fixes the order (default 0).
        shuffle_buffer: rows mixed together when shuffling; memory grows with it (default
            16,384; 2,048 for images).
        drop_last: drop the globally last partial batch (see ``summary()``).
        even_batches: ``"drop"`` or ``"pad"`` to give every rank exactly the same number of
            items (default None: counts differ by at most one). ``fastdata.pack`` refuses
            it: packed batch counts are known only once packed and can differ by more.
        rank: this process's rank; with ``world_size``, or neither: then it comes from
            torch.distributed or the ``RANK``/``WORLD_SIZE`` variables.
        world_size: the number of ranks; with ``rank``, or neither.
        read_ahead: windows read on background threads ahead of the one being consumed
            (default 2); 0 reads in line. Memory holds up to ``1 + read_ahead`` windows per
            reader.
    """

    batch_size: int | None
    shuffle: bool
    seed: int
    shuffle_buffer: int
    drop_last: bool
    even_batches: EvenBatches
    rank: int | None
    world_size: int | None
    read_ahead: int


def checked_options(
    *,
    batch_size: int | None = None,
    shuffle: bool = False,
    seed: int = 0,
    shuffle_buffer: int = 16_384,
    drop_last: bool = False,
    even_batches: EvenBatches = None,
    rank: int | None = None,
    world_size: int | None = None,
    read_ahead: int = 2,
) -> tuple[Policy, tuple[int | None, int | None], int]:
    """The stream options checked (a TypeError / ValueError naming the option): the epoch
    policy, the ``(rank, world_size)`` passed, and ``read_ahead``."""
    batch_size = check_int("batch_size", batch_size, minimum=1, none="None to yield rows")
    if check_bool("drop_last", drop_last) and batch_size is None:
        raise ValueError(
            "drop_last=True needs batch_size: with batch_size=None the stream yields rows "
            "and DataLoader(drop_last=...) drops the partial batch"
        )
    policy = Policy(
        batch_size=batch_size or 1,
        shuffle=check_bool("shuffle", shuffle),
        seed=check_int("seed", seed, minimum=0, maximum=2**63 - 1),
        drop_last=drop_last,
        even_batches=check_choice("even_batches", even_batches, (None, "drop", "pad")),
        shuffle_buffer=check_int("shuffle_buffer", shuffle_buffer, minimum=0),
    )
    rank = check_int("rank", rank, minimum=0, none="None (with world_size=None)")
    world_size = check_int("world_size", world_size, minimum=1, none="None (with rank=None)")
    if (rank is None) != (world_size is None) or (rank or 0) >= (world_size or 1):
        resolve_rank(rank, world_size)  # raises the explanatory error
    return policy, (rank, world_size), check_int("read_ahead", read_ahead, minimum=0)
