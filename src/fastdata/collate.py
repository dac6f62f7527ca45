"""Collate functions for variable-size samples: padding with lengths and masks, nested tensors.

``torch.utils.data.default_collate`` stacks, so it fails as soon as two samples differ in
size. The functions here walk the same nested structures as ``default_collate`` (dicts,
namedtuples, tuples, lists of tensors / numpy arrays / numbers / strings) and agree with it
wherever every item has the same size; only the fields that vary in size are treated
differently:

* :func:`pad_collate` pads them to the batch maximum (one allocation, then copies) and
  returns their lengths and a boolean mask of the valid positions;
* :func:`nested_collate` turns them into ``torch.nested`` tensors (no padding at all).

:func:`bucket_by_length` (batches of similar length, so padding wastes little) and
:func:`padding_stats` (how much a batching wastes) are re-exported from ``fastdata._bucket``.
"""

from __future__ import annotations

import collections.abc as cabc
import copy
import reprlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

from fastdata._bucket import PaddingStats, bucket_by_length, padding_stats
from fastdata._padding import check_multiples, pad_tensors

__all__ = [
    "Padded",
    "PaddingStats",
    "bucket_by_length",
    "nested_collate",
    "pad_collate",
    "padding_stats",
]

KeyPath = tuple[Any, ...]
"""Where a field sits in a sample: mapping keys, namedtuple field names, sequence indices."""

_NUMPY_STRING_KINDS = frozenset("SUO")  # bytes, str, object: default_collate refuses them


class Padded(NamedTuple):
    """A padded field that has no mapping to hold its lengths and mask as sibling keys.

    Returned for a batch of bare tensors and for tuple, list and namedtuple positions.
    It is a tuple, so ``values, lengths, mask = pad_collate(batch)`` works.

    Attributes:
        values: ``(B, *padded_shape)``, the items padded with ``pad_value``.
        lengths: ``(B,)`` int64 for 1-D items; ``(B, ndim)``, each item's shape, otherwise.
        mask: bool, same shape as ``values``, True on the items' own elements;
            None with ``return_mask=False``.
    """

    values: torch.Tensor
    lengths: torch.Tensor
    mask: torch.Tensor | None


@dataclass(frozen=True)
class _Walk:
    """What one collate call does with tensors, and which of them it must pad / nest."""

    leaf: Callable[[list[torch.Tensor], list[torch.Size], str], Any]
    keys: frozenset[KeyPath] | None
    sibling_suffixes: tuple[str, ...]

    def pads(self, path: KeyPath) -> bool:
        """Whether the field at ``path`` is padded / nested even when its sizes agree."""
        return self.keys is not None and path in self.keys


