"""Length bucketing, so that padded batches waste little, and a measure of that waste.

Padding every batch to its longest item wastes most of the compute when lengths are
long-tailed: one 512-token sample pads 255 short ones. :func:`bucket_by_length` groups
samples of similar length before they are batched; :func:`padding_stats` says how much a
batching pads. Both are plain generators / loops over any iterable, torch-free for streams of
samples; streams of already batched items (a :class:`~fastdata.Ragged` column, ``key=``) are
regrouped row by row with vectorised torch operations in :mod:`fastdata.collate._bucket_rows`. The
public names are exported from ``fastdata.collate``.
"""

from __future__ import annotations

import bisect
import math
import operator
import random
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain, islice, pairwise
from typing import Any, Literal, TypeVar

from fastdata._validate import check_int, constructor_keywords_checked, is_int
from fastdata.collate._bucket_state import Bucketing, Track

__all__ = ["PaddingStats", "bucket_by_length", "padding_stats"]

T = TypeVar("T")

_POOL_BATCHES = 32
"""Default buffer, in batches: enough for well-sorted pools, small enough to stay random."""


def bucket_by_length(
    stream: Iterable[T],
    /,
    *,
    length_fn: Callable[[T], int] | None = None,
    key: Any = None,
    batch_size: int,
    boundaries: Sequence[int] | Literal["auto"] | None = None,
    buffer_size: int | None = None,
    seed: int | None = 0,
    drop_last: bool = False,
) -> Bucketing[Any]:
    """Group the samples of ``stream`` into batches of samples of similar length.

    Two kinds of stream:

    * samples, with ``length_fn``: it yields lists of samples, so collate them with
      :func:`~fastdata.collate.pad_collate` (as ``collate_fn`` of a
      ``DataLoader(batch_size=None)``, which then collates each list it receives);
    * already batched items, with ``key``: each item is a batch such as
      ``ParquetStream(batch_size=N)`` yields (a dict of columns), ``key`` names its
      :class:`~fastdata.Ragged` column whose row lengths count, and the *rows* of the
      batches are regrouped into new batches of the same form (every column gathered with
      one ``take``, no tensor per row), ready for ``pad_collate(batch)``.

    Every sample (row) is yielded exactly once, in exactly one batch; every batch has
    ``batch_size`` of them except at most one, the last, which ``drop_last=True`` drops. At
    most ``buffer_size`` samples are held at once (rows: ``buffer_size`` plus one incoming
    batch). The order depends only on the stream and ``seed`` (``seed=None``: on torch's
    global generator, which draws the seed).

    Three ways to group, chosen by ``boundaries``:

    * ``None``: fill a pool of ``buffer_size`` consecutive samples, sort it by length (ties
      in a seeded random order), cut it into batches and yield those in a seeded random
      order; the newest samples that fill no batch begin the next pool. The least padding
      for a given buffer.
    * a list of increasing lengths: bucket ``i`` holds lengths in
      ``[boundaries[i-1], boundaries[i])`` (bucket 0 below ``boundaries[0]``, the last one
      from ``boundaries[-1]`` up); a bucket is yielded as soon as it holds ``batch_size``
      samples, so batches keep the stream's order and randomness.
    * ``"auto"``: boundaries at the quantiles of the lengths of the first ``buffer_size``
      samples, ``buffer_size // batch_size`` equally filled buckets, then as with a list.

    At the end of the stream the partly filled buckets (or the last pool) are merged,
    sorted and cut into batches, so only the very last batch may be short.

    Resume: the bucketing holds rows it read and has not yielded, so save *its*
    ``state_dict()``, not the loader's (which raises :class:`~fastdata.errors.ResumeError`
    while rows are held, rather than lose them), and ``load_state_dict()`` it into a new
    bucketing of a new loader before the first batch. It resumes exactly from any batch:
    pools re-read the current pool's rows; buckets re-read from before the oldest row they
    hold. The stream must have ``state_dict()`` / ``load_state_dict()``: a fastdata
    DataLoader (or, for saving only, its iterator).

    Args:
        stream: any iterable of samples: a list, a generator, an ``IterableDataset`` (or one
            worker's share of it), or indices into a map-style dataset.
        length_fn: the length of a sample, a non-negative int (e.g. ``len``); for a stream
            of samples.
        key: for a stream of batches, the key path of their Ragged column, as
            ``pad_collate``'s ``keys`` takes it: a key (``"tokens"``), a namedtuple field
            name or tuple position (``1``), a tuple of those for a nested one, ``()`` for
            items that are a Ragged themselves.
        batch_size: samples (rows) per batch.
        boundaries: ``None``, ``"auto"`` or a list of increasing positive ints, see above.
        buffer_size: the most samples held at once; at least ``batch_size``. Default
            ``32 * batch_size``. With a list of boundaries the buckets hold at most
            ``len(boundaries) + 1`` partial batches, which ``buffer_size`` must allow.
        seed: an int >= 0 that seeds the ordering; pass e.g. ``seed + epoch`` for a new
            order every epoch. Pools: it orders the batches of each pool and samples of
            equal length. Buckets (a list or ``"auto"``): batches come in the stream's order,
            and it orders only the batches cut from the leftovers merged at the end, so two
            seeds give mostly the same batches (shuffle the stream for a new order).
            ``None`` draws the seed at the call from torch's global generator, as
            ``RandomSampler(generator=None)`` does: after ``torch.manual_seed(s)`` it is the
            same in every process and run. Processes that split the batches (DDP ranks
            keeping ``batches[rank::world]``) must agree on the seed: pass the same int, or
            seed torch alike on every rank. ``state_dict()`` saves the seed, so a resume
            (with ``seed=None`` again) continues that order.
        drop_last: drop the last batch when it is short.

    Returns:
        An iterator of batches (lists of samples, or batches of rows with ``key``), with
        ``state_dict()`` / ``load_state_dict()``.

    Raises:
        ValueError: a bad argument (checked at the call, not at the first batch), a
            negative length, or (``key``) a batch whose columns do not all have as many rows
            as its Ragged (the columns and their row counts named).
        TypeError: ``length_fn`` returned something other than an int; neither or both of
            ``length_fn`` and ``key``; an item without a Ragged at ``key``.

    Examples:
        >>> batches = bucket_by_length(["aaa", "b", "cc", "dddd"], length_fn=len, batch_size=2)
        >>> sorted(sorted(b, key=len) for b in batches)
        [['aaa', 'dddd'], ['b', 'cc']]
    """
    if (length_fn is None) == (key is None):
        raise TypeError(
            "pass length_fn= for a stream of samples (e.g. length_fn=len), or key= for a "
            "stream of batches holding a fastdata.Ragged column (e.g. key='tokens'), not "
            f"{'both' if key is not None else 'neither'}"
        )
    batch_size = check_int("batch_size", batch_size, minimum=1)
    buffer_size = check_int(
        "buffer_size", buffer_size, minimum=batch_size, none="None for the default"
    )
    if isinstance(boundaries, str) and boundaries != "auto":
        raise ValueError(f"boundaries={boundaries!r}: expected None, 'auto' or a list of ints")
    if boundaries is None or isinstance(boundaries, str):
        fixed = None
        buffer_size = _POOL_BATCHES * batch_size if buffer_size is None else buffer_size
    else:
        fixed = list(boundaries)
        if (
            not fixed
            or not all(is_int(b) for b in fixed)
            or fixed[0] < 1
            or any(a >= b for a, b in pairwise(fixed))
        ):
            raise ValueError(
                f"boundaries={boundaries!r}: expected a non-empty list of strictly "
                "increasing positive lengths, e.g. [16, 32, 64, 128]"
            )
        held = (len(fixed) + 1) * (batch_size - 1) + 1
        if buffer_size is not None and buffer_size < held:
            raise ValueError(
                f"buffer_size={buffer_size} cannot hold a partial batch for each of the "
                f"{len(fixed) + 1} buckets; pass buffer_size>={held} or fewer boundaries"
            )
    settings = {
        "batch_size": batch_size,
        "buffer_size": buffer_size,
        "boundaries": boundaries if boundaries is None or isinstance(boundaries, str) else fixed,
        "seed": check_int(
            "seed", seed, minimum=0, none="None for one drawn from torch's global generator"
        ),
        "drop_last": drop_last,
    }
    pooled = boundaries is None
    every = buffer_size or _POOL_BATCHES * batch_size  # buckets: rows between checkpoints
    if key is not None:
        from fastdata.collate._bucket_rows import bucketing  # torch is loaded there

        return bucketing(stream, key, settings, fixed, every)
    assert length_fn is not None  # checked above

    def build(items: Iterator[T], track: Track) -> Iterator[list[T]]:
        measured = _measured(track.reading(items, _one), length_fn)
        if pooled:
            return _pooled(measured, batch_size, buffer_size, track, drop_last)
        if track.boundaries is None and fixed is not None:
            track.boundaries = fixed
        return _bucketed(measured, batch_size, buffer_size, track, drop_last)

    return Bucketing(stream, settings, build, _rng, pooled, every)


