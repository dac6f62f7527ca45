"""Parquet at the edges (issue #24): every Arrow type a user may have, files that differ in
what does not change their values, filters and storage that do not fit, nulls where no tensor
can hold them, slices of large row groups, and footers that do not stay in memory.

Each input is generated here, small; each case states the expected tensors or the expected
error class and location, with ``num_workers`` 0 and 2.
"""

from __future__ import annotations

import datetime
import decimal
import gc
import socket
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fastdata import DataLoader, ParquetStream, Ragged, SchemaError, SourceError
from fastdata.sources.readers import ParquetRowGroups

EPOCH = datetime.date(1970, 1, 1)
ROWS = 12


def _days(d: datetime.date) -> int:
    return (d - EPOCH).days


# --------------------------------------------------------------------------- every type
# name -> (Arrow array of ROWS values, expected value of row i as delivered, batch kind)
# The kind is what a batch holds: a tensor dtype, "ragged" or "objects".
def _type_cases() -> dict[str, tuple[pa.Array, Callable[[int], Any], Any]]:
    n = range(ROWS)
    dates = [EPOCH + datetime.timedelta(days=400 * i) for i in n]
    uuids = [uuid.UUID(int=i * 7919).bytes for i in n]
    tensor_type = pa.fixed_shape_tensor(pa.float32(), [2, 3])
    tensors = np.arange(ROWS * 6, dtype=np.float32).reshape(ROWS, 6)
    return {
        "id": (pa.array(n, pa.int64()), lambda i: i, torch.int64),
        "bool": (pa.array([i % 3 == 0 for i in n]), lambda i: i % 3 == 0, torch.bool),
        "uint8": (pa.array(n, pa.uint8()), lambda i: i, torch.uint8),
        "float16": (
            pa.array(np.arange(ROWS, dtype=np.float16) / 4),
            lambda i: i / 4,
            torch.float16,
        ),
        "date32": (pa.array(dates, pa.date32()), lambda i: _days(dates[i]), torch.int64),
        # Parquet stores date64 as date32: days, not milliseconds
        "date64": (pa.array(dates, pa.date64()), lambda i: _days(dates[i]), torch.int64),
        # ... and time32[s] as milliseconds
        "time32_s": (pa.array(n, pa.time32("s")), lambda i: 1000 * i, torch.int64),
        "time64_us": (pa.array(n, pa.time64("us")), lambda i: i, torch.int64),
        "timestamp_ns": (pa.array(n, pa.timestamp("ns")), lambda i: i, torch.int64),
        "timestamp_zoned": (
            pa.array(n, pa.timestamp("ms", tz="Europe/Paris")),
            lambda i: i,
            torch.int64,
        ),
        "duration": (pa.array(n, pa.duration("us")), lambda i: i, torch.int64),
        "fixed_list": (
            pa.array([[i, -i] for i in n], pa.list_(pa.float32(), 2)),
            lambda i: [float(i), float(-i)],
            torch.float32,
        ),
        "fixed_2d": (
            pa.array([[[i, 1], [2, 3]] for i in n], pa.list_(pa.list_(pa.int16(), 2), 2)),
            lambda i: [[i, 1], [2, 3]],
            torch.int16,
        ),
        "fixed_shape_tensor": (
            pa.ExtensionArray.from_storage(
                tensor_type, pa.array(list(tensors), tensor_type.storage_type)
            ),
            lambda i: tensors[i].reshape(2, 3).tolist(),
            torch.float32,
        ),
        "large_list": (
            pa.array([[i] * (i % 3) for i in n], pa.large_list(pa.int64())),
            lambda i: [i] * (i % 3),
            "ragged",
        ),
        "list_of_dates": (
            pa.array([[d] for d in dates], pa.list_(pa.date32())),
            lambda i: [_days(dates[i])],
            "ragged",
        ),
        "list_of_bools": (
            pa.array([[True, i % 2 == 0] for i in n]),
            lambda i: [True, i % 2 == 0],
            "ragged",
        ),
        "large_string": (
            pa.array([f"s{i}" for i in n], pa.large_string()),
            lambda i: f"s{i}",
            "ragged",
        ),
        "string_view": (
            pa.array([f"v{i}" for i in n], pa.string_view()),
            lambda i: f"v{i}",
            "ragged",
        ),
        "large_binary": (
            pa.array([bytes([i]) for i in n], pa.large_binary()),
            lambda i: bytes([i]),
            "ragged",
        ),
        "dictionary": (
            pa.array([f"d{i % 3}" for i in n]).dictionary_encode(),
            lambda i: f"d{i % 3}",
            "ragged",
        ),
        "fixed_binary": (
            pa.array([bytes([i, i, i]) for i in n], pa.binary(3)),
            lambda i: bytes([i] * 3),
            "ragged",
        ),
        "uuid": (
            pa.ExtensionArray.from_storage(pa.uuid(), pa.array(uuids, pa.binary(16))),
            lambda i: uuids[i],
            "ragged",
        ),
        "decimal": (
            pa.array([decimal.Decimal(i) / 4 for i in n], pa.decimal128(9, 2)),
            lambda i: decimal.Decimal(i) / 4,
            "objects",
        ),
        "struct": (
            pa.array([{"a": i, "b": str(i)} for i in n]),
            lambda i: {"a": i, "b": str(i)},
            "objects",
        ),
        "map": (
            pa.array([[("k", i)] for i in n], pa.map_(pa.string(), pa.int64())),
            lambda i: [["k", i]],  # (key, value) pairs: tuples, made lists in rows mode by
            # DataLoader's default_convert (a stream's batches are handed over as they are)
            "objects",
        ),
        "nested_list": (pa.array([[[i], []] for i in n]), lambda i: [[i], []], "objects"),
        "list_of_strings": (
            pa.array([[str(i), "x"] for i in n]),
            lambda i: [str(i), "x"],
            "objects",
        ),
        "null": (pa.nulls(ROWS), lambda i: None, "objects"),
    }


