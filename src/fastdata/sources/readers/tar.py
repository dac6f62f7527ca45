"""TarShards: WebDataset-layout tar shards; a unit is a shard.

A sample is a run of adjacent members sharing a key (the member name up to the first dot of
its base name): ``sample-000012.jpg`` + ``sample-000012.cls`` (or ``.json``). Each shard's
member headers are indexed once, up front; shards are then read sequentially with seeks over
the members a piece does not need; nothing is extracted to disk and member names are never
used as paths.

A shard that ends early is found while indexing: a member whose data is cut short, a header
cut in two, or a shard that stops between members without tar's end-of-archive marker (two
zero blocks), where the samples after the cut are lost without a trace in the file. Under
``on_error="raise"`` each is a :class:`fastdata.SourceError` naming the shard and the last
member read; under ``"skip"`` the shard's samples up to the cut are kept, the last of them
dropped (it may have lost a member), and each truncated shard counted in :attr:`skipped`.
"""

from __future__ import annotations

import json
import logging
import posixpath
import tarfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata.errors import SourceError
from fastdata.sources._files import Listing, digest, paths_digest
from fastdata.sources.readers.files import IMG_EXTENSIONS

__all__ = [
    "IMAGE_SUFFIXES",
    "LABEL_SUFFIXES",
    "TEXT_SUFFIXES",
    "TarSample",
    "TarShards",
    "index_shard",
]

log = logging.getLogger("fastdata")

_END_OF_ARCHIVE = 1024  # two zero blocks
_INDEX_THREADS = 8

IMAGE_SUFFIXES = tuple(ext[1:] for ext in IMG_EXTENSIONS)
"""Image members of a sample, in order of preference (the image folders' endings)."""
LABEL_SUFFIXES = ("cls", "json")
"""Label members, in order of preference: ``.cls`` (ASCII decimal) or ``.json``."""
TEXT_SUFFIXES = ("txt", "text", "caption", "json")
"""Other members read as UTF-8 text (a column of strings); any other suffix is bytes."""


@dataclass(frozen=True)
class Member:
    """Where a member's bytes are in its shard."""

    name: str
    offset: int
    size: int


@dataclass(frozen=True)
class TarSample:
    """One sample of a shard: its image member, its label member if any, and the other
    members asked for (by suffix, in the order asked)."""

    key: str
    image: Member
    label: Member | None
    extras: tuple[Member, ...] = ()


def split_key(name: str) -> tuple[str, str]:
    """``("dir/sample-1", "jpg")`` for ``"dir/sample-1.jpg"`` (WebDataset's grouping rule)."""
    directory, base = posixpath.split(name)
    stem, _, suffix = base.partition(".")
    return posixpath.join(directory, stem), suffix.lower()


@dataclass(frozen=True)
class ShardIndex:
    """The complete samples of a shard, and why it stopped early (None: it did not)."""

    samples: list[TarSample]
    truncated: SourceError | None


def index_shard(
    fs: pafs.FileSystem,
    path: str,
    *,
    size: int | None = None,
    image_suffixes: Sequence[str] = IMAGE_SUFFIXES,
    label_suffixes: Sequence[str] = LABEL_SUFFIXES,
    extra_suffixes: Sequence[str] = (),
) -> ShardIndex:
    """The samples of one shard, in order, from its member headers (data is seeked over).
    A sample's image and label are its first members with a suffix in ``image_suffixes``
    and ``label_suffixes`` (empty: no labels); ``extra_suffixes`` are members every sample
    must also have. ``size`` is the shard's size in bytes.

    Raises:
        SourceError: the shard is not a readable tar, or a sample has no image member or
            lacks one of ``extra_suffixes``.
    """
    samples: list[TarSample] = []
    key: str | None = None
    members: dict[str, Member] = {}
    last: str | None = None

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
        missing = [s for s in extra_suffixes if s not in members]
        if missing:
            raise SourceError(
                f"sample {key!r} has no .{missing[0]} member (found: "
                f"{', '.join(sorted(members))}); every sample needs the members= asked for",
                path=path,
                member=image.name,
            )
        samples.append(TarSample(key, image, label, tuple(members[s] for s in extra_suffixes)))

    try:
        with fs.open_input_file(path) as raw:
            total = raw.size() if size is None else size
            with tarfile.open(fileobj=raw, mode="r:") as tar:
                for info in tar:
                    last = info.name
                    if not info.isfile():
                        continue
                    if info.offset_data + info.size > total:
                        raise tarfile.ReadError("unexpected end of data")
                    member_key, suffix = split_key(info.name)
                    if member_key != key:
                        close()
                        key, members = member_key, {}
                    members[suffix] = Member(info.name, info.offset_data, info.size)
                end = tar.offset
            raw.seek(end)
            tail = raw.read(_END_OF_ARCHIVE)
        if len(tail) < _END_OF_ARCHIVE or any(tail):
            raise tarfile.ReadError("no end-of-archive marker after the last member")
        close()
        return ShardIndex(samples, None)
    except (tarfile.TarError, OSError, pa.ArrowException) as exc:
        if last is None and not isinstance(exc, tarfile.ReadError):
            raise SourceError(
                f"cannot read the tar shard ({exc}); it is not a tar file", path=path
            ) from exc
        error = SourceError(
            f"the tar shard is truncated ({exc}) after {len(samples)} complete sample(s): "
            "the rest of it is lost; rewrite the shard, or pass on_error='skip' to read the "
            "samples before the cut",
            path=path,
            member=last,
        )
        return ShardIndex(samples[:-1], error)


