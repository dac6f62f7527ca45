"""The values of :meth:`fastdata.Ragged.from_rows`' numeric rows, cast to ``dtype`` only where
``dtype`` holds every value.

torch's ``.to()`` wraps integers (40000 as int16 is -25536), truncates fractions and turns
what a float type cannot hold into inf, without a word; ``pa.array`` refuses such values. A
token id corrupted that way trains a model on the wrong token, so from_rows refuses them,
naming the row, whether the rows are tensors, arrays or Python lists (torch converts lists
on its own terms: it refuses an int16 overflow but truncates 1.7; pyarrow too). Rows already
of ``dtype`` are not read: the check runs where a cast happens, vectorised over all the rows
of one source dtype, in slices below torch's grain size, so that torch runs it (and the cast)
on the calling thread: over a whole batch its intra-op threads would wait for busy cores at
every operation's barrier, 6-12x slower in a main process beside busy DataLoader workers (as
:mod:`fastdata.device._normalize_cpu` avoids).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["numeric_values"]

# torch runs an operation on fewer elements than its grain size (32,768) on the calling thread.
_SERIAL_ELEMENTS = 2**15 - 1


def numeric_values(
    rows: Sequence[Any], dtype: torch.dtype | None
) -> tuple[torch.Tensor, list[int]]:
    """The present (not None) ``rows`` back to back as one tensor, of ``dtype`` or of the
    rows' promoted dtype (an empty list having none), and each present row's length."""
    numbers = [i for i, row in enumerate(rows) if row is not None]
    parts = [_row_tensor(rows[i], i, dtype) for i in numbers]
    typed: list[int] = []  # all but empty lists (a tensor or array has a dtype)
    cast = False
    for k, part in enumerate(parts):
        if part.ndim == 0:
            raise TypeError(f"a row is a scalar ({part.item()!r}); rows are sequences")
        if len(part) or hasattr(rows[numbers[k]], "dtype"):
            typed.append(k)
            cast = cast or part.dtype != dtype
    lengths = [len(part) for part in parts]
    if not typed:
        return torch.empty(0, dtype=dtype or torch.float32), lengths
    if dtype is None or not cast:
        return torch.cat([parts[k] for k in typed]), lengths
    by_source: dict[torch.dtype, list[int]] = {}
    for k in typed:
        by_source.setdefault(parts[k].dtype, []).append(k)
    for source, group in by_source.items():
        values = torch.cat([parts[k] for k in group])
        if source != dtype:
            _refuse_misfits(values, dtype, [lengths[k] for k in group], [numbers[k] for k in group])
        if len(by_source) == 1:
            return _cast(values, dtype), lengths
    return torch.cat([_cast(parts[k], dtype) for k in typed]), lengths


def _cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``values.to(dtype)``, on the calling thread (slices below torch's grain size)."""
    if values.numel() <= _SERIAL_ELEMENTS:
        return values.to(dtype)
    out = torch.empty(values.shape, dtype=dtype)
    source, target = values.reshape(-1), out.view(-1)
    for start in range(0, len(source), _SERIAL_ELEMENTS):
        target[start : start + _SERIAL_ELEMENTS].copy_(source[start : start + _SERIAL_ELEMENTS])
    return out


def _row_tensor(row: Any, number: int, dtype: torch.dtype | None) -> torch.Tensor:
    """:func:`_as_tensor`, naming the row where torch's conversion of an integer fails."""
    try:
        return _as_tensor(row, dtype)
    except (OverflowError, RuntimeError, ValueError) as error:
        # a Python int beyond 64 bits: numpy gives an object array, torch then "int too big
        # to convert" (OverflowError) or "Overflow when unpacking long long" (ValueError)
        if not isinstance(error, OverflowError) and "overflow" not in str(error).lower():
            raise
        where, what = f"Ragged.from_rows(dtype={dtype})", f"{dtype} cannot hold"
        if dtype is None:
            where, what = "Ragged.from_rows", "no dtype of torch holds"
        raise ValueError(
            f"{where}: row {number} holds an integer {what} ({error}); from_rows refuses it "
            "rather than wrap it"
        ) from error


