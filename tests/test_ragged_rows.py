"""Ragged.from_rows(dtype=...) (fastdata._ragged_rows): a value the dtype cannot hold is
refused naming the row, whatever the rows are (lists, numpy arrays, tensors); every other
value is cast as ``.to()`` casts it. The reference is Python's own arithmetic on the values."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

import fastdata._ragged_rows as ragged_rows
from fastdata import Ragged

FORMS = {
    "list": lambda values, dtype: values,
    "numpy": lambda values, dtype: np.asarray(values, dtype=dtype),
    "tensor": lambda values, dtype: torch.tensor(values, dtype=getattr(torch, dtype)),
}
INTS = [torch.int8, torch.uint8, torch.int16, torch.uint16, torch.int32, torch.int64]


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize(
    ("value", "source", "dtype", "holds"),
    [
        (40000, "int64", torch.int16, "whole numbers -32768..32767"),  # rcol #6
        (-1, "int64", torch.uint8, "whole numbers 0..255"),
        (200, "int64", torch.int8, "whole numbers -128..127"),
        (1.7, "float64", torch.int64, "whole numbers"),  # was truncated to 1
        (float("nan"), "float64", torch.int32, "whole numbers"),
        (float("inf"), "float64", torch.int64, "whole numbers"),
        (2, "int64", torch.bool, "0 and 1 only"),
        (1e5, "float64", torch.float16, "finite values up to 65504"),  # was inf
        (2**24 + 1, "int64", torch.float32, "integers it represents exactly"),  # as pa.array
    ],
)
def test_a_value_the_dtype_cannot_hold_is_refused_naming_the_row(
    form: str, value: Any, source: str, dtype: torch.dtype, holds: str
) -> None:
    rows = [FORMS[form]([0, 1], source), None, FORMS[form]([1, value], source)]
    with pytest.raises(ValueError, match=rf"row 2 holds .*{dtype} cannot hold \({holds}"):
        Ragged.from_rows(rows, dtype=dtype)


def test_uint64_rows_are_checked_though_torch_cannot_compare_them() -> None:
    big = np.array([1, 2**63], dtype=np.uint64)
    with pytest.raises(ValueError, match=r"row 1 holds 9223372036854775808 \(torch.uint64\)"):
        Ragged.from_rows([np.array([1], dtype=np.uint64), big], dtype=torch.int64)
    fits = Ragged.from_rows([np.array([5, 127], dtype=np.uint64)], dtype=torch.int8)
    assert fits.tolist() == [[5, 127]]
    assert Ragged.from_rows([[2**63]], dtype=torch.uint64).tolist() == [[2**63]]


def test_inner_dims_and_mixed_row_types_name_the_row() -> None:
    frames = [np.zeros((2, 3)), np.zeros((1, 3)), np.full((2, 3), 1e6)]
    with pytest.raises(ValueError, match=r"row 2 holds 1000000\.0"):
        Ragged.from_rows(frames, dtype=torch.int16)
    mixed = [np.array([1]), torch.tensor([7], dtype=torch.int32), [3], [], None]
    assert Ragged.from_rows(mixed, dtype=torch.int16).tolist() == [[1], [7], [3], [], None]
    with pytest.raises(ValueError, match="row 1 holds 70000"):
        Ragged.from_rows(
            [np.array([1]), torch.tensor([70000], dtype=torch.int32)], dtype=torch.int16
        )


def test_what_fits_is_cast_and_floats_round_as_floats_do() -> None:
    assert Ragged.from_rows([np.array([1.0, -2.0])], dtype=torch.int8).tolist() == [[1, -2]]
    assert Ragged.from_rows([[0.1]], dtype=torch.float64).values.item() == 0.1  # not via float32
    assert torch.equal(
        Ragged.from_rows([[0.1], np.array([0.2])], dtype=torch.float16).values,
        torch.tensor([0.1, 0.2], dtype=torch.float16),
    )
    nonfinite = Ragged.from_rows([[float("inf"), float("nan")]], dtype=torch.float16).values
    assert nonfinite[0].isinf() and nonfinite[1].isnan()  # already not finite: kept
    assert Ragged.from_rows([[True, False], [0, 1]], dtype=torch.bool).tolist() == [
        [True, False],
        [False, True],
    ]


@settings(max_examples=120, deadline=None)
@given(
    source=st.sampled_from(INTS),
    dtype=st.sampled_from(INTS),
    form=st.sampled_from(["numpy", "tensor"]),
    data=st.data(),
)
def test_integer_rows_are_cast_when_every_value_fits_and_refused_otherwise(
    source: torch.dtype, dtype: torch.dtype, form: str, data: st.DataObject
) -> None:
    have, want = torch.iinfo(source), torch.iinfo(dtype)
    value = st.integers(have.min, have.max)
    rows = data.draw(st.lists(st.lists(value, max_size=4), min_size=1, max_size=4))
    made = [FORMS[form](row, str(source).removeprefix("torch.")) for row in rows]
    bad = [i for i, row in enumerate(rows) if any(not want.min <= v <= want.max for v in row)]
    if bad:
        with pytest.raises(ValueError, match=f"row {bad[0]} holds"):
            Ragged.from_rows(made, dtype=dtype)
    else:
        out = Ragged.from_rows(made, dtype=dtype)
        assert out.dtype == dtype and out.tolist() == rows


def test_rows_already_of_the_dtype_are_not_read() -> None:
    """The common path (token ids already int64, say) costs no check: only a cast is checked."""
    rows = [np.arange(5), torch.arange(3), [7, 8]]
    with mock.patch.object(ragged_rows, "_refuse_misfits", side_effect=AssertionError):
        assert Ragged.from_rows(rows, dtype=torch.int64).tolist() == [
            [0, 1, 2, 3, 4],
            [0, 1, 2],
            [7, 8],
        ]
        with pytest.raises(AssertionError):
            Ragged.from_rows(rows, dtype=torch.int32)


class _Sizes(TorchDispatchMode):
    """The most elements each aten op (but views) computes on: its tensor inputs and its
    output (cat: its inputs only, the rows; empty only allocates)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest: dict[str, int] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = str(func.overloadpacket)
        if not func.is_view:
            given = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
            if isinstance(out, torch.Tensor) and name not in ("aten.cat", "aten.empty"):
                given.append(out)
            sizes = [t.numel() for t in given]
            self.largest[name] = max([self.largest.get(name, 0), *sizes])
        return out


