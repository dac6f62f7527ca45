"""What :mod:`fastdata.sources.readers._parquet_input` takes from a user's source (a new-user
review on real-world files, 7 Dec): a ``pyarrow.dataset``'s own filter and schema, a column
of Arrow type null in one file, and the messages where a source or column is refused (a
``UnionDataset``, a partition column, a column only later files have).

Each input is generated here, small; each case states the expected rows or the expected
error and what it names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch

from fastdata import ParquetStream, SchemaError, SourceError
from fastdata.sources.readers._parquet_input import read_failure


# --------------------------------------------------------------------------- datasets
@pytest.fixture(scope="module")
def hive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``year=2023`` (ids 0-99) and ``year=2024`` (ids 100-199), as Spark writes them."""
    root = tmp_path_factory.mktemp("hive")
    for year, first in ((2023, 0), (2024, 100)):
        (root / f"year={year}").mkdir()
        ids = pa.array(range(first, first + 100), pa.int64())
        pq.write_table(pa.table({"id": ids}), root / f"year={year}" / "part-0.parquet")
    (root / "_SUCCESS").touch()
    return root


def _ids(stream: ParquetStream) -> list[int]:
    return sorted(i for batch in stream for i in batch["id"].tolist())


def test_a_datasets_own_filter_holds_and_with_filter_both_hold(hive: Path) -> None:
    dataset = ds.dataset(hive, partitioning="hive").filter(pc.field("id") < 10)
    assert _ids(ParquetStream(dataset, batch_size=64)) == list(range(10))
    both = ParquetStream(dataset, batch_size=64, filter=pc.field("id") >= 5)
    assert _ids(both) == list(range(5, 10))


def test_a_datasets_filter_on_a_partition_column_is_refused_saying_what_to_do(
    hive: Path,
) -> None:
    dataset = ds.dataset(hive, partitioning="hive").filter(pc.field("year") == 2024)
    with pytest.raises(SchemaError, match=r"dataset's filter .*year.*get_fragments") as caught:
        ParquetStream(dataset)
    assert caught.value.column == "year"


def test_a_filter_on_a_partition_folder_of_a_path_says_how_to_pass_partitioning(
    hive: Path,
) -> None:
    with pytest.raises(SchemaError, match="partitioning='hive'") as caught:
        ParquetStream(hive, filter=pc.field("year") == 2024)
    assert caught.value.column == "year"


def test_a_datasets_schema_casts_files_of_another_type(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3], pa.int64())}), tmp_path / "b.parquet")
    dataset = ds.dataset(tmp_path, schema=pa.schema([("id", pa.int64())]))
    stream = ParquetStream(dataset, batch_size=10)
    assert stream.schema.field("id").type == pa.int64()
    [batch] = list(stream)
    assert batch["id"].dtype == torch.int64 and batch["id"].tolist() == [1, 2, 3]
    with pytest.raises(SchemaError, match=r"does not cast to .* dataset.s schema"):
        ParquetStream(
            ds.dataset(tmp_path, schema=pa.schema([("id", pa.struct([("a", pa.int8())]))]))
        )


def test_a_value_beyond_the_datasets_narrower_type_names_file_and_row_group(
    tmp_path: Path,
) -> None:
    """As pyarrow's scan: an inferred (or given) int32 schema over an int64 file casts it, and
    a value beyond int32 is an error, here naming where it is and what to do."""
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([3_000_000_000])}), tmp_path / "b.parquet")
    for kept in (None, pc.field("id") > 0):  # a filter's scan too
        stream = ParquetStream(ds.dataset(tmp_path), batch_size=4, filter=kept)
        with pytest.raises(SourceError, match="do not cast to the stream's schema") as caught:
            list(stream)
        assert caught.value.path == str(tmp_path / "b.parquet") and caught.value.row_group == 0


def test_a_union_dataset_is_refused_naming_what_to_pass(hive: Path) -> None:
    union = ds.dataset([ds.dataset(hive / "year=2023"), ds.dataset(hive / "year=2024")])
    with pytest.raises(TypeError, match=r"UnionDataset is not supported.*children"):
        ParquetStream(union)
    files = [path for child in union.children for path in child.files]
    assert ParquetStream(files).num_rows == 200


def _stored_partitions(root: Path, years: tuple[int, ...], stored: tuple[int, ...]) -> None:
    """``year=...`` folders whose files store the year too (those in ``stored``), as a
    Spark job that kept the column writes them."""
    for year in years:
        (root / f"year={year}").mkdir()
        table = pa.table({"id": [year * 10, year * 10 + 1]})
        if year in stored:
            table = table.append_column("year", pa.array([year, year], pa.int32()))
        pq.write_table(table, root / f"year={year}" / "p.parquet")


