"""The samples a conversion writes: :class:`Sample`, and the listings that make them from an
ImageFolder tree (:func:`folder_samples`) or a list file (:func:`list_samples`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Sample", "folder_samples", "list_samples"]


@dataclass(frozen=True)
class Sample:
    """One sample to write: an encoded image and, optionally, its label, key and other
    fields (a caption, tokens, JSON metadata: the multimodal samples that
    ``ImageStream.from_tar(members=...)`` and ``from_parquet(columns=...)`` read back).

    Args:
        image: the path of an image file (on ``source_filesystem`` of :func:`write_shards`,
            local by default), or the encoded bytes themselves.
        label: an integer label, or None (then every sample must have none).
        key: the sample's name in the shard (the tar member stem, the Parquet ``key``
            column); default: its index, zero-padded. Unique, without ``.``.
        size: the image file's size in bytes, when already known (saves a ``stat``).
        extras: other fields by name, the same names for every sample: in a tar shard the
            member ``{key}.{name}`` (``"txt"``, ``"json"``...: text as UTF-8, bytes as they
            are, anything else as JSON text), in Parquet the column ``name`` (text, bytes,
            numbers and lists of numbers in Arrow's types, a dict as JSON text).
    """

    image: str | bytes
    label: int | None = None
    key: str | None = None
    size: int | None = None
    extras: Mapping[str, Any] | None = None


def folder_samples(
    root: str | os.PathLike[str], /, *, filesystem: Any = None, **options: Any
) -> tuple[list[Sample], list[str]]:
    """The samples of an ImageFolder tree ``root/<class>/**/<image>`` and its class names,
    found exactly as :meth:`fastdata.ImageStream.from_folder` (and torchvision) finds them;
    ``options`` are that method's (``class_to_idx``, ``extensions``, ``is_valid_file``,
    ``allow_empty``)."""
    from fastdata.sources.images import ImageStream
    from fastdata.sources.readers.files import ImageFiles

    stream = ImageStream.from_folder(root, filesystem=filesystem, **options)
    reader = stream.reader
    assert isinstance(reader, ImageFiles) and reader.labels is not None
    samples = [
        Sample(path, label, size=size)
        for path, label, size in zip(reader.paths, reader.labels, reader.sizes, strict=True)
    ]
    return samples, list(stream.classes or [])


def list_samples(list_file: str | os.PathLike[str], /) -> list[Sample]:
    """The samples of a text file with one image per line: ``path`` or ``path<TAB>label``
    (relative paths are relative to the list's folder; blank lines are skipped).

    Raises:
        ValueError: a line whose label is not an integer.
    """
    base = os.path.dirname(os.path.abspath(list_file))
    samples = []
    with open(list_file, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            path, tab, label = line.rstrip("\r\n").partition("\t")
            if not path.strip():
                continue
            try:
                value = int(label) if tab else None
            except ValueError:
                raise ValueError(
                    f"{list_file}, line {number}: label {label!r} is not an integer "
                    "(expected 'path' or 'path<TAB>label')"
                ) from None
            samples.append(Sample(os.path.normpath(os.path.join(base, path)), value))
    return samples
