"""Thrift's compact protocol, read from bytes as Thrift's own code reads it: each function takes
the bytes and a position and returns the position after what it read (no cursor object: the
footers of wide Parquet files hold hundreds of thousands of structs, and every one is read).

A struct is read by a table of the fields wanted, ``{field id: (type, read)}``: a field of
that type is read by ``read(data, position, out)``; a field of another type, or not in the
table, is skipped by the type its header says, as Thrift's generated code skips it. A list
whose field is in the table is read as the schema declares its elements (:func:`items`),
whatever element type its header says: Thrift's generated code does not check it either.
Bytes that end early raise ``IndexError``; an unknown type, ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["BINARY", "I32", "I64", "LIST", "STRUCT", "Fields", "Out", "Read"]
__all__ += ["collection", "field_header", "integer", "items", "skip", "struct", "varint"]

# Compact protocol type codes (a UUID, 16 bytes, since Thrift 0.19).
TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)
UUID = 13
_FIXED = {TRUE: 1, FALSE: 1, BYTE: 1, DOUBLE: 8, UUID: 16}  # bytes of a collection element

Out = dict[str, Any]  # what the readers of a struct's fields found, by name
Read = Callable[[bytes, int, Out], int]  # reads a value into ``out``: the position after it
Fields = dict[int, tuple[int, Read]]  # the fields of a struct read: {field id: (type, read)}


def struct(data: bytes, pos: int, wanted: Fields, out: Out) -> int:
    """Read the struct at ``pos`` by the table ``wanted`` (see the module's docstring);
    returns the position after the struct."""
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
            field, pos = integer(data, pos)
        read = wanted.get(field)
        if read is not None and read[0] == kind:
            pos = read[1](data, pos, out)
        elif I16 <= kind <= I64:  # most fields: skipped here, without a call
            while data[pos] & 0x80:
                pos += 1
            pos += 1
        elif kind > FALSE:  # a boolean field's value is in its header
            pos = skip(data, pos, kind, element=False)


def field_header(data: bytes, pos: int, last: int) -> tuple[int, int, int]:
    """``(position after it, field id, type)`` of the field header at ``pos`` of a struct
    whose previous field was ``last``; type 0: the struct's stop byte."""
    header = data[pos]
    if not header & 0x0F:
        return pos + 1, last, 0
    if header >> 4:
        return pos + 1, last + (header >> 4), header & 0x0F
    field, pos = integer(data, pos + 1)
    return pos, field, header & 0x0F


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


def integer(data: bytes, pos: int) -> tuple[int, int]:
    """The zigzag-encoded i16, i32 or i64 at ``pos`` and the position after it."""
    raw, pos = varint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def collection(data: bytes, pos: int) -> tuple[int, int]:
    """The size of the list or set whose header is at ``pos``, and where its elements start."""
    size = data[pos] >> 4
    return varint(data, pos + 1) if size == 15 else (size, pos + 1)


def skip(data: bytes, pos: int, kind: int, *, element: bool) -> int:
    """The position after the value of type ``kind`` at ``pos`` (a boolean field's value is
    in its header; a boolean element of a collection is one byte)."""
    if I16 <= kind <= I64:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == BINARY:
        length, pos = varint(data, pos)
        return pos + length
    if kind == STRUCT:
        return struct(data, pos, {}, {})
    if kind in (LIST, SET):
        return _elements(data, pos, data[pos] & 0x0F)
    if kind == MAP:
        size, pos = varint(data, pos)
        if size:
            kinds, pos = data[pos], pos + 1
            for _ in range(size):
                pos = skip(data, pos, kinds >> 4, element=True)
                pos = skip(data, pos, kinds & 0x0F, element=True)
        return pos
    if kind in (TRUE, FALSE):
        return pos + 1 if element else pos
    if kind in _FIXED:
        return pos + _FIXED[kind]
    raise ValueError(f"unknown Thrift compact type {kind} at byte {pos}")


def _elements(data: bytes, pos: int, kind: int | Fields) -> int:
    """The position after the list or set at ``pos`` whose elements are of type ``kind``,
    or structs read by the table ``kind``."""
    size, pos = collection(data, pos)
    if isinstance(kind, dict):
        for _ in range(size):
            pos = struct(data, pos, kind, {})
    elif kind in _FIXED:  # no loop over a size nothing bounds
        pos += size * _FIXED[kind]
    elif I16 <= kind <= I64:  # encodings, level histograms: no call per element
        for _ in range(size):
            while data[pos] & 0x80:
                pos += 1
            pos += 1
    else:
        for _ in range(size):
            pos = skip(data, pos, kind, element=True)
    return pos


def items(kind: int | Fields) -> Read:
    """A reader of a list field declared to hold values of type ``kind`` (or structs with
    the fields ``kind``), whatever element type its header says."""
    return lambda data, pos, out: _elements(data, pos, kind)
