"""Which columns of a Parquet file are encrypted, read from its footer's Thrift bytes.

A file written with Parquet modular encryption and a plaintext footer opens without keys,
but asking pyarrow for the metadata of a column encrypted with its own key throws a C++
exception that no Python code can catch: the process aborts (pyarrow's
``RowGroupMetaData.column``). So the footer is read here instead, in Thrift's compact
protocol (the format's ``parquet.thrift``): a column chunk with ``crypto_metadata`` (field 8
of ``ColumnChunk``) is encrypted. Only fields the answer needs are decoded; everything else
is skipped by its type.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["encrypted_leaves"]

# Compact protocol type codes.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
# Field ids in parquet.thrift.
_FILE_ROW_GROUPS = 4  # FileMetaData.row_groups: list<RowGroup>
_GROUP_COLUMNS = 1  # RowGroup.columns: list<ColumnChunk>
_CHUNK_CRYPTO = 8  # ColumnChunk.crypto_metadata: ColumnCryptoMetaData


class _Reader:
    """A cursor over compact-protocol bytes; raises ``IndexError`` or ``ValueError`` on
    bytes that end early or hold an unknown type."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value
            shift += 7

    def fields(self) -> Iterator[tuple[int, int]]:
        """``(field id, type)`` of each field of the struct at the cursor, up to its stop
        byte; the caller reads or skips each field's value before the next."""
        last = 0
        while (header := self.byte()) != 0:
            delta, kind = header >> 4, header & 0x0F
            if delta:
                last += delta
            else:  # a long jump: the id follows, zigzag-encoded
                raw = self.varint()
                last = (raw >> 1) ^ -(raw & 1)
            yield last, kind

    def collection(self) -> tuple[int, int]:
        """``(size, element type)`` of a list or set header."""
        header = self.byte()
        size = header >> 4
        return (self.varint() if size == 15 else size), header & 0x0F

    def skip(self, kind: int, *, element: bool = False) -> None:
        """Skip a value of type ``kind`` (a boolean field's value is in its header; a
        boolean element of a collection is one byte)."""
        if kind in (_TRUE, _FALSE):
            self.pos += 1 if element else 0
        elif kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before pos moves: not ``self.pos += self.varint()``
            self.pos += length
        elif kind in (_LIST, _SET):
            size, inner = self.collection()
            for _ in range(size):
                self.skip(inner, element=True)
        elif kind == _MAP:
            size = self.varint()
            kinds = self.byte() if size else 0
            for _ in range(size):
                self.skip(kinds >> 4, element=True)
                self.skip(kinds & 0x0F, element=True)
        elif kind == _STRUCT:
            for _, inner in self.fields():
                self.skip(inner)
        else:
            raise ValueError(f"unknown Thrift compact type {kind} at byte {self.pos}")
        if self.pos > len(self.data):
            raise IndexError("the footer ends inside a value")


def encrypted_leaves(footer: bytes) -> frozenset[int]:
    """The leaf columns (column chunks, in schema order) that are encrypted in any row
    group of the serialized ``FileMetaData`` ``footer``.

    Raises:
        ValueError: the bytes are not a Thrift compact ``FileMetaData``.
    """
    reader = _Reader(footer)
    found: set[int] = set()
    try:
        for field, kind in reader.fields():
            if field != _FILE_ROW_GROUPS or kind != _LIST:
                reader.skip(kind)
                continue
            groups, _ = reader.collection()
            for _ in range(groups):
                for group_field, group_kind in reader.fields():
                    if group_field != _GROUP_COLUMNS or group_kind != _LIST:
                        reader.skip(group_kind)
                        continue
                    chunks, _ = reader.collection()
                    for leaf in range(chunks):
                        for chunk_field, chunk_kind in reader.fields():
                            if chunk_field == _CHUNK_CRYPTO:
                                found.add(leaf)
                            reader.skip(chunk_kind)
    except IndexError:
        raise ValueError("the footer ends inside a value") from None
    return frozenset(found)
