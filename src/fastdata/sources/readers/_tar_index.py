"""Indexing a WebDataset tar shard: its samples from its member headers, in one pass that
seeks over the data, and where a truncated shard stops (see :mod:`.tar` for the layout)."""

from __future__ import annotations

import lzma
import posixpath
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata.errors import SourceError
from fastdata.sources.readers._compressed import open_shard, shard_compression
from fastdata.sources.readers.files import IMG_EXTENSIONS

__all__ = [
    "IMAGE_SUFFIXES",
    "LABEL_SUFFIXES",
    "Member",
    "ShardIndex",
    "TarSample",
    "index_shard",
    "split_key",
]

_END_OF_ARCHIVE = 1024  # two zero blocks

IMAGE_SUFFIXES = tuple(ext[1:] for ext in IMG_EXTENSIONS)
"""Image members of a sample, in order of preference (the image folders' endings)."""
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
    compression: str | None = None  # the whole shard's (see _compression)


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

    compression = None
    try:
        compression = shard_compression(fs, path)
        with open_shard(fs, path, compression) as raw:
            total = (fs.get_file_info(path).size if size is None else size) or 0
            with tarfile.open(fileobj=raw, mode="r:") as tar:
                for info in tar:
                    last = info.name
                    if not info.isfile():
                        continue
                    if compression is None and info.offset_data + info.size > total:
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
        return ShardIndex(samples, None, compression)
    except (tarfile.TarError, OSError, EOFError, lzma.LZMAError, pa.ArrowException) as exc:
        kind = f"{compression}-compressed tar shard" if compression else "tar shard"
        if last is None and not _cut_short(exc):
            raise SourceError(
                f"cannot read the {kind} ({type(exc).__name__}: {exc}); it is not a tar file "
                f"(WebDataset shards are tar files, plain or compressed whole with gzip, bzip2, "
                "zstd or xz)",
                path=path,
            ) from exc
        error = SourceError(
            f"the {kind} is truncated ({exc}) after {len(samples)} complete sample(s): "
            "the rest of it is lost; rewrite the shard, or pass on_error='skip' to read the "
            "samples before the cut",
            path=path,
            member=last,
        )
        return ShardIndex(samples[:-1], error, compression)


def _cut_short(exc: BaseException) -> bool:
    """Whether an error reading a shard's first header says the shard ends there (an empty
    or cut file, a compressed stream that ends early), rather than that it holds no tar."""
    if isinstance(exc, EOFError) or "Truncated compressed stream" in str(exc):  # lzma, pyarrow
        return True
    return isinstance(exc, tarfile.ReadError) and str(exc) in _CUT_SHORT


_CUT_SHORT = ("empty file", "truncated header", "unexpected end of data")  # tarfile's words
