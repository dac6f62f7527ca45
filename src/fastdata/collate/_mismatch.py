"""What :func:`fastdata.pad_collate` and :func:`fastdata.nested_collate` say when the items
of a list of samples differ from ``batch[0]`` in a way collate cannot fix: tensors of another
layout, dtype, rank or device, and a None (a null in the data) where the others hold a value.
The walk that finds them is :mod:`fastdata.collate._walk`.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch


def null_hint(path: tuple[Any, ...], other: Any) -> str:
    """What to do about a None at ``path`` (a field's key path) in a sample where another
    sample holds ``other`` (None: every sample holds None).

    A None there is usually a null in the data: a ``ParquetStream`` without ``batch_size``
    yields a null list or string as None, while with ``batch_size=N`` its Ragged batches pad
    a null as an empty row. So the hint names the stream's two fixes, then the dataset's own.
    """
    column = repr(path[-1]) if path and isinstance(path[-1], str) else "column"
    fill = f"ParquetStream(..., fill_null={{{column}: {_filler(other)}}})"
    if other is None:  # the column's type cannot be told from this batch
        fill = (
            f"ParquetStream(..., fill_null={{{column}: value}}) with a value of the column's "
            "type ('' for a string, 0 for a number, [] for a list)"
        )
    return (
        "A None is usually a null in the data: a ParquetStream without batch_size yields a "
        "null as None (with batch_size=N its Ragged batches pad a null as an empty row). "
        f"Fill nulls with {fill}, skip those rows with filter=pc.field({column}).is_valid(), "
        "or replace or drop the None in the dataset (or its transform)"
    )


def _filler(other: Any) -> str:
    """A ``fill_null`` value of ``other``'s type (``ParquetStream`` refuses one of another)."""
    if isinstance(other, str):
        return "''"
    if isinstance(other, bytes):
        return "b''"
    if isinstance(other, bool | np.bool_):
        return "False"
    if isinstance(other, numbers.Number) or getattr(other, "ndim", None) == 0:
        return "0"
    return "[]"


def raise_unlike(tensors: list[torch.Tensor], where: str) -> None:
    """Raise for the first item that differs from ``batch[0]`` in a way collate cannot fix."""
    first = tensors[0]
    for i, t in enumerate(tensors):
        if t.is_nested or t.layout != torch.strided:
            layout = "nested" if t.is_nested else str(t.layout)
            raise TypeError(
                f"batch[{i}]{where} is a {layout} tensor; collate takes dense tensors, so "
                "make it dense in the dataset (e.g. x.to_dense(), or unbind a nested tensor)"
            )
        if t.dtype != first.dtype:
            raise TypeError(
                f"batch[{i}]{where} has dtype {t.dtype} but batch[0]{where} has "
                f"{first.dtype}; cast every item to one dtype in the dataset, e.g. "
                f"x.to({first.dtype})"
            )
        if t.ndim != first.ndim:
            raise ValueError(
                f"batch[{i}]{where} has {t.ndim} dims (shape {tuple(t.shape)}) but "
                f"batch[0]{where} has {first.ndim} (shape {tuple(first.shape)}); give every "
                "item the same rank, e.g. with x.reshape(-1) or x.unsqueeze(0) in the dataset"
            )
        if t.device != first.device:
            raise ValueError(
                f"batch[{i}]{where} is on {t.device} but batch[0]{where} is on "
                f"{first.device}; move every item to one device before collating"
            )
