"""Parquet footers as planning reads them (fastdata.sources.readers._footers): the footer from
the file's last bytes, named errors instead of aborts (encrypted columns, corrupt column
chunks), the schema
every file agrees with, and a digest of the data read."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata.errors import SchemaError, SourceError
from fastdata.sources.readers._footers import (
    ContentDigest,
    SchemaAgreement,
    _leaf_columns,
    read_footer,
    refuse_encrypted,
)
from real_world_files import (
    FLIPPED_FOOTERS,
    write_encrypted,
    write_flipped,
    write_short_statistic,
)

FS = pafs.LocalFileSystem()
TABLE = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [[1.0], [], [2.0]]})


def written(path: Path, table: pa.Table = TABLE, **options: object) -> str:
    pq.write_table(table, path, **options)
    return str(path)


@pytest.mark.parametrize("columns", [3, 3000])  # a footer within the first read, and over it
def test_the_footer_is_pyarrows_read_from_the_files_end(tmp_path: Path, columns: int) -> None:
    table = pa.table({f"column_{i}": [i, i + 1] for i in range(columns)})
    path = written(tmp_path / "f.parquet", table, row_group_size=1)
    footer = read_footer(FS, path)
    expected = pq.ParquetFile(path).metadata
    assert columns < 3000 or expected.serialized_size > 64 << 10
    assert footer.metadata.num_rows == 2 and footer.metadata.num_row_groups == 2
    assert footer.metadata.num_columns == expected.num_columns
    assert footer.schema == table.schema and footer.encrypted == frozenset()


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        (b"", "does not end with b'PAR1'"),
        (b"not parquet at all", "does not end with b'PAR1'"),
        (b"\x00" * 20 + b"PARE", "footer is encrypted"),
        (b"PAR1" + (10**6).to_bytes(4, "little") + b"PAR1", "claims 1,000,000 bytes"),
        (b"PAR1" + b"\xff" * 30 + (30).to_bytes(4, "little") + b"PAR1", "cannot read"),
    ],
)
def test_what_is_no_parquet_footer_is_a_source_error_naming_the_file(
    tmp_path: Path, tail: bytes, message: str
) -> None:
    path = tmp_path / "bad.parquet"
    path.write_bytes(tail)
    with pytest.raises(SourceError, match=message) as info:
        read_footer(FS, str(path))
    assert str(path) in str(info.value)


def test_a_plaintext_footer_names_its_encrypted_columns(tmp_path: Path) -> None:
    path = write_encrypted(tmp_path / "e.parquet", TABLE, ["b", "c"], plaintext_footer=True)
    footer = read_footer(FS, str(path))
    assert footer.encrypted == {"b", "c"}
    assert footer.schema.names == ["a", "b", "c"]
    refuse_encrypted(str(path), footer.encrypted, ["a"])  # the others read as they are
    with pytest.raises(SourceError, match="column 'c' is encrypted") as info:
        refuse_encrypted(str(path), footer.encrypted, ["a", "c", "b"])
    assert info.value.column == "c"
    hidden = write_encrypted(tmp_path / "h.parquet", TABLE, ["a"], plaintext_footer=False)
    with pytest.raises(SourceError, match="footer is encrypted"):
        read_footer(FS, str(hidden))


@pytest.mark.parametrize(
    ("case", "row_group", "column", "reason"),
    [
        ("chunk type", 0, "id", "column chunk 'id': the column chunk's type is unknown type 47"),
        ("repetition histogram", 1, "st", "'st.b.list.element': its repetition level histogram"),
        ("definition histogram", 0, "d", "'d': its definition level histogram has 2 counts"),
        ("lists as declared", 2, "f", "'f.list.element': its definition level histogram"),
    ],
)
def test_a_corrupt_column_chunk_is_refused_before_pyarrow_describes_it(
    tmp_path: Path, case: str, row_group: int, column: str, reason: str
) -> None:
    """A byte flipped in a footer that pyarrow parses, but whose column chunk metadata or
    statistics pyarrow cannot build (its accessors then abort the process; its reads raise an
    OSError): refused when the footer is read, naming file, row group and column."""
    path = write_flipped(tmp_path / "flipped.parquet", case)
    with pytest.raises(OSError, match=FLIPPED_FOOTERS[case][3]):  # pyarrow's read says so too
        pq.read_table(path)
    with pytest.raises(SourceError, match="corrupt Parquet footer") as info:
        read_footer(FS, str(path))
    assert reason in str(info.value) and f"row group {row_group}" in str(info.value)
    assert (info.value.path, info.value.row_group, info.value.column) == (
        str(path),
        row_group,
        column,
    )


def test_a_statistic_shorter_than_its_type_is_refused(tmp_path: Path) -> None:
    path = write_short_statistic(tmp_path / "short.parquet")
    with pytest.raises(OSError, match="Unexpected end of stream"):  # pyarrow's read
        pq.read_table(path)
    with pytest.raises(SourceError, match="statistic min_value has 3 bytes where a INT64") as info:
        read_footer(FS, str(path))
    assert (info.value.row_group, info.value.column) == (0, "id")


NESTED = pa.schema(
    [
        ("id", pa.int64()),
        ("point", pa.struct([("x", pa.float32()), ("y", pa.struct([("z", pa.int8())]))])),
        ("tags", pa.map_(pa.string(), pa.list_(pa.int32()))),
        ("tokens", pa.large_list(pa.int32())),
        ("fixed", pa.list_(pa.float32(), 2)),
        ("name", pa.string()),
    ]
)


def test_each_fields_leaves_are_the_files_column_chunks(tmp_path: Path) -> None:
    path = written(tmp_path / "n.parquet", NESTED.empty_table())
    schema = pq.ParquetFile(path).metadata.schema
    spans = _leaf_columns(NESTED)
    assert sum(len(span) for span in spans.values()) == len(schema)
    for name, span in spans.items():
        assert [schema.column(i).path.split(".")[0] for i in span] == [name] * len(span)


def test_files_must_hold_the_columns_with_agreeing_types(tmp_path: Path) -> None:
    ref = pa.schema([("a", pa.int64(), False), ("s", pa.string()), ("l", pa.list_(pa.int32()))])
    agreement = SchemaAgreement("ref.parquet", ref, ["a", "s", "l"])
    assert agreement.schema() == ref
    with pytest.raises(SchemaError, match="column 'x' does not exist; available columns: a, s"):
        SchemaAgreement("ref.parquet", ref, ["a", "x"])
    other = pa.schema([("a", pa.int32()), ("s", pa.string()), ("l", pa.list_(pa.int32()))])
    with pytest.raises(SchemaError, match=r"has type int32 here but int64 in ref\.parquet"):
        agreement.check("other.parquet", other)


def test_with_every_column_read_the_files_must_hold_the_same_columns() -> None:
    ref = pa.schema([("a", pa.int64()), ("s", pa.string())])
    every = SchemaAgreement("ref.parquet", ref, ["a", "s"], every=True)
    every.check("reordered.parquet", pa.schema([("s", pa.string()), ("a", pa.int64())]))
    wider = pa.schema([("a", pa.int64()), ("s", pa.string()), ("x", pa.int8())])
    with pytest.raises(SchemaError, match=r"this file has column 'x', unlike ref\.parquet") as err:
        every.check("wider.parquet", wider)
    assert err.value.column == "x" and "share: a, s" in str(err.value)
    SchemaAgreement("ref.parquet", ref, ["a", "s"]).check("wider.parquet", wider)  # columns named


def test_files_differing_in_width_or_nullability_read_as_the_relaxed_type() -> None:
    ref = pa.schema([("a", pa.int64(), False), ("s", pa.string()), ("l", pa.list_(pa.int32()))])
    agreement = SchemaAgreement("ref.parquet", ref, ["a", "s", "l"])
    wide = pa.schema(
        [
            ("a", pa.int64(), True),
            ("s", pa.large_string()),
            ("l", pa.large_list(pa.field("item", pa.int32(), False))),
        ]
    )
    agreement.check("wide.parquet", wide)
    schema = agreement.schema()
    assert schema.field("a").nullable  # one file has nulls: the column may
    assert schema.field("s").type == pa.large_string()
    assert schema.field("l").type == pa.large_list(pa.int32())


def digest(paths: list[str], names: list[str]) -> str:
    content = ContentDigest()
    for path in paths:
        footer = read_footer(FS, path)
        content.add(Path(path).stat().st_size, footer.metadata, footer.schema, names)
    return content.hexdigest()


@settings(max_examples=20, deadline=None)
@given(
    values=st.lists(st.integers(-100, 100), min_size=1, max_size=20),
    change=st.integers(1, 50),
)
def test_the_digest_follows_the_selected_columns_values_only(
    tmp_path_factory: pytest.TempPathFactory, values: list[int], change: int
) -> None:
    root = tmp_path_factory.mktemp("digest")
    b = [str(v) for v in values]
    one = written(root / "1.parquet", pa.table({"a": values, "b": b}))
    again = written(root / "2.parquet", pa.table({"a": values, "b": b}))
    moved = written(root / "3.parquet", pa.table({"a": [v + change for v in values], "b": b}))
    # Column b changed, and the file's size with it (by its metadata: another b alone may
    # compress to the same size, which hypothesis found: [46, 61, -11, 12, -51, 16, 60, ...])
    b_table = pa.table({"a": values, "b": [x + "!" for x in b]})
    b_changed = written(root / "4.parquet", b_table.replace_schema_metadata({"pad": "x" * 64}))
    assert digest([one], ["a"]) == digest([again], ["a"])
    assert digest([one], ["a"]) != digest([moved], ["a"])  # other min/max: another digest
    assert digest([one], ["a"]) != digest([one, again], ["a"])
    assert digest([b_changed], ["a"]) != digest([one], ["a"])  # the file's size is in it
    assert digest([one], ["b"]) != digest([one], ["a"])
