"""What an image stream's items look like: an image (or a batch of them) with its label and
the other columns of its sample.

Without other columns an item is ``image`` or ``(image, label)`` (a batch: ``(images,
labels)``, labels an int64 tensor); with them (``ImageStream.from_parquet(columns=...)``,
``from_tar(members=...)``) or with ``origin=True`` it is a dict ``{"image", "label",
*columns, "origin"}`` whose other values are those :class:`~fastdata.sources.ArrowDecoder`
gives for the columns (tensors, :class:`fastdata.Ragged`, lists of str), JSON text parsed
where asked.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from fastdata.ragged import Ragged
from fastdata.sources.base import INDEX, ORIGIN

__all__ = ["ItemColumns", "chw", "encoded_rows", "image_item", "stack"]


def encoded_rows(table: pa.Table, column: str) -> list[dict[str, Any]]:
    """Each row's ``{column: encoded image, INDEX: index}``. A binary column's images are
    memoryviews of the table's buffers (no copy per image: a decode reads them in place); a
    struct's (Hugging Face ``datasets.Image``) are Python values; a null is None."""
    images = table.column(column)
    if not (pa.types.is_binary(images.type) or pa.types.is_large_binary(images.type)):
        return table.select([column, INDEX]).to_pylist()
    values = [view for chunk in images.chunks for view in _views(chunk)]
    indices = table.column(INDEX).to_pylist()
    return [{column: v, INDEX: i} for v, i in zip(values, indices, strict=True)]


def _views(chunk: pa.Array) -> list[memoryview | None]:
    """The values of a (large) binary array as memoryviews of its data buffer."""
    _, offsets_buffer, data = chunk.buffers()
    kind = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    offsets = np.frombuffer(offsets_buffer, kind)[chunk.offset : chunk.offset + len(chunk) + 1]
    whole = memoryview(data if data is not None else b"")
    bounds = offsets.tolist()
    views: list[memoryview | None] = [whole[a:b] for a, b in itertools.pairwise(bounds)]
    if chunk.null_count:
        valid = chunk.is_valid().to_pylist()
        views = [v if ok else None for v, ok in zip(views, valid, strict=True)]
    return views


@dataclass(frozen=True)
class ItemColumns:
    """The columns of an item besides the image."""

    label: str | None
    extras: tuple[str, ...] = ()
    json: frozenset[str] = frozenset()
    origin: bool = False  # the item says where its rows came from (ORIGIN)

    @property
    def others(self) -> list[str]:
        """The label column (if any), then the extra ones."""
        return ([] if self.label is None else [self.label]) + list(self.extras)


def image_item(images: Any, others: Any, columns: ItemColumns) -> Any:
    """An item of ``images`` (one, or a batch) and the other columns' values: a batch's
    ``{column: values}``, or one row's ``{column: value}``."""
    label = None if columns.label is None else others[columns.label]
    if isinstance(label, list | torch.Tensor):  # a batch's labels, as int64 always
        label = torch.as_tensor(label, dtype=torch.int64)
    elif label is not None:  # a row's, a Python int (not a numpy scalar)
        label = int(label)
    if not columns.extras and not columns.origin:
        return images if label is None else (images, label)
    item = {"image": images} if label is None else {"image": images, "label": label}
    for column in columns.extras:
        value = others[column]
        if column in columns.json:  # a batch's texts come as a Ragged of UTF-8
            texts = value.tolist() if isinstance(value, Ragged) else value
            value = [_json(v) for v in texts] if isinstance(texts, list) else _json(texts)
        item[column] = value
    if columns.origin:
        item[ORIGIN] = others[ORIGIN]
    return item


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def chw(image: np.ndarray) -> torch.Tensor:
    """A ``(C, H, W)`` view of a decoded HWC (or HW) array."""
    return torch.from_numpy(image[:, :, None] if image.ndim == 2 else image).permute(2, 0, 1)


def stack(images: list[torch.Tensor]) -> torch.Tensor:
    """Same-size images as one ``(N, C, H, W)`` batch, stacked as NHWC (one contiguous copy)
    and returned channels-last, like the images."""
    return torch.stack([img.permute(1, 2, 0) for img in images]).permute(0, 3, 1, 2)
