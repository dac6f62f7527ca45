"""How :func:`fastdata.pad_collate` and :func:`fastdata.nested_collate` walk a batch.

Both take a list of samples (walked like ``default_collate``: dicts, namedtuples, tuples,
lists, tensors, numpy arrays, numbers, strings) or one already batched item (a Ragged, or a
dict / tuple of columns holding one). The walk finds the fields to pad or nest, by type or by
``keys``, hands them to the caller's leaf functions (:class:`Walk`), collates the rest, and
puts lengths and masks next to padded fields. The public functions live in
:mod:`fastdata.collate`.

This is not :func:`fastdata._tree.map_tensors`, the walk that moves a batch to a device, and
cannot be: that one maps each tensor of one structure to one tensor in place. Collate zips the
same field of many samples into one value, checks the samples agree (keys, lengths, types,
shapes) and says which ``batch[i]`` differs, turns numbers into tensors, tuples into lists
(as ``default_collate`` does), pads whole Ragged columns rather than their tensors, and adds
sibling ``_lengths`` / ``_mask`` keys that the samples did not have.
"""

from __future__ import annotations

import collections.abc as cabc
import copy
import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from fastdata._padding import Padded
from fastdata.collate._mismatch import null_hint, raise_unlike
from fastdata.ragged import Ragged

KeyPath = tuple[Any, ...]
"""Where a field sits in a sample: mapping keys, namedtuple field names, sequence indices."""

_NUMPY_STRING_KINDS = frozenset("SUO")  # bytes, str, object: default_collate refuses them


@dataclass(frozen=True)
class Walk:
    """What one collate call does with tensors, and which of them it must pad / nest."""

    leaf: Callable[[list[torch.Tensor], list[torch.Size], str], Any]
    ragged_leaf: Callable[[Ragged, str], Any]
    keys: frozenset[KeyPath] | None
    sibling_suffixes: tuple[str, ...]
    name: str

    def pads(self, path: KeyPath) -> bool:
        """Whether the field at ``path`` is named in ``keys``."""
        return self.keys is not None and path in self.keys


# --- the two forms -----------------------------------------------------------------------


