"""Checks of the streams that ``fastdata.mix`` and ``fastdata.pack`` take apart for their
readers and decoders: the stream options such a source was built with (which the mix or the
pack does not use), and that the sources of a mix read columns of one schema, so that their
tables concatenate into one batch.

Sources whose schemas differ only where the values do not (nullability, string / binary /
list against their large forms, the column order) are read through :class:`CastReader`,
which casts each table to the one schema of the mix. A column that one source lacks, or one
of another type (``list<int64>`` against ``list<int32>``), is a :class:`fastdata.SchemaError`
naming both sources and the column, raised when the mix is built, not mid-epoch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import pyarrow as pa

from fastdata.errors import SchemaError, warn_user
from fastdata.sources._arrow_types import delivered_type, relaxed
from fastdata.sources.base import Reader, SchemaReader, declares
from fastdata.sources.options import checked_options
from fastdata.sources.stream import PlannedStream

__all__ = ["CastReader", "one_schema", "options_set", "warn_ignored_options"]

_SETTINGS = ("batch_size", "shuffle", "seed", "shuffle_buffer", "drop_last", "even_batches")


def options_set(source: PlannedStream) -> list[str]:
    """``name=value`` of every stream option ``source`` was built with that differs from
    its default (the defaults of its own kind of stream: an ``ImageStream`` shuffles in
    windows of 2,048 rows unless told)."""
    policy, _, read_ahead = checked_options()
    defaults = {k: getattr(policy, k) for k in _SETTINGS} | {"batch_size": None}
    defaults |= {"rank": None, "world_size": None, "read_ahead": read_ahead}
    defaults |= getattr(source, "option_defaults", {})
    rank, world_size = source._rank_args
    got = {k: source.settings[k] for k in _SETTINGS}
    got |= {"rank": rank, "world_size": world_size, "read_ahead": source.read_ahead}
    return [f"{k}={v!r}" for k, v in got.items() if v != defaults[k]]


def warn_ignored_options(streams: Mapping[str, PlannedStream]) -> None:
    """One warning naming each source built with stream options, which the mix ignores."""
    ignored = {name: options_set(stream) for name, stream in streams.items()}
    shown = "; ".join(f"{name!r}: {', '.join(opts)}" for name, opts in ignored.items() if opts)
    if shown:
        warn_user(
            f"mix() ignores the stream options of its sources ({shown}): the mix reads the "
            "sources' readers with its own options; build the sources without them and pass "
            "them to mix() instead (e.g. fd.mix(sources, batch_size=..., shuffle=True))"
        )


class CastReader:
    """A source's reader whose tables are cast to the mix's schema (lossless: the types
    differ only in nullability or large against small forms, or the columns' order)."""

    def __init__(self, inner: Reader, schema: pa.Schema) -> None:
        self.inner = inner
        self.schema = schema

    def unit_rows(self) -> Sequence[int]:
        return self.inner.unit_rows()

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return self.inner.read(unit, start, stop).select(self.schema.names).cast(self.schema)

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return self.inner.location(unit, row)

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def __repr__(self) -> str:
        return repr(self.inner)


def one_schema(streams: Mapping[str, PlannedStream]) -> dict[str, Reader]:
    """The sources' readers, checked to read one schema, each cast to it where it differs
    in what :func:`pyarrow.concat_tables` refuses but a cast keeps (see the module
    docstring). Readers that do not say their schema (image folders, tar shards, a
    reader of one's own that is not a :class:`~fastdata.sources.SchemaReader`) are not
    checked.

    Raises:
        SchemaError: two sources read different columns, or a column of different types, or
            a source reads a column named like the one the mix adds (``source``).
    """
    readers = {name: stream.reader for name, stream in streams.items()}
    known = {
        n: cast(SchemaReader, r).schema for n, r in readers.items() if declares(r, SchemaReader)
    }
    for name, schema in known.items():
        if "source" in schema.names:  # the column the mix adds (mix.SOURCE)
            raise SchemaError(
                f"source {name!r} reads a column 'source', the column the mix adds to every "
                "row (the index of its source); leave it out (ParquetStream(..., columns=[...]))"
                " or rename it",
                column="source",
            )
    if len(known) < 2:
        return readers
    (first, reference), *others = known.items()
    for name, schema in others:
        _compare(first, reference, name, schema)
    target = pa.unify_schemas(list(known.values()), promote_options="permissive")
    target = pa.schema([target.field(column) for column in reference.names])
    for name, schema in known.items():
        if not _concatenates(schema, target):
            readers[name] = CastReader(readers[name], target)
    return readers


def _compare(first: str, reference: pa.Schema, name: str, schema: pa.Schema) -> None:
    """Refuse ``name``'s schema where it holds other columns or values than ``first``'s."""
    extra = [c for c in schema.names if c not in reference.names]
    missing = [c for c in reference.names if c not in schema.names]
    if extra or missing:
        differs = [f"has column {c!r}" for c in extra] + [f"lacks column {c!r}" for c in missing]
        raise SchemaError(
            f"the sources of a mix read different columns: source {name!r} "
            f"{', '.join(differs)}, unlike source {first!r} (which reads "
            f"{', '.join(reference.names)}); every row of a batch may come from any source: "
            "read the same columns from each (ParquetStream(..., columns=[...]))",
            column=(extra or missing)[0],
        )
    differ = [
        column
        for column in reference.names
        if _values(reference.field(column).type) != _values(schema.field(column).type)
    ]
    if differ:
        shown = "; ".join(
            f"column {c!r} is {schema.field(c).type} in source {name!r} but "
            f"{reference.field(c).type} in source {first!r}"
            for c in differ
        )
        raise SchemaError(
            f"the sources of a mix read columns of different types: {shown}; every row of a "
            "batch may come from any source: write the corpora with one type (e.g. cast the "
            "table with pyarrow before writing it)",
            column=differ[0],
        )


def _values(t: pa.DataType) -> pa.DataType:
    """``t`` in a form that is the same for two types holding the same values."""
    return relaxed(delivered_type(t))


def _concatenates(schema: pa.Schema, target: pa.Schema) -> bool:
    """Whether tables of ``schema`` concatenate with tables of ``target`` as they are."""
    try:
        pa.concat_tables([target.empty_table(), schema.empty_table()])
    except pa.ArrowInvalid:
        return False
    return True