def pad_collate(
    batch: Sequence[Any],
    /,
    *,
    pad_value: float = 0,
    pad_to_multiple_of: int | Sequence[int | None] | None = None,
    padding_side: Literal["right", "left"] = "right",
    return_mask: bool = True,
    keys: Iterable[Any] | None = None,
) -> Any:
    """Collate samples like ``default_collate``, padding the tensors whose sizes differ.

    Every field of the samples (a dict value, a tuple / list / namedtuple position, or the
    sample itself) is collated as ``default_collate`` would, except tensors and numpy arrays
    that get padded. With ``keys=None`` those are the ones whose shapes differ within this
    batch, so a batch whose items all have one size comes back exactly as from
    ``default_collate``. Name the fields in ``keys`` to pad them in every batch, which keeps
    the output structure the same from batch to batch.

    Where a padded field's lengths and mask go:

    * in a mapping, next to it: ``{"tokens": values, "tokens_lengths": lengths,
      "tokens_mask": mask}`` (a sample that already holds one of those keys raises, so
      nothing is overwritten silently);
    * anywhere else (bare tensors, tuple / list / namedtuple positions), in place as a
      :class:`Padded` ``(values, lengths, mask)`` tuple.

    Each padded dim is padded to the batch maximum (rounded up by ``pad_to_multiple_of``);
    ``values`` keeps the items' dtype and device. The items' elements land where
    ``mask`` is True, in order: ``values[mask]`` equals the items flattened and concatenated.

    Args:
        batch: the samples, e.g. what a DataLoader's sampler fetched.
        pad_value: the value written into the padding; it must fit the field's dtype.
        pad_to_multiple_of: round each padded dim up to a multiple of this (8 suits tensor
            cores); a sequence gives one multiple per dim of the items, None leaving that dim
            alone, e.g. ``(None, 32, 32)`` for ``C x H x W`` images.
        padding_side: ``"right"`` puts the items first; ``"left"`` puts the padding first
            (at the start of every dim), as decoder-only models want for generation.
        return_mask: also return the boolean mask (one byte per element of ``values``).
        keys: key paths of the fields to pad in every batch, and only those: a key
            (``"tokens"``), a namedtuple field name or sequence index (``0``), a tuple of
            those for nested fields (``("text", "ids")``), or ``()`` for bare tensor samples.
            A field not named here whose sizes differ raises instead of being padded.

    Returns:
        The batch in the structure of the samples, as described above.

    Raises:
        ValueError: an empty batch; items of different ranks, devices or keys; sizes that
            differ in a field left out of ``keys``; a sibling key that already exists; a
            ``pad_value`` the dtype cannot hold. The message names the position, e.g.
            ``batch[3]['tokens']``.
        TypeError: items of different dtypes, or a value of another type (a string where a
            tensor is expected) at the same position.

    Examples:
        >>> import torch
        >>> out = pad_collate([{"tokens": torch.tensor([5, 6, 7])}, {"tokens": torch.tensor([8])}])
        >>> out["tokens"]
        tensor([[5, 6, 7],
                [8, 0, 0]])
        >>> out["tokens_lengths"], out["tokens_mask"][1]
        (tensor([3, 1]), tensor([ True, False, False]))
    """
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side={padding_side!r}: expected 'right' or 'left'")
    multiples = check_multiples(pad_to_multiple_of)

    def leaf(tensors: list[torch.Tensor], shapes: list[torch.Size], where: str) -> Padded:
        return Padded(
            *pad_tensors(
                tensors,
                shapes,
                where,
                pad_value=pad_value,
                multiples=multiples,
                left=padding_side == "left",
                return_mask=return_mask,
            )
        )

    suffixes = ("_lengths", "_mask") if return_mask else ("_lengths",)
    return _collate_batch(batch, _Walk(leaf, _key_paths(keys), suffixes), "pad_collate")


