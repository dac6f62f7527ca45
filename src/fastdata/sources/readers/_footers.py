"""Parquet footers as planning reads them, one at a time so that none is kept: each file's
footer read without a call that can abort the process (:func:`read_footer`), the schema every
file agrees with, and a hash of the data's layout and statistics."""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pyarrow.types as pat

from fastdata.errors import CacheError, SchemaError, SourceError
from fastdata.sources._arrow_types import delivered_type, relaxed
from fastdata.sources._cache import refetched
from fastdata.sources.readers._thrift import footer_facts

__all__ = [
    "ContentDigest",
    "Footer",
    "SchemaAgreement",
    "read_footer",
    "refuse_encrypted",
]

_TAIL = 64 << 10  # bytes read from a file's end at first: the whole footer, most of the time
_MAGIC = b"PAR1"
_ENCRYPTED_MAGIC = b"PARE"  # a file whose footer is encrypted (Parquet modular encryption)
_UNREADABLE = "the file is not Parquet, is truncated or unreadable: rewrite or remove it"
_ENCRYPTED = (
    "fastdata reads no encrypted Parquet (it has no keys; pyarrow without decryption "
    "properties refuses it too)"
)


class Footer(NamedTuple):
    """A file's parsed footer, its Arrow schema, and its columns that are encrypted (a
    file with a plaintext footer; pyarrow must not be asked for their metadata)."""

    metadata: pq.FileMetaData
    schema: pa.Schema
    encrypted: frozenset[str]


def read_footer(fs: pafs.FileSystem, path: str) -> Footer:
    """:func:`_footer_of` the file; a cached copy found damaged when its footer cannot be
    read is deleted and the file read again (:func:`~fastdata.sources._cache.refetched`)."""
    try:
        return _footer_of(fs, path)
    except SourceError as exc:
        if isinstance(exc, CacheError) or not refetched(fs, path):
            raise
    return _footer_of(fs, path)


def _footer_of(fs: pafs.FileSystem, path: str) -> Footer:
    """The footer of one Parquet file, read from the file's last bytes (in one read when it
    is under 64 KiB) and parsed by pyarrow from those bytes.

    Holding the footer's bytes shows what pyarrow cannot say without aborting, read from
    their Thrift (:mod:`._thrift`): the columns encrypted behind a plaintext footer, and a
    corrupt column chunk (pyarrow parses such a footer, but asking it for that chunk's
    metadata or statistics, as the content digest and a ``filter`` do, aborts the process).
    (The schema is not ``footer.schema``, whose reference cycle would keep each footer,
    megabytes for wide files, until the garbage collector runs.)

    Raises:
        SourceError: not Parquet, truncated, unreadable, an encrypted footer, or a corrupt
            column chunk (naming its row group and column).
    """
    try:
        with fs.open_input_file(path) as file:
            size = file.size()
            tail = file.read_at(min(size, _TAIL), max(size - _TAIL, 0))
            if len(tail) < 12 or tail[-4:] not in (_MAGIC, _ENCRYPTED_MAGIC):
                raise SourceError(
                    f"no Parquet footer: the file does not end with {_MAGIC!r} "
                    f"({size:,} bytes); {_UNREADABLE}",
                    path=path,
                )
            if tail[-4:] == _ENCRYPTED_MAGIC:
                raise SourceError(
                    f"the file's footer is encrypted (Parquet modular encryption); "
                    f"{_ENCRYPTED}: write it without encryption",
                    path=path,
                )
            length = int.from_bytes(tail[-8:-4], "little")
            if length + 12 > size:
                raise SourceError(
                    f"the footer claims {length:,} bytes, more than the file's {size:,}; "
                    f"{_UNREADABLE}",
                    path=path,
                )
            if length + 8 > len(tail):
                tail = file.read_at(length + 8, size - length - 8)
        footer = tail[len(tail) - length - 8 :]
        with pq.ParquetFile(pa.BufferReader(footer)) as parsed:
            metadata, schema = parsed.metadata, parsed.schema_arrow.remove_metadata()
        encrypted, problem = footer_facts(footer[:length])
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise SourceError(
            f"cannot read the Parquet footer ({exc}); {_UNREADABLE}", path=path
        ) from exc
    if problem is not None:
        where = f"row group {problem.row_group}" + (
            "" if problem.column is None else f", column chunk {problem.column!r}"
        )
        raise SourceError(
            f"corrupt Parquet footer ({where}: {problem.reason}); {_UNREADABLE}",
            path=path,
            row_group=problem.row_group,
            column=None if problem.column is None else problem.column.split(".")[0],
        )
    leaves = _leaf_columns(schema)
    names = frozenset(name for name, span in leaves.items() if encrypted.intersection(span))
    return Footer(metadata, schema, names)


def refuse_encrypted(path: str, encrypted: frozenset[str], names: list[str]) -> None:
    """Refuse the encrypted columns among ``names`` (pyarrow reads the other columns of such
    a file, and so does fastdata).

    Raises:
        SourceError: naming the first encrypted column asked for.
    """
    for name in names:
        if name in encrypted:
            raise SourceError(
                f"column {name!r} is encrypted (Parquet modular encryption); {_ENCRYPTED}: "
                "leave it out of `columns` (and `filter`), or write the file without encryption",
                path=path,
                column=name,
            )


