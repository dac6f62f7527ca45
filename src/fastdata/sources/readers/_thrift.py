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

So the footer is read here too, in Thrift's compact protocol (the format's
``parquet.thrift``), as pyarrow's Thrift code reads it: a known field of an unexpected type is
skipped, a list's element type is not checked. Only the fields these checks need are decoded;
everything else is skipped by its type. Each function takes the bytes and a position and
returns the position after what it read: the footers of wide files hold hundreds of
thousands of column chunks, and every one is read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["FooterFacts", "Problem", "footer_facts"]

# Compact protocol type codes (a UUID, 16 bytes, since Thrift 0.19).
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_UUID = 13
_FIXED = {_TRUE: 1, _FALSE: 1, _BYTE: 1, _DOUBLE: 8, _UUID: 16}  # bytes of a collection element
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


_Out = dict[str, Any]  # the fields read from a struct, by name
_Read = Callable[[bytes, int, _Out], int]  # reads a value into ``out``: the position after it
_Fields = dict[int, tuple[int, _Read]]  # the fields of a struct read: {field id: (type, read)}


def footer_facts(footer: bytes) -> FooterFacts:
    """The encrypted leaf columns and the first corrupt column chunk of the serialized
    ``FileMetaData`` ``footer``.

    Raises:
        ValueError: the bytes are not a Thrift compact ``FileMetaData``.
    """
    out: _Out = {"elements": [], "groups": []}
    try:
        _struct(footer, 0, _FILE, out)
    except (IndexError, RecursionError):
        raise ValueError("the footer ends inside a value") from None
    groups: list[list[_Chunk]] = out["groups"]
    leaves = _leaves(out["elements"])
    encrypted = {leaf for chunks in groups for leaf, c in enumerate(chunks) if c.encrypted}
    return FooterFacts(frozenset(encrypted), _first_problem(leaves, groups))


def _struct(data: bytes, pos: int, wanted: _Fields, out: _Out) -> int:
    """Read the struct at ``pos``: each field in ``wanted`` (``{field id: (type, read)}``)
    of that type by its ``read(data, position, out)``, which returns the position after it;
    every other field skipped. Returns the position after the struct."""
    field = 0
    while True:
        header = data[pos]
        pos += 1
        kind = header & 0x0F
        if not kind:  # the stop byte: a type 0, whatever the other bits (as Thrift reads it)
            return pos
        if header & 0xF0:
            field += header >> 4
        else:  # a long jump: the id follows, zigzag-encoded
            raw, pos = varint(data, pos)
            field = (raw >> 1) ^ -(raw & 1)
        read = wanted.get(field)
        if read is not None and read[0] == kind:
            pos = read[1](data, pos, out)
        elif _I16 <= kind <= _I64:  # most fields: skipped here, without a call
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind > _FALSE:  # a boolean field's value is in its header
            pos = skip(data, pos, kind, element=False)


def field_header(data: bytes, pos: int, last: int) -> tuple[int, int, int]:
    """``(position after it, field id, type)`` of the field header at ``pos`` of a struct
    whose previous field was ``last``; type 0: the struct's stop byte."""
    header = data[pos]
    if not header & 0x0F:
        return pos + 1, last, 0
    if header >> 4:
        return pos + 1, last + (header >> 4), header & 0x0F
    raw, pos = varint(data, pos + 1)
    return pos, (raw >> 1) ^ -(raw & 1), header & 0x0F


