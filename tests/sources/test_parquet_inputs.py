"""Parquet as users hand it over (a new-user review on real-world files, 7 Dec): nested
fixed-size lists under shuffle at rank and worker cuts, and folders and globs of files
without a ``.parquet`` suffix (the datasets, schemas and messages of that review:
``readers/test_parquet_input.py``).

Each input is generated here, small; each case states the expected values (pyarrow's, for
the same id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastdata import DataLoader, ParquetStream, SourceError
from fastdata.sources._arrow_types import take_rows

MATRIX = pa.list_(pa.list_(pa.int16(), 2), 2)
HOLDER = pa.struct([("m", pa.list_(pa.list_(pa.int64(), 2), 2))])


def _nested(first: int, n: int) -> pa.Table:
    ids = range(first, first + n)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "m": pa.array([[[i, -i], [100 + i, 200 + i]] for i in ids], MATRIX),
            "st": pa.array([{"m": [[i, 1], [2, -i]]} for i in ids], HOLDER),
        }
    )


@pytest.fixture(scope="module")
def nested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two files of 2-D fixed-size list and struct-holding-one columns: row groups of 128
    rows in one, one row group of 400 in the other, so ranks and workers cut row groups."""
    root = tmp_path_factory.mktemp("nested")
    pq.write_table(_nested(0, 600), root / "a.parquet", row_group_size=128)
    pq.write_table(_nested(600, 400), root / "b.parquet", row_group_size=1000)
    return root


def test_take_of_a_sliced_nested_fixed_size_list_is_right() -> None:
    table = _nested(0, 10).slice(5, 5)
    got = take_rows(table, pa.array([2, 0, 1]))
    assert got.to_pylist() == [table.to_pylist()[i] for i in (2, 0, 1)]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_nested_fixed_size_lists_keep_their_values_under_shuffle_ranks_and_workers(
    nested: Path, num_workers: int
) -> None:
    want = {row["id"]: row for row in pq.read_table(nested).to_pylist()}
    seen: list[int] = []
    for rank in range(2):
        stream = ParquetStream(
            nested, batch_size=7, shuffle=True, shuffle_buffer=50, rank=rank, world_size=2
        )
        for batch in DataLoader(stream, batch_size=None, num_workers=num_workers):
            rows = zip(batch["id"].tolist(), batch["m"].tolist(), batch["st"], strict=True)
            for i, m, st in rows:
                assert m == want[i]["m"] and _plain(st) == want[i]["st"], i
                seen.append(i)
    assert sorted(seen) == list(range(1000))


def _plain(value: Any) -> Any:
    """A delivered value as pyarrow's ``to_pylist`` gives it (tensors as lists)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- files
def test_a_folder_with_a_part_file_without_suffix_warns_and_a_glob_reads_it(
    tmp_path: Path,
) -> None:
    pq.write_table(pa.table({"id": range(50)}), tmp_path / "000000_0")
    pq.write_table(pa.table({"id": range(50, 100)}), tmp_path / "000001_0.parquet")
    with pytest.warns(UserWarning, match="000000_0"):
        assert ParquetStream(tmp_path).num_rows == 50
    assert ParquetStream(f"{tmp_path}/*").num_rows == 100
    (tmp_path / "README.md").write_text("not Parquet")
    with pytest.raises(SourceError, match="not Parquet") as caught:
        ParquetStream(f"{tmp_path}/*")  # a glob reads what it matches
    assert caught.value.path == str(tmp_path / "README.md")
