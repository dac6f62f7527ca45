"""What pyarrow must not be asked about a footer, read from its Thrift bytes
(fastdata.sources.readers._thrift): encrypted columns and corrupt column chunks, in footers
written here in Thrift's compact protocol (with any fields around the ones that matter), in
pyarrow's own footers, plain and encrypted, and in those footers with a byte flipped."""

from __future__ import annotations

import decimal
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.sources.readers._compact import struct as read_struct
from fastdata.sources.readers._thrift import _FILE, Problem, _leaves, footer_facts
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
    encrypted in any row group. (The other fields are none that parquet.thrift declares a
    list or struct: those are read as declared, whatever their bytes say.)"""
    noise = values()
    expected: set[int] = set()
    groups = []
    for _ in range(draw(st.integers(0, 3))):
        chunks = []
        for leaf in range(draw(st.integers(0, 5))):
            fields = draw(others(noise, avoid=(3, 8)))
            if draw(st.booleans()):
                expected.add(leaf)
                fields = sorted([*fields, (8, STRUCT, draw(others(SCALARS, avoid=())))])
            chunks.append(fields)
        group = sorted([*draw(others(noise, avoid=(1, 4))), (1, LIST, (STRUCT, chunks))])
        groups.append(group)
    top = sorted([*draw(others(noise, avoid=(2, 4, 5, 7))), (4, LIST, (STRUCT, groups))])
    return thrift_struct(top), expected


@settings(max_examples=200, deadline=None)
@given(case=footers())
def test_the_encrypted_leaves_are_found_among_any_other_fields(
    case: tuple[bytes, set[int]],
) -> None:
    footer, expected = case
    assert footer_facts(footer).encrypted == expected


@settings(max_examples=100, deadline=None)
@given(case=footers(), data=st.data())
def test_a_footer_cut_short_is_a_value_error(case: tuple[bytes, set[int]], data: Any) -> None:
    footer, _ = case
    end = data.draw(st.integers(0, len(footer) - 1))
    with pytest.raises(ValueError, match="ends inside a value"):
        footer_facts(footer[:end])


def test_an_unknown_type_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown Thrift compact type 14 at byte 1"):
        footer_facts(bytes([0x1E, 0]))


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
    assert footer_facts(footer_bytes(plain)) == (frozenset(), None)
    for columns, leaves in ((["a"], {0}), (["b", "c"], {1, 2})):
        path = write_encrypted(tmp_path / "e.parquet", TABLE, columns, plaintext_footer=True)
        assert footer_facts(footer_bytes(path)) == (leaves, None)


# ---------------------------------------------------------------- corrupt column chunks
INT64, BYTE_ARRAY = 2, 6
OPTIONAL, REPEATED = 1, 2
SCHEMA = [  # a: optional int64 (levels 0, 1); b: a list of strings (b.list.element: 1, 3)
    [(4, BINARY, b"schema"), (5, I32, 2)],
    [(1, I32, INT64), (3, I32, OPTIONAL), (4, BINARY, b"a")],
    [(3, I32, OPTIONAL), (4, BINARY, b"b"), (5, I32, 1)],
    [(3, I32, REPEATED), (4, BINARY, b"list"), (5, I32, 1)],
    [(1, I32, BYTE_ARRAY), (3, I32, OPTIONAL), (4, BINARY, b"element")],
]


def chunk(physical: int, stats=(), sizes=(), *, crypto: bool = False, meta: bool = True) -> list:
    """A ColumnChunk: its ColumnMetaData's type, Statistics and SizeStatistics fields."""
    fields = [(1, I32, physical), (2, LIST, (I32, [0, 3])), (4, I32, 0), (5, I64, 3)]
    if stats:
        fields.append((12, STRUCT, [(3, I64, 0), *stats]))
    if sizes:
        fields.append((16, STRUCT, list(sizes)))
    out = [(2, I64, 4)] + ([(3, STRUCT, fields)] if meta else [])
    return out + ([(8, STRUCT, [(1, STRUCT, [])])] if crypto else [])


def footer(*groups: list) -> bytes:
    """A FileMetaData with :data:`SCHEMA` and these row groups of column chunks."""
    rows = [[(1, LIST, (STRUCT, chunks)), (3, I64, 2)] for chunks in groups]
    return thrift_struct(
        [(1, I32, 2), (2, LIST, (STRUCT, SCHEMA)), (3, I64, 2), (4, LIST, (STRUCT, rows))]
    )


def histogram(field: int, size: int) -> tuple[int, int, Any]:
    return (field, LIST, (I64, [1] * size))


GOOD_A = chunk(INT64, [(5, BINARY, bytes(8)), (6, BINARY, bytes(8))], [histogram(3, 2)])
GOOD_B = chunk(
    BYTE_ARRAY,
    [(1, BINARY, b""), (2, BINARY, b"")],  # strings may be empty
    [(1, I64, 12), histogram(2, 2), histogram(3, 4)],
)


