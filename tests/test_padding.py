"""Tests of fastdata._padding, the kernel under pad_collate and Ragged.to_padded: both of its
ways of writing items (one masked scatter, one copy per item) and the ragged path give what
padding each item by hand gives; the layout, the multiples and the pad value are checked.
pad_collate's own behaviour (fields, keys, structures) is tested in tests/collate/."""

from __future__ import annotations

import decimal
import fractions
from typing import Any
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from fastdata import Ragged, _padding
from fastdata._padding import PadSpec, check_multiples, pad_ragged, pad_spec, pad_tensors
from fastdata.collate import pad_collate


def by_hand(
    items: list[torch.Tensor], padded: list[int], pad_value: float, left: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each item written into its own padded slot with plain indexing, and the mask."""
    values = torch.full((len(items), *padded), pad_value, dtype=items[0].dtype)
    mask = torch.zeros((len(items), *padded), dtype=torch.bool)
    for i, item in enumerate(items):
        slot: list[int | slice] = [i]
        slot += [
            slice(p - n, p) if left else slice(0, n)
            for n, p in zip(item.shape, padded, strict=True)
        ]
        values[tuple(slot)] = item
        mask[tuple(slot)] = True
    return values, mask


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[torch.Tensor], tuple[int, ...]]:
    """1 to 6 int16 items of one rank (1 to 3), the first dim 0 to 6 long, the others fixed
    or varying; and the fixed inner shape when there is one (for the ragged path)."""
    ndim = draw(st.integers(1, 3))
    inner = tuple(draw(st.lists(st.integers(1, 3), min_size=ndim - 1, max_size=ndim - 1)))
    vary_inner = draw(st.booleans())
    items = []
    for _ in range(draw(st.integers(1, 6))):
        shape = [draw(st.integers(0, 6))]
        shape += [draw(st.integers(1, 3)) for _ in inner] if vary_inner else list(inner)
        n = 1
        for s in shape:
            n *= s
        items.append(torch.arange(1, n + 1, dtype=torch.int16).reshape(shape))
    return items, (() if vary_inner and ndim > 1 else inner)


multiples = st.one_of(st.none(), st.integers(1, 5))


@settings(max_examples=150, deadline=None)
@given(
    case=batches(),
    multiple=multiples,
    left=st.booleans(),
    return_mask=st.booleans(),
    scatter=st.booleans(),
)
def test_pad_tensors_equals_padding_by_hand(
    case: tuple[list[torch.Tensor], tuple[int, ...]],
    multiple: int | None,
    left: bool,
    return_mask: bool,
    scatter: bool,
) -> None:
    items, _ = case
    spec = PadSpec(pad_value=-3, multiples=multiple, left=left, return_mask=return_mask)
    largest = [max(t.shape[d] for t in items) for d in range(items[0].ndim)]
    padded = [n if multiple is None else -(-n // multiple) * multiple for n in largest]
    threshold = 10**9 if scatter else 0
    with mock.patch.object(_padding, "_SCATTER_MAX_MEAN_NUMEL", threshold):
        values, lengths, mask = pad_tensors(items, [t.shape for t in items], "", spec)
    want_values, want_mask = by_hand(items, padded, -3, left)
    assert torch.equal(values, want_values)
    assert (mask is None) != return_mask
    if mask is not None:
        assert torch.equal(mask, want_mask)
    if items[0].ndim == 1:
        assert lengths.tolist() == [len(t) for t in items]
    else:
        assert lengths.tolist() == [list(t.shape) for t in items]


@settings(max_examples=150, deadline=None)
@given(case=batches(), multiple=multiples, left=st.booleans(), return_mask=st.booleans())
def test_pad_ragged_equals_pad_tensors_of_its_rows(
    case: tuple[list[torch.Tensor], tuple[int, ...]],
    multiple: int | None,
    left: bool,
    return_mask: bool,
) -> None:
    items, inner = case

    assume(all(t.shape[1:] == inner for t in items))  # rows of a Ragged share their inner shape
    spec = PadSpec(pad_value=9, multiples=multiple, left=left, return_mask=return_mask)
    values = torch.cat(items)
    offsets = torch.tensor([0, *torch.tensor([len(t) for t in items]).cumsum(0).tolist()])
    got = pad_ragged(values, offsets, "", spec)
    want = pad_tensors(items, [t.shape for t in items], "", spec)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    if return_mask:
        assert got[2] is not None and want[2] is not None and torch.equal(got[2], want[2])
    else:
        assert got[2] is None and want[2] is None


def test_layout_rounds_up_and_says_which_dims_every_item_fills() -> None:
    spec = PadSpec(pad_value=0, multiples=(None, 4, 2), left=False, return_mask=True)
    padded, full = spec.layout([3, 5, 2], [3, 6, 2], torch.uint8, "")
    assert padded == [3, 8, 2]
    assert full == [True, False, True]  # dim 1 varies; a rounded-up dim would not be full
    padded, full = PadSpec(0, 4, False, True).layout([3], [3], torch.uint8, "")
    assert (padded, full) == ([4], [False])


def test_layout_refuses_multiples_of_another_rank() -> None:
    spec = PadSpec(pad_value=0, multiples=(8, 8), left=False, return_mask=True)
    with pytest.raises(ValueError, match="has 2 entries") as raised:
        spec.layout([1], [2], torch.int64, "['tokens']")
    assert str(raised.value) == (
        "pad_to_multiple_of=(8, 8) has 2 entries but the items of batch[*]['tokens'] have 1 "
        "dims; give one entry (or None) per dim"
    )


@pytest.mark.parametrize(
    ("dtype", "fits", "refused"),
    [
        (torch.bool, [0, 1, True], [2, -1, 0.5]),
        (torch.uint8, [0, 255], [-1, 256, 0.5]),
        (torch.uint16, [0, 65535], [-1, 65536]),
        (torch.uint64, [0, 2**64 - 1], [-1, 2**64]),
        (torch.int8, [-128, 127], [-129, 128]),
        (torch.int64, [-(2**40)], [1.5]),
        (torch.float16, [0.5, -1e4, 65504.0, float("-inf"), float("nan")], [1e5, -65519.0]),
        (torch.bfloat16, [3e38, float("inf")], [1e39]),
        (torch.float32, [1 + 0j], [np.float64(1e39), 1j]),
        (torch.complex64, [1.5, 1j], []),
    ],
)
def test_the_pad_value_must_fit_the_dtype(
    dtype: torch.dtype, fits: list[Any], refused: list[Any]
) -> None:
    for value in fits:
        PadSpec(value, None, False, True).layout([1], [2], dtype, "")
    for value in refused:
        with pytest.raises(ValueError, match="cannot be stored") as raised:
            PadSpec(value, None, False, True).layout([1], [2], dtype, "['x']")
        assert str(raised.value) == (
            f"pad_value={value!r} cannot be stored in batch[*]['x'], whose dtype is {dtype}; "
            f"pass a pad_value that {dtype} holds, e.g. 0"
        )


@pytest.mark.parametrize("value", [fractions.Fraction(1, 2), decimal.Decimal("0.5")])
def test_a_number_torch_cannot_fill_with_is_refused_at_the_call(value: Any) -> None:
    """A Fraction or Decimal is a numbers.Number, so it passed the call and failed inside
    torch.full ("argument 'fill_value' must be Number, not Fraction"), naming no pad_value."""
    with pytest.raises(TypeError, match=r"pad_value=.*got (Fraction|Decimal); pass e\.g\. float"):
        pad_collate([{"x": torch.ones(2)}, {"x": torch.ones(1)}], pad_value=value)
    for fine in (np.float32(0.5), np.int16(3), np.bool_(True), 2, 0.5, True, 1 + 0j):
        pad_collate([{"x": torch.ones(2)}, {"x": torch.ones(1)}], pad_value=fine)


def test_a_pad_value_that_is_no_number_is_refused_at_the_call() -> None:
    """Not inside torch.full at the first padded field, naming no field."""
    with pytest.raises(TypeError, match=r"pad_value='0': expected a number .*got str"):
        pad_collate([{"x": torch.ones(2)}, {"x": torch.ones(1)}], pad_value="0")
    with pytest.raises(TypeError, match=r"pad_value='0': expected a number .*got str"):
        Ragged.from_rows([[1.0]]).to_padded("0")
    float16 = [{"wave": torch.ones(2, dtype=torch.float16)}, {"wave": torch.ones(1).half()}]
    with pytest.raises(
        ValueError, match=r"pad_value=100000.0 cannot be stored in batch\[\*\]\['wave'\]"
    ):
        pad_collate(float16, pad_value=1e5)
    assert pad_collate(float16, pad_value=torch.tensor(-1.0))["wave"][1].tolist() == [1.0, -1.0]


@pytest.mark.parametrize("value", [None, 1, 8, (None, 4), [2, None, 3]])
def test_check_multiples_accepts_positive_ints_per_dim(value: Any) -> None:
    got = check_multiples(value)
    assert got == (tuple(value) if isinstance(value, list | tuple) else value)


@pytest.mark.parametrize("value", [0, -8, 2.0, (4, 0), ["8"], (None, 1.5)])
def test_check_multiples_refuses_anything_else(value: Any) -> None:
    with pytest.raises(ValueError, match="expected a positive int") as raised:
        check_multiples(value)
    assert str(raised.value) == (
        f"pad_to_multiple_of={value!r}: expected a positive int (e.g. 8), a sequence of "
        "positive ints or None (one per dim), or None"
    )


def test_pad_spec_reads_the_side() -> None:
    assert pad_spec(0, "left", 8, False) == PadSpec(0, 8, True, False)
    assert pad_spec(1, "right", [None, 2], True) == PadSpec(1, (None, 2), False, True)
    with pytest.raises(ValueError, match=r"padding_side='top': expected 'right' or 'left'"):
        pad_spec(0, "top", None, True)
