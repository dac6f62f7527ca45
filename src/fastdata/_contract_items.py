"""The decoders :func:`fastdata.check_reader` reads through: each item tagged with the
worker that made it, and keys that tell rows (or items) apart."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from fastdata._env import worker_slot
from fastdata.ragged import Ragged
from fastdata.sources.base import INDEX, Context, Decoder, VaryingDecoder, varies

__all__ = ["Probe", "fingerprint", "fingerprints", "tagged"]


def fingerprints(table: pa.Table) -> list[str]:
    """A short hash of each row's values (:data:`INDEX` left out)."""
    if INDEX in table.column_names:
        table = table.drop_columns([INDEX])
    return [digest(repr(sorted(row.items()))) for row in table.to_pylist()]


def digest(text: str) -> str:
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def fingerprint(item: Any) -> list[Hashable]:
    """One key for an item: a hash of its contents (tensors and arrays by their bytes)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Ragged):  # every row, not the preview its repr shows
            start, end = int(value.offsets[0]), int(value.offsets[-1])
            rows = (value.values[start:end], value.offsets - start, value.valid)
            return ("ragged", value.kind, [plain(part) for part in rows])
        if hasattr(value, "numpy"):
            value = value.numpy()
        if isinstance(value, np.ndarray) and value.dtype.hasobject:  # bytes are pointers
            return (value.dtype.str, value.shape, [plain(v) for v in value.ravel().tolist()])
        if isinstance(value, np.ndarray):
            return (value.dtype.str, value.shape, digest(value.tobytes().hex()))
        if isinstance(value, dict):
            return sorted((k, plain(v)) for k, v in value.items())
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return value

    return [digest(repr(plain(item)))]


class Probe:
    """The default decoder: each row's position and a hash of its values, tagged with the
    worker (the reader is checked down to each row)."""

    needs_index = True

    def batch(self, table: pa.Table, context: Context) -> tuple[int, list[tuple[int, str]]]:
        index = table.column(INDEX).to_pylist()
        return worker_slot()[0], list(zip(index, fingerprints(table), strict=True))

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        for i in range(table.num_rows):
            yield self.batch(table.slice(i, 1), context)


class _Tagged:
    """A decoder's items tagged with the worker that made them."""

    def __init__(self, inner: Decoder) -> None:
        self.inner = inner
        self.needs_index = inner.needs_index

    def batch(self, table: pa.Table, context: Context) -> tuple[int, Any]:
        return worker_slot()[0], self.inner.batch(table, context)

    def rows(self, table: pa.Table, context: Context) -> Iterator[tuple[int, Any]]:
        worker = worker_slot()[0]
        return ((worker, item) for item in self.inner.rows(table, context))


class _TaggedVarying(_Tagged):
    """A :class:`~fastdata.sources.VaryingDecoder`'s items tagged with their worker."""

    varying = True

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[Any, tuple[int, int]]]:
        worker = worker_slot()[0]
        inner: VaryingDecoder = self.inner  # type: ignore[assignment]
        for item, position in inner.items(tables, context, offset):
            yield (worker, item), position


def tagged(decoder: Decoder) -> _Tagged:
    return _TaggedVarying(decoder) if varies(decoder) else _Tagged(decoder)