def test_a_partition_column_the_files_store_is_read_from_them_as_pyarrow_reads_it(
    tmp_path: Path,
) -> None:
    """It was dropped from every batch without an error, and refused with columns= or a
    filter as "its values are in directory names, not in the files" (8 Dec review)."""
    _stored_partitions(tmp_path, (2020, 2021), stored=(2020, 2021))
    dataset = ds.dataset(tmp_path, partitioning="hive")
    expected = dataset.to_table().to_pydict()
    for columns in (None, ["id", "year"]):
        stream = ParquetStream(dataset, batch_size=10, columns=columns)
        assert stream.schema.names == ["id", "year"]
        rows = [b for b in stream]
        assert {k: v.tolist() for k, v in rows[0].items()} == expected
    chosen = ParquetStream(dataset, batch_size=10, filter=pc.field("year") == 2020)
    assert _ids(chosen) == dataset.to_table(filter=pc.field("year") == 2020)["id"].to_pylist()


def test_a_partition_column_only_some_files_store_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    """pyarrow reads the folder's value where a file lacks it; nulls there would be wrong."""
    _stored_partitions(tmp_path, (2020, 2021), stored=(2020,))
    with pytest.raises(SchemaError, match=r"partition column 'year' is stored .*not in") as caught:
        ParquetStream(ds.dataset(tmp_path, partitioning="hive"))
    assert caught.value.path is not None and "year=2021" in caught.value.path


# --------------------------------------------------------------------------- schemas
def test_a_column_only_later_files_have_names_both_files(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": [1]}), tmp_path / "p0.parquet")
    pq.write_table(pa.table({"id": [2], "new": [0.5]}), tmp_path / "p1.parquet")
    with pytest.raises(SchemaError, match=r"'new' is missing in .*p0\.parquet .* present in .*p1"):
        ParquetStream(tmp_path, columns=["id", "new"])


def test_a_column_only_later_files_of_a_dataset_have_says_to_build_it_with_schema(
    tmp_path: Path,
) -> None:
    """A dataset's schema names the columns read; ``schema=`` is its fix (8 Dec review)."""
    pq.write_table(pa.table({"id": [1]}), tmp_path / "p0.parquet")
    pq.write_table(pa.table({"id": [2], "new": [0.5]}), tmp_path / "p1.parquet")
    with pytest.raises(
        SchemaError, match=r"present in .*p1\.parquet.*build the dataset with schema="
    ):
        ParquetStream(ds.dataset(tmp_path), columns=["id", "new"])


@pytest.mark.parametrize("null_first", [False, True])
def test_a_column_of_type_null_in_one_file_reads_as_nulls_of_the_others_type(
    tmp_path: Path, null_first: bool
) -> None:
    """pandas writes a chunk whose object column is all None as Arrow type null."""
    typed = pa.table({"id": [0, 1], "name": ["a", None], "k": pa.array([5, 6], pa.int64())})
    nulls = pa.table({"id": [2, 3], "name": pa.nulls(2), "k": pa.array([7, 8], pa.int64())})
    first, second = (nulls, typed) if null_first else (typed, nulls)
    pq.write_table(first, tmp_path / "a.parquet")
    pq.write_table(second, tmp_path / "b.parquet")
    stream = ParquetStream(tmp_path, batch_size=4)
    assert stream.schema.field("name").type == pa.string()
    [batch] = list(stream)
    names = dict(zip(batch["id"].tolist(), batch["name"].tolist(), strict=True))
    assert names == {0: "a", 1: None, 2: None, 3: None}
    # a null-typed column that becomes a tensor: its nulls are refused, naming the row
    pq.write_table(pa.table({"id": [4], "name": ["z"], "k": pa.nulls(1)}), tmp_path / "c.parquet")
    with pytest.raises(SourceError, match="null") as caught:
        list(ParquetStream(tmp_path, batch_size=5))
    assert caught.value.column == "k" and caught.value.row == 0


@pytest.mark.parametrize("empty", [True, False])
@pytest.mark.parametrize("null_first", [False, True])
def test_isin_on_a_column_of_type_null_in_one_file_reads_as_equality_does(
    tmp_path: Path, empty: bool, null_first: bool
) -> None:
    """A zero-row file (an empty chunk) or pandas' all-None chunk stores the column as type
    null: ``isin`` needs its value set's type there, and reads as ``==`` and as pyarrow's
    dataset with the unified schema read it (it was refused, the empty file as corrupt)."""
    typed = pa.table({"id": pa.array([0, 1, 2], pa.int64()), "tag": ["a", "b", "c"]})
    rows = 0 if empty else 2
    untyped = pa.table({"id": pa.array(range(10, 10 + rows), pa.int64()), "tag": pa.nulls(rows)})
    pq.write_table(untyped if null_first else typed, tmp_path / "a.parquet")
    pq.write_table(typed if null_first else untyped, tmp_path / "b.parquet")
    unified = pa.schema([("id", pa.int64()), ("tag", pa.string())])
    for kept in (pc.field("tag").isin(["a", "b"]), pc.field("tag") == "b"):
        expected = ds.dataset(tmp_path, schema=unified).to_table(filter=kept)["id"].to_pylist()
        stream = ParquetStream(tmp_path, columns=["id"], filter=kept, batch_size=10)
        assert _ids(stream) == sorted(expected) and expected


def test_a_datasets_schema_is_the_columns_read_and_missing_ones_are_nulls(tmp_path: Path) -> None:
    """As pyarrow's scan: a dataset built with ``schema=`` reads that schema's columns (not
    every column of the files), a column a file lacks comes as nulls, and one only later
    files have is not read unless the schema names it."""
    pq.write_table(
        pa.table({"id": pa.array([0, 1], pa.int32()), "x": [0.5, 1.5]}), tmp_path / "a.parquet"
    )
    later = {"id": pa.array([2, 3], pa.int64()), "x": [2.5, 3.5], "extra": pa.array([7, None])}
    pq.write_table(pa.table(later), tmp_path / "b.parquet")
    narrow = ds.dataset(tmp_path, schema=pa.schema([("id", pa.int64())]))
    assert narrow.to_table().column_names == ["id"]
    stream = ParquetStream(narrow, batch_size=10)
    assert stream.schema.names == ["id"] and _ids(stream) == [0, 1, 2, 3]
    full = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("extra", pa.int64())])
    expected = ds.dataset(tmp_path, schema=full).to_table().to_pydict()
    assert expected["extra"] == [None, None, 7, None]
    for kept in (None, pc.field("x") > 1.0, pc.field("extra").is_null()):
        dataset = ds.dataset(tmp_path, schema=full)
        stream = ParquetStream(dataset, batch_size=10, filter=kept, fill_null={"extra": -1})
        [batch] = list(stream)
        assert list(batch) == ["id", "x", "extra"]
        table = ds.dataset(tmp_path, schema=full).to_table(filter=kept).to_pydict()
        assert batch["id"].tolist() == table["id"]
        assert batch["extra"].tolist() == [-1 if v is None else v for v in table["extra"]]
    narrowed = ParquetStream(ds.dataset(tmp_path, schema=full), columns=["extra"], batch_size=10)
    assert narrowed.schema.names == ["extra"]
    with pytest.raises(SchemaError, match="'x' does not exist"):
        ParquetStream(narrow, columns=["x"])  # not a column of the dataset, as in pyarrow