TYPE_CASES = _type_cases()


@pytest.fixture(scope="module")
def all_types(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cases as two files of 6 rows, row groups of 4: batches span row groups and files."""
    root = tmp_path_factory.mktemp("types")
    table = pa.table({name: array for name, (array, _, _) in TYPE_CASES.items()})
    pq.write_table(table.slice(0, 6), root / "a.parquet", row_group_size=4)
    pq.write_table(table.slice(6), root / "b.parquet", row_group_size=4)
    return root


def python_value(value: Any) -> Any:
    """A delivered value (tensor, numpy scalar, Python object) as plain Python."""
    if isinstance(value, torch.Tensor | np.ndarray | np.generic):
        return value.tolist()
    return value


def rows_of_batch(batch: dict[str, Any]) -> list[dict[str, Any]]:
    columns = {
        name: value.tolist() if isinstance(value, torch.Tensor | Ragged) else list(value)
        for name, value in batch.items()
    }
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size", [5, None])
def test_every_type_is_delivered_as_documented(all_types: Path, num_workers, batch_size) -> None:
    stream = ParquetStream(all_types, batch_size=batch_size, shuffle=True, shuffle_buffer=8)
    items = list(DataLoader(stream, batch_size=None, num_workers=num_workers))
    if batch_size is None:
        rows = [{k: python_value(v) for k, v in item.items()} for item in items]
    else:
        for batch in items:
            for name, (_, _, kind) in TYPE_CASES.items():
                value = batch[name]
                if kind == "ragged":
                    assert isinstance(value, Ragged), name
                elif kind == "objects":
                    assert isinstance(value, list), name
                else:
                    assert isinstance(value, torch.Tensor) and value.dtype == kind, name
                    assert value.shape[0] == len(batch["id"]), name
        rows = [row for batch in items for row in rows_of_batch(batch)]
    assert sorted(row["id"] for row in rows) == list(range(ROWS))
    for row in rows:
        for name, (_, expected, _) in TYPE_CASES.items():
            got = [list(pair) for pair in row[name]] if name == "map" else row[name]
            assert got == expected(row["id"]), (name, row["id"])


def test_the_schema_says_what_is_delivered(all_types: Path) -> None:
    schema = ParquetStream(all_types).schema
    assert schema.field("dictionary").type == pa.string()
    assert schema.field("string_view").type == pa.large_string()
    assert schema.field("uuid").type == pa.binary(16)
    assert isinstance(schema.field("fixed_shape_tensor").type, pa.FixedShapeTensorType)


def test_a_permuted_fixed_shape_tensor_is_refused_when_the_stream_is_made(tmp_path: Path) -> None:
    kind = pa.fixed_shape_tensor(pa.float32(), [2, 3], permutation=[1, 0])
    storage = pa.array([list(range(6))] * 3, kind.storage_type)
    pq.write_table(
        pa.table({"id": [0, 1, 2], "t": pa.ExtensionArray.from_storage(kind, storage)}),
        tmp_path / "t.parquet",
    )
    with pytest.raises(SchemaError, match="permuted dimensions") as err:
        ParquetStream(tmp_path)
    assert err.value.column == "t"
    assert len(list(ParquetStream(tmp_path, columns=["id"], batch_size=2))) == 2


# --------------------------------------------------------------------------- schemas
def _write(path: Path, columns: dict[str, pa.Array], fields: list[pa.Field], **kw: Any) -> None:
    pq.write_table(pa.table(columns, schema=pa.schema(fields)), path, **kw)


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("shuffle", [False, True])
def test_files_differing_in_nullability_and_encoding_read_as_one(
    tmp_path: Path, num_workers: int, shuffle: bool
) -> None:
    """Required against optional (also inside lists), dictionary against plain, string
    against large_string: one schema, and batches / shuffle windows that span the files."""
    _write(
        tmp_path / "a.parquet",
        {"id": range(5), "tokens": [[i] for i in range(5)], "text": [str(i) for i in range(5)]},
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("tokens", pa.list_(pa.field("element", pa.int32(), nullable=False))),
            pa.field("text", pa.dictionary(pa.int32(), pa.string())),
        ],
    )
    _write(
        tmp_path / "b.parquet",
        {"id": range(5, 9), "tokens": [[i, i] for i in range(5, 9)], "text": ["x"] * 4},
        [
            pa.field("id", pa.int64()),
            pa.field("tokens", pa.list_(pa.int32())),
            pa.field("text", pa.large_string()),
        ],
    )
    stream = ParquetStream(tmp_path, batch_size=3, shuffle=shuffle, shuffle_buffer=9)
    assert stream.schema.field("id").nullable
    assert stream.schema.field("text").type == pa.large_string()
    batches = list(DataLoader(stream, batch_size=None, num_workers=num_workers))
    rows = sorted((r["id"], r["tokens"], r["text"]) for b in batches for r in rows_of_batch(b))
    expected = [(i, [i], str(i)) for i in range(5)] + [(i, [i, i], "x") for i in range(5, 9)]
    assert rows == expected


def test_files_whose_types_differ_name_file_column_and_both_types(tmp_path: Path) -> None:
    _write(tmp_path / "a.parquet", {"x": [1]}, [pa.field("x", pa.int32())])
    _write(tmp_path / "b.parquet", {"x": [1]}, [pa.field("x", pa.int64())])
    with pytest.raises(SchemaError, match="int64 here but int32") as err:
        ParquetStream(tmp_path)
    assert (Path(err.value.path).name, err.value.column) == ("b.parquet", "x")


@pytest.mark.parametrize("extra_first", [True, False])
def test_a_column_only_some_files_have_is_refused_whatever_the_order(
    tmp_path: Path, extra_first: bool
) -> None:
    """No `columns`: a column only one file has is neither dropped (pyarrow.dataset keeps
    the first file's columns) nor read from some files, whichever file comes first; naming
    the columns reads what every file has."""
    base = ({"id": range(3)}, [pa.field("id", pa.int64())])
    extra = (
        {"id": range(3, 5), "extra": ["e", "f"]},
        [pa.field("id", pa.int64()), pa.field("extra", pa.string())],
    )
    first, second = (extra, base) if extra_first else (base, extra)
    _write(tmp_path / "a.parquet", *first)
    _write(tmp_path / "b.parquet", *second)
    with pytest.raises(SchemaError, match=r"different columns.*columns=") as err:
        ParquetStream(tmp_path)
    assert (Path(err.value.path).name, err.value.column) == ("b.parquet", "extra")
    assert ("lacks" if extra_first else "has") + " column 'extra'" in str(err.value)
    ids = [
        i for b in ParquetStream(tmp_path, columns=["id"], batch_size=5) for i in b["id"].tolist()
    ]
    assert sorted(ids) == list(range(5))


def test_an_empty_first_file_of_another_schema_does_not_block(tmp_path: Path) -> None:
    _write(
        tmp_path / "a.parquet",
        {"other": pa.array([], pa.string())},
        [pa.field("other", pa.string())],
    )
    _write(tmp_path / "b.parquet", {"id": range(4)}, [pa.field("id", pa.int64())])
    stream = ParquetStream(tmp_path, batch_size=2)
    assert stream.schema.names == ["id"]
    for num_workers in (0, 2):
        got = [
            i
            for b in DataLoader(stream, batch_size=None, num_workers=num_workers)
            for i in b["id"].tolist()
        ]
        assert sorted(got) == [0, 1, 2, 3]


# --------------------------------------------------------------------------- filters, storage
@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plain")
    _write(
        root / "a.parquet",
        {"id": range(10), "s": [str(i) for i in range(10)]},
        [pa.field("id", pa.int64()), pa.field("s", pa.string())],
        row_group_size=4,
    )
    return root


def test_a_hive_partition_column_is_named_as_one_with_the_way_round(tmp_path: Path) -> None:
    """Partition values live in directory names (year=2020/), not in the files, which are
    all ParquetStream reads: asking for one says so, and the files of a partition read."""
    for year in (2020, 2021):
        (tmp_path / f"year={year}").mkdir()
        _write(
            tmp_path / f"year={year}/p.parquet", {"id": [year, year]}, [pa.field("id", pa.int64())]
        )
    dataset = ds.dataset(tmp_path, partitioning="hive")
    for options in ({"columns": ["id", "year"]}, {"filter": pc.field("year") == 2020}):
        with pytest.raises(SchemaError, match="'year' is a partition column") as err:
            ParquetStream(dataset, **options)
        assert err.value.column == "year"
    chosen = [f.path for f in dataset.get_fragments(filter=pc.field("year") == 2020)]
    assert [i for b in ParquetStream(chosen, batch_size=4) for i in b["id"].tolist()] == [2020] * 2


def test_a_filter_on_a_missing_column_names_the_column(plain: Path) -> None:
    with pytest.raises(SchemaError, match="'labels', which does not exist") as err:
        ParquetStream(plain, columns=["id"], filter=(pc.field("id") > 2) & (pc.field("labels") < 3))
    assert err.value.column == "labels" and err.value.path.endswith("a.parquet")
    assert "available columns: id, s" in str(err.value)


def test_a_filter_whose_types_do_not_fit_is_refused_up_front(plain: Path) -> None:
    with pytest.raises(SchemaError, match="does not fit the columns' types") as err:
        ParquetStream(plain, filter=pc.field("s") < 3)
    assert err.value.path.endswith("a.parquet")


def test_an_unreachable_s3_endpoint_names_the_uri_and_what_to_check() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    filesystem = pafs.S3FileSystem(
        endpoint_override=f"127.0.0.1:{port}",
        scheme="http",
        access_key="test",
        secret_key="test",
        region="us-east-1",
        connect_timeout=0.5,
        request_timeout=0.5,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1),
    )
    for source in ("bucket/train", "bucket/train/*.parquet"):
        with pytest.raises(SourceError, match="check the URI or path, the endpoint") as err:
            ParquetStream(source, filesystem=filesystem)
        assert err.value.path == source and not isinstance(err.value, SchemaError)


def test_a_link_loop_in_a_folder_lists_each_file_once(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    pq.write_table(pa.table({"id": [0, 1]}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": [2]}), tmp_path / "sub" / "b.parquet")
    (tmp_path / "sub" / "up").symlink_to(tmp_path, target_is_directory=True)  # a loop
    (tmp_path / "again").symlink_to(tmp_path / "sub", target_is_directory=True)
    stream = ParquetStream(tmp_path, batch_size=8)
    assert [Path(f).name for f in stream.files] == ["a.parquet", "b.parquet"]
    assert sorted(i for b in stream for i in b["id"].tolist()) == [0, 1, 2]


# --------------------------------------------------------------------------- nulls
NULL_CASES = {
    "list<int32>": (pa.array([[1, 2], [3, None, 5], [6]], pa.list_(pa.int32())), 1),
    "list<bool>": (pa.array([[True], [False], [None]], pa.list_(pa.bool_())), 2),
    "fixed_size_list": (pa.array([[1, 2], [3, 4], [None, 6]], pa.list_(pa.int64(), 2)), 2),
    "fixed_2d": (
        pa.array([[[1, 2]], [[3, None]], [[5, 6]]], pa.list_(pa.list_(pa.int8(), 2), 1)),
        1,
    ),
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", list(NULL_CASES))
def test_nulls_inside_lists_name_file_row_group_and_column(
    tmp_path: Path, case: str, num_workers: int
) -> None:
    values, bad_row = NULL_CASES[case]
    good = pa.array([values[0].as_py()] * 3, values.type)
    pq.write_table(
        pa.table({"v": pa.concat_arrays([good, values])}), tmp_path / "n.parquet", row_group_size=3
    )
    stream = ParquetStream(tmp_path, batch_size=2)
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
    with pytest.raises(SourceError, match=f"inside the lists .*first in row {bad_row} ") as err:
        list(loader)
    assert (err.value.row_group, err.value.column) == (1, "v")
    assert err.value.path.endswith("n.parquet")


def test_null_rows_of_a_fixed_size_list_explain_the_fix(tmp_path: Path) -> None:
    pq.write_table(
        pa.table({"v": pa.array([[1, 2], None], pa.list_(pa.int64(), 2))}), tmp_path / "n.parquet"
    )
    with pytest.raises(SourceError, match=r"fill_null=\{'v': value\}") as err:
        list(ParquetStream(tmp_path, batch_size=2))
    assert (err.value.row_group, err.value.column) == (0, "v")


# --------------------------------------------------------------------------- slices
@pytest.fixture(scope="module")
def one_group(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("one")
    n = 400
    pq.write_table(
        pa.table(
            {
                "id": range(n),
                "label": [i % 5 for i in range(n)],
                "tokens": [[i] * (i % 4) for i in range(n)],
            }
        ),
        root / "g.parquet",
        row_group_size=n,
    )
    return root


@settings(max_examples=40, deadline=None)
@given(
    bounds=st.tuples(st.integers(0, 400), st.integers(0, 400)).map(sorted), filtered=st.booleans()
)
def test_a_slice_of_a_row_group_is_its_rows(
    one_group: Path, bounds: list[int], filtered: bool
) -> None:
    condition = pc.field("label") != 2 if filtered else None
    reader = ParquetRowGroups(one_group, columns=["id", "tokens"], filter=condition)
    [rows] = reader.unit_rows()
    start, stop = min(bounds[0], rows), min(bounds[1], rows)
    whole = reader.read(0, 0, rows)
    part = reader.read(0, start, stop)
    assert part.num_rows == stop - start and part.equals(whole.slice(start, stop - start))


@pytest.mark.parametrize("num_workers", [0, 2])
def test_one_large_row_group_is_read_exactly_once_by_many_readers(
    one_group: Path, num_workers: int
) -> None:
    ids = []
    for rank in range(4):
        stream = ParquetStream(one_group, columns=["id"], batch_size=16, rank=rank, world_size=4)
        ids += [
            i
            for b in DataLoader(stream, batch_size=None, num_workers=num_workers)
            for i in b["id"].tolist()
        ]
    assert sorted(ids) == list(range(400))


def test_a_slice_read_notices_a_file_that_shrank(one_group: Path, tmp_path: Path) -> None:
    path = tmp_path / "g.parquet"
    path.write_bytes((one_group / "g.parquet").read_bytes())
    reader = ParquetRowGroups(tmp_path, columns=["id"])
    pq.write_table(pa.table({"id": range(10)}), path)
    with pytest.raises(SourceError, match="changed while streaming") as err:
        reader.read(0, 0, 50)
    assert (err.value.row_group, err.value.path) == (0, str(path))


# --------------------------------------------------------------------------- footers
def test_no_footer_outlives_the_construction(tmp_path: Path) -> None:
    for f in range(20):
        pq.write_table(pa.table({"id": [f], "x": [1.0]}), tmp_path / f"{f:02d}.parquet")
    gc.collect()
    gc.disable()  # a footer held by a reference cycle would survive until a collection
    try:
        stream = ParquetStream(tmp_path, columns=["id"], batch_size=4)
        assert stream.num_rows == 20
        alive = [o for o in gc.get_objects() if type(o) in (pq.FileMetaData, pq.ParquetSchema)]
        assert alive == [], "planning must drop each footer once read"
    finally:
        gc.enable()
