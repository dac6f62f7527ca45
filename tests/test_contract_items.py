"""Tests of fastdata._contract_items, the decoders check_reader reads through: keys that tell
rows and items apart, the default probe decoder, and a decoder's items tagged with their
worker."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Dataset

from fastdata import Ragged
from fastdata._contract_items import Probe, fingerprint, fingerprints, tagged
from fastdata.sources.base import INDEX, ArrowDecoder, Context, varies


def context() -> Context:
    return Context(epoch=0, seed=0, locate=lambda row: {"row": row})


def table(ids: list[int], names: list[str], index: list[int] | None = None) -> pa.Table:
    columns: dict[str, Any] = {"id": pa.array(ids, pa.int64()), "name": names}
    if index is not None:
        columns[INDEX] = pa.array(index, pa.int64())
    return pa.table(columns)


rows = st.lists(st.tuples(st.integers(-(2**63), 2**63 - 1), st.text()), min_size=1, max_size=20)


@settings(deadline=None)
@given(rows)
def test_fingerprints_tell_rows_apart_by_their_values(values: list[tuple[int, str]]) -> None:
    ids, names = [v[0] for v in values], [v[1] for v in values]
    keys = fingerprints(table(ids, names))
    assert len(keys) == len(values)
    assert all(isinstance(k, str) and len(k) == 16 for k in keys)  # 8 bytes, in hex
    assert len(set(keys)) == len(set(values))  # equal rows, equal keys; others differ
    shuffled = list(range(len(values)))[::-1]
    assert fingerprints(table(ids, names, index=shuffled)) == keys  # INDEX left out


def test_fingerprints_do_not_depend_on_the_column_order() -> None:
    swapped = pa.table({"name": ["a", "b"], "id": pa.array([1, 2], pa.int64())})
    assert fingerprints(swapped) == fingerprints(table([1, 2], ["a", "b"]))


def test_fingerprint_keys_tensors_and_arrays_by_their_bytes() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    key = fingerprint(array)
    assert isinstance(key, list) and len(key) == 1
    assert fingerprint(torch.from_numpy(array.copy())) == key
    assert fingerprint(array.reshape(3, 2)) != key  # the shape counts
    assert fingerprint(array.astype(np.int32)) != key  # so does the dtype
    changed = array.copy()
    changed[1, 2] = -1
    assert fingerprint(changed) != key


def test_fingerprint_walks_dicts_lists_and_tuples() -> None:
    item = {"image": torch.zeros(2, 2, dtype=torch.uint8), "label": 3, "tags": ("a", "b")}
    same = {"tags": ["a", "b"], "label": 3, "image": np.zeros((2, 2), np.uint8)}
    assert fingerprint(item) == fingerprint(same)  # key order and list vs tuple ignored
    assert fingerprint({**item, "label": 4}) != fingerprint(item)
    assert fingerprint([torch.ones(1), 1]) != fingerprint([torch.zeros(1), 1])


int64s = st.lists(st.integers(-(2**63), 2**63 - 1), max_size=10)


def test_fingerprint_keys_ragged_columns_by_all_their_values() -> None:
    rows = [torch.arange(i, i + 5) for i in range(10)]
    changed = [*rows[:-1], torch.zeros(5, dtype=torch.int64)]  # the last row differs
    a, b = Ragged.from_rows(rows), Ragged.from_rows(changed)
    assert fingerprint({"tokens": a}) != fingerprint({"tokens": b})


def test_fingerprint_keys_object_arrays_by_their_values() -> None:
    made_apart = "".join(["x"] * 30)  # equal to "x" * 30, another object
    a = np.array(["x" * 30], dtype=object)
    b = np.array([made_apart], dtype=object)
    assert fingerprint(a) == fingerprint(b)


@settings(deadline=None)
@given(int64s, int64s)
def test_fingerprints_of_items_are_equal_exactly_when_the_items_are(
    a: list[int], b: list[int]
) -> None:
    assert (fingerprint(np.array(a, np.int64)) == fingerprint(np.array(b, np.int64))) == (a == b)


def test_the_probe_keys_each_row_by_its_index_and_values() -> None:
    probe = Probe()
    assert probe.needs_index
    rows_table = table([7, 8, 7], ["a", "b", "a"], index=[10, 11, 12])
    keys = fingerprints(rows_table)
    worker, batch = probe.batch(rows_table, context())
    assert (worker, batch) == (0, list(zip([10, 11, 12], keys, strict=True)))
    assert batch[0][1] == batch[2][1] != batch[1][1]
    assert list(probe.rows(rows_table, context())) == [
        (0, [(10, keys[0])]),
        (0, [(11, keys[1])]),
        (0, [(12, keys[2])]),
    ]


def test_tagged_keeps_the_decoders_items_and_needs() -> None:
    plain = ArrowDecoder()
    wrapped = tagged(plain)
    assert not varies(wrapped) and wrapped.needs_index is False
    assert tagged(ArrowDecoder(index=True)).needs_index is True
    rows_table = table([1, 2], ["a", "b"])
    worker, batch = wrapped.batch(rows_table, context())
    assert worker == 0 and batch["id"].tolist() == [1, 2] and batch["name"].tolist() == ["a", "b"]
    assert [(w, row["id"]) for w, row in wrapped.rows(rows_table, context())] == [(0, 1), (0, 2)]


class Pairs:
    """A varying decoder: each item is two rows' ids, across table boundaries."""

    needs_index = False
    varying = True

    def batch(self, table: pa.Table, context: Context) -> Any:
        raise NotImplementedError

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        raise NotImplementedError

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[Any, tuple[int, int]]]:
        ids = [i for t in tables for i in t.column("id").to_pylist()][offset:]
        for start in range(0, len(ids) - 1, 2):
            yield ids[start : start + 2], (2, 0)


def test_tagged_varying_decoders_stay_varying_and_keep_their_positions() -> None:
    wrapped = tagged(Pairs())
    assert varies(wrapped)
    tables = iter([table([1, 2, 3], ["a"] * 3), table([4, 5], ["b"] * 2)])
    assert list(wrapped.items(tables, context(), 1)) == [  # type: ignore[attr-defined]
        ((0, [2, 3]), (2, 0)),
        ((0, [4, 5]), (2, 0)),
    ]


class Decoded(Dataset[Any]):
    """Decodes one table per item in whichever worker reads it."""

    def __init__(self, decoder: Any) -> None:
        self.decoder = decoder

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> Any:
        return self.decoder.batch(table([i], [str(i)], index=[i]), context())


@pytest.mark.parametrize("decoder", [Probe(), tagged(ArrowDecoder())], ids=["probe", "tagged"])
def test_items_are_tagged_with_the_worker_that_made_them(decoder: Any) -> None:
    loader = DataLoader(
        Decoded(decoder),
        batch_size=None,
        num_workers=2,
        multiprocessing_context="fork",
        collate_fn=lambda item: item,
    )
    workers = sorted(worker for worker, _ in loader)
    assert workers == [0, 0, 1, 1]  # torch hands indices to its workers in turn
