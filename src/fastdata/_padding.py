"""The padding kernel of :func:`fastdata.collate.pad_collate`: one allocation, then copies.

Items are written into one tensor filled with the pad value, either by one masked scatter of
their concatenation (small items: no per-item overhead) or by one slice copy per item (large
items, where the scatter's per-element mask work costs more). No Python loop over elements.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import torch

from fastdata._validate import constructor_keywords_checked, is_int


@constructor_keywords_checked
class Padded(NamedTuple):
    """A padded field that has no mapping to hold its lengths and mask as sibling keys.

    Returned for a batch of bare tensors, for a bare :class:`~fastdata.Ragged`, and for
    tuple, list and namedtuple positions. It is a tuple, so
    ``values, lengths, mask = pad_collate(batch)`` works.

    Attributes:
        values: ``(B, *padded_shape)``, the items padded with ``pad_value``.
        lengths: ``(B,)`` int64 for 1-D items; ``(B, ndim)``, each item's shape, otherwise.
        mask: bool, same shape as ``values``, True on the items' own elements;
            None with ``return_mask=False``.
    """

    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor | None


# Up to this many elements per item on average, padding scatters the concatenated items
# through the mask (one vectorized copy, no per-item overhead); above it, one slice copy per
# item is faster. The crossover was measured on one CPU thread (docs/benchmarks.md,
# "Measurements behind implementation choices").
_SCATTER_MAX_MEAN_NUMEL = 2048

# torch has no masked_scatter or index_put kernel for the unsigned dtypes wider than a byte
# ("not implemented for 'UInt16'"; uint16 is the usual on-disk dtype of GPT-2 token ids), so
# both write through a view of the same bits as the signed dtype of that width: bit-exact,
# and the result keeps the unsigned dtype. Every other dtype is written as it is.
_SIGNED_VIEW = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}


@dataclass(frozen=True)
class PadSpec:
    """The padding arguments of one :func:`fastdata.pad_collate` call.

    Attributes:
        pad_value: written into the padding; must fit the dtype.
        multiples: from :func:`check_multiples`.
        left: pad at the start of every dim instead of the end.
        return_mask: return the mask (else None).
    """

    pad_value: float
    multiples: tuple[int | None, ...] | int | None
    left: bool
    return_mask: bool

    def layout(
        self, smallest: Sequence[int], largest: Sequence[int], dtype: torch.dtype, where: str
    ) -> tuple[list[int], list[bool]]:
        """The padded size of each dim, and whether every item fills that dim (the mask
        needs no comparison along it), for items whose sizes span ``smallest..largest``.
        Raises for multiples of another rank and a ``pad_value`` the dtype cannot hold."""
        multiples, ndim = self.multiples, len(largest)
        if isinstance(multiples, tuple) and len(multiples) != ndim:
            raise ValueError(
                f"pad_to_multiple_of={multiples!r} has {len(multiples)} entries but the items "
                f"of batch[*]{where} have {ndim} dims; give one entry (or None) per dim"
            )
        _check_pad_value(self.pad_value, dtype, where)
        per_dim = multiples if isinstance(multiples, tuple) else (multiples,) * ndim
        padded = [_round_up(n, m) for n, m in zip(largest, per_dim, strict=True)]
        full = [s == n == p for s, n, p in zip(smallest, largest, padded, strict=True)]
        return padded, full


def pad_tensors(
    tensors: list[torch.Tensor], shapes: list[torch.Size], where: str, spec: PadSpec
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Pad items of one rank, dtype and device into one ``(B, *padded)`` tensor.

    Args:
        tensors: the items.
        shapes: their shapes.
        where: the field's key path suffix (``['tokens']``), for messages.
        spec: how to pad.

    Returns:
        ``(values, lengths, mask)`` as :class:`fastdata.collate.Padded` documents them.
    """
    first = tensors[0]
    ndim, device = first.ndim, first.device
    sizes = torch.tensor(shapes, dtype=torch.int64)  # (B, ndim), on the CPU for the maths
    padded, full = spec.layout(sizes.amin(0).tolist(), sizes.amax(0).tolist(), first.dtype, where)
    values = torch.full((len(tensors), *padded), spec.pad_value, dtype=first.dtype, device=device)
    scatter = int(sizes.prod(1).sum()) <= _SCATTER_MAX_MEAN_NUMEL * len(tensors)
    sizes = sizes.to(device)
    mask = None
    if scatter:
        mask = _mask(sizes, padded, full, spec.left)
        flat = torch.cat(tensors if ndim == 1 else [t.reshape(-1) for t in tensors])
        _scatterable(values).masked_scatter_(mask, _scatterable(flat))
    else:
        for i, (t, shape) in enumerate(zip(tensors, shapes, strict=True)):
            index: list[int | slice] = [i]
            for n, p in zip(shape, padded, strict=True):
                index.append(_placed(n, p, spec.left))
            values[tuple(index)] = t
        if spec.return_mask:
            mask = _mask(sizes, padded, full, spec.left)
    lengths = sizes[:, 0] if ndim == 1 else sizes
    return values, lengths, mask if spec.return_mask else None


