"""Data and comparisons shared by the collate tests: random tensors of every dtype, batches
of them whose sizes vary per dim, Ragged columns with their rows, and a structural equality."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch
from hypothesis import strategies as st

from fastdata import Ragged

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]

Point = namedtuple("Point", ["x", "y"])


def make_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random values of any dtype, never equal to the pad value 0 for integers, so a misplaced
    pad is visible."""
    if dtype.is_floating_point:
        return torch.rand(shape, generator=gen).to(dtype) + 1
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    return torch.randint(1, 100, shape, generator=gen).to(dtype)


@st.composite
def ragged_batches(draw: Any, max_ndim: int = 3) -> list[torch.Tensor]:
    """A batch of 1-6 tensors of one rank and dtype whose sizes vary independently per dim."""
    ndim = draw(st.integers(1, max_ndim))
    dtype = draw(st.sampled_from(DTYPES))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    fixed = draw(st.lists(st.booleans(), min_size=ndim, max_size=ndim))  # dims all items share
    base = draw(st.tuples(*[st.integers(0, 5)] * ndim))
    batch = []
    for _ in range(draw(st.integers(1, 6))):
        shape = tuple(b if f else draw(st.integers(0, 5)) for b, f in zip(base, fixed, strict=True))
        batch.append(make_tensor(shape, dtype, gen))
    return batch


@st.composite
def raggeds(draw: Any, max_inner: int = 2) -> tuple[Ragged, list[torch.Tensor]]:
    """A Ragged of 1-8 rows (some null, some empty) and its rows as tensors (null: empty)."""
    dtype = draw(st.sampled_from(DTYPES))
    inner = draw(st.tuples(*[st.integers(0, 3)] * draw(st.integers(0, max_inner))))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))
    rows: list[torch.Tensor | None] = []
    for _ in range(draw(st.integers(1, 8))):
        if draw(st.integers(0, 5)) == 0:
            rows.append(None)
        else:
            rows.append(make_tensor((draw(st.integers(0, 6)), *inner), dtype, gen))
    if all(r is None for r in rows):
        rows[0] = make_tensor((0, *inner), dtype, gen)
    empty = torch.empty((0, *inner), dtype=dtype)
    ragged = Ragged.from_rows(rows)
    return ragged, [empty if r is None else r for r in rows]


def assert_same(got: Any, want: Any, where: str = "out") -> None:
    """Equal structure, types, dtypes and values (nested tensors: row by row)."""
    assert type(got) is type(want), f"{where}: {type(got)} != {type(want)}"
    if isinstance(want, torch.Tensor) and want.is_nested:
        assert got.is_nested and got.layout == want.layout, where
        assert_same(list(got.unbind()), list(want.unbind()), where)
    elif isinstance(want, torch.Tensor):
        assert got.dtype == want.dtype, f"{where}: {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"{where}: {got.shape} != {want.shape}"
        assert torch.equal(got, want), f"{where}: values differ"
    elif isinstance(want, dict):
        assert list(got) == list(want), where
        for k in want:
            assert_same(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def tokens(*lengths: int, dtype: torch.dtype = torch.int64) -> list[dict[str, Any]]:
    """Samples ``{"tokens": ones(n)}``, one per length."""
    return [{"tokens": torch.ones(n, dtype=dtype)} for n in lengths]


def var_len_samples() -> list[dict[str, Any]]:
    """Sample ``i`` holds ``i % 7 + 1`` tokens, each equal to ``i``. A list is a map-style
    dataset that spawned workers unpickle without importing this module."""
    return [{"tokens": torch.full((i % 7 + 1,), i), "id": i} for i in range(24)]
