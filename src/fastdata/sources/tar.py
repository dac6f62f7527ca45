"""WebDataset-layout tar shards: an index of samples per shard, and reads of sample ranges.

A sample is a run of adjacent members sharing a key (the member name up to the first dot of
its base name): ``sample-000012.jpg`` + ``sample-000012.cls`` (or ``.json``). Shards are read
sequentially with seeks over the members a piece does not need; nothing is extracted to disk
and member names are never used as paths.
"""

from __future__ import annotations

import json
import posixpath
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata.errors import SourceError

IMAGE_SUFFIXES = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm")
LABEL_SUFFIXES = ("cls", "json")
"""Label members, in order of preference: ``.cls`` (ASCII decimal) or ``.json``."""


@dataclass(frozen=True)
class Member:
    """Where a member's bytes are in its shard."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class TarSample:
    """One sample of a shard: its image member and, if present, its label member."""

    key: str
    image: Member
    label: Member | None


def split_key(name: str) -> tuple[str, str]:
    """``("dir/sample-1", "jpg")`` for ``"dir/sample-1.jpg"`` (WebDataset's grouping rule)."""
    directory, base = posixpath.split(name)
    stem, _, suffix = base.partition(".")
    return posixpath.join(directory, stem), suffix.lower()


def index_shard(
    fs: pafs.FileSystem,
    path: str,
    *,
    image_suffixes: Sequence[str] = IMAGE_SUFFIXES,
    label_suffixes: Sequence[str] = LABEL_SUFFIXES,
) -> list[TarSample]:
    """The samples of one shard, in order, from its member headers (data is seeked over).
    A sample's image and label are its first members with a suffix in ``image_suffixes``
    and ``label_suffixes`` (empty: no labels).

    Raises:
        SourceError: the shard is not a readable tar, or a sample has no image member.
    """
    samples: list[TarSample] = []
    key: str | None = None
    members: dict[str, Member] = {}

    def close() -> None:
        if key is None:
            return
        image = next((members[s] for s in image_suffixes if s in members), None)
        if image is None:
            raise SourceError(
                f"sample {key!r} has no image member (found: {', '.join(sorted(members))}); "
                f"expected one of {', '.join(image_suffixes)}",
                path=path,
                member=next(iter(members.values())).name,
            )
        label = next((members[s] for s in label_suffixes if s in members), None)
        samples.append(TarSample(key, image, label))

    try:
        with fs.open_input_file(path) as raw, tarfile.open(fileobj=raw, mode="r:") as tar:
            for info in tar:
                if not info.isfile():
                    continue
                member_key, suffix = split_key(info.name)
                if member_key != key:
                    close()
                    key, members = member_key, {}
                members[suffix] = Member(info.name, info.offset_data, info.size)
            close()
    except (tarfile.TarError, OSError, pa.ArrowException) as exc:
        raise SourceError(
            f"cannot read the tar shard ({exc}); it is truncated or not a tar file",
            path=path,
        ) from exc
    return samples


def read_samples(
    fs: pafs.FileSystem, path: str, samples: list[TarSample], *, label_field: str = "label"
) -> pa.Table:
    """The image bytes and labels of ``samples`` (consecutive samples of one shard); see
    :func:`parse_label` for the label members."""
    data: list[bytes] = []
    labels: list[int | None] = []
    with fs.open_input_file(path) as f:
        for sample in samples:
            data.append(_read(f, sample.image, path))
            if sample.label is None:
                labels.append(None)
                continue
            text = _read(f, sample.label, path)
            labels.append(parse_label(text, sample.label.name, path, label_field))
    return pa.table({"data": pa.array(data, pa.binary()), "label": pa.array(labels, pa.int64())})


def parse_label(text: bytes, member: str, path: str, label_field: str = "label") -> int:
    """The integer class index a label member holds.

    A ``.cls`` member holds ASCII decimal; a ``.json`` member a bare integer or an object
    whose ``label_field`` is one (WebDataset writes either).

    Raises:
        SourceError: naming the shard and member, when it holds anything else.
    """
    if split_key(member)[1] != "json":
        try:
            return _int64(int(text.strip()), text, member, path)
        except ValueError:
            raise SourceError(
                f"label member holds {text[:40]!r}, not an integer class index",
                path=path,
                member=member,
            ) from None
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"label member is not valid JSON ({exc})", path=path, member=member
        ) from exc
    if isinstance(value, dict):
        value = value.get(label_field)
    if isinstance(value, int) and not isinstance(value, bool):
        return _int64(value, text, member, path)
    raise SourceError(
        f"JSON label member holds {text[:60]!r}: expected an integer, or an object whose "
        f"{label_field!r} is an integer class index (label_field= names another key)",
        path=path,
        member=member,
    )


def _int64(value: int, text: bytes, member: str, path: str) -> int:
    """``value``, which labels become an int64 tensor of; an error naming the member if it
    does not fit."""
    if not -(2**63) <= value < 2**63:
        raise SourceError(
            f"label member holds {text[:40]!r}, too large for an int64 class index",
            path=path,
            member=member,
        )
    return value


def _read(f: Any, member: Member, path: str) -> bytes:
    f.seek(member.offset)
    data = f.read(member.size)
    if len(data) != member.size:
        raise SourceError(
            f"member is cut short ({len(data)} of {member.size} bytes); the shard is truncated",
            path=path,
            member=member.name,
        )
    return data