def pad_ragged(
    values: torch.Tensor, offsets: torch.Tensor, where: str, spec: PadSpec
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Pad the rows of a :class:`fastdata.Ragged` (``values`` cut at ``offsets``).

    The result equals :func:`pad_tensors` of the rows as separate tensors, written by one
    scatter of ``values``, with nothing done per row: through the mask when it is returned
    anyway, else through flat positions computed from the offsets (element ``k`` of row
    ``i`` goes to ``i * L + k``, plus ``L - length[i]`` on the left).
    """
    inner = tuple(values.shape[1:])
    lengths = offsets.diff()
    batch, device = lengths.numel(), values.device
    longest, shortest = (int(lengths.max()), int(lengths.min())) if batch else (0, 0)
    padded, full = spec.layout((shortest, *inner), (longest, *inner), values.dtype, where)
    out = torch.full((batch, *padded), spec.pad_value, dtype=values.dtype, device=device)
    sizes = lengths[:, None]
    if inner:
        fixed = torch.tensor(inner, dtype=torch.int64, device=device).expand(batch, -1)
        sizes = torch.cat([sizes, fixed], 1)
    mask = None
    if spec.return_mask:
        mask = _mask(sizes, padded, full, spec.left)
        _scatterable(out).masked_scatter_(mask, _scatterable(values))
    elif values.shape[0]:
        n = values.shape[0]
        shift = torch.arange(batch, device=device) * padded[0] - offsets[:-1]
        if spec.left:
            shift += padded[0] - lengths
        flat = torch.arange(n, device=device)
        flat += torch.repeat_interleave(shift, lengths, output_size=n)
        placed = (_placed(d, p, spec.left) for d, p in zip(inner, padded[1:], strict=True))
        index = (slice(None), slice(None), *placed)
        region = _scatterable(out)[index]
        region.view(batch * padded[0], *region.shape[2:])[flat] = _scatterable(values)
    return out, sizes[:, 0] if not inner else sizes, mask


def _scatterable(t: torch.Tensor) -> torch.Tensor:
    """``t``, or a view of its bits as a dtype that masked_scatter and index_put handle."""
    signed = _SIGNED_VIEW.get(t.dtype)
    return t if signed is None else t.view(signed)


def _placed(n: int, p: int, left: bool) -> slice:
    """Where ``n`` elements go in a padded dim of ``p``."""
    return slice(p - n, p) if left else slice(0, n)


def _mask(sizes: torch.Tensor, padded: list[int], full: list[bool], left: bool) -> torch.Tensor:
    """``(B, *padded)`` bool, True where an item's elements go.

    Built as the AND of one ``(B, p)`` comparison per dim, broadcast; dims that every item
    fills completely are skipped and the result expanded, which halves the work on images.
    """
    batch, ndim = sizes.shape
    mask = None
    for d, p in enumerate(padded):
        if full[d]:
            continue
        position = torch.arange(p, device=sizes.device)
        limit = sizes[:, d : d + 1]
        valid = position >= p - limit if left else position < limit
        view = [batch] + [1] * ndim
        view[d + 1] = p
        valid = valid.view(view)
        mask = valid if mask is None else mask & valid
    shape = (batch, *padded)
    if mask is None:
        return torch.ones(shape, dtype=torch.bool, device=sizes.device)
    return mask if mask.shape == shape else mask.expand(shape).contiguous()


def _round_up(n: int, multiple: int | None) -> int:
    return n if multiple is None else -(-n // multiple) * multiple


def pad_spec(
    pad_value: float,
    padding_side: str,
    pad_to_multiple_of: int | Sequence[int | None] | None,
    return_mask: bool,
) -> PadSpec:
    """The :class:`PadSpec` of :func:`fastdata.pad_collate`'s arguments, checked."""
    if isinstance(pad_value, torch.Tensor) and pad_value.ndim == 0:
        pad_value = pad_value.item()
    if not isinstance(pad_value, int | float | complex | np.number | np.bool_):
        # torch.full takes these; a Fraction or Decimal (a numbers.Number) it refuses
        convert = "; pass e.g. float(pad_value)" if isinstance(pad_value, numbers.Number) else ""
        raise TypeError(
            f"pad_value={pad_value!r}: expected a number (written into the padding, in each "
            "padded field's dtype): an int, float, bool or complex, Python's or numpy's; got "
            f"{type(pad_value).__name__}{convert}"
        )
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side={padding_side!r}: expected 'right' or 'left'")
    return PadSpec(pad_value, check_multiples(pad_to_multiple_of), padding_side == "left",
                   return_mask)  # fmt: skip


def check_multiples(
    value: int | Sequence[int | None] | None,
) -> tuple[int | None, ...] | int | None:
    """Validate ``pad_to_multiple_of``: None, a positive int, or one of those per dim."""
    entries: list[Any] = list(value) if isinstance(value, Sequence) else [value]
    for m in entries:
        if m is not None and (not is_int(m) or m < 1):
            raise ValueError(
                f"pad_to_multiple_of={value!r}: expected a positive int (e.g. 8), "
                "a sequence of positive ints or None (one per dim), or None"
            )
    return tuple(entries) if isinstance(value, Sequence) else value


def _check_pad_value(pad_value: Any, dtype: torch.dtype, where: str) -> None:
    """Refuse a ``pad_value`` the field's dtype cannot hold: outside an integer dtype's range,
    not 0 or 1 for bool, a finite value beyond a float dtype's largest (``1e5`` in float16,
    which torch.full refuses, or turns into inf for a numpy float), an imaginary part in a
    real dtype."""
    if dtype.is_complex:
        return
    if not isinstance(pad_value, numbers.Real):  # complex (a number, checked at the call)
        if pad_value.imag:
            raise _unfit(pad_value, dtype, where)
        pad_value = pad_value.real
    if dtype.is_floating_point:
        value = float(pad_value)  # inf and nan are values of every float dtype
        fits = not math.isfinite(value) or abs(value) <= torch.finfo(dtype).max
    elif dtype == torch.bool:
        fits = pad_value in (0, 1)
    else:
        info = torch.iinfo(dtype)
        fits = float(pad_value).is_integer() and info.min <= pad_value <= info.max
    if not fits:
        raise _unfit(pad_value, dtype, where)


def _unfit(pad_value: Any, dtype: torch.dtype, where: str) -> ValueError:
    return ValueError(
        f"pad_value={pad_value!r} cannot be stored in batch[*]{where}, whose dtype is "
        f"{dtype}; pass a pad_value that {dtype} holds, e.g. 0"
    )