def _rng(seed: int, pool: int) -> random.Random:
    return random.Random(f"{seed}/{pool}")


def _one(item: Any) -> int:
    return 1


@constructor_keywords_checked
@dataclass(frozen=True)
class PaddingStats:
    """How much padding a batching needs.

    Attributes:
        batches: number of batches.
        samples: number of samples.
        valid_elements: elements of the samples themselves.
        total_elements: elements of the padded batches, padding included.
    """

    batches: int
    samples: int
    valid_elements: int
    total_elements: int

    @property
    def padded_fraction(self) -> float:
        """The share of the padded batches' elements that is padding (0 when empty)."""
        if self.total_elements == 0:
            return 0.0
        return 1 - self.valid_elements / self.total_elements


def padding_stats(
    batches: Iterable[Any],
    /,
    *,
    length_fn: Callable[[Any], int | Sequence[int]] = len,
    key: Any = None,
) -> PaddingStats:
    """Measure the padding that padding each batch to its largest item would add.

    Works on batches before collation (e.g. what :func:`bucket_by_length` yields), so it
    is cheap enough to compare batchings. It consumes ``batches``.

    Args:
        batches: lists of samples; or already batched items holding a
            :class:`~fastdata.Ragged` at ``key`` (a Ragged itself needs no ``key``), whose
            rows are measured from the offsets.
        length_fn: a sample's length, or its shape (e.g. ``lambda s: s.shape``) for samples
            padded along several dims; it is padded to the per-dim batch maximum.
        key: the key path of the Ragged column in already batched items.

    Returns:
        The totals; ``padded_fraction`` is the share that is padding.

    Examples:
        >>> stats = padding_stats([["ab", "cdef"], ["gh", "ij"]])
        >>> stats
        PaddingStats(batches=2, samples=4, valid_elements=10, total_elements=12)
        >>> round(stats.padded_fraction, 3)
        0.167
    """
    n_batches = n_samples = valid = total = 0
    for batch in batches:
        shapes = _batch_shapes(batch, key, length_fn, n_batches)
        if not shapes:
            continue
        if any(len(s) != len(shapes[0]) for s in shapes):
            raise ValueError(
                f"batch {n_batches} mixes shapes of different ranks {sorted(set(shapes))}; "
                "length_fn must return one int, or shapes of one rank, for every sample"
            )
        n_batches += 1
        n_samples += len(shapes)
        valid += sum(math.prod(s) for s in shapes)
        total += len(shapes) * math.prod(max(dim) for dim in zip(*shapes, strict=True))
    return PaddingStats(n_batches, n_samples, valid, total)


