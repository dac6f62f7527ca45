"""Tests of fastdata.collate._mismatch: what collate says when a sample differs from
``batch[0]``. A None beside values (a null that a ParquetStream without batch_size yields as
None) names the fixes that work, and those fixes do pad the nulls as batch mode does; the
other differences are in test_walk.py's error table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import torch

import fastdata as fd
from fastdata.collate._mismatch import null_hint, raise_unlike


def test_the_hint_names_the_column_and_an_empty_value_of_its_kind() -> None:
    assert "fill_null={'tokens': []}" in null_hint(("tokens",), torch.ones(1))
    assert "filter=pc.field('tokens').is_valid()" in null_hint(("tokens",), None)
    assert "fill_null={'tokens': value}) with a value of" in null_hint(("tokens",), None)
    assert "fill_null={'n': 0}" in null_hint(("n",), 3)
    assert "fill_null={'text': ''}" in null_hint(("meta", "text"), "a")
    assert "fill_null={'blob': b''}" in null_hint(("blob",), b"a")
    assert "fill_null={column: []}" in null_hint((0,), torch.ones(1))  # a tuple position


@pytest.mark.parametrize(
    ("batch", "fix"),
    [
        ([{"tokens": torch.ones(2)}, {"tokens": None}], "fill_null={'tokens': []}"),
        ([{"tokens": None}, {"tokens": torch.ones(2)}], "fill_null={'tokens': []}"),
        ([{"n": 1}, {"n": None}], "fill_null={'n': 0}"),
        ([{"n": None}, {"n": np.float32(2)}], "fill_null={'n': 0}"),
        ([{"n": True}, {"n": None}], "fill_null={'n': False}"),
    ],
)
def test_a_none_beside_values_names_the_fixes(batch: list[Any], fix: str) -> None:
    with pytest.raises(TypeError) as info:
        fd.pad_collate(batch)
    message = str(info.value)
    assert "NoneType None" in message and "a null in the data" in message
    assert fix in message and ".is_valid()" in message


def test_a_field_none_in_every_sample_asks_for_a_value_of_the_columns_type(
    tmp_path: Path,
) -> None:
    """An optional text field none of a batch's samples holds: its type cannot be told, so
    the batch is refused (not guessed); the hint said fill_null={'speaker': []}, which
    ParquetStream refuses on a string column. It names a value of the column's type, and
    the one for strings works."""
    with pytest.raises(TypeError) as info:
        fd.pad_collate([{"speaker": None, "n": 1}, {"speaker": None, "n": 2}])
    message = str(info.value)
    assert "batch[*]['speaker'] is None in every sample of this batch" in message
    assert "fill_null={'speaker': []}" not in message
    assert "fill_null={'speaker': value}) with a value of the column's type ('' for a string" in (
        message
    )
    pq.write_table(pa.table({"speaker": [None, None, "alice"]}), tmp_path / "a.parquet")
    with pytest.raises(fd.errors.SchemaError):
        fd.ParquetStream(tmp_path, fill_null={"speaker": []})
    stream = fd.ParquetStream(tmp_path, fill_null={"speaker": ""})
    loader = fd.DataLoader(stream, batch_size=2, collate_fn=fd.pad_collate)
    assert [b["speaker"] for b in loader] == [["", ""], ["alice"]]


@pytest.mark.parametrize("collate", [fd.pad_collate, fd.nested_collate])
def test_a_none_among_strings_stays_in_the_list_as_default_collate_keeps_it(collate: Any) -> None:
    """An optional text field (speaker, language tag): default_collate returns
    ['alice', None]; so does collate, wherever the None is (default_collate refuses a None in
    batch[0], which a shuffled batch would make depend on the order)."""
    from torch.utils.data import default_collate

    batch = [{"speaker": "alice", "n": 1}, {"speaker": None, "n": 2}]
    assert default_collate(batch)["speaker"] == ["alice", None]
    assert collate(batch)["speaker"] == ["alice", None]
    assert collate(batch[::-1])["speaker"] == [None, "alice"]
    assert collate([{"b": None}, {"b": b"x"}, {"b": None}])["b"] == [None, b"x", None]
    with pytest.raises(TypeError, match=r"batch\[\*\]\['s'\] is None in every sample"):
        collate([{"s": None}, {"s": None}])  # no string to say the field is text


def test_other_differences_say_fix_the_dataset_without_the_null_hint() -> None:
    with pytest.raises(TypeError) as info:
        fd.pad_collate([{"a": torch.ones(1)}, {"a": "x"}])
    assert "Fix the dataset (or its transform)" in str(info.value)
    assert "null" not in str(info.value)


def test_the_fixes_it_names_pad_a_null_list_in_row_mode(tmp_path: Path) -> None:
    rows = [[1, 2, 3], None, [4]]
    pq.write_table(
        pa.table({"tokens": pa.array(rows, pa.list_(pa.int32()))}), tmp_path / "a.parquet"
    )
    batch_mode = fd.pad_collate(next(iter(fd.ParquetStream(tmp_path, batch_size=3))))
    assert batch_mode["tokens_lengths"].tolist() == [3, 0, 1]  # the null: an empty row

    def row_mode(**options: Any) -> dict[str, torch.Tensor]:
        stream = fd.ParquetStream(tmp_path, **options)
        return next(iter(fd.DataLoader(stream, batch_size=3, collate_fn=fd.pad_collate)))

    with pytest.raises(TypeError, match=r"batch\[1\]\['tokens'\] is a NoneType None"):
        row_mode()
    filled = row_mode(fill_null={"tokens": []})
    assert torch.equal(filled["tokens"], batch_mode["tokens"])
    assert filled["tokens_lengths"].tolist() == [3, 0, 1]
    assert row_mode(filter=pc.field("tokens").is_valid())["tokens_lengths"].tolist() == [3, 1]


def test_raise_unlike_names_the_first_item_that_differs() -> None:
    with pytest.raises(TypeError, match=r"batch\[2\]\['x'\] has dtype torch.int8 but"):
        raise_unlike([torch.ones(1), torch.ones(2), torch.ones(1, dtype=torch.int8)], "['x']")
    with pytest.raises(ValueError, match=r"batch\[1\] has 2 dims \(shape \(1, 1\)\)"):
        raise_unlike([torch.ones(1), torch.ones(1, 1)], "")
    raise_unlike([torch.ones(1), torch.ones(3)], "")  # sizes may differ: they are padded