@pytest.mark.parametrize("form", ["numpy", "tensor"])
@pytest.mark.parametrize("dtype", [torch.int16, torch.float32])
def test_a_cast_runs_on_the_calling_thread(form: str, dtype: torch.dtype) -> None:
    """Every op of the check and the cast is below torch's grain size (32,768 elements), so
    torch runs it on the calling thread: whole-batch ops went to the intra-op threads, 6-12x
    slower in a main process whose cores are busy. The values and the row named hold."""
    rows = [np.arange(i, i + 300, dtype=np.int64) % 30000 for i in range(400)]  # 120k values
    given_rows = rows if form == "numpy" else [torch.from_numpy(r) for r in rows]
    with _Sizes() as sizes:
        out = Ragged.from_rows(given_rows, dtype=dtype)
    assert max(sizes.largest.values()) < 2**15, str(sizes.largest)
    assert out.values.dtype == dtype
    assert torch.equal(out.values, torch.from_numpy(np.concatenate(rows)).to(dtype))
    rows[377] = rows[377].copy()
    rows[377][5] = 40000  # past the first slices
    with pytest.raises(ValueError, match=r"row 377 holds 40000"):
        Ragged.from_rows(rows, dtype=torch.int16)


@pytest.mark.parametrize("dtype", [torch.uint64, torch.int64, None])
def test_an_integer_beyond_64_bits_in_a_list_names_the_row(dtype: torch.dtype | None) -> None:
    """It raised torch's OverflowError / ValueError naming no row."""
    with pytest.raises(ValueError, match=r"row 1 holds an integer"):
        Ragged.from_rows([[1], [2, 2**64]], dtype=dtype)