def _batch_shapes(
    batch: Any, key: Any, length_fn: Callable[[Any], Any], index: int
) -> list[tuple[int, ...]]:
    """The shape of every sample (row) of one batch."""
    ragged_module = sys.modules.get("fastdata.ragged")  # no Ragged exists before it loads
    is_ragged = ragged_module is not None and isinstance(batch, ragged_module.Ragged)
    if key is None and not is_ragged:
        return [_shape(length_fn(sample)) for sample in batch]
    from fastdata.collate._bucket_rows import ragged_at

    ragged = ragged_at(
        batch, () if key is None else key if isinstance(key, tuple) else (key,), index
    )
    inner = tuple(ragged.values.shape[1:])
    return [(n, *inner) for n in ragged.lengths.tolist()]


def _shape(length: int | Sequence[int]) -> tuple[int, ...]:
    if isinstance(length, Sequence):
        return tuple(operator.index(n) for n in length)
    return (operator.index(length),)


def _measured(stream: Iterable[T], length_fn: Callable[[T], int]) -> Iterator[tuple[int, T]]:
    for i, sample in enumerate(stream):
        raw = length_fn(sample)
        try:
            if isinstance(raw, bool):
                raise TypeError
            length = operator.index(raw)
        except TypeError:
            raise TypeError(
                f"length_fn returned {raw!r} ({type(raw).__name__}) for stream item {i}; "
                "it must return an int, e.g. length_fn=len or lambda s: s['tokens'].shape[0]"
            ) from None
        if length < 0:
            raise ValueError(f"length_fn returned {length} for stream item {i}; lengths are >= 0")
        yield length, sample


