"""Ragged: a batch of variable-length rows as one values tensor cut by offsets.

A token column of 1,024 documents is 1,024 sequences of different lengths. Kept as 1,024
tensors, it costs Python work per row everywhere it goes: pickling between DataLoader workers
and the main process (a record per tensor), pinning, moving to the GPU, padding. Kept as Arrow
keeps it, it is two buffers: every row's values back to back, and ``B + 1`` offsets where each
row starts and ends. :class:`Ragged` is that pair (plus a validity mask when some rows are
null), so a batch crosses the worker boundary as two or three shared-memory segments (one,
from a ParquetStream worker), pins and moves as two or three tensors, and pads with one
vectorised scatter.

Why not a jagged ``torch.nested`` tensor, which also holds values + offsets? It crosses a
worker as those two buffers too (plus, in torch 2.14, a tiny segment each for its cached
shortest and longest row), but it has no nulls and no strings, cannot be sliced along the
batch or compared with ``torch.equal``, has no ``tolist()``, needs int64 offsets and
``max_seqlen`` to pad to the longest row, and its operator coverage changes between torch
releases. A ``Ragged`` converts to one without copying (:meth:`Ragged.to_nested`) where a
model wants it.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal

import numpy as np
import torch

from fastdata._padding import Padded, pad_ragged, pad_spec
from fastdata._ragged_rows import numeric_values
from fastdata._validate import check_choice, constructor_keywords_checked

__all__ = ["Ragged", "RaggedKind"]

RaggedKind = Literal["list", "str", "bytes"]
_KINDS = ("list", "str", "bytes")
_ROW_PREVIEW = 3  # rows shown by repr


@constructor_keywords_checked
class Ragged:
    """``B`` rows of different lengths: ``values`` cut at ``offsets``, nulls in ``valid``.

    Row ``i`` is ``values[offsets[i]:offsets[i + 1]]``. This is the form in which
    :class:`fastdata.ParquetStream` yields variable-length list and string columns in batch
    mode, and the form :func:`fastdata.pad_collate`, :func:`fastdata.nested_collate`,
    :func:`fastdata.bucket_by_length` and :func:`fastdata.padding_stats` take without making a
    tensor per row. It crosses DataLoader workers as its two or three tensors, and
    ``DataLoader(pin_memory=True)``, :func:`fastdata.to_device` and
    :class:`fastdata.DevicePrefetcher` pin and move it like a tensor.

    Strings and binary values are UTF-8 / raw bytes in a uint8 ``values`` (``kind="str"`` /
    ``"bytes"``); :meth:`tolist` gives Python ``str`` / ``bytes``.

    Null rows are empty (their offsets are equal) and False in ``valid``; ``valid`` is None
    when no row is null. Padding or nesting keeps them as empty rows: read ``valid`` before
    collating where a null must differ from an empty row.

    Args:
        values: ``(N, *inner)``: all rows' elements back to back (uint8 for strings).
        offsets: ``(B + 1,)`` integers, starting at 0, never decreasing, ending at ``N``;
            stored as int64 on ``values``' device.
        valid: ``(B,)`` bool, False for null rows, or None when no row is null.
        kind: ``"list"`` (rows are tensors), ``"str"`` or ``"bytes"``.

    Raises:
        ValueError, TypeError: offsets or validity that do not describe ``values``. The
            check reads the offsets, so build on the CPU (or accept one device sync).

    Examples:
        >>> r = Ragged(torch.tensor([5, 6, 7, 8]), torch.tensor([0, 3, 3, 4]))
        >>> len(r), r.lengths.tolist(), r[0].tolist(), r.tolist()
        (3, [3, 0, 1], [5, 6, 7], [[5, 6, 7], [], [8]])
        >>> Ragged.from_rows(["héllo", None, ""]).tolist()
        ['héllo', None, '']
    """

    __slots__ = ("kind", "offsets", "valid", "values")

    values: torch.Tensor
    offsets: torch.Tensor
    valid: torch.Tensor | None
    kind: RaggedKind

    def __init__(
        self,
        values: torch.Tensor,
        offsets: torch.Tensor,
        valid: torch.Tensor | None = None,
        *,
        kind: RaggedKind = "list",
    ) -> None:
        check_choice("kind", kind, _KINDS)
        if not isinstance(values, torch.Tensor) or values.ndim == 0 or values.is_nested:
            raise TypeError(
                f"values must be a dense tensor of at least one dim (all rows back to back), "
                f"got {_describe(values)}"
            )
        if kind != "list" and (values.dtype != torch.uint8 or values.ndim != 1):
            raise TypeError(
                f"kind={kind!r} needs 1-D uint8 values (the encoded bytes), got "
                f"{_describe(values)}; for numbers use kind='list'"
            )
        if (
            not isinstance(offsets, torch.Tensor)
            or offsets.ndim != 1
            or offsets.numel() == 0
            or offsets.dtype.is_floating_point
            or offsets.dtype.is_complex
            or offsets.dtype == torch.bool
        ):
            raise TypeError(
                f"offsets must be a 1-D integer tensor of B + 1 row boundaries, got "
                f"{_describe(offsets)}"
            )
        offsets = offsets.to(values.device, torch.int64)
        n = values.shape[0]
        if offsets[0] != 0 or offsets[-1] != n or bool((offsets.diff() < 0).any()):
            raise ValueError(
                f"offsets {reprlib.repr(offsets.tolist())} do not cut {n} values into rows: "
                f"they must start at 0, never decrease and end at {n} (len(values))"
            )
        if valid is not None:
            if not isinstance(valid, torch.Tensor) or valid.shape != (offsets.numel() - 1,):
                raise ValueError(
                    f"valid must be a ({offsets.numel() - 1},) bool tensor (one per row) or "
                    f"None, got {_describe(valid)}"
                )
            valid = valid.to(values.device, torch.bool)
            if bool((~valid & (offsets[1:] != offsets[:-1])).any()):
                raise ValueError("null rows (valid False) must be empty: equal offsets")
        self.values, self.offsets, self.valid, self.kind = values, offsets, valid, kind

    @classmethod
    def _unchecked(cls, *parts: Any) -> Ragged:
        """A Ragged of ``(values, offsets, valid, kind)`` already known to be consistent
        (no reads, no device sync)."""
        out = cls.__new__(cls)
        out.values, out.offsets, out.valid, out.kind = parts
        return out

    @classmethod
    def from_rows(cls, rows: Sequence[Any], /, *, dtype: torch.dtype | None = None) -> Ragged:
        """A Ragged from Python rows: tensors / arrays / lists of numbers, ``str`` or ``bytes``.

        ``None`` is a null row. The kind comes from the first row that is not None (all None
        or no rows: ``"list"``). ``dtype`` casts numeric rows; else torch promotes the rows'
        dtypes, an empty list having none (``[[5], []]``: int64, as pyarrow; ``[[]]``: float32).

        Raises:
            ValueError: naming the row, for a value ``dtype`` cannot hold (40000 as int16, 1.7
                as int64, 2**64 in a list: :mod:`fastdata._ragged_rows`).
        """
        present = [row for row in rows if row is not None]
        first = present[0] if present else None
        kind: RaggedKind = (
            "str" if isinstance(first, str) else "bytes" if isinstance(first, bytes) else "list"
        )
        if kind == "list":
            values, lengths = numeric_values(rows, dtype)
        else:
            want = str if kind == "str" else bytes
            if any(not isinstance(row, want) for row in present):
                raise TypeError(f"rows mix {want.__name__} with other types")
            encoded = [row.encode() if isinstance(row, str) else row for row in present]
            values = torch.from_numpy(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy())
            lengths = [len(b) for b in encoded]
        full = iter(lengths)
        all_lengths = [0 if row is None else next(full) for row in rows]
        offsets = torch.zeros(len(rows) + 1, dtype=torch.int64)
        torch.cumsum(torch.tensor(all_lengths, dtype=torch.int64), 0, out=offsets[1:])
        nulls = [row is None for row in rows]
        valid = torch.tensor([not n for n in nulls]) if any(nulls) else None
        return cls._unchecked(values, offsets, valid, kind)

    # ----------------------------------------------------------------- shape
    def __len__(self) -> int:
        return self.offsets.numel() - 1

    @property
    def lengths(self) -> torch.Tensor:
        """``(B,)`` int64: each row's length (0 for a null row)."""
        return self.offsets.diff()

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    # ----------------------------------------------------------------- rows
    def __getitem__(self, index: int | slice | Sequence[int] | torch.Tensor) -> Any:
        """Row ``i`` as a view of ``values`` (None for a null row); a slice or an index
        tensor / list of rows (or a bool mask) as a Ragged (a view for a step-1 slice)."""
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return self._slice(start, max(start, stop))
            return self.take(torch.tensor(range(start, stop, step), dtype=torch.int64))
        if isinstance(index, (int, np.integer)):
            i = int(index)
            if not -len(self) <= i < len(self):
                raise IndexError(f"row {i} is out of range for a Ragged of {len(self)} rows")
            i %= len(self)
            if self.valid is not None and not self.valid[i]:
                return None
            return self.values[self.offsets[i] : self.offsets[i + 1]]
        return self.take(index)

    def __iter__(self) -> Iterator[torch.Tensor | None]:
        for i in range(len(self)):
            yield self[i]

    def _slice(self, start: int, stop: int) -> Ragged:
        first, last = self.offsets[start], self.offsets[stop]
        valid = None if self.valid is None else self.valid[start:stop]
        return Ragged._unchecked(
            self.values[first:last], self.offsets[start : stop + 1] - first, valid, self.kind
        )

    def take(self, index: Sequence[int] | torch.Tensor | np.ndarray) -> Ragged:
        """The rows at ``index`` (ints, or a bool mask of ``B``), in that order, as a new
        Ragged: one gather of the values, no per-row work."""
        idx = torch.as_tensor(index, device=self.device)
        if (idx.dtype.is_floating_point or idx.dtype.is_complex) and idx.numel():
            got = f"{idx.dtype} {reprlib.repr(idx.tolist())}"  # as torch: no truncating
            raise IndexError(f"row indices must be integers or a bool mask, got {got}")
        if idx.dtype == torch.bool:
            if idx.shape != (len(self),):
                raise IndexError(f"a bool index must have {len(self)} entries, got {idx.shape}")
            idx = idx.nonzero().flatten()
        idx = idx.to(torch.int64).flatten()
        if idx.numel() and not bool(((idx >= -len(self)) & (idx < len(self))).all()):
            raise IndexError(f"row indices out of range for a Ragged of {len(self)} rows")
        idx = idx % max(len(self), 1)
        lengths = self.lengths[idx]
        offsets = _offsets(lengths)
        n = int(offsets[-1])
        shift = torch.repeat_interleave(self.offsets[idx] - offsets[:-1], lengths, output_size=n)
        gather = torch.arange(n, device=self.device) + shift
        valid = None if self.valid is None else self.valid[idx]
        return Ragged._unchecked(self.values[gather], offsets, valid, self.kind)

    @staticmethod
    def cat(parts: Sequence[Ragged], /) -> Ragged:
        """The rows of ``parts`` one after the other (one concatenation of each buffer)."""
        if not parts:
            raise ValueError("Ragged.cat needs at least one Ragged")
        first = parts[0]
        for p in parts:
            if (
                p.kind != first.kind
                or p.dtype != first.dtype
                or p.values.shape[1:] != (first.values.shape[1:])
            ):
                raise TypeError(
                    f"cannot concatenate {p!r} to {first!r}: kinds, dtypes or inner shapes differ"
                )
        offsets = _offsets(torch.cat([p.lengths for p in parts]))
        valid = None
        if any(p.valid is not None for p in parts):
            valid = torch.cat([_valid(p) for p in parts])
        return Ragged._unchecked(torch.cat([p.values for p in parts]), offsets, valid, first.kind)

    def tolist(self) -> list[Any]:
        """The rows as Python values: lists of numbers, ``str`` (UTF-8 decoded) or ``bytes``;
        None for null rows. One Python object per row: for inspection and tests, or text a
        tokenizer needs as ``str``."""
        bounds = self.offsets.tolist()
        valid = [True] * len(self) if self.valid is None else self.valid.tolist()
        data: Any = self.values.tolist() if self.kind == "list" else self._bytes()
        rows = [
            data[a:b] if ok else None
            for a, b, ok in zip(bounds[:-1], bounds[1:], valid, strict=True)
        ]
        if self.kind == "str":
            return [None if r is None else r.decode() for r in rows]
        return rows

    def _bytes(self) -> bytes:
        return self.values.cpu().numpy().tobytes()

    # ----------------------------------------------------------------- comparisons
    def __eq__(self, other: object) -> bool:
        """Same kind, dtype, rows and nulls (``valid=None`` equals an all-True ``valid``)."""
        if not isinstance(other, Ragged):
            return NotImplemented
        return (
            self.kind == other.kind
            and self.dtype == other.dtype
            and self.values.shape == other.values.shape
            and torch.equal(self.offsets, other.offsets.to(self.device))
            and torch.equal(self.values, other.values.to(self.device))
            and torch.equal(_valid(self), _valid(other).to(self.device))
        )

    __hash__ = None  # type: ignore[assignment]  # mutable tensors inside

    # ----------------------------------------------------------------- memory and devices
    def map_tensors(self, fn: Callable[[torch.Tensor, str], torch.Tensor]) -> Ragged:
        """A Ragged of ``fn(tensor, name)`` for ``values``, ``offsets`` (and ``valid``): how
        :func:`fastdata.to_device` moves one. ``fn`` must keep shapes and row boundaries."""
        valid = None if self.valid is None else fn(self.valid, "valid")
        return Ragged._unchecked(
            fn(self.values, "values"), fn(self.offsets, "offsets"), valid, self.kind
        )

    def to(self, device: torch.device | str | int, *, non_blocking: bool = False) -> Ragged:
        """This Ragged on ``device`` (itself when it is already there)."""
        return self.map_tensors(lambda t, _: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Ragged:
        """A copy in page-locked memory (what ``DataLoader(pin_memory=True)`` calls)."""
        return self.map_tensors(lambda t, _: t.pin_memory())

    def is_pinned(self) -> bool:
        """Whether every tensor of it is in page-locked memory."""
        tensors = (self.values, self.offsets, self.valid)
        return all(t.is_pinned() for t in tensors if t is not None)

    # ----------------------------------------------------------------- conversions
    def to_nested(self) -> torch.Tensor:
        """A jagged-layout ``torch.nested`` tensor ``(B, j, *inner)`` sharing ``values`` and
        ``offsets`` (no copy). Null rows become empty rows. Reads the lengths (one sync on a
        GPU) to record the shortest and longest row, which padding it needs."""
        lengths = self.lengths
        if len(self) == 0:
            raise ValueError("a nested tensor needs at least one row; this Ragged has none")
        return torch.nested.nested_tensor_from_jagged(
            self.values,
            self.offsets,
            min_seqlen=int(lengths.min()),
            max_seqlen=int(lengths.max()),
        )

    def to_padded(
        self,
        pad_value: float = 0,
        *,
        padding_side: Literal["right", "left"] = "right",
        pad_to_multiple_of: int | Sequence[int | None] | None = None,
        return_mask: bool = True,
    ) -> Padded:
        """The rows padded to the longest one: ``Padded(values, lengths, mask)``.

        The same as :func:`fastdata.pad_collate` of the rows as separate tensors (null rows
        as empty ones), computed by one scatter of ``values`` into the padded tensor, on
        ``values``' device. The arguments are :func:`fastdata.pad_collate`'s.
        """
        spec = pad_spec(pad_value, padding_side, pad_to_multiple_of, return_mask)
        return Padded(*pad_ragged(self.values, self.offsets, "", spec))

    # ----------------------------------------------------------------- pickling, repr
    def __reduce__(self) -> tuple[Any, ...]:
        # The tensors pickle on their own: through torch's ForkingPickler (DataLoader
        # workers) each one is one shared-memory segment.
        return (Ragged._unchecked, (self.values, self.offsets, self.valid, self.kind))

    def __repr__(self) -> str:
        n = len(self)
        inner = "".join(f" x {d}" for d in self.values.shape[1:])
        what = f"{self.dtype}".removeprefix("torch.") + inner if self.kind == "list" else self.kind
        parts = [f"{n} rows of {what}"]
        if n:
            lengths = self.lengths
            parts.append(f"lengths {int(lengths.min())}..{int(lengths.max())}")
        parts.append(f"{self.values.shape[0]} {'values' if self.kind == 'list' else 'bytes'}")
        if self.valid is not None:
            parts.append(f"{int((~self.valid).sum())} null")
        if self.device.type != "cpu":
            parts.append(f"device={self.device}")
        preview = reprlib.Repr()
        preview.maxlist, preview.maxstring = 8, 40
        shown = [preview.repr(row) for row in self[:_ROW_PREVIEW].tolist()]
        if n > _ROW_PREVIEW:
            shown.append("...")
        return f"Ragged({', '.join(parts)}: [{', '.join(shown)}])"


def _offsets(lengths: torch.Tensor) -> torch.Tensor:
    """``(B + 1,)`` int64 offsets of rows of ``lengths``."""
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64, device=lengths.device)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return offsets


def _valid(ragged: Ragged) -> torch.Tensor:
    if ragged.valid is not None:
        return ragged.valid
    return torch.ones(len(ragged), dtype=torch.bool, device=ragged.device)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"
