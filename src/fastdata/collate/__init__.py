"""Collate functions for variable-size data: padding with lengths and masks, nested tensors.

``torch.utils.data.default_collate`` stacks, so it fails as soon as two samples differ in
size. The functions here take either of the two forms variable-size data comes in:

* a **list of samples** (what a map-style DataLoader fetches): the functions walk the same
  nested structures as ``default_collate`` (dicts, namedtuples, tuples, lists of tensors /
  numpy arrays / numbers / strings) and agree with it on everything except tensors and
  arrays of at least one dim, which they pad or nest;
* an **already batched** item: a :class:`~fastdata.Ragged` column, or a dict (or tuple) of
  columns as :class:`fastdata.ParquetStream` yields with ``batch_size=N``: its numeric
  Ragged columns are padded or nested straight from values + offsets (no tensor per row),
  everything else is already a batch and passes through.

What is padded or nested is decided by the field's *type*, never by the sizes in one batch,
so a field is padded (nested) in every batch of an epoch, a batch of one and a batch of
equal lengths included; ``keys=`` narrows it to the named fields.

* :func:`pad_collate` pads to the batch maximum (one allocation, then one scatter) and
  returns lengths and a boolean mask of the valid positions;
* :func:`nested_collate` makes ``torch.nested`` tensors (no padding at all).

:func:`bucket_by_length` (batches of similar length, so padding wastes little) and
:func:`padding_stats` (how much a batching wastes) live in ``fastdata.collate._bucket``.
"""

from __future__ import annotations

from fastdata._padding import Padded
from fastdata.collate._bucket import PaddingStats, bucket_by_length, padding_stats
from fastdata.collate._collate import nested_collate, pad_collate
from fastdata.ragged import Ragged

__all__ = [
    "Padded",
    "PaddingStats",
    "Ragged",
    "bucket_by_length",
    "nested_collate",
    "pad_collate",
    "padding_stats",
]
