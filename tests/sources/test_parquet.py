"""ParquetStream: reading, conversion, sharding over workers, determinism, resume, errors."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import default_collate

import fastdata.sources.stream as stream_module
from fastdata import (
    DataLoader,
    ParquetStream,
    Ragged,
    ResumeError,
    SchemaError,
    SourceError,
    check_reader,
)
from fastdata.sources._arrow import converter, to_batch
from fastdata.synthetic import make_parquet

from resume_helper import check_resume, ids_of


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("parquet")
    make_parquet(root, rows_per_file=[300, 0, 157, 64], row_group_size=50, seed=3)
    return root


ALL_IDS = list(range(300 + 157 + 64))


def collect(stream: ParquetStream) -> list[int]:
    return [i for item in stream for i in ids_of(item)]


def read_as_workers(stream: ParquetStream, num_workers: int, monkeypatch) -> list[list]:
    """Iterate the stream as each of ``num_workers`` DataLoader workers would, in-process."""
    out = []
    for worker in range(num_workers):
        with monkeypatch.context() as m:
            m.setattr(stream_module, "worker_slot", lambda w=worker: (w, num_workers))
            out.append([ids_of(item) for item in stream])
    return out


def rank_streams(root: str, world_size: int, **options: Any) -> list[ParquetStream]:
    """The ids of the data at ``root`` as each rank of ``world_size`` reads them."""
    common = {"columns": ["id"], "seed": 5, "shuffle_buffer": 8, "world_size": world_size}
    return [ParquetStream(root, rank=rank, **common, **options) for rank in range(world_size)]


# --------------------------------------------------------------------------- reading
@pytest.mark.parametrize(
    "options",
    [{"batch_size": 32, "shuffle": True}, {"batch_size": None, "shuffle_buffer": 64}],
    ids=["batches", "rows"],
)
def test_the_reader_keeps_the_reader_contract(dataset: Path, tmp_path: Path, options) -> None:
    make_parquet(tmp_path, rows_per_file=[300, 0, 157, 64], row_group_size=50, seed=4)
    reader = ParquetStream(dataset).reader
    check_reader(reader, changed=ParquetStream(tmp_path).reader, **options)


def test_a_filtered_reader_keeps_the_reader_contract(dataset: Path) -> None:
    ends = (pc.field("id") < 120) | (pc.field("id") > 330)
    check_reader(ParquetStream(dataset, columns=["id"], filter=ends).reader, batch_size=16)


def test_batches_hold_tensors_strings_and_ragged_lists(dataset: Path) -> None:
    stream = ParquetStream(dataset, batch_size=64)
    batch = next(iter(stream))
    assert batch["id"].dtype == torch.int64 and batch["id"].shape == (64,)
    assert batch["label"].dtype == torch.int32
    assert batch["x"].dtype == torch.float32
    assert isinstance(batch["text"], Ragged) and batch["text"].kind == "str"
    assert isinstance(batch["tokens"], Ragged) and len(batch["tokens"]) == 64
    assert batch["tokens"].dtype == torch.int32
    table = pq.read_table(dataset / "part-00000.parquet").slice(0, 64)
    assert batch["x"].tolist() == pytest.approx(table["x"].to_pylist())
    assert batch["tokens"].tolist() == table["tokens"].to_pylist()
    assert batch["text"].tolist() == table["text"].to_pylist()
    assert collect(stream) == ALL_IDS
    assert len(stream) == len(list(stream)) == -(-len(ALL_IDS) // 64)


def test_numeric_columns_are_zero_copy() -> None:
    table = pa.table({"v": pa.array(np.arange(100, dtype=np.float32))}).slice(10, 50)
    conv = {"v": converter(table.schema.field("v"))[0]}
    tensor = to_batch(table, conv)["v"]
    buffer = table.column("v").chunk(0).buffers()[1]
    assert tensor.data_ptr() == buffer.address + 10 * 4
    assert tensor.tolist() == list(range(10, 60))


def test_rows_collate_with_default_collate_keeping_dtypes(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id", "label", "x"])
    rows = [row for _, row in zip(range(8), stream, strict=False)]
    batch = default_collate(rows)
    assert batch["id"].tolist() == list(range(8))
    assert batch["x"].dtype == torch.float32 and batch["label"].dtype == torch.int32
    assert collect(stream) == ALL_IDS


def test_column_projection_and_filter_pushdown(dataset: Path) -> None:
    stream = ParquetStream(
        dataset, columns=["id", "label"], filter=pc.field("label") == 3, batch_size=10
    )
    expected = pq.read_table(dataset, columns=["id", "label"]).filter(pc.field("label") == 3)
    batches = list(stream)
    assert set(batches[0]) == {"id", "label"}
    assert torch.cat([b["label"] for b in batches]).eq(3).all()
    assert torch.cat([b["id"] for b in batches]).tolist() == expected["id"].to_pylist()
    assert stream.num_rows == expected.num_rows
    assert all(len(b["id"]) == 10 for b in batches[:-1])  # rebatched after filtering


def test_filter_may_use_columns_that_are_not_read(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id"], filter=pc.field("label") < 2, batch_size=32)
    labels = pq.read_table(dataset, columns=["id", "label"])
    expected = labels.filter(pc.field("label") < 2)["id"].to_pylist()
    assert collect(stream) == expected


def test_source_forms_agree(dataset: Path) -> None:
    files = sorted(str(p) for p in dataset.glob("*.parquet"))
    import pyarrow.dataset as ds

    forms = [dataset, str(dataset / "*.parquet"), files, f"file://{dataset}", ds.dataset(files)]
    for form in forms:
        assert ParquetStream(form, columns=["id"], batch_size=100).files == files


def test_fill_null_and_strings_with_nulls(tmp_path: Path) -> None:
    make_parquet(tmp_path, rows=200, files=1, null_fraction=0.3, seed=1)
    stream = ParquetStream(
        tmp_path, columns=["id", "x", "text"], batch_size=200, fill_null={"x": -1}
    )
    batch = next(iter(stream))
    raw = pq.read_table(tmp_path)
    assert batch["x"].tolist() == pytest.approx(
        [-1 if v is None else v for v in raw["x"].to_pylist()]
    )
    assert batch["text"].tolist() == raw["text"].to_pylist()  # None stays None


# --------------------------------------------------------------------------- sharding
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows_per_file=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    row_group_size=st.sampled_from([1, 3, 7, 64]),
    world_size=st.integers(1, 4),
    num_workers=st.integers(0, 3),
    shuffle=st.booleans(),
    batch_size=st.sampled_from([None, 1, 4, 10]),
    drop_last=st.booleans(),
)
def test_exactly_once_over_ranks_and_workers(
    monkeypatch,
    rows_per_file,
    row_group_size,
    world_size,
    num_workers,
    shuffle,
    batch_size,
    drop_last,
) -> None:
    drop_last = drop_last and batch_size is not None
    if sum(rows_per_file) == 0:
        rows_per_file = [*rows_per_file, 1]
    with tempfile.TemporaryDirectory() as root:
        make_parquet(root, rows_per_file=rows_per_file, row_group_size=row_group_size)
        seen: Counter[int] = Counter()
        counts = []
        dropped = None
        options = {"batch_size": batch_size, "shuffle": shuffle, "drop_last": drop_last}
        for stream in rank_streams(root, world_size, **options):
            per_worker = read_as_workers(stream, max(num_workers, 1), monkeypatch)
            items = [b for worker in per_worker for b in worker]
            counts.append(len(items))
            seen.update(i for b in items for i in b)
            assert len(items) == len(stream)
            dropped = stream.summary().dropped_rows
        total = sum(rows_per_file)
        assert max(seen.values(), default=1) == 1
        assert set(seen) <= set(range(total))
        assert len(seen) == total - dropped
        assert dropped == (total % batch_size if drop_last else 0)
        assert max(counts) - min(counts) <= 1


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    rows_per_file=st.lists(st.integers(0, 30), min_size=1, max_size=4),
    row_group_size=st.sampled_from([1, 3, 7, 64]),
    world_size=st.integers(1, 3),
    num_workers=st.integers(1, 3),
    shuffle=st.booleans(),
    batch_size=st.sampled_from([None, 1, 4, 10]),
)
def test_exactly_once_over_ranks_and_real_workers(
    worker_method, rows_per_file, row_group_size, world_size, num_workers, shuffle, batch_size
) -> None:
    """The property above through the loader's own workers (processes or threads), each
    finding its share from ``get_worker_info()`` as it runs."""
    with tempfile.TemporaryDirectory() as root:
        make_parquet(root, rows_per_file=[*rows_per_file, 1], row_group_size=row_group_size)
        seen: Counter[int] = Counter()
        for stream in rank_streams(root, world_size, batch_size=batch_size, shuffle=shuffle):
            loader = DataLoader(
                stream, batch_size=None, num_workers=num_workers, worker_method=worker_method
            )
            items = [ids_of(item) for item in loader]
            assert len(items) == len(stream)
            seen.update(i for item in items for i in item)
        assert seen == Counter(range(sum(rows_per_file) + 1))


@pytest.mark.parametrize("context", ["fork", "spawn", "forkserver"])
def test_same_result_under_every_start_method(dataset: Path, context: str) -> None:
    def ids(ctx):
        stream = ParquetStream(dataset, columns=["id"], batch_size=32, shuffle=True, seed=9)
        stream.set_epoch(2)
        loader = DataLoader(stream, batch_size=None, num_workers=2, multiprocessing_context=ctx)
        return [b["id"].tolist() for b in loader]

    reference = ids(None if context == "fork" else "fork")
    assert ids(context) == reference
    assert sorted(i for b in reference for i in b) == ALL_IDS


def test_deterministic_and_ignores_global_rng(dataset: Path) -> None:
    def order():
        stream = ParquetStream(dataset, columns=["id"], batch_size=16, shuffle=True, seed=1)
        stream.set_epoch(4)
        return collect(stream)

    first = order()
    torch.manual_seed(99)
    np.random.seed(99)
    assert order() == first
    assert first != ALL_IDS and sorted(first) == ALL_IDS


def test_epochs_reshuffle_and_persistent_workers_see_set_epoch(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id"], batch_size=32, shuffle=True, seed=2)
    loader = DataLoader(stream, batch_size=None, num_workers=2, persistent_workers=True)
    orders = []
    for epoch in range(3):
        stream.set_epoch(epoch)
        orders.append([i for b in loader for i in b["id"].tolist()])
        reference = ParquetStream(dataset, columns=["id"], batch_size=32, shuffle=True, seed=2)
        reference.set_epoch(epoch)
        in_process = DataLoader(reference, batch_size=None, num_workers=2)
        assert orders[-1] == [i for b in in_process for i in b["id"].tolist()]
    assert all(sorted(o) == ALL_IDS for o in orders)
    assert len({tuple(o) for o in orders}) == 3


def test_pickles_with_its_plan(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id"], batch_size=50, shuffle=True)
    clone = pickle.loads(pickle.dumps(stream))
    assert collect(clone) == collect(stream)


def test_drop_last_and_even_batches_are_reported(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id"], batch_size=100, drop_last=True)
    summary = stream.summary()
    assert summary.dropped_rows == len(ALL_IDS) % 100
    assert collect(stream) == ALL_IDS[: len(ALL_IDS) - summary.dropped_rows]
    padded = ParquetStream(
        dataset, columns=["id"], batch_size=100, even_batches="pad", rank=0, world_size=4
    )
    assert padded.summary().items_per_rank == (2, 2, 2, 2)
    assert padded.summary().padded_rows == 800 - len(ALL_IDS)


# --------------------------------------------------------------------------- resume
@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize(("batch_size", "loader_batch"), [(64, None), (None, 32)])
def test_resume_continues_exactly(dataset: Path, num_workers, batch_size, loader_batch) -> None:
    def make():
        stream = ParquetStream(
            dataset, columns=["id"], batch_size=batch_size, shuffle=True, seed=4, shuffle_buffer=90
        )
        return DataLoader(stream, batch_size=loader_batch, num_workers=num_workers)

    check_resume(make, epoch=1)


RESUME_SCRIPT = """
import json, sys
from fastdata import DataLoader, ParquetStream
root, state_path, num_workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
stream = ParquetStream(root, columns=["id"], batch_size=40, shuffle=True, seed=8)
loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
loader.load_state_dict(json.load(open(state_path)))
print(json.dumps([b["id"].tolist() for b in loader]))
"""


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_in_a_new_process(dataset: Path, tmp_path: Path, num_workers: int) -> None:
    def loader():
        stream = ParquetStream(dataset, columns=["id"], batch_size=40, shuffle=True, seed=8)
        return DataLoader(stream, batch_size=None, num_workers=num_workers)

    full = [b["id"].tolist() for b in loader()]
    k = int(np.random.default_rng(num_workers).integers(1, len(full)))
    first = loader()
    iterator = iter(first)
    head = [next(iterator)["id"].tolist() for _ in range(k)]
    state_path = tmp_path / "state.json"
    state_path.write_text(json.dumps(first.state_dict()))
    out = subprocess.run(
        [sys.executable, "-c", RESUME_SCRIPT, str(dataset), str(state_path), str(num_workers)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert head + json.loads(out.stdout) == full


def test_stream_state_without_a_loader(dataset: Path) -> None:
    stream = ParquetStream(dataset, columns=["id"], batch_size=30, shuffle=True)
    iterator = iter(stream)
    head = [next(iterator)["id"].tolist() for _ in range(5)]
    state = stream.state_dict()
    again = ParquetStream(dataset, columns=["id"], batch_size=30, shuffle=True)
    again.load_state_dict(state)
    whole = [
        b["id"].tolist()
        for b in ParquetStream(dataset, columns=["id"], batch_size=30, shuffle=True)
    ]
    assert head + [b["id"].tolist() for b in again] == whole


def test_resume_refuses_a_different_setup(dataset: Path) -> None:
    state = DataLoader(ParquetStream(dataset, batch_size=10), batch_size=None).state_dict()
    other = DataLoader(ParquetStream(dataset, batch_size=20), batch_size=None)
    with pytest.raises(ResumeError, match="batch_size"):
        other.load_state_dict(state)
    two_workers = DataLoader(ParquetStream(dataset, batch_size=10), batch_size=None, num_workers=2)
    two_workers.load_state_dict(state)  # another num_workers resumes (elastic), not refused
    assert sum(len(b["id"]) for b in two_workers) == two_workers.dataset.num_rows


# --------------------------------------------------------------------------- errors
def test_missing_file_and_empty_glob_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file") as err:
        ParquetStream(tmp_path / "nope.parquet")
    assert err.value.path == str(tmp_path / "nope.parquet")
    with pytest.raises(SourceError, match=r"glob matched no files.*\*\.parquet"):
        ParquetStream(str(tmp_path / "*.parquet"))
    with pytest.raises(SourceError, match="directory holds no"):
        ParquetStream(tmp_path)


def test_not_parquet_and_truncated_files_are_named(tmp_path: Path) -> None:
    bad = tmp_path / "bad.parquet"
    bad.write_text("hello, not parquet")
    with pytest.raises(SourceError, match="not Parquet") as err:
        ParquetStream(bad)
    assert str(bad) in str(err.value)
    [good] = make_parquet(tmp_path / "t", rows=100, files=1)
    truncated = tmp_path / "truncated.parquet"
    truncated.write_bytes(good.read_bytes()[:-100])
    with pytest.raises(SourceError, match="truncated") as err:
        ParquetStream(truncated)
    assert err.value.path == str(truncated)


def test_corrupt_row_group_names_file_and_row_group(tmp_path: Path) -> None:
    [good] = make_parquet(tmp_path, rows=400, files=1, row_group_size=100)
    data = bytearray(good.read_bytes())
    meta = pq.ParquetFile(good).metadata.row_group(2).column(0)
    start = meta.data_page_offset
    data[start : start + 40] = b"\xff" * 40  # garble the page header of row group 2
    good.write_bytes(bytes(data))
    for read_ahead in (0, 1, 3):
        stream = ParquetStream(good, columns=["id"], batch_size=100, read_ahead=read_ahead)
        seen: list[int] = []
        batches = iter(stream)
        with pytest.raises(SourceError) as err:  # noqa: PT012 - the batches before it count
            for batch in batches:
                seen += batch["id"].tolist()
        assert err.value.path == str(good) and err.value.row_group == 2
        # Row groups read ahead in the background fail where they come in the stream.
        assert seen == list(range(200)), read_ahead


def test_verify_checksums_names_the_page_that_changed(tmp_path: Path) -> None:
    """A file written with page CRCs and one bit flipped in row group 2's data: with
    ``verify_checksums`` every read path (whole row groups, a row group's head, a filter)
    raises naming the file and row group; files without CRCs read the same."""
    path = tmp_path / "crc.parquet"
    ids = pa.table({"id": pa.array(range(200), pa.int64())})
    pq.write_table(ids, path, compression="none", write_page_checksum=True, row_group_size=50)
    data = bytearray(path.read_bytes())
    data[data.find((137).to_bytes(8, "little"))] ^= 0x40
    path.write_bytes(bytes(data))
    assert 137 not in [i for b in ParquetStream(path, batch_size=50) for i in b["id"].tolist()]
    for options in ({"batch_size": 50}, {"batch_size": 20}, {"filter": pc.field("id") >= 0}):
        stream = ParquetStream(path, verify_checksums=True, read_ahead=0, **options)
        with pytest.raises(SourceError, match="CRC checksum verification failed") as err:
            list(stream)
        assert (err.value.path, err.value.row_group) == (str(path), 2), options
    plain = tmp_path / "plain.parquet"
    pq.write_table(ids, plain, row_group_size=50)
    got = [
        i
        for b in ParquetStream(plain, batch_size=20, verify_checksums=True)
        for i in b["id"].tolist()
    ]
    assert got == list(range(200))


def test_schema_mismatch_names_file_column_and_types(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int64())}), tmp_path / "a.parquet")
    pq.write_table(pa.table({"id": pa.array([1.5], pa.float64())}), tmp_path / "b.parquet")
    with pytest.raises(SchemaError, match="'id' has type double here but int64") as err:
        ParquetStream(tmp_path)
    assert err.value.path == str(tmp_path / "b.parquet")


def test_unknown_column_lists_the_available_ones(dataset: Path) -> None:
    with pytest.raises(
        SchemaError, match="column 'nope' does not exist; available columns: id, label"
    ):
        ParquetStream(dataset, columns=["id", "nope"])


def test_nulls_in_tensor_columns_explain_the_fix(tmp_path: Path) -> None:
    make_parquet(tmp_path, rows=100, files=1, null_fraction=0.5)
    stream = ParquetStream(tmp_path, columns=["x"], batch_size=10)
    with pytest.raises(SourceError, match=r"fill_null=\{'x': value\}") as err:
        next(iter(stream))
    assert err.value.column == "x" and err.value.row_group == 0
    assert err.value.path.endswith("part-00000.parquet")


@pytest.mark.parametrize("filtered", [False, True])
def test_a_null_names_its_row_as_the_message_counts_it(tmp_path: Path, filtered: bool) -> None:
    """``err.row`` is the row the message names: within the row group, or among its rows
    that match the filter."""
    x = pa.array([float(i) if i != 27 else None for i in range(40)], pa.float32())
    pq.write_table(pa.table({"id": range(40), "x": x}), tmp_path / "n.parquet", row_group_size=20)
    where = {"filter": pc.field("id") > 23} if filtered else {}
    with pytest.raises(SourceError, match="null") as err:
        list(ParquetStream(tmp_path, batch_size=5, **where))
    row = 3 if filtered else 7  # id 27: row 7 of row group 1, its 4th id above 23
    assert (err.value.row_group, err.value.row, err.value.column) == (1, row, "x")
    counted = "of the row group's matching rows" if filtered else "of the row group)"
    assert f"first at row {row} {counted}" in str(err.value)


def test_errors_from_a_worker_keep_type_and_location(tmp_path: Path) -> None:
    [path] = make_parquet(tmp_path, rows=100, files=1, null_fraction=0.5)
    loader = DataLoader(
        ParquetStream(tmp_path, columns=["x"], batch_size=10), batch_size=None, num_workers=1
    )
    with pytest.raises(SourceError, match="null") as err:
        next(iter(loader))
    column = pq.ParquetFile(path).read_row_group(0, columns=["x"])["x"]
    first = pc.index(pc.is_null(column), True).as_py()
    assert f"file={path} row_group=0 row={first} column=x" in str(err.value)
    assert "worker process 0" in str(err.value)
    # The attributes survive torch's re-raise in the main process, not only the text.
    located = (err.value.path, err.value.row_group, err.value.row, err.value.column)
    assert located == (str(path), 0, first, "x")
    assert err.value.member is None
    assert "null" in err.value.reason and "worker process" not in err.value.reason


@settings(max_examples=20, deadline=None)
@given(
    read_ahead=st.integers(0, 4),
    shuffle=st.booleans(),
    batch_size=st.sampled_from([None, 7, 64]),
    shuffle_buffer=st.sampled_from([0, 60, 500]),
)
def test_read_ahead_never_changes_the_stream(
    dataset: Path, read_ahead: int, shuffle: bool, batch_size: int | None, shuffle_buffer: int
) -> None:
    options = {"shuffle": shuffle, "batch_size": batch_size, "shuffle_buffer": shuffle_buffer}
    reference = [ids_of(b) for b in ParquetStream(dataset, read_ahead=0, **options)]
    assert [ids_of(b) for b in ParquetStream(dataset, read_ahead=read_ahead, **options)] == (
        reference
    )


def test_invalid_settings_are_explained(dataset: Path) -> None:
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="read_ahead"):
            ParquetStream(dataset, read_ahead=bad)
    with pytest.raises(ValueError, match="drop_last=True needs batch_size"):
        ParquetStream(dataset, drop_last=True)
    with pytest.raises(ValueError, match="pass both or neither"):
        ParquetStream(dataset, rank=1)
    with pytest.raises(TypeError, match=r"pyarrow\.compute\.Expression"):
        ParquetStream(dataset, filter="label < 3")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- object storage
def test_reads_from_s3(dataset: Path, s3fs_pyarrow, s3_endpoint: str, monkeypatch) -> None:
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="fastdata-test")
    for path in dataset.glob("*.parquet"):
        client.put_object(
            Bucket="fastdata-test", Key=f"parquet/{path.name}", Body=path.read_bytes()
        )
    stream = ParquetStream(
        "fastdata-test/parquet",
        filesystem=s3fs_pyarrow,
        columns=["id", "x"],
        batch_size=64,
        shuffle=True,
        rank=1,
        world_size=2,
    )
    other = ParquetStream(
        "fastdata-test/parquet",
        filesystem=s3fs_pyarrow,
        columns=["id"],
        batch_size=64,
        shuffle=True,
        rank=0,
        world_size=2,
    )
    assert sorted(collect(stream) + collect(other)) == ALL_IDS
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    uri = (
        f"s3://fastdata-test/parquet/*.parquet?endpoint_override={s3_endpoint}&scheme=http"
        "&region=us-east-1"
    )
    loader = DataLoader(
        ParquetStream(uri, columns=["id"], batch_size=64), batch_size=None, num_workers=2
    )
    assert sorted(i for b in loader for i in b["id"].tolist()) == ALL_IDS


def test_set_epoch_after_load_state_dict_starts_that_epoch_afresh(dataset: Path) -> None:
    def make():
        stream = ParquetStream(dataset, columns=["id"], batch_size=50, shuffle=True)
        return DataLoader(stream, batch_size=None, num_workers=2)

    first = make()
    it = iter(first)
    for _ in range(4):
        next(it)
    state = first.state_dict()
    resumed = make()
    resumed.load_state_dict(state)
    resumed.dataset.set_epoch(1)  # a different epoch: the saved position does not apply
    ids = [i for b in resumed for i in b["id"].tolist()]
    assert sorted(ids) == ALL_IDS
    assert resumed.state_dict()["batches"] == len(resumed)