def varint(data: bytes, pos: int) -> tuple[int, int]:
    """The unsigned varint at ``pos`` and the position after it."""
    b = data[pos]
    if b < 0x80:
        return b, pos + 1
    value, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = data[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + 1
        shift += 7


def _integer(data: bytes, pos: int) -> tuple[int, int]:
    raw, pos = varint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def collection(data: bytes, pos: int) -> tuple[int, int]:
    """The size of the list or set whose header is at ``pos``, and where its elements start."""
    size = data[pos] >> 4
    return varint(data, pos + 1) if size == 15 else (size, pos + 1)


def skip(data: bytes, pos: int, kind: int, *, element: bool) -> int:
    """The position after the value of type ``kind`` at ``pos`` (a boolean field's value is
    in its header; a boolean element of a collection is one byte)."""
    if _I16 <= kind <= _I64:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == _BINARY:
        length, pos = varint(data, pos)
        return pos + length
    if kind == _STRUCT:
        return _struct(data, pos, {}, {})
    if kind in (_LIST, _SET):
        inner = data[pos] & 0x0F
        size, pos = collection(data, pos)
        if inner in _FIXED:  # no loop over a size nothing bounds
            return pos + size * _FIXED[inner]
        if _I16 <= inner <= _I64:  # encodings, level histograms: no call per element
            for _ in range(size):
                while data[pos] & 0x80:
                    pos += 1
                pos += 1
            return pos
        for _ in range(size):
            pos = skip(data, pos, inner, element=True)
        return pos
    if kind == _MAP:
        size, pos = varint(data, pos)
        if size:
            kinds, pos = data[pos], pos + 1
            for _ in range(size):
                pos = skip(data, pos, kinds >> 4, element=True)
                pos = skip(data, pos, kinds & 0x0F, element=True)
        return pos
    if kind in (_TRUE, _FALSE):
        return pos + 1 if element else pos
    if kind in _FIXED:
        return pos + _FIXED[kind]
    raise ValueError(f"unknown Thrift compact type {kind} at byte {pos}")


def _list(wanted: _Fields, key: str, make: Callable[[_Out], Any]) -> _Read:
    """A reader of a list of structs (its element type unchecked, as in pyarrow's Thrift
    code): ``out[key]`` becomes ``[make(fields of each)]``."""

    def read(data: bytes, pos: int, out: _Out) -> int:
        size, pos = collection(data, pos)
        items = []
        for _ in range(size):
            fields: _Out = {}
            pos = _struct(data, pos, wanted, fields)
            items.append(make(fields))
        out[key] = items
        return pos

    return read


def _value(key: str) -> _Read:
    """A reader of an integer field into ``out[key]``."""

    def read(data: bytes, pos: int, out: _Out) -> int:
        out[key], pos = _integer(data, pos)
        return pos

    return read


def _name(data: bytes, pos: int, out: _Out) -> int:
    length, start = varint(data, pos)
    out["name"] = data[start : start + length].decode("utf-8", "replace")
    return start + length


_STAT_VALUES = {1: "max", 2: "min", 5: "max_value", 6: "min_value"}  # Statistics fields


def _stat(name: str) -> _Read:
    """A reader of a min or max statistic: its length only."""

    def read(data: bytes, pos: int, out: _Out) -> int:
        length, pos = varint(data, pos)
        out.setdefault("values", []).append((name, length))
        return pos + length

    return read


def _histogram(key: str) -> _Read:
    def read(data: bytes, pos: int, out: _Out) -> int:
        out[key] = collection(data, pos)[0]
        return skip(data, pos, _LIST, element=False)

    return read


def _unencoded(data: bytes, pos: int, out: _Out) -> int:
    out["unencoded"] = True
    return skip(data, pos, _I64, element=False)


def _crypto(data: bytes, pos: int, out: _Out) -> int:
    out["encrypted"] = True
    return skip(data, pos, _STRUCT, element=False)


def _nested(wanted: _Fields) -> _Read:
    """A reader of a struct whose fields go into ``out`` itself."""
    return lambda data, pos, out: _struct(data, pos, wanted, out)


def _chunk(fields: _Out) -> _Chunk:
    return _Chunk(
        fields.get("encrypted", False),
        fields.get("physical", 0) if fields.get("meta") else None,  # thrift's default: 0
        tuple(fields.get("values", ())),
        fields.get("repetitions", 0),
        fields.get("definitions", 0),
        fields.get("unencoded", False),
    )


def _element(fields: _Out) -> tuple[int | None, int, int, str, int]:
    return (
        fields.get("physical"),
        fields.get("length", 0),
        fields.get("repetition", 0),
        fields.get("name", ""),
        fields.get("children", 0),
    )


def _meta(data: bytes, pos: int, out: _Out) -> int:
    out["meta"] = True
    return _struct(data, pos, _COLUMN_META, out)


# The fields read, by struct, as parquet.thrift numbers them.
_COLUMN_META = {  # ColumnMetaData
    1: (_I32, _value("physical")),  # type
    12: (_STRUCT, _nested({i: (_BINARY, _stat(name)) for i, name in _STAT_VALUES.items()})),
    16: (  # size_statistics: SizeStatistics
        _STRUCT,
        _nested(
            {
                1: (_I64, _unencoded),  # unencoded_byte_array_data_bytes
                2: (_LIST, _histogram("repetitions")),  # repetition_level_histogram
                3: (_LIST, _histogram("definitions")),  # definition_level_histogram
            }
        ),
    ),
}
_CHUNK: _Fields = {3: (_STRUCT, _meta), 8: (_STRUCT, _crypto)}  # meta_data, crypto_metadata
_ROW_GROUP = {1: (_LIST, _list(_CHUNK, "chunks", _chunk))}  # RowGroup: columns
_ELEMENT = {  # SchemaElement
    1: (_I32, _value("physical")),  # type
    2: (_I32, _value("length")),  # type_length
    3: (_I32, _value("repetition")),  # repetition_type
    4: (_BINARY, _name),  # name
    5: (_I32, _value("children")),  # num_children
}
_FILE = {  # FileMetaData: schema, row_groups
    2: (_LIST, _list(_ELEMENT, "elements", _element)),
    4: (_LIST, _list(_ROW_GROUP, "groups", lambda fields: fields.get("chunks", []))),
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
