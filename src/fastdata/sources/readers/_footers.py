"""What planning keeps of Parquet footers, gathered one footer at a time so that none is kept:
the schema every file agrees with, and a hash of the data's layout and statistics."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pat

from fastdata.errors import SchemaError
from fastdata.sources._arrow import delivered_type, rebuild

__all__ = ["ContentDigest", "SchemaAgreement"]


class SchemaAgreement:
    """Checks, file by file, that the selected columns exist with agreeing types, and gives
    the one schema every read is cast to."""

    def __init__(self, ref_path: str, ref: pa.Schema, names: list[str]) -> None:
        for name in names:
            _require(ref_path, ref, name)
        self.ref_path = ref_path
        self.fields = {name: ref.field(name) for name in names}
        self.exact = dict.fromkeys(names, True)  # every file has the reference's exact type

    def check(self, path: str, schema: pa.Schema) -> None:
        for name, ref in self.fields.items():
            field = _require(path, schema, name)
            got, expected = delivered_type(field.type), delivered_type(ref.type)
            if _relaxed(got) != _relaxed(expected):
                raise SchemaError(
                    f"column {name!r} has type {field.type} here but {ref.type} in "
                    f"{self.ref_path}; cast the files to one schema",
                    path=path,
                    column=name,
                )
            self.exact[name] = self.exact[name] and got == expected
            if field.nullable and not ref.nullable:
                self.fields[name] = ref.with_nullable(True)

    def schema(self) -> pa.Schema:
        """Each column's delivered type; where files differ (in nullability inside nested
        types, or large against small), the relaxed type every file casts to losslessly."""
        fields = []
        for name, field in self.fields.items():
            kind = delivered_type(field.type)
            fields.append(field.with_type(kind if self.exact[name] else _relaxed(kind)))
        return pa.schema(fields)


def _require(path: str, schema: pa.Schema, name: str) -> pa.Field:
    if name not in schema.names:
        raise SchemaError(
            f"column {name!r} does not exist; available columns: {', '.join(schema.names)}",
            path=path,
            column=name,
        )
    return schema.field(name)


def _relaxed(t: pa.DataType) -> pa.DataType:
    """``t`` with every nested field nullable and strings, binaries and lists in their large
    form: two types equal in this form hold the same values."""
    if pat.is_string(t):
        return pa.large_string()
    if pat.is_binary(t):
        return pa.large_binary()
    if pat.is_list(t):
        t = pa.large_list(t.value_field)
    return rebuild(t, lambda field: pa.field(field.name, _relaxed(field.type)))


class ContentDigest:
    """A hash of what the footers say about the data read: file sizes, row counts and, for
    the selected columns, each chunk's compressed size and min/max statistics. A file
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
    stats = chunk.statistics
    bounds = [str(stats.min), str(stats.max)] if stats is not None and stats.has_min_max else []
    return [chunk.total_compressed_size, *bounds]
