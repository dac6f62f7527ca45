"""The collate functions :func:`pad_collate` and :func:`nested_collate` (the package docstring
tells the forms they take).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

import torch

from fastdata._padding import Padded, pad_ragged, pad_spec, pad_tensors
from fastdata.collate._walk import KeyPath, Walk, collate_batch
from fastdata.ragged import Ragged

__all__ = ["nested_collate", "pad_collate"]


def pad_collate(
    batch: Any,
    /,
    *,
    pad_value: float = 0,
    pad_to_multiple_of: int | Sequence[int | None] | None = None,
    padding_side: Literal["right", "left"] = "right",
    return_mask: bool = True,
    keys: Iterable[Any] | None = None,
) -> Any:
    """Collate a batch, padding its variable-size fields and adding their lengths and masks.

    ``batch`` is either form (see the module docs):

    * a list of samples: every field is collated as ``default_collate`` would (numbers,
      strings, dicts, tuples, 0-d tensors; a None among strings stays in the list), except
      tensors and numeric numpy arrays of at least one dim, which are padded, whatever their
      sizes in this batch;
    * an already batched item: a :class:`~fastdata.Ragged`, or a dict (or a tuple holding a
      Ragged) of columns such as a :class:`fastdata.ParquetStream` batch: its numeric Ragged
      columns are padded from values + offsets in one scatter; other columns (tensors,
      string Ragged columns, lists) are returned as they are. This is what
      ``DataLoader(stream, batch_size=None, collate_fn=pad_collate)`` passes it.

    ``keys`` names the fields to pad instead; then every other tensor is stacked (and must
    have one size) in a list of samples, and every other column passes through in a batch.

    Where a padded field's lengths and mask go:

    * in a mapping, next to it: ``{"tokens": values, "tokens_lengths": lengths,
      "tokens_mask": mask}`` (a sample that already holds one of those keys raises, so
      nothing is overwritten silently);
    * anywhere else (bare tensors, a bare Ragged, tuple / list / namedtuple positions), in
      place as a :class:`Padded` ``(values, lengths, mask)`` tuple.

    Each padded dim is padded to the batch maximum (rounded up by ``pad_to_multiple_of``);
    ``values`` keeps the items' dtype and device. The items' elements land where
    ``mask`` is True, in order: ``values[mask]`` equals the items flattened and concatenated.
    Null rows of a Ragged are padded as empty rows.

    Args:
        batch: a list of samples, or one already batched item.
        pad_value: the number written into the padding (an int, float, bool or complex,
            Python's or numpy's); it must fit each padded field's dtype (an integer dtype's
            range, a float dtype's largest finite value).
        pad_to_multiple_of: round each padded dim up to a multiple of this (8 suits tensor
            cores); a sequence gives one multiple per dim of the items, None leaving that dim
            alone, e.g. ``(None, 32, 32)`` for ``C x H x W`` images.
        padding_side: ``"right"`` puts the items first; ``"left"`` puts the padding first
            (at the start of every dim), as decoder-only models want for generation.
        return_mask: also return the boolean mask (one byte per element of ``values``).
        keys: key paths of the fields to pad, and only those: a key (``"tokens"``), a
            namedtuple field name or sequence index (``0``), a tuple of those for nested
            fields (``("text", "ids")``), or ``()`` for bare samples. A string Ragged column
            is padded (its bytes) only when named here.

    Returns:
        The batch in the structure of the samples (or of the batched item), as above.

    Raises:
        ValueError: an empty batch; items of different ranks, devices or keys; sizes that
            differ in a field left out of ``keys``; a sibling key that already exists; a
            ``pad_value`` the dtype cannot hold. The message names the position, e.g.
            ``batch[3]['tokens']``.
        TypeError: items of different dtypes, or a value of another type (a string where a
            tensor is expected) at the same position; a dict holding no Ragged (a single
            sample rather than a batch); a ``pad_value`` that is not a number.

    Examples:
        >>> import torch
        >>> out = pad_collate([{"tokens": torch.tensor([5, 6, 7])}, {"tokens": torch.tensor([8])}])
        >>> out["tokens"]
        tensor([[5, 6, 7],
                [8, 0, 0]])
        >>> out["tokens_lengths"], out["tokens_mask"][1]
        (tensor([3, 1]), tensor([ True, False, False]))
        >>> pad_collate({"tokens": Ragged.from_rows([[5, 6, 7], [8]])})["tokens"]
        tensor([[5, 6, 7],
                [8, 0, 0]])
    """
    spec = pad_spec(pad_value, padding_side, pad_to_multiple_of, return_mask)

    def leaf(tensors: list[torch.Tensor], shapes: list[torch.Size], where: str) -> Padded:
        return Padded(*pad_tensors(tensors, shapes, where, spec))

    def ragged_leaf(ragged: Ragged, where: str) -> Padded:
        return Padded(*pad_ragged(ragged.values, ragged.offsets, where, spec))

    suffixes = ("_lengths", "_mask") if return_mask else ("_lengths",)
    walk = Walk(leaf, ragged_leaf, key_paths(keys), suffixes, "pad_collate")
    return collate_batch(batch, walk)


def nested_collate(batch: Any, /, *, keys: Iterable[Any] | None = None) -> Any:
    """Collate a batch like :func:`pad_collate`, nesting its variable-size fields instead.

    The fields :func:`pad_collate` would pad become ``torch.nested`` tensors. A numeric
    Ragged column becomes a jagged-layout nested tensor ``(B, j, *inner)`` sharing its values
    and offsets (no copy). Items of a list of samples ragged at most in their first dim
    (1-D sequences, ``L x D`` features) become a jagged nested tensor built from one
    concatenation and the offsets; items ragged in any other dim (``C x H x W`` images of
    different sizes) a strided-layout nested tensor, the only layout torch has for several
    ragged dims. Everything else is collated as by ``default_collate`` (or passed through,
    in an already batched item). Nothing is added next to a nested field: a nested tensor
    knows its own lengths. For a padded tensor use
    ``torch.nested.to_padded_tensor(nt, pad_value)``, which equals ``pad_collate``'s
    right-padded values.

    Args:
        batch: a list of samples, or one already batched item (see :func:`pad_collate`).
        keys: key paths of the fields to nest, and only those (see :func:`pad_collate`).

    Returns:
        The batch in the structure of the samples.

    Raises:
        ValueError, TypeError: as :func:`pad_collate`.

    Examples:
        >>> import torch
        >>> nt = nested_collate([torch.tensor([1, 2, 3]), torch.tensor([4])])
        >>> nt.shape[0], [t.tolist() for t in nt.unbind()]
        (2, [[1, 2, 3], [4]])
    """
    walk = Walk(nest, nest_ragged, key_paths(keys), (), "nested_collate")
    return collate_batch(batch, walk)


# --- nesting -----------------------------------------------------------------------------


def nest(tensors: list[torch.Tensor], shapes: list[torch.Size], where: str) -> torch.Tensor:
    del where  # nesting cannot fail once the items agree in rank, dtype and device
    if any(s[1:] != shapes[0][1:] for s in shapes):
        return torch.nested.nested_tensor(tensors)  # several ragged dims: strided layout
    lengths = [s[0] for s in shapes]
    device = tensors[0].device
    offsets = torch.zeros(len(tensors) + 1, dtype=torch.int64, device=device)
    torch.cumsum(torch.tensor(lengths, device=device), 0, out=offsets[1:])
    # Without min/max_seqlen, to_padded_tensor pads to the total length (pytorch#159380);
    # the arguments exist since torch 2.5.
    return torch.nested.nested_tensor_from_jagged(
        torch.cat(tensors), offsets, min_seqlen=min(lengths), max_seqlen=max(lengths)
    )


def nest_ragged(ragged: Ragged, where: str) -> torch.Tensor:
    del where
    return ragged.to_nested()


def key_paths(keys: Iterable[Any] | None) -> frozenset[KeyPath] | None:
    if keys is None:
        return None
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys={keys!r} is a string; pass a list of key paths: keys=[{keys!r}]")
    return frozenset(k if isinstance(k, tuple) else (k,) for k in keys)