def read_samples(
    fs: pafs.FileSystem,
    path: str,
    samples: list[TarSample],
    *,
    label_field: str = "label",
    extra_suffixes: Sequence[str] = (),
) -> pa.Table:
    """The image bytes and labels of ``samples`` (consecutive samples of one shard), and a
    column per extra member suffix (text for :data:`TEXT_SUFFIXES`, else bytes); see
    :func:`parse_label` for the label members."""
    data: list[bytes] = []
    labels: list[int | None] = []
    extras: list[list[bytes]] = [[] for _ in extra_suffixes]
    with fs.open_input_file(path) as f:
        for sample in samples:
            data.append(_read(f, sample.image, path))
            for column, member in zip(extras, sample.extras, strict=True):
                column.append(_read(f, member, path))
            if sample.label is None:
                labels.append(None)
                continue
            text = _read(f, sample.label, path)
            labels.append(parse_label(text, sample.label.name, path, label_field))
    columns = {"data": pa.array(data, pa.binary()), "label": pa.array(labels, pa.int64())}
    for position, (suffix, values) in enumerate(zip(extra_suffixes, extras, strict=True)):
        members = [sample.extras[position] for sample in samples]
        columns[suffix] = _member_column(suffix, values, members, path)
    return pa.table(columns)


def _member_column(suffix: str, values: list[bytes], members: list[Member], path: str) -> pa.Array:
    """Members' bytes as a column: strings for :data:`TEXT_SUFFIXES`, else binary.

    Raises:
        SourceError: a text member that is not UTF-8, naming it.
    """
    if suffix not in TEXT_SUFFIXES:
        return pa.array(values, pa.binary())
    texts = []
    for value, member in zip(values, members, strict=True):
        try:
            texts.append(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"the member is not UTF-8 text ({exc})", path=path, member=member.name
            ) from None
    return pa.array(texts, pa.string())


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


class TarShards:
    """WebDataset tar shards as a :class:`fastdata.sources.Reader`: columns ``data`` (the
    image member's bytes), ``label`` (when the samples have label members) and one per
    ``extra_suffixes`` member (see :func:`read_samples`).

    Args:
        listing: the shards (:func:`fastdata.sources._files.resolve_files`).
        image_suffixes / label_suffixes: which members are a sample's image and label.
        extra_suffixes: other members every sample has and the reader reads, as columns.
        label_field: the key of a JSON label member's integer label.
        on_error: ``"raise"`` refuses a truncated shard; ``"skip"`` reads what precedes the
            cut and counts the shard in :attr:`skipped` (see the module docstring).
    """

    def __init__(
        self,
        listing: Listing,
        *,
        image_suffixes: Sequence[str] = IMAGE_SUFFIXES,
        label_suffixes: Sequence[str] = LABEL_SUFFIXES,
        label_field: str = "label",
        extra_suffixes: Sequence[str] = (),
        on_error: str = "raise",
    ) -> None:
        self.fs, self.shards, self.sizes = listing
        self.label_field = label_field
        self.extra_suffixes = tuple(extra_suffixes)

        def index(shard: tuple[str, int]) -> ShardIndex:
            return index_shard(
                self.fs,
                shard[0],
                size=shard[1],
                image_suffixes=image_suffixes,
                label_suffixes=label_suffixes,
                extra_suffixes=self.extra_suffixes,
            )

        with ThreadPoolExecutor(_INDEX_THREADS) as pool:
            indexes = list(pool.map(index, zip(self.shards, self.sizes, strict=True)))
        truncated = [i.truncated for i in indexes if i.truncated is not None]
        if truncated and on_error == "raise":
            raise truncated[0]
        for error in truncated:
            log.warning("skipped the rest of a truncated tar shard (on_error='skip'): %s", error)
        self.skipped = len(truncated)
        self.index = [i.samples for i in indexes]
        self.labelled = self._labelled()

    def _labelled(self) -> bool:
        with_labels = {s.label is not None for samples in self.index for s in samples}
        if len(with_labels) > 1:
            shard, sample = next(
                (shard, s)
                for shard, samples in zip(self.shards, self.index, strict=True)
                for s in samples
                if s.label is None
            )
            raise SourceError(
                "some samples have a label member and this one has none; label all or none",
                path=shard,
                member=sample.image.name,
            )
        return with_labels == {True}

    def unit_rows(self) -> list[int]:
        return [len(samples) for samples in self.index]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        samples = self.index[unit][start:stop]
        table = read_samples(
            self.fs,
            self.shards[unit],
            samples,
            label_field=self.label_field,
            extra_suffixes=self.extra_suffixes,
        )
        return table if self.labelled else table.drop_columns(["label"])

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": self.shards[unit], "member": self.index[unit][row].image.name}

    def identity(self) -> dict[str, Any]:
        members = [
            [s.image.name, s.image.size, *[[m.name, m.size] for m in s.extras]]
            for samples in self.index
            for s in samples
        ]
        return {
            "shards": len(self.shards),
            "paths": paths_digest(self.shards),
            "samples": sum(self.unit_rows()),
            "content": digest([self.sizes, members]),
        }

    def __repr__(self) -> str:
        return f"TarShards({len(self.shards)} shards, {sum(self.unit_rows())} samples)"
