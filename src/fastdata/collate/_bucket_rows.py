"""Length bucketing of the rows of already batched items (dicts of columns holding a Ragged).

:func:`fastdata.bucket_by_length` with ``key=`` lands here. The rows of the incoming batches
are regrouped into new batches of rows of similar length, with the same rules as for a stream
of samples (see :mod:`fastdata.collate._bucket`), but every step is one vectorised operation per
column: lengths come from the Ragged's offsets, rows are gathered with one ``take`` per column
and batches joined with one concatenation per column. No tensor per row is made.

A batch is a :class:`~fastdata.Ragged`, or a mapping / tuple of columns: tensors (rows along
the first dim), Ragged, numpy arrays, or lists of Python objects, all with the same number of
rows.
"""

from __future__ import annotations

import collections.abc as cabc
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from fastdata.collate._bucket_state import Bucketing, Track
from fastdata.ragged import Ragged

KeyPath = tuple[Any, ...]


def bucketing(
    stream: Iterable[Any], key: Any, settings: dict[str, Any], fixed: list[int] | None, every: int
) -> Bucketing[Any]:
    """:func:`fastdata.bucket_by_length` of the rows of a stream of batches (``settings``:
    its arguments, checked; ``fixed``: a list of boundaries; ``every``: rows between
    checkpoints of buckets)."""
    path = key if isinstance(key, tuple) else (key,)
    batch_size, drop_last = settings["batch_size"], settings["drop_last"]
    buffer_size = settings["buffer_size"]
    pooled = settings["boundaries"] is None

    def build(items: Iterator[Any], track: Track) -> Iterator[Any]:
        batches = track.reading(measured_batches(items, path), row_count)
        if pooled:
            return pooled_rows(batches, batch_size, buffer_size, track, drop_last)
        if track.boundaries is None and fixed is not None:
            track.boundaries = fixed
        return bucketed_rows(batches, batch_size, buffer_size or 0, track, drop_last)

    return Bucketing(stream, settings, build, _rng, pooled, every)


def _rng(seed: int, pool: int) -> np.random.Generator:
    return np.random.default_rng([seed, pool])


def ragged_at(batch: Any, path: KeyPath, index: int | None = None) -> Ragged:
    """The Ragged at ``path`` in ``batch`` (``index``: the stream item, for messages): a
    key path as ``pad_collate``'s ``keys`` takes it (mapping keys, namedtuple field names,
    tuple positions)."""
    value, where = batch, ""
    item = "" if index is None else f" (stream item {index})"
    shown = path[0] if len(path) == 1 else path
    for key in path:
        if isinstance(value, cabc.Mapping) and key in value:
            value, where = value[key], f"{where}[{key!r}]"
        elif isinstance(value, tuple) and hasattr(value, "_fields") and key in value._fields:
            value, where = getattr(value, key), f"{where}.{key}"
        elif (
            isinstance(value, tuple | list)
            and isinstance(key, int)
            and not isinstance(key, bool)
            and -len(value) <= key < len(value)
        ):
            value, where = value[key], f"{where}[{key}]"
        else:
            raise TypeError(
                f"key={shown!r}: the batch{item}{' at ' + where if where else ''} has no "
                f"{key!r} ({_has(value)}); name the variable-length column of batches such "
                "as ParquetStream(batch_size=N) yields, e.g. key='tokens'"
            )
    if not isinstance(value, Ragged):
        raise TypeError(
            f"key={shown!r}: the batch{item} holds {type(value).__name__} there, not a "
            "fastdata.Ragged; name the variable-length column of batches such as "
            "ParquetStream(batch_size=N) yields, e.g. key='tokens'"
        )
    return value


def _has(value: Any) -> str:
    """What a key path can name in ``value``, for a message."""
    if isinstance(value, cabc.Mapping):
        return "its keys: " + ", ".join(map(repr, value)) if value else "it is empty"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return f"its fields: {', '.join(value._fields)}, or positions 0..{len(value) - 1}"
    if isinstance(value, tuple | list):
        return f"its positions: 0..{len(value) - 1}" if value else "it is empty"
    return f"it is a {type(value).__name__}"


