"""Synthetic tables (fastdata.synthetic._tables): make_parquet's layout, schema, nulls, and
make_tokens' long-tailed lengths."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_helpers import parquet_ids, tree_bytes

from fastdata import synthetic


def test_make_parquet_layout_schema_and_row_groups(tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path / "new" / "dir", 3000, files=4, row_group_size=256)
    assert [p.name for p in paths] == [f"part-{k:05d}.parquet" for k in range(4)]
    assert parquet_ids(paths) == list(range(3000))
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_rows == 750
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        assert groups == [256, 256, 238]
    table = pq.read_table(paths[0])
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("label").type == pa.int32()
    assert table.schema.field("x").type == pa.float32()
    assert table.schema.field("text").type == pa.string()
    assert table.schema.field("tokens").type.value_type == pa.int32()
    assert pa.types.is_list(table.schema.field("tokens").type)
    assert set(table["label"].to_pylist()) <= set(range(10))
    assert all(name.null_count == 0 for name in table.columns)
    words = {w for text in table["text"].to_pylist() for w in text.split(" ")}
    assert 1 < len(words) < 100
    assert all(w.isalpha() for w in words)


@pytest.mark.parametrize(
    ("rows", "files", "expected"), [(10, 4, [3, 3, 2, 2]), (2, 4, [1, 1, 0, 0]), (0, 1, [0])]
)
def test_rows_are_split_as_evenly_as_possible(
    rows: int, files: int, expected: list[int], tmp_path: Path
) -> None:
    paths = synthetic.make_parquet(tmp_path, rows, files=files)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == expected
    assert parquet_ids(paths) == list(range(rows))


def test_rows_per_file_gives_exact_counts_including_empty_files(tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path, rows_per_file=[5, 0, 7], row_group_size=4)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [5, 0, 7]
    assert parquet_ids(paths) == list(range(12))
    empty = pq.read_table(paths[1])
    assert empty.num_rows == 0
    assert empty.schema.names == ["id", "label", "x", "text", "tokens"]
    # rows and files may be given too when they agree; the files are the same
    synthetic.make_parquet(tmp_path / "b", 12, files=3, row_group_size=4, rows_per_file=[5, 0, 7])
    assert tree_bytes(tmp_path / "b") == {p.name: p.read_bytes() for p in paths}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rows": 11, "rows_per_file": [5, 7]}, "rows=11, files=4 disagree"),
        ({"files": 3, "rows_per_file": [5, 7]}, "2 files"),
        ({"rows_per_file": []}, "names no file"),
        ({"rows_per_file": [3, -1]}, r"rows_per_file\[1\]=-1"),
        ({"rows": -1}, "rows=-1"),
        ({"files": 0}, "files=0"),
        ({"row_group_size": 0}, "row_group_size=0"),
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"null_fraction": 1.5}, r"expected a number in \[0, 1\]"),
        ({"null_fraction": -0.1}, r"expected a number in \[0, 1\]"),
        ({"null_fraction": float("nan")}, r"expected a finite number in \[0, 1\]"),
        ({"seed": -3}, "seed=-3"),
    ],
)
def test_make_parquet_validates_its_options(
    kwargs: dict[str, Any], match: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic.make_parquet(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_nulls_only_in_x_text_and_tokens(tmp_path: Path) -> None:
    table = pq.read_table(synthetic.make_parquet(tmp_path / "some", 4000, null_fraction=0.3))
    for name in ("x", "text", "tokens"):
        assert 0.25 < table[name].null_count / 4000 < 0.35
    assert table["id"].null_count == table["label"].null_count == 0
    assert not table.schema.field("id").nullable
    assert not table.schema.field("label").nullable
    assert not (table["x"].is_null().to_numpy() == table["text"].is_null().to_numpy()).all()
    every = pq.read_table(synthetic.make_parquet(tmp_path / "all", 50, null_fraction=1.0))
    assert [every[name].null_count for name in every.column_names] == [0, 0, 50, 50, 50]


@pytest.mark.parametrize("max_tokens", [512, 16])
def test_token_lengths_are_long_tailed_and_clipped(max_tokens: int, tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path, 5000, files=2, max_tokens=max_tokens)
    lengths = pc.list_value_length(pq.read_table(paths)["tokens"]).to_numpy()
    assert lengths.min() >= 1
    assert lengths.max() <= max_tokens
    if max_tokens == 512:
        assert lengths.max() >= 8 * np.median(lengths)
        assert np.mean(lengths) > np.median(lengths)  # skewed to the right
    else:
        assert (lengths == max_tokens).mean() > 0.1


@settings(max_examples=30, deadline=None)
@given(
    counts=st.one_of(
        st.tuples(st.integers(0, 300), st.integers(1, 5)),
        st.lists(st.integers(0, 80), min_size=1, max_size=5),
    ),
    row_group_size=st.integers(1, 64),
)
def test_any_layout_has_every_id_once_and_bounded_row_groups(
    counts: tuple[int, int] | list[int], row_group_size: int
) -> None:
    if isinstance(counts, tuple):
        rows, files = counts
        kwargs: dict[str, Any] = {"rows": rows, "files": files}
    else:
        rows, files = sum(counts), len(counts)
        kwargs = {"rows_per_file": counts}
    with tempfile.TemporaryDirectory() as root:
        paths = synthetic.make_parquet(root, row_group_size=row_group_size, **kwargs)
        assert len(paths) == files
        assert parquet_ids(paths) == list(range(rows))
        for path in paths:
            meta = pq.ParquetFile(path).metadata
            groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            assert all(g <= row_group_size for g in groups)
            assert sum(groups) == meta.num_rows