def collate_batch(batch: Any, walk: Walk) -> Any:
    if _is_batched(batch):
        return _collate_batched(batch, walk)
    name = walk.name
    if isinstance(batch, (str, bytes, torch.Tensor, np.ndarray)):
        raise TypeError(
            f"{name} expects a list of samples or one batch holding Ragged columns, got one "
            f"{type(batch).__name__}; wrap a single sample as {name}([sample])"
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


def _is_batched(batch: Any) -> bool:
    """A Ragged, a mapping, or a tuple holding a Ragged: one item that is a whole batch."""
    if isinstance(batch, (Ragged, cabc.Mapping)):
        return True
    return isinstance(batch, tuple) and any(isinstance(x, Ragged) for x in batch)


def _collate_batched(batch: Any, walk: Walk) -> Any:
    for path in sorted(walk.keys or (), key=repr):
        _check_batched_key(batch, path)
    if walk.keys is None and not _holds_ragged(batch):
        raise TypeError(
            f"{walk.name} got one {type(batch).__name__} holding no Ragged column: a single "
            f"sample, or a batch with nothing to pad. Collate a list of samples "
            f"({walk.name}([sample, ...]) or DataLoader(batch_size=N, collate_fn={walk.name})), "
            f"or pass a batch whose variable-length columns are fastdata.Ragged "
            f"(ParquetStream(batch_size=N) yields them)"
        )
    return _batched(batch, (), "", walk)


def _holds_ragged(value: Any) -> bool:
    if isinstance(value, Ragged):
        return True
    if isinstance(value, cabc.Mapping):
        return any(_holds_ragged(v) for v in value.values())
    return isinstance(value, tuple) and any(_holds_ragged(v) for v in value)


def _batched(value: Any, path: KeyPath, where: str, walk: Walk) -> Any:
    """``value``, part of an already batched item, with its Ragged columns padded / nested."""
    if isinstance(value, Ragged):
        if walk.pads(path) or (walk.keys is None and value.kind == "list"):
            return walk.ragged_leaf(value, where)
        return value
    if isinstance(value, cabc.Mapping):
        collated = {k: _batched(v, (*path, k), f"{where}[{k!r}]", walk) for k, v in value.items()}
        return _assemble(value, collated, where, walk)
    if isinstance(value, tuple):
        named = hasattr(value, "_fields")
        names = value._fields if named else range(len(value))  # type: ignore[attr-defined]
        values = [
            _batched(v, (*path, n), f"{where}.{n}" if named else f"{where}[{n}]", walk)
            for v, n in zip(value, names, strict=True)
        ]
        return type(value)(*values) if named else tuple(values)
    return value  # a tensor, list or other column: already a batch


def _check_batched_key(batch: Any, path: KeyPath) -> None:
    """Raise unless ``path`` leads to a Ragged in the batched item ``batch``."""
    value, where = batch, ""
    for key in path:
        if isinstance(value, cabc.Mapping) and key in value:
            value, where = value[key], f"{where}[{key!r}]"
        elif isinstance(value, tuple) and hasattr(value, "_fields") and key in value._fields:
            value, where = getattr(value, key), f"{where}.{key}"
        elif isinstance(value, tuple) and isinstance(key, int) and 0 <= key < len(value):
            value, where = value[key], f"{where}[{key}]"
        else:
            raise ValueError(
                f"keys names {_path_repr(path)}, but batch{where} ({_describe(value)}) has no "
                f"{key!r}; name a Ragged column by its key path, e.g. 'tokens'"
            )
    if not isinstance(value, Ragged):
        raise ValueError(
            f"keys names {_path_repr(path)}, but batch{where} is {_describe(value)}, not a "
            "Ragged: in an already batched item only Ragged columns are padded or nested "
            "(tensors there are whole batches already), so remove it from keys"
        )


def _assemble(elem: cabc.Mapping, collated: dict[Any, Any], where: str, walk: Walk) -> Any:
    """The collated mapping, with each padded field's lengths and mask as sibling keys,
    keeping the mapping type of ``elem`` as default_collate does."""
    result: dict[Any, Any] = {}
    for key, value in collated.items():
        if not (
            isinstance(value, Padded) and isinstance(elem[key], (torch.Tensor, np.ndarray, Ragged))
        ):
            result[key] = value
            continue
        for suffix in walk.sibling_suffixes:
            if f"{key}{suffix}" in elem:
                raise ValueError(
                    f"batch{where} already has the key '{key}{suffix}', where {walk.name} puts "
                    f"the {suffix[1:]} of {key!r}; rename that key, or pass "
                    "keys=[...] naming only the fields to pad"
                )
        result[key] = value.values
        result[f"{key}_lengths"] = value.lengths
        if value.mask is not None:
            result[f"{key}_mask"] = value.mask
    try:
        if isinstance(elem, cabc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(result)
            return clone
        return type(elem)(result)  # type: ignore[call-arg]
    except TypeError:
        return result


# --- a list of samples -------------------------------------------------------------------


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


def _collate(items: Sequence[Any], path: KeyPath, where: str, walk: Walk) -> Any:
    elem = items[0]
    kind = _kind(elem)
    if len({type(item) for item in items}) > 1:  # types may differ within a kind (int, bool)
        kinds = {"none" if item is None else _kind(item) for item in items}
        if kinds == {"string", "none"}:  # an optional text field: the list, None kept
            return items  # (default_collate: when batch[0] is a string; here wherever)
        for i, item in enumerate(items):
            if _kind(item) != kind:
                fix = "Fix the dataset (or its transform) that produced this sample"
                if item is None or elem is None:
                    fix = null_hint(path, elem if item is None else item)
                raise TypeError(
                    f"batch[{i}]{where} is {_describe(item)} but batch[0]{where} is "
                    f"{_describe(elem)}; every sample must hold the same type at the same "
                    f"place. {fix}"
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
    if kind == "ragged":
        raise TypeError(
            f"batch[0]{where} is a Ragged, a column of a whole batch; pass that batch itself "
            f"({walk.name}(batch)), not a list of batches"
        )
    if elem is None:  # in every sample: of which type, this batch cannot tell
        raise TypeError(
            f"batch[*]{where} is None in every sample of this batch (an optional field none "
            "of them holds): collate cannot tell its type from this batch, so it refuses it "
            f"rather than guess a list, a tensor or a number. {null_hint(path, None)}"
        )
    raise TypeError(
        f"batch[0]{where} is {_describe(elem)}; collate handles tensors, numeric numpy "
        "arrays, numbers, strings, dicts, tuples and lists, so convert it in the dataset"
    )


def _collate_mapping(items: Sequence[Any], path: KeyPath, where: str, walk: Walk) -> Any:
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
    collated = {
        key: _collate([item[key] for item in items], (*path, key), f"{where}[{key!r}]", walk)
        for key in elem
    }
    return _assemble(elem, collated, f"[0]{where}", walk)


def _collate_sequence(items: Sequence[Any], path: KeyPath, where: str, walk: Walk) -> Any:
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


def _tensor_field(items: Sequence[Any], path: KeyPath, where: str, walk: Walk) -> Any:
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
            raise_unlike(tensors, where)
        # By type, not by this batch's sizes: a batch of one, or of equal lengths, is
        # padded / nested like every other batch.
        if walk.pads(path) or (walk.keys is None and first.ndim > 0):
            return walk.leaf(tensors, shapes, where)
        if len(set(shapes)) > 1:
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
        raise_unlike(tensors, where)
        raise


# --- helpers -----------------------------------------------------------------------------


def _path_repr(path: KeyPath) -> str:
    """A key path as ``keys`` accepts it: ``'tokens'`` for a one-key path, else the tuple."""
    return repr(path[0]) if len(path) == 1 else repr(path)


def _kind(value: Any) -> str:
    """The collate rule that applies to ``value`` (mirrors default_collate's dispatch)."""
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, Ragged):
        return "ragged"
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
    if isinstance(value, Ragged):
        return f"a Ragged of {len(value)} rows"
    if isinstance(value, torch.Tensor) and value.is_nested:
        return f"a nested {type(value).__name__} of dtype {value.dtype}"
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"a {type(value).__name__} of shape {tuple(value.shape)} and dtype {value.dtype}"
    return f"a {type(value).__name__} {reprlib.repr(value)}"
