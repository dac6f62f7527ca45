"""Encrypted columns read from a footer's Thrift bytes (fastdata.sources.readers._thrift):
footers written here in Thrift's compact protocol, with any fields around the ones that
matter, and pyarrow's own footers, plain and encrypted."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources.readers._thrift import encrypted_leaves
from real_world_files import write_encrypted

# compact-protocol type codes, as parquet.thrift's files are written
TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(1, 13)


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            return bytes(out + bytes([n]))
        out.append(n & 0x7F | 0x80)
        n >>= 7


def zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def value(kind: int, v: Any) -> bytes:
    """The bytes of a value of ``kind`` (a boolean here: an element of a collection)."""
    if kind in (TRUE, FALSE):
        return bytes([1 if v else 2])
    if kind == BYTE:
        return bytes([v & 0xFF])
    if kind in (I16, I32, I64):
        return varint(zigzag(v))
    if kind == DOUBLE:
        return struct.pack("<d", v)
    if kind == BINARY:
        return varint(len(v)) + v
    if kind in (LIST, SET):
        inner, items = v
        head = bytes([len(items) << 4 | inner]) if len(items) < 15 else bytes([0xF0 | inner])
        size = b"" if len(items) < 15 else varint(len(items))
        return head + size + b"".join(value(inner, x) for x in items)
    if kind == MAP:
        (k, i), pairs = v
        body = b"".join(value(k, a) + value(i, b) for a, b in pairs)
        return varint(len(pairs)) + (bytes([k << 4 | i]) if pairs else b"") + body
    return thrift_struct(v)


def thrift_struct(fields: list[tuple[int, int, Any]]) -> bytes:
    """A struct of ``(field id, kind, value)``, ids increasing; a jump over 15 ids is
    written the long way, as compact writers do."""
    out, last = bytearray(), 0
    for field, kind, v in fields:
        header = (TRUE if v else FALSE) if kind in (TRUE, FALSE) else kind
        if 0 < field - last <= 15:
            out.append((field - last) << 4 | header)
        else:
            out += bytes([header]) + varint(zigzag(field))
        if kind not in (TRUE, FALSE):
            out += value(kind, v)
        last = field
    return bytes(out + b"\x00")


SCALARS = st.one_of(
    st.tuples(st.just(TRUE), st.booleans()),
    st.tuples(st.just(BYTE), st.integers(-128, 127)),
    st.tuples(st.sampled_from([I16, I32, I64]), st.integers(-(2**40), 2**40)),
    st.tuples(st.just(DOUBLE), st.floats(allow_nan=False)),
    st.tuples(st.just(BINARY), st.binary(max_size=20)),
)


def values() -> st.SearchStrategy[tuple[int, Any]]:
    """Any compact value: scalars, and lists, sets, maps and structs of them."""
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.tuples(
                st.sampled_from([LIST, SET]),
                st.sampled_from([BYTE, I32, BINARY, TRUE]).flatmap(
                    lambda k: st.tuples(st.just(k), st.lists(scalar_of(k), max_size=17))
                ),
            ),
            st.tuples(
                st.just(MAP),
                st.tuples(
                    st.just((I32, BINARY)),
                    st.lists(st.tuples(scalar_of(I32), scalar_of(BINARY)), max_size=3),
                ),
            ),
            st.tuples(st.just(STRUCT), others(inner, avoid=())),
        ),
        max_leaves=6,
    )


def scalar_of(kind: int) -> st.SearchStrategy[Any]:
    return {
        BYTE: st.integers(-128, 127),
        I32: st.integers(-(2**31), 2**31 - 1),
        BINARY: st.binary(max_size=5),
        TRUE: st.booleans(),
    }[kind]


def others(inner: st.SearchStrategy, avoid: tuple[int, ...]) -> st.SearchStrategy[list]:
    """Struct fields of any kind at ids other than ``avoid``, in increasing id order."""
    ids = st.lists(st.integers(1, 40).filter(lambda i: i not in avoid), unique=True, max_size=4)
    return ids.flatmap(
        lambda chosen: st.tuples(*[inner for _ in chosen]).map(
            lambda vs: [(i, k, v) for i, (k, v) in zip(sorted(chosen), vs, strict=True)]
        )
    )


@st.composite
def footers(draw: Any) -> tuple[bytes, set[int]]:
    """A FileMetaData-like struct: row groups (field 4) of column chunks (field 1), some with
    crypto_metadata (field 8), every struct with other fields around them; and the leaves
    encrypted in any row group."""
    noise = values()
    expected: set[int] = set()
    groups = []
    for _ in range(draw(st.integers(0, 3))):
        chunks = []
        for leaf in range(draw(st.integers(0, 5))):
            fields = draw(others(noise, avoid=(8,)))
            if draw(st.booleans()):
                expected.add(leaf)
                fields = sorted([*fields, (8, STRUCT, draw(others(SCALARS, avoid=())))])
            chunks.append(fields)
        group = sorted([*draw(others(noise, avoid=(1,))), (1, LIST, (STRUCT, chunks))])
        groups.append(group)
    top = sorted([*draw(others(noise, avoid=(4,))), (4, LIST, (STRUCT, groups))])
    return thrift_struct(top), expected


@settings(max_examples=200, deadline=None)
@given(case=footers())
def test_the_encrypted_leaves_are_found_among_any_other_fields(
    case: tuple[bytes, set[int]],
) -> None:
    footer, expected = case
    assert encrypted_leaves(footer) == expected


@settings(max_examples=100, deadline=None)
@given(case=footers(), data=st.data())
def test_a_footer_cut_short_is_a_value_error(case: tuple[bytes, set[int]], data: Any) -> None:
    footer, _ = case
    end = data.draw(st.integers(0, len(footer) - 1))
    with pytest.raises(ValueError, match="ends inside a value"):
        encrypted_leaves(footer[:end])


def test_an_unknown_type_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown Thrift compact type 13 at byte 1"):
        encrypted_leaves(bytes([0x1D, 0]))


def footer_bytes(path: Path) -> bytes:
    """The file's serialized FileMetaData (without a plaintext footer's signature)."""
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length :]  # with its length and magic, as pyarrow parses it
    size = pq.ParquetFile(pa.BufferReader(footer)).metadata.serialized_size
    return footer[:size]


TABLE = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [[1.0], [], [2.0]]})


def test_pyarrows_footers_name_the_encrypted_columns_leaves(tmp_path: Path) -> None:
    plain = tmp_path / "plain.parquet"
    pq.write_table(TABLE, plain, row_group_size=2)
    assert encrypted_leaves(footer_bytes(plain)) == frozenset()
    for columns, leaves in ((["a"], {0}), (["b", "c"], {1, 2})):
        path = write_encrypted(tmp_path / "e.parquet", TABLE, columns, plaintext_footer=True)
        assert encrypted_leaves(footer_bytes(path)) == leaves