def _pooled(
    measured: Iterator[tuple[int, T]],
    batch_size: int,
    buffer_size: int,
    track: Track,
    drop_last: bool,
) -> Iterator[list[T]]:
    """Pools of consecutive samples (see :mod:`fastdata.collate._bucket_state`)."""
    pool: list[tuple[int, T]] = []
    drop = track.dropping()
    for item in measured:
        if drop:
            drop -= 1
            continue
        pool.append(item)
        if len(pool) >= buffer_size:
            keep = len(pool) % batch_size  # the newest samples begin the next pool
            cut = len(pool) - keep
            batches = _cut(pool[:cut], batch_size, track.rng(), drop_last=drop_last)
            pool = pool[cut:]
            yield from track.pour(((b, len(b)) for b in batches), keep)
    batches = _cut(pool, batch_size, track.rng(), drop_last=drop_last)
    yield from track.pour(((b, len(b)) for b in batches), 0)


def _bucketed(
    measured: Iterator[tuple[int, T]],
    batch_size: int,
    buffer_size: int,
    track: Track,
    drop_last: bool,
) -> Iterator[list[T]]:
    boundaries = track.boundaries
    if boundaries is None:  # "auto": quantiles of the first buffer's lengths
        head = list(islice(measured, buffer_size))
        lengths = sorted(length for length, _ in head)
        n = buffer_size // batch_size
        quantiles = {lengths[k * len(lengths) // n] for k in range(1, n)} if lengths else set()
        boundaries = track.boundaries = sorted(quantiles)
        measured = chain(head, measured)
    buckets: list[list[tuple[int, T]]] = [[] for _ in range(len(boundaries) + 1)]
    track.buckets(len(buckets))
    for length, sample in measured:
        b = bisect.bisect_right(boundaries, length)
        if track.assign(b, 1):  # a resume drops what was yielded before
            continue
        bucket = buckets[b]
        bucket.append((length, sample))
        if len(bucket) == batch_size:
            track.emit(batch_size, b)
            yield [s for _, s in bucket]
            bucket.clear()
    rest = [item for bucket in buckets for item in bucket]
    batches = _cut(rest, batch_size, track.rng(), drop_last=drop_last)
    yield from track.pour(((b, len(b)) for b in batches), 0)


def _cut(
    pool: list[tuple[int, Any]], batch_size: int, rng: random.Random, *, drop_last: bool
) -> list[list[Any]]:
    """Sort ``pool`` by length and cut it into batches in a random order; the longest
    samples that fill no batch form the last (short) one, or are dropped."""
    rng.shuffle(pool)  # a random order among samples of equal length
    pool.sort(key=lambda item: item[0])
    full = len(pool) - len(pool) % batch_size
    batches = [[s for _, s in pool[i : i + batch_size]] for i in range(0, full, batch_size)]
    rng.shuffle(batches)
    if pool[full:] and not drop_last:
        batches.append([s for _, s in pool[full:]])
    return batches