def _as_tensor(row: Any, dtype: torch.dtype | None) -> torch.Tensor:
    """A row as a tensor of its own dtype (Python numbers: numpy's int64 / float64 / bool,
    which hold them exactly where torch's float32 default would round), or of ``dtype`` where
    numpy cannot tell one."""
    if dtype is None or hasattr(row, "dtype"):
        return torch.as_tensor(row)
    try:
        array = np.asarray(row)
    except (ValueError, TypeError, OverflowError):
        array = None
    if array is not None and array.dtype.kind in "biufc":  # numpy's own name ([2**63]: ulonglong)
        return torch.from_numpy(array.view(np.dtype(array.dtype.str)))
    return torch.as_tensor(row, dtype=dtype)  # torch's conversion and error


def _refuse_misfits(
    values: torch.Tensor, dtype: torch.dtype, lengths: list[int], numbers: list[int]
) -> None:
    """Raise ValueError naming the first row (``numbers``, each of ``lengths`` values) of
    ``values`` that holds a value ``dtype`` cannot."""
    flat = values.reshape(-1)
    per = max(1, values[0].numel()) if len(values) else 1  # elements per first-dim entry
    for start in range(0, len(flat), _SERIAL_ELEMENTS):  # on the calling thread, see above
        piece = flat[start : start + _SERIAL_ELEMENTS]
        bad = _misfits(piece, dtype)
        if bad is None:
            return
        if bool(bad.any()):
            at = int(bad.nonzero()[0])
            value, first = piece[at].item(), (start + at) // per
            break
    else:
        return
    row = numbers[int(np.searchsorted(np.cumsum(lengths), first, side="right"))]
    raise ValueError(
        f"Ragged.from_rows(dtype={dtype}): row {row} holds {value!r} ({values.dtype}), which "
        f"{dtype} cannot hold ({_holds(dtype, values.dtype)}); from_rows refuses it rather "
        "than wrap, truncate or round it: cast the rows yourself (.to() / .astype()) where "
        "that is meant"
    )


def _misfits(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """A bool mask of the ``values`` that change when cast to ``dtype`` (beyond a float's
    rounding to a float), or None when none can."""
    source = values.dtype
    if source == torch.bool or dtype.is_complex:
        return None
    if source.is_complex:
        rest = _misfits(values.real, dtype)
        return values.imag != 0 if rest is None else (values.imag != 0) | rest
    if dtype == torch.bool:
        return (values != 0) & (values != 1)
    if dtype.is_floating_point:
        cast = values.to(dtype)
        if source.is_floating_point:  # rounding is a float's nature; becoming inf is not
            return torch.isfinite(values) & ~torch.isfinite(cast)
        within = float(torch.iinfo(source).min), float(torch.iinfo(source).max) + 1
        wide = cast.double()  # the round trip below is defined only within the source's range
        return (wide < within[0]) | (wide >= within[1]) | (cast.to(source) != values)
    info = torch.iinfo(dtype)
    if source.is_floating_point:
        wide = values.double()
        whole = (wide == wide.trunc()) & (wide >= info.min) & (wide < float(info.max) + 1)
        return ~whole  # NaN and inf too
    if source == torch.uint64:  # torch does not compare uint64: from 2**63 its int64 view is < 0
        signed = values.view(torch.int64)
        return (signed < 0) | (signed > info.max)
    wide = values.to(torch.int64) if source in (torch.uint16, torch.uint32) else values
    limits = torch.iinfo(source)
    below = wide < info.min if info.min > limits.min else None
    above = wide > info.max if info.max < limits.max else None
    if below is None or above is None:
        return below if above is None else above
    return below | above


def _holds(dtype: torch.dtype, source: torch.dtype) -> str:
    if source.is_complex:
        return "real values only"
    if dtype == torch.bool:
        return "0 and 1 only"
    if not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        return f"whole numbers {info.min}..{info.max}"
    finfo = torch.finfo(dtype)
    if source.is_floating_point:
        return f"finite values up to {finfo.max:g}; this one would become inf"
    digits = round(-np.log2(finfo.eps)) + 1
    return f"integers it represents exactly: all up to 2**{digits}, some beyond"