def nested_collate(batch: Sequence[Any], /, *, keys: Iterable[Any] | None = None) -> Any:
    """Collate samples like ``default_collate``, nesting the tensors whose sizes differ.

    Instead of padding them, the fields that vary in size become ``torch.nested`` tensors.
    Items ragged only in their first dim (1-D sequences, ``L x D`` features) become a
    jagged-layout nested tensor of shape ``(B, j, *D)``, built from one concatenation and
    the offsets. Items ragged in any other dim (``C x H x W`` images of different sizes)
    become a strided-layout nested tensor, the only layout torch has for several ragged
    dims. Everything else is collated as by ``default_collate``. Nothing is added next to a
    nested field: a nested tensor knows its own lengths. For a padded tensor plus mask use
    ``torch.nested.to_padded_tensor(nt, pad_value)``, which equals ``pad_collate``'s
    right-padded values.

    Args:
        batch: the samples.
        keys: key paths of the fields to nest in every batch, and only those (see
            :func:`pad_collate`); with None, a field is nested when its sizes differ.

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
    return _collate_batch(batch, _Walk(_nest, _key_paths(keys), ()), "nested_collate")


# --- structure walk ----------------------------------------------------------------------


def _collate_batch(batch: Sequence[Any], walk: _Walk, name: str) -> Any:
    if isinstance(batch, (str, bytes, cabc.Mapping, torch.Tensor, np.ndarray)):
        raise TypeError(
            f"{name} expects a list of samples, got one {type(batch).__name__}; wrap a single "
            f"sample as {name}([sample]), and with DataLoader(batch_size=None) pass it lists "
            "of samples (e.g. from fastdata.collate.bucket_by_length)"
        )
    items = list(batch)
    if not items:
        raise ValueError(
            f"{name} got an empty batch; there is nothing to collate. Drop empty batches "
            "before collating (a sampler or bucketing stage should never yield one)"
        )
    for path in sorted(walk.keys or (), key=repr):
        _check_key_path(items[0], path)
    return _collate(items, (), "", walk)


def _check_key_path(sample: Any, path: KeyPath) -> None:
    """Raise unless ``path`` leads to a tensor or array of at least one dim in ``sample``."""
    value, where = sample, ""
    for key in path:
        kind = _kind(value)
        if kind == "mapping" and key in value:
            value, where = value[key], f"{where}[{key!r}]"
        elif kind == "namedtuple" and key in value._fields:
            value, where = getattr(value, key), f"{where}.{key}"
        elif kind == "sequence" and isinstance(key, int) and 0 <= key < len(value):
            value, where = value[key], f"{where}[{key}]"
        else:
            raise ValueError(
                f"keys names {_path_repr(path)}, but batch[0]{where} ({_describe(value)}) has "
                f"no {key!r}; name a field by its key path, e.g. 'tokens', ('text', 'ids'), "
                "0 (a tuple position), or () for samples that are bare tensors"
            )
    if _kind(value) != "tensor" or value.ndim == 0:
        raise ValueError(
            f"keys names {_path_repr(path)}, but batch[0]{where} is {_describe(value)}; only "
            "tensors and numpy arrays of at least one dim can be padded or nested, so remove "
            "it from keys"
        )


def _collate(items: Sequence[Any], path: KeyPath, where: str, walk: _Walk) -> Any:
    elem = items[0]
    kind = _kind(elem)
    if len({type(item) for item in items}) > 1:  # types may differ within a kind (int, bool)
        for i, item in enumerate(items):
            if _kind(item) != kind:
                raise TypeError(
                    f"batch[{i}]{where} is {_describe(item)} but batch[0]{where} is "
                    f"{_describe(elem)}; every sample must hold the same type at the same "
                    "place, so fix the dataset (or its transform) that produced this sample"
                )
    if kind == "tensor":
        return _tensor_field(items, path, where, walk)
    if kind == "number":
        # The same dtypes as default_collate: float -> float64, int -> int64, numpy as is.
        if isinstance(elem, float):
            return torch.tensor(items, dtype=torch.float64)
        if isinstance(elem, np.generic):
            return torch.as_tensor(items)
        return torch.tensor(items)
    if kind == "string":
        return items  # as default_collate: the list or tuple it was given
    if kind == "mapping":
        return _collate_mapping(items, path, where, walk)
    if kind in ("namedtuple", "sequence"):
        return _collate_sequence(items, path, where, walk)
    raise TypeError(
        f"batch[0]{where} is {_describe(elem)}; collate handles tensors, numeric numpy "
        "arrays, numbers, strings, dicts, tuples and lists, so convert it in the dataset"
    )


def _collate_mapping(items: Sequence[Any], path: KeyPath, where: str, walk: _Walk) -> Any:
    elem = items[0]
    for i, item in enumerate(items):
        if item.keys() != elem.keys():
            missing = sorted(elem.keys() - item.keys(), key=repr)
            extra = sorted(item.keys() - elem.keys(), key=repr)
            raise ValueError(
                f"batch[{i}]{where} has keys {sorted(item, key=repr)} but batch[0]{where} has "
                f"{sorted(elem, key=repr)} (missing {missing}, extra {extra}); every sample "
                "must have the same keys"
            )
    for key in elem:
        if _kind(elem[key]) != "tensor" or not (walk.keys is None or walk.pads((*path, key))):
            continue
        for suffix in walk.sibling_suffixes:
            if f"{key}{suffix}" in elem:
                raise ValueError(
                    f"batch[0]{where} already has the key '{key}{suffix}', where pad_collate "
                    f"puts the {suffix[1:]} of batch[*]{where}[{key!r}]; rename that key, or pass "
                    "keys=[...] naming only the fields to pad"
                )
    result: dict[Any, Any] = {}
    for key in elem:
        sub = [item[key] for item in items]
        value = _collate(sub, (*path, key), f"{where}[{key!r}]", walk)
        if isinstance(value, Padded) and _kind(elem[key]) == "tensor":
            result[key] = value.values
            result[f"{key}_lengths"] = value.lengths
            if value.mask is not None:
                result[f"{key}_mask"] = value.mask
        else:
            result[key] = value
    try:  # keep the mapping type, as default_collate does
        if isinstance(elem, cabc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(result)
            return clone
        return type(elem)(result)
    except TypeError:
        return result


def _collate_sequence(items: Sequence[Any], path: KeyPath, where: str, walk: _Walk) -> Any:
    elem = items[0]
    for i, item in enumerate(items):
        if len(item) != len(elem):
            raise ValueError(
                f"batch[{i}]{where} has length {len(item)} but batch[0]{where} has length "
                f"{len(elem)}; lists and tuples are collated position by position, so to pad "
                "a variable-length sequence make it a tensor or numpy array in the dataset"
            )
    named = hasattr(elem, "_fields")
    names = elem._fields if named else range(len(elem))
    values = [
        _collate(
            column,
            (*path, name),
            f"{where}.{name}" if named else f"{where}[{name}]",
            walk,
        )
        for column, name in zip(zip(*items, strict=True), names, strict=True)
    ]
    if named:
        return type(elem)(*values)
    if isinstance(elem, tuple):
        return values  # default_collate turns tuples into lists too
    try:
        if isinstance(elem, cabc.MutableSequence):
            clone = copy.copy(elem)
            clone[:] = values
            return clone
        return type(elem)(values)
    except TypeError:
        return values


def _tensor_field(items: Sequence[Any], path: KeyPath, where: str, walk: _Walk) -> Any:
    tensors = [x if isinstance(x, torch.Tensor) else torch.as_tensor(x) for x in items]
    first = tensors[0]
    try:
        shapes = [t.shape for t in tensors]
        if (
            first.is_nested
            or first.layout != torch.strided
            or len({t.dtype for t in tensors}) > 1
            or len({len(shape) for shape in shapes}) > 1
        ):
            _raise_unlike(tensors, where)
        ragged = len(set(shapes)) > 1
        if walk.pads(path) or (ragged and walk.keys is None):
            return walk.leaf(tensors, shapes, where)
        if ragged:
            i = next(i for i, shape in enumerate(shapes) if shape != first.shape)
            raise ValueError(
                f"batch[{i}]{where} has shape {tuple(shapes[i])} but batch[0]{where} has "
                f"{tuple(first.shape)}, and keys does not name {_path_repr(path)}; add it to "
                "keys to pad it"
            )
        return torch.stack(tensors)
    except RuntimeError:
        # Devices and layouts are checked per item only once torch objects: per item, those
        # checks cost more than the copies of a batch of short sequences.
        _raise_unlike(tensors, where)
        raise


def _raise_unlike(tensors: list[torch.Tensor], where: str) -> None:
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


# --- nesting -----------------------------------------------------------------------------


def _nest(tensors: list[torch.Tensor], shapes: list[torch.Size], where: str) -> torch.Tensor:
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


# --- helpers -----------------------------------------------------------------------------


def _key_paths(keys: Iterable[Any] | None) -> frozenset[KeyPath] | None:
    if keys is None:
        return None
    if isinstance(keys, (str, bytes)):
        raise TypeError(f"keys={keys!r} is a string; pass a list of key paths: keys=[{keys!r}]")
    return frozenset(k if isinstance(k, tuple) else (k,) for k in keys)


def _path_repr(path: KeyPath) -> str:
    """A key path as ``keys`` accepts it: ``'tokens'`` for a one-key path, else the tuple."""
    return repr(path[0]) if len(path) == 1 else repr(path)


def _kind(value: Any) -> str:
    """The collate rule that applies to ``value`` (mirrors default_collate's dispatch)."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, np.ndarray):  # arrays of strings or objects: as default_collate
        return "other" if value.dtype.kind in _NUMPY_STRING_KINDS else "tensor"
    if isinstance(value, (bool, int, float, np.bool_, np.number)):
        return "number"
    if isinstance(value, (str, bytes)):
        return "string"
    if isinstance(value, cabc.Mapping):
        return "mapping"
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return "namedtuple"
    if isinstance(value, cabc.Sequence):
        return "sequence"
    return "other"


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor) and value.is_nested:
        return f"a nested {type(value).__name__} of dtype {value.dtype}"
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"a {type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__} {reprlib.repr(value)}"
