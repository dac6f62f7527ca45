"""What pyarrow must not be asked about a Parquet footer, read from its Thrift bytes.

pyarrow parses a footer whole, but builds a column chunk's metadata (and its statistics) only
when asked (``RowGroupMetaData.column``, ``ColumnChunkMetaData.statistics``, a ``filter``
tested against the statistics), and a C++ exception there is one no Python code can catch:
the process aborts. Two kinds of footer make it throw there:

- a column encrypted with its own key (Parquet modular encryption behind a plaintext footer):
  a column chunk with ``crypto_metadata`` (field 8 of ``ColumnChunk``);
- a corrupt column chunk (one flipped byte is enough): a physical type other than its schema
  column's, a level histogram of another size than the column's levels, unencoded byte
  counts on a column that is no ``BYTE_ARRAY``, a min or max statistic shorter than a value
  of its type; or a row group with another number of column chunks than the schema has
  columns. pyarrow's reads raise a catchable ``OSError`` on such a file; its metadata
  accessors abort.

So the footer is read here too (:mod:`._compact`), as pyarrow's Thrift code reads it: the
fields these checks need are decoded, and every list or struct the format's
``parquet.thrift`` declares is read as declared (its elements as the schema says, whatever
their header says), so that the bytes are read in step with pyarrow's reading of them;
everything else is skipped by its type.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from fastdata.sources.readers._compact import (
    BINARY,
    I32,
    I64,
    LIST,
    STRUCT,
    Fields,
    Out,
    Read,
    collection,
    integer,
    items,
    struct,
    varint,
)

__all__ = ["FooterFacts", "Problem", "footer_facts"]

# Parquet's FieldRepetitionType and physical types.
_OPTIONAL, _REPEATED = 1, 2
_BYTE_ARRAY, _FIXED_LEN_BYTE_ARRAY = 6, 7
_TYPES: tuple[str, ...] = ("BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY")
_TYPES += ("FIXED_LEN_BYTE_ARRAY",)
_WIDTHS = (1, 4, 8, 12, 4, 8, 0)  # bytes a plain-encoded value needs, by physical type


class Problem(NamedTuple):
    """A column chunk pyarrow cannot describe: where it is and what is wrong."""

    row_group: int
    column: str | None  # the schema column's dotted path; None: the row group's chunk count
    reason: str


class FooterFacts(NamedTuple):
    encrypted: frozenset[int]  # leaf columns (in schema order) encrypted in any row group
    problem: Problem | None  # the first corrupt column chunk


class _Leaf(NamedTuple):
    path: str
    physical: int
    width: int  # bytes a min or max statistic needs at least
    max_definition: int
    max_repetition: int


class _Chunk(NamedTuple):
    encrypted: bool
    physical: int | None  # None: no ColumnMetaData
    values: tuple[tuple[str, int], ...]  # (statistics field, length) of each min and max
    repetitions: int  # repetition level histogram size (0: none)
    definitions: int
    unencoded: bool  # unencoded_byte_array_data_bytes set


def footer_facts(footer: bytes) -> FooterFacts:
    """The encrypted leaf columns and the first corrupt column chunk of the serialized
    ``FileMetaData`` ``footer``.

    Raises:
        ValueError: the bytes are not a Thrift compact ``FileMetaData``.
    """
    out: Out = {"elements": [], "groups": []}
    try:
        struct(footer, 0, _FILE, out)
    except (IndexError, RecursionError):
        raise ValueError("the footer ends inside a value") from None
    groups: list[list[_Chunk]] = out["groups"]
    leaves = _leaves(out["elements"])
    encrypted = {leaf for chunks in groups for leaf, c in enumerate(chunks) if c.encrypted}
    return FooterFacts(frozenset(encrypted), _first_problem(leaves, groups))


def _list(wanted: Fields, key: str, make: Callable[[Out], Any]) -> Read:
    """A reader of a list of structs (its element type unchecked, as in pyarrow's Thrift
    code): ``out[key]`` becomes ``[make(fields of each)]``."""

    def read(data: bytes, pos: int, out: Out) -> int:
        size, pos = collection(data, pos)
        items = []
        for _ in range(size):
            fields: Out = {}
            pos = struct(data, pos, wanted, fields)
            items.append(make(fields))
        out[key] = items
        return pos

    return read


def _value(key: str) -> Read:
    """A reader of an integer field into ``out[key]``."""

    def read(data: bytes, pos: int, out: Out) -> int:
        out[key], pos = integer(data, pos)
        return pos

    return read


def _name(data: bytes, pos: int, out: Out) -> int:
    length, start = varint(data, pos)
    out["name"] = data[start : start + length].decode("utf-8", "replace")
    return start + length


_STAT_VALUES = {1: "max", 2: "min", 5: "max_value", 6: "min_value"}  # Statistics fields


def _stat(name: str) -> Read:
    """A reader of a min or max statistic: its length only."""

    def read(data: bytes, pos: int, out: Out) -> int:
        length, pos = varint(data, pos)
        out.setdefault("values", []).append((name, length))
        return pos + length

    return read


def _histogram(key: str) -> Read:
    """A reader of a level histogram (a list<i64>): its size only."""
    skip_items = items(I64)

    def read(data: bytes, pos: int, out: Out) -> int:
        out[key] = collection(data, pos)[0]
        return skip_items(data, pos, out)

    return read


def _unencoded(data: bytes, pos: int, out: Out) -> int:
    out["unencoded"] = True
    return varint(data, pos)[1]


def _crypto(data: bytes, pos: int, out: Out) -> int:
    out["encrypted"] = True
    return struct(data, pos, _CRYPTO, {})


def _nested(wanted: Fields) -> Read:
    """A reader of a struct whose fields go into ``out`` itself."""
    return lambda data, pos, out: struct(data, pos, wanted, out)


def _chunk(fields: Out) -> _Chunk:
    return _Chunk(
        fields.get("encrypted", False),
        fields.get("physical", 0) if fields.get("meta") else None,  # thrift's default: 0
        tuple(fields.get("values", ())),
        fields.get("repetitions", 0),
        fields.get("definitions", 0),
        fields.get("unencoded", False),
    )


def _element(fields: Out) -> tuple[int | None, int, int, str, int]:
    return (
        fields.get("physical"),
        fields.get("length", 0),
        fields.get("repetition", 0),
        fields.get("name", ""),
        fields.get("children", 0),
    )


def _meta(data: bytes, pos: int, out: Out) -> int:
    out["meta"] = True
    return struct(data, pos, _COLUMN_META, out)


# The fields read, by struct, as parquet.thrift numbers them: those the checks need, and
# every list (and struct holding one) whose elements must be read as declared.
_SIZES: Fields = {  # SizeStatistics
    1: (I64, _unencoded),  # unencoded_byte_array_data_bytes
    2: (LIST, _histogram("repetitions")),  # repetition_level_histogram: list<i64>
    3: (LIST, _histogram("definitions")),  # definition_level_histogram: list<i64>
}
_COLUMN_META: Fields = {  # ColumnMetaData
    1: (I32, _value("physical")),  # type
    2: (LIST, items(I32)),  # encodings
    3: (LIST, items(BINARY)),  # path_in_schema
    8: (LIST, items({})),  # key_value_metadata: list<KeyValue>
    12: (STRUCT, _nested({i: (BINARY, _stat(name)) for i, name in _STAT_VALUES.items()})),
    13: (LIST, items({})),  # encoding_stats: list<PageEncodingStats>
    16: (STRUCT, _nested(_SIZES)),  # size_statistics
    17: (STRUCT, _nested({2: (LIST, items(I32))})),  # geospatial_statistics: its types
}
# ColumnCryptoMetaData: ENCRYPTION_WITH_COLUMN_KEY's path_in_schema
_CRYPTO: Fields = {2: (STRUCT, _nested({1: (LIST, items(BINARY))}))}
_CHUNK: Fields = {3: (STRUCT, _meta), 8: (STRUCT, _crypto)}  # meta_data, crypto_metadata
_ROW_GROUP: Fields = {  # RowGroup: columns, sorting_columns
    1: (LIST, _list(_CHUNK, "chunks", _chunk)),
    4: (LIST, items({})),
}
_ELEMENT: Fields = {  # SchemaElement
    1: (I32, _value("physical")),  # type
    2: (I32, _value("length")),  # type_length
    3: (I32, _value("repetition")),  # repetition_type
    4: (BINARY, _name),  # name
    5: (I32, _value("children")),  # num_children
}
_FILE: Fields = {  # FileMetaData: schema, row_groups, key_value_metadata, column_orders
    2: (LIST, _list(_ELEMENT, "elements", _element)),
    4: (LIST, _list(_ROW_GROUP, "groups", lambda fields: fields.get("chunks", []))),
    5: (LIST, items({})),
    7: (LIST, items({})),
}


def _leaves(elements: list[tuple[int | None, int, int, str, int]]) -> list[_Leaf]:
    """The leaves of the schema tree (depth first, as the column chunks are ordered), as
    pyarrow unflattens it: an element without children that has a type is a leaf, any
    other a group."""
    leaves: list[_Leaf] = []
    # (children left, path, definition level, repetition level) of each open group
    stack = [(max(elements[0][4], 0), "", 0, 0)] if elements else []
    for physical, length, repetition, name, children in elements[1:]:
        while stack and stack[-1][0] == 0:
            stack.pop()
        if not stack:
            break  # pyarrow reads no further than the root's children
        left, parent, definition, repeated = stack.pop()
        stack.append((left - 1, parent, definition, repeated))
        path = f"{parent}.{name}" if parent else name
        definition += repetition in (_OPTIONAL, _REPEATED)
        repeated += repetition == _REPEATED
        if children == 0 and physical is not None:
            width = length if physical == _FIXED_LEN_BYTE_ARRAY else _width(physical)
            leaves.append(_Leaf(path, physical, width, definition, repeated))
        else:
            stack.append((max(children, 0), path, definition, repeated))
    return leaves


def _width(physical: int) -> int:
    return _WIDTHS[physical] if 0 <= physical < len(_WIDTHS) else 0


def _first_problem(leaves: list[_Leaf], groups: list[list[_Chunk]]) -> Problem | None:
    for group, chunks in enumerate(groups):
        if len(chunks) != len(leaves):
            return Problem(
                group,
                None,
                f"the row group has {len(chunks)} column chunks where the schema has "
                f"{len(leaves)} columns",
            )
        for leaf, chunk in zip(leaves, chunks, strict=True):
            reason = None if chunk.encrypted else _chunk_problem(leaf, chunk)
            if reason is not None:
                return Problem(group, leaf.path, reason)
    return None


def _chunk_problem(leaf: _Leaf, chunk: _Chunk) -> str | None:
    """Why pyarrow cannot build the metadata or statistics of ``chunk`` (None: it can)."""
    kind = _type_name(leaf.physical)
    if chunk.physical is None:
        return "the column chunk has no metadata"
    if chunk.physical != leaf.physical:
        return f"the column chunk's type is {_type_name(chunk.physical)}, the schema's {kind}"
    for name, size, levels in (
        ("repetition", chunk.repetitions, leaf.max_repetition),
        ("definition", chunk.definitions, leaf.max_definition),
    ):
        if size and size != levels + 1:
            return (
                f"its {name} level histogram has {size} counts where the column has "
                f"{levels + 1} levels"
            )
    if chunk.unencoded and leaf.physical != _BYTE_ARRAY:
        return f"it counts unencoded byte array bytes for a {kind} column"
    for name, size in chunk.values:
        if size < leaf.width:
            return f"its statistic {name} has {size} bytes where a {kind} value has {leaf.width}"
    return None


def _type_name(physical: int) -> str:
    return _TYPES[physical] if 0 <= physical < len(_TYPES) else f"unknown type {physical}"