@pytest.mark.parametrize(
    ("a", "b", "column", "reason"),
    [
        (chunk(1), GOOD_B, "a", "the column chunk's type is INT32, the schema's INT64"),
        (chunk(47), GOOD_B, "a", "type is unknown type 47, the schema's INT64"),
        (chunk(INT64, meta=False), GOOD_B, "a", "the column chunk has no metadata"),
        (
            GOOD_A,
            chunk(BYTE_ARRAY, sizes=[histogram(2, 9)]),
            "b.list.element",
            "its repetition level histogram has 9 counts where the column has 2 levels",
        ),
        (
            chunk(INT64, sizes=[histogram(3, 1)]),
            GOOD_B,
            "a",
            "definition level histogram has 1 counts where the column has 2 levels",
        ),
        (
            chunk(INT64, sizes=[(1, I64, 5)]),
            GOOD_B,
            "a",
            "it counts unencoded byte array bytes for a INT64 column",
        ),
        (
            chunk(INT64, [(5, BINARY, bytes(8)), (6, BINARY, bytes(3))]),
            GOOD_B,
            "a",
            "its statistic min_value has 3 bytes where a INT64 value has 8",
        ),
        (
            chunk(INT64, [(1, BINARY, bytes(7)), (2, BINARY, bytes(8))]),  # legacy max and min
            GOOD_B,
            "a",
            "its statistic max has 7 bytes",
        ),
    ],
)
def test_a_column_chunk_pyarrow_cannot_describe_is_found(
    a: list, b: list, column: str, reason: str
) -> None:
    facts = footer_facts(footer([GOOD_A, GOOD_B], [a, b]))
    assert facts.encrypted == frozenset()
    assert facts.problem is not None
    assert (facts.problem.row_group, facts.problem.column) == (1, column)
    assert reason in facts.problem.reason


def test_well_formed_and_encrypted_chunks_are_no_problem() -> None:
    assert footer_facts(footer([GOOD_A, GOOD_B], [GOOD_A, GOOD_B])) == (frozenset(), None)
    assert footer_facts(footer()) == (frozenset(), None)  # no row groups
    hidden = chunk(47, [(6, BINARY, b"")], crypto=True, meta=False)  # its metadata encrypted
    assert footer_facts(footer([GOOD_A, hidden])) == ({1}, None)


def test_a_row_group_must_hold_a_chunk_for_every_column() -> None:
    short = footer_facts(footer([GOOD_A, GOOD_B], [GOOD_A]))
    reason = "the row group has 1 column chunks where the schema has 2 columns"
    assert short.problem == Problem(1, None, reason)
    assert footer_facts(footer([GOOD_A, GOOD_B, GOOD_B])).problem is not None


def test_a_declared_list_is_read_as_declared_whatever_its_header_says() -> None:
    """pyarrow's Thrift code reads ColumnMetaData.encodings as a list<i32> whatever element
    type its header names (one flipped byte can name another): read by the header (binaries,
    here), everything after it would be read out of step with pyarrow."""
    good = footer([GOOD_A, GOOD_B])
    encodings = bytes([0x19, 0x25, 0x00, 0x06])  # field 2: a list of 2 i32, 0 and 3
    assert good.count(encodings) == 2
    said_binary = good.replace(encodings, bytes([0x19, 0x28, 0x00, 0x06]))
    assert footer_facts(said_binary) == (frozenset(), None)


NESTED = pa.table(
    {
        "flag": [True, None],
        "i32": pa.array([1, 2], pa.int32()),
        "u64": pa.array([1, 2], pa.uint64()),
        "f16": pa.array([1.0, 2.0], pa.float16()),
        "f64": [1.5, None],
        "money": pa.array([decimal.Decimal("1.25"), None], pa.decimal128(12, 2)),
        "fixed": pa.array([b"abcd", b"efgh"], pa.binary(4)),
        "when": pa.array([1, 2], pa.timestamp("ns")),
        "label": pa.array(["x", "y"]).dictionary_encode(),
        "point": [{"x": 1.0, "y": {"z": 2}}, None],
        "tags": pa.array([[("k", [1, 2])], []], pa.map_(pa.string(), pa.list_(pa.int32()))),
        "deep": [[[1], [2, 3]], None],
        "tensor": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
    }
)


@pytest.mark.parametrize("options", [{}, {"use_deprecated_int96_timestamps": True}])
def test_pyarrows_footers_are_read_with_pyarrows_leaves(tmp_path: Path, options: dict) -> None:
    """Every type pyarrow writes, with statistics and size statistics: no problem, and the
    leaves (paths, physical types, levels) as pyarrow's schema has them."""
    path = tmp_path / "types.parquet"
    pq.write_table(NESTED, path, row_group_size=1, **options)
    data = footer_bytes(path)
    assert footer_facts(data) == (frozenset(), None)
    out: dict[str, Any] = {}
    read_struct(data, 0, _FILE, out)
    schema = pq.ParquetFile(path).metadata.schema
    expected = [
        (c.path, c.physical_type, c.max_definition_level, c.max_repetition_level)
        for c in (schema.column(i) for i in range(len(schema)))
    ]
    types = ["BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY"]
    types.append("FIXED_LEN_BYTE_ARRAY")
    got = [
        (leaf.path, types[leaf.physical], leaf.max_definition, leaf.max_repetition)
        for leaf in _leaves(out["elements"])
    ]
    assert got == expected