# --------------------------------------------------------------------------- read errors
def test_a_file_deleted_after_planning_is_not_called_corrupt(tmp_path: Path) -> None:
    for name, first in (("a", 0), ("b", 10)):
        pq.write_table(pa.table({"id": range(first, first + 10)}), tmp_path / f"{name}.parquet")
    stream = ParquetStream(tmp_path, batch_size=5)
    (tmp_path / "b.parquet").unlink()
    with pytest.raises(SourceError, match=r"not there now .*deleted or moved") as caught:
        list(stream)
    assert "corrupt" not in str(caught.value)
    assert caught.value.path == str(tmp_path / "b.parquet") and caught.value.row_group == 0


S3_DENIED = (
    "When reading information for key 't/a.parquet' in bucket 'locked': AWS Error "
    "ACCESS_DENIED during HeadObject operation: No response body."
)
S3_THROTTLED = (
    "Could not open Parquet input source 'b/a.parquet': AWS Error SLOW_DOWN during "
    "GetObject operation: Please reduce your request rate."
)
S3_FAILED = "AWS Error INTERNAL_FAILURE during GetObject operation: We encountered an error"
S3_UNREACHED = (
    "When reading information for key 't/a.parquet' in bucket 'b': AWS Error "
    "NETWORK_CONNECTION during GetObject operation: curlCode: 7, Could not connect to server"
)


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (OSError(S3_DENIED), "refused access .*credentials have not expired"),
        (PermissionError(13, "Permission denied"), "refused access"),
        (OSError("[Errno 2] Path does not exist 'b/t/a.parquet'"), "not there now"),
        (FileNotFoundError(2, "No such file or directory"), "not there now"),
        (OSError(S3_UNREACHED), "could not be reached .*network"),
        (OSError(S3_THROTTLED), "failed or throttled .*retry later.*fewer concurrent"),
        (OSError(S3_FAILED), "failed or throttled .*retry later"),
        (OSError("AWS Error SERVICE_UNAVAILABLE during GetObject"), "failed or throttled"),
        (pa.ArrowInvalid("Couldn't deserialize thrift"), "corrupt or truncated"),
    ],
)
def test_a_row_group_that_cannot_be_read_says_why_by_the_error(error: Exception, says: str) -> None:
    """Refused credentials mid-epoch (an expired session token: moto's denial's own text),
    a deleted object or an unreachable store were all "the file may be corrupt"."""
    assert re.search(says, read_failure(error))
    if not isinstance(error, pa.ArrowInvalid):
        assert "corrupt" not in read_failure(error)
