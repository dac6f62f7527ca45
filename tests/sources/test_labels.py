"""Labels of an image stream's Parquet rows: one rule (fastdata.sources._labels) with row and
batch modes alike, and errors that name where and say what to do."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastdata import SchemaError, SourceError
from fastdata.sources._labels import as_label
from fastdata.sources.images import ImageStream


def _write(path: Path, labels: pa.Array | None, *, row_group_size: int = 2) -> Path:
    png = cv2.imencode(".png", np.full((6, 6, 3), 90, np.uint8))[1].tobytes()
    n = 4 if labels is None else len(labels)
    columns = {"image": pa.array([png] * n, pa.binary())}
    if labels is not None:
        columns["label"] = labels
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def _labels(path: Path, batch_size: int | None, **options) -> list[int]:
    stream = ImageStream.from_parquet(path, size=4, crop="center", batch_size=batch_size, **options)
    if batch_size is None:
        return [label for _, label in stream]
    return [label for _, labels in stream for label in labels.tolist()]


@pytest.mark.parametrize("batch_size", [None, 2])
def test_integral_floats_are_labels_and_a_fraction_is_refused_with_its_row(
    tmp_path: Path, batch_size: int | None
) -> None:
    whole = _write(tmp_path / "whole.parquet", pa.array([0.0, 1.0, 2.0, 3.0]))  # as pandas
    assert _labels(whole, batch_size) == [0, 1, 2, 3]
    frac = _write(tmp_path / "frac.parquet", pa.array([1.0, 2.0, 3.0, 0.7]))
    with pytest.raises(SourceError, match=r"label 0\.7 is not an integer") as caught:
        _labels(frac, batch_size)  # was [1, 2, 3, 0]: truncated silently
    error = caught.value
    assert (error.path, error.row_group, error.row, error.column) == (str(frac), 1, 1, "label")


@pytest.mark.parametrize("batch_size", [None, 2])
def test_string_labels_parse_as_integers_in_both_modes_and_words_are_refused(
    tmp_path: Path, batch_size: int | None
) -> None:
    digits = _write(tmp_path / "digits.parquet", pa.array(["3", "07", " 1", "2"]))
    assert _labels(digits, batch_size) == [3, 7, 1, 2]  # batches were a TypeError ('Ragged')
    for name, words in [
        ("words", pa.array(["cat", "dog", "cat", "dog"])),
        ("dictionary", pa.array(["cat", "dog", "cat", "dog"]).dictionary_encode()),
    ]:
        path = _write(tmp_path / f"{name}.parquet", words)
        with pytest.raises(SourceError, match="map class names to indices") as caught:
            _labels(path, batch_size)  # was a bare ValueError naming nothing
        error = caught.value
        assert (error.path, error.row_group, error.row, error.column) == (str(path), 0, 0, "label")


def test_a_null_label_can_be_filled_as_the_error_says(tmp_path: Path) -> None:
    path = _write(tmp_path / "nulls.parquet", pa.array([0, None, 2, 1], pa.int64()))
    with pytest.raises(SourceError, match=r"fill_null=\{'label': value\}"):
        _labels(path, None)
    assert _labels(path, None, fill_null={"label": -1}) == [0, -1, 2, 1]  # was a TypeError
    assert _labels(path, 2, fill_null={"label": -1}) == [0, -1, 2, 1]
    texts = _write(tmp_path / "texts.parquet", pa.array(["0", None, "2", "1"]))
    with pytest.raises(SourceError, match=r"a null label; pass fill_null") as caught:
        _labels(texts, 2)
    assert (caught.value.row_group, caught.value.row) == (0, 1)


def test_a_table_without_labels_is_told_about_label_column_none(tmp_path: Path) -> None:
    path = _write(tmp_path / "unlabelled.parquet", None)
    with pytest.raises(SchemaError, match=r"label_column=None") as caught:
        ImageStream.from_parquet(path)
    assert caught.value.column == "label"
    assert len(list(ImageStream.from_parquet(path, label_column=None))) == 4


def test_the_rule_is_the_one_file_labels_follow(tmp_path: Path) -> None:
    assert [as_label(v) for v in (3, np.int16(4), 5.0, "6", b"7", True)] == [3, 4, 5, 6, 7, 1]
    for bad in (0.7, float("nan"), float("inf"), "cat", "", None, 2.0**63, 2**64, [1]):
        assert as_label(bad) is None, bad
    path = str(_write(tmp_path / "one.parquet", pa.array([0])))
    with pytest.raises(SourceError, match=r"label 0\.7 is not an integer") as caught:
        ImageStream.from_files([path], [0.7])
    assert caught.value.path == path


@pytest.mark.parametrize("batch_size", [None, 2])
def test_uint64_labels_beyond_int64_and_nan_labels_are_refused_with_what_to_do(
    tmp_path: Path, batch_size: int | None
) -> None:
    small = _write(tmp_path / "small.parquet", pa.array([0, 1, 2, 3], pa.uint64()))
    assert _labels(small, batch_size) == [0, 1, 2, 3]
    huge = _write(tmp_path / "huge.parquet", pa.array([0, 1, 2, 2**63 + 5], pa.uint64()))
    with pytest.raises(SourceError, match=r"label 9223372036854775813 is not") as caught:
        _labels(huge, batch_size)  # was wrapped to a negative label in batches
    assert (caught.value.row_group, caught.value.row) == (1, 1)
    nan = _write(tmp_path / "nan.parquet", pa.array([0.0, float("nan"), 1.0, 2.0]))
    with pytest.raises(SourceError, match=r"a NaN label .* filter=~pyarrow\.compute\.is_nan"):
        _labels(nan, batch_size)  # was told to map class names to indices


def test_other_label_schema_errors_are_not_told_about_label_column_none(tmp_path: Path) -> None:
    path = _write(tmp_path / "ints.parquet", pa.array([0, 1, 2, 3]))
    with pytest.raises(SchemaError) as caught:
        ImageStream.from_parquet(path, fill_null={"label": "x"})
    assert "label_column=None" not in str(caught.value)