class SchemaAgreement:
    """Checks, file by file, that the selected columns exist with agreeing types, and gives
    the one schema every read is cast to.

    With ``every`` (no ``columns`` given: the reference file's columns are read), every file
    must have the same columns: a column that only some files have would otherwise be read
    or dropped depending on which file comes first (pyarrow.dataset drops it silently)."""

    def __init__(
        self, ref_path: str, ref: pa.Schema, names: list[str], *, every: bool = False
    ) -> None:
        present = set(ref.names)
        for name in names:
            _require(ref_path, ref, present, name)
        self.ref_path = ref_path
        self.fields = {name: ref.field(name) for name in names}
        self.exact = dict.fromkeys(names, True)  # every file has the reference's exact type
        self.every = every

    def check(self, path: str, schema: pa.Schema) -> None:
        present = set(schema.names)
        if self.every and present != self.fields.keys():
            self._refuse_other_columns(path, schema, present)
        for name, ref in self.fields.items():
            field = _require(path, schema, present, name)
            got, expected = delivered_type(field.type), delivered_type(ref.type)
            if relaxed(got) != relaxed(expected):
                raise SchemaError(
                    f"column {name!r} has type {field.type} here but {ref.type} in "
                    f"{self.ref_path}; cast the files to one schema",
                    path=path,
                    column=name,
                )
            self.exact[name] = self.exact[name] and got == expected
            if field.nullable and not ref.nullable:
                self.fields[name] = ref.with_nullable(True)

    def _refuse_other_columns(self, path: str, schema: pa.Schema, present: set[str]) -> None:
        extra = [name for name in schema.names if name not in self.fields]
        missing = [name for name in self.fields if name not in present]
        differs = ", ".join(
            [f"has column {name!r}" for name in extra]
            + [f"lacks column {name!r}" for name in missing]
        )
        shared = [name for name in self.fields if name in present]
        raise SchemaError(
            f"the files have different columns: this file {differs}, unlike {self.ref_path} "
            "(the first file with rows); with no `columns` given every file must have the "
            "same columns, so that none is dropped or refused depending on the file order. "
            f"Pass columns=[...] naming the columns to read (every file must have them; "
            f"these two share: {', '.join(shared) or 'none'}), or rewrite the files to one schema",
            path=path,
            column=(extra or missing)[0],
        )

    def schema(self) -> pa.Schema:
        """Each column's delivered type; where files differ (in nullability inside nested
        types, or large against small), the relaxed type every file casts to losslessly."""
        fields = []
        for name, field in self.fields.items():
            kind = delivered_type(field.type)
            fields.append(field.with_type(kind if self.exact[name] else relaxed(kind)))
        return pa.schema(fields)


def _require(path: str, schema: pa.Schema, present: set[str], name: str) -> pa.Field:
    if name not in present:
        raise SchemaError(
            f"column {name!r} does not exist; available columns: {', '.join(schema.names)}",
            path=path,
            column=name,
        )
    return schema.field(name)


class ContentDigest:
    """A hash of what the footers say about the data read: file sizes, row counts and, for
    the selected columns, each chunk's compressed size and min/max statistics (as stored). A file
    rewritten with other values changes it even where the layout stays the same. Built file
    by file, so no footer is kept for it."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256()

    def add(self, size: int, footer: pq.FileMetaData, schema: pa.Schema, names: list[str]) -> None:
        leaves = _leaf_columns(schema)
        columns = [c for name in names if name in leaves for c in leaves[name]]
        for rg in range(footer.num_row_groups):
            group = footer.row_group(rg)
            part = [size, group.num_rows, *(_chunk(group.column(c)) for c in columns)]
            self._hash.update(json.dumps(part, separators=(",", ":")).encode() + b"\n")

    def hexdigest(self) -> str:
        return self._hash.hexdigest()[:16]


def _leaf_columns(schema: pa.Schema) -> dict[str, range]:
    """The Parquet leaf columns (column chunks) of each top-level field: a struct or map
    spans several, in schema order."""
    out, start = {}, 0
    for field in schema:
        n = _leaves(field.type)
        out[field.name] = range(start, start + n)
        start += n
    return out


def _leaves(t: pa.DataType) -> int:
    if pat.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pat.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t):
        return _leaves(t.value_type)
    if isinstance(t, pa.BaseExtensionType):
        return _leaves(t.storage_type)
    return 1


def _chunk(chunk: pq.ColumnChunkMetaData) -> list[Any]:
    """A column chunk's size and statistics. The bounds are the stored (physical) values,
    not their logical conversion (``stats.min``), which loses nanoseconds or needs pandas
    for them, and fails on values outside Python's datetime range."""
    stats = chunk.statistics
    if stats is None or not stats.has_min_max:
        return [chunk.total_compressed_size]
    return [chunk.total_compressed_size, _plain(stats.min_raw), _plain(stats.max_raw)]


def _plain(value: Any) -> Any:
    """A physical statistics value (bool, int, float, bytes, or None for INT96) as JSON."""
    return value.hex() if isinstance(value, bytes) else value