def take(batch: Any, index: torch.Tensor) -> Any:
    """The rows ``index`` (int64, CPU) of every column of ``batch``, in that order."""
    if isinstance(batch, Ragged):
        return batch.take(index.to(batch.device))
    if isinstance(batch, torch.Tensor):
        return batch[index.to(batch.device)]
    if isinstance(batch, np.ndarray):
        return batch[index.numpy()]
    if isinstance(batch, cabc.Mapping):
        return type(batch)({k: take(v, index) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, tuple):
        values = [take(v, index) for v in batch]
        return type(batch)(*values) if hasattr(batch, "_fields") else tuple(values)
    if isinstance(batch, list):
        return [batch[i] for i in index.tolist()]
    raise TypeError(f"cannot select rows of a {type(batch).__name__} column")


def concat(parts: Sequence[Any]) -> Any:
    """The rows of ``parts`` (batches of one structure) one after the other."""
    first = parts[0]
    if len(parts) == 1:
        return first
    if isinstance(first, Ragged):
        return Ragged.cat(parts)
    if isinstance(first, torch.Tensor):
        return torch.cat(list(parts))
    if isinstance(first, np.ndarray):
        return np.concatenate(parts)
    if isinstance(first, cabc.Mapping):
        return type(first)({k: concat([p[k] for p in parts]) for k in first})  # type: ignore[call-arg]
    if isinstance(first, tuple):
        values = [concat(column) for column in zip(*parts, strict=True)]
        return type(first)(*values) if hasattr(first, "_fields") else tuple(values)
    if isinstance(first, list):
        return [row for p in parts for row in p]
    raise TypeError(f"cannot concatenate {type(first).__name__} columns")


class _Rows:
    """Rows waiting to be batched: batches and their lengths, joined only when cut."""

    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.lengths: list[np.ndarray] = []
        self.count = 0

    def add(self, batch: Any, lengths: np.ndarray) -> None:
        if len(lengths):
            self.parts.append(batch)
            self.lengths.append(lengths)
            self.count += len(lengths)

    def join(self) -> tuple[Any, np.ndarray]:
        batch, lengths = concat(self.parts), np.concatenate(self.lengths)
        self.parts, self.lengths, self.count = [], [], 0
        return batch, lengths


def measured_batches(stream: Iterable[Any], path: KeyPath) -> Iterator[tuple[Any, np.ndarray]]:
    """Each batch of ``stream`` with the lengths of its rows (from the Ragged at ``path``),
    once every column is checked to have as many rows as that Ragged."""
    for i, batch in enumerate(stream):
        ragged = ragged_at(batch, path, i)
        _check_rows(batch, path, len(ragged), i)
        yield batch, ragged.lengths.cpu().numpy()


def _check_rows(batch: Any, path: KeyPath, rows: int, index: int) -> None:
    """Refuse a batch whose columns do not all have ``rows`` rows: its rows could not be
    regrouped (a longer column would lose its extra rows, a shorter one fail in ``take``)."""
    wrong = [(where, n) for where, n in _column_rows(batch, "") if n != rows]
    if wrong:
        key = path[0] if len(path) == 1 else path
        columns = ", ".join(f"batch{where} has {n}" for where, n in wrong)
        raise ValueError(
            f"the batch (stream item {index}) has columns of different row counts: the Ragged "
            f"at key={key!r} has {rows} rows, but {columns}; every column of a batch must "
            "have one row per row of the Ragged (as a pyarrow.RecordBatch), so fix the "
            "transform that built it"
        )


def _column_rows(batch: Any, where: str) -> Iterator[tuple[str, int | str]]:
    """``(position, row count)`` of every column of ``batch`` (a 0-d tensor has none)."""
    if isinstance(batch, Ragged | list):
        yield where, len(batch)
    elif isinstance(batch, torch.Tensor | np.ndarray):
        yield where, batch.shape[0] if batch.ndim else "no rows (0-d)"
    elif isinstance(batch, cabc.Mapping):
        for k, v in batch.items():
            yield from _column_rows(v, f"{where}[{k!r}]")
    elif isinstance(batch, tuple):
        for k, v in enumerate(batch):
            yield from _column_rows(v, f"{where}[{k}]")


def row_count(item: tuple[Any, np.ndarray]) -> int:
    return len(item[1])


def pooled_rows(
    batches: Iterator[tuple[Any, np.ndarray]],
    batch_size: int,
    buffer_size: int,
    track: Track,
    drop_last: bool,
) -> Iterator[Any]:
    """Pools of at least ``buffer_size`` consecutive rows, each sorted by length and cut into
    batches (see :mod:`fastdata.collate._bucket_state`)."""
    pool = _Rows()
    drop = track.dropping()
    for batch, lengths in batches:
        if drop:  # a resumed pool begins past these rows
            n = min(drop, len(lengths))
            drop -= n
            batch, lengths = take(batch, torch.arange(n, len(lengths))), lengths[n:]
        pool.add(batch, lengths)
        if pool.count >= buffer_size:
            keep = pool.count % batch_size  # the newest rows begin the next pool
            yield from track.pour(_cut(pool, batch_size, track.rng(), keep, drop_last), keep)
    yield from track.pour(_cut(pool, batch_size, track.rng(), 0, drop_last), 0)


def bucketed_rows(
    batches: Iterator[tuple[Any, np.ndarray]],
    batch_size: int,
    buffer_size: int,
    track: Track,
    drop_last: bool,
) -> Iterator[Any]:
    """Rows by length bucket; a bucket is yielded as soon as it holds ``batch_size`` rows."""
    boundaries = track.boundaries
    if boundaries is None:  # "auto": quantiles of the first buffer's lengths
        head: list[tuple[Any, np.ndarray]] = []
        for item in batches:
            head.append(item)
            if sum(len(lengths) for _, lengths in head) >= buffer_size:
                break
        boundaries = track.boundaries = _quantiles(
            np.concatenate([lengths for _, lengths in head]) if head else np.empty(0, np.int64),
            buffer_size // batch_size,
        )
        batches = _chain(head, batches)
    edges = np.asarray(boundaries, dtype=np.int64)
    buckets = [_Rows() for _ in range(len(boundaries) + 1)]
    track.buckets(len(buckets))
    for batch, lengths in batches:
        ids = np.searchsorted(edges, lengths, side="right")
        for b in np.unique(ids).tolist():
            rows = np.flatnonzero(ids == b)
            rows = rows[track.assign(b, len(rows)) :]  # a resume drops what was yielded
            if not len(rows):
                continue
            bucket = buckets[b]
            bucket.add(take(batch, torch.from_numpy(rows)), lengths[rows])
            if bucket.count >= batch_size:
                joined, joined_lengths = bucket.join()
                for start in range(0, len(joined_lengths) - batch_size + 1, batch_size):
                    track.emit(batch_size, b)
                    yield take(joined, torch.arange(start, start + batch_size))
                rest = len(joined_lengths) - len(joined_lengths) % batch_size
                tail = torch.arange(rest, len(joined_lengths))
                bucket.add(take(joined, tail), joined_lengths[rest:])
    leftover = _Rows()
    for bucket in buckets:
        for part, lengths in zip(bucket.parts, bucket.lengths, strict=True):
            leftover.add(part, lengths)
    yield from track.pour(_cut(leftover, batch_size, track.rng(), 0, drop_last), 0)


def _quantiles(lengths: np.ndarray, n: int) -> list[int]:
    """Bucket boundaries at the ``n``-quantiles of ``lengths`` (as for samples)."""
    ordered = np.sort(lengths)
    if not len(ordered):
        return []
    return sorted({int(ordered[k * len(ordered) // n]) for k in range(1, n)})


def _chain(head: list[Any], rest: Iterator[Any]) -> Iterator[Any]:
    yield from head
    yield from rest


def _cut(
    pool: _Rows, batch_size: int, rng: np.random.Generator, keep: int, drop_last: bool
) -> Iterator[tuple[Any, int]]:
    """Leave the newest ``keep`` rows of ``pool`` in it; sort the others by length (ties in a
    seeded random order), cut them into batches and yield those, with their row counts, in a
    seeded random order. The longest rows that fill no batch form the last (short) one, or
    are dropped."""
    if not pool.count:
        return
    batch, lengths = pool.join()
    n = len(lengths) - keep
    if keep:
        pool.add(take(batch, torch.arange(n, len(lengths))), lengths[n:])
    order = rng.permutation(n)
    order = order[np.argsort(lengths[order], kind="stable")]
    full = n - n % batch_size
    chunks = [order[i : i + batch_size] for i in range(0, full, batch_size)]
    for k in rng.permutation(len(chunks)).tolist():
        yield take(batch, torch.from_numpy(chunks[k])), batch_size
    rest = order[full:]
    if len(rest) and not drop_last:
        yield take(batch, torch.from_numpy(rest)), len(rest)
