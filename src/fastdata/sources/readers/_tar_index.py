"""Indexing a WebDataset tar shard: its samples from its member headers, in one pass that
seeks over the data, and where a truncated shard stops (see :mod:`.tar` for the layout).

At a cut, every sample whose members all lie before it is kept. The sample being read when
the cut came is kept when none of its members is cut short and it has the members the
sample before it has (its image and label members, of the same suffixes): a cut just after a
member cannot tell whether its sample had more members, and the one before shows what a
sample holds. The first sample of a shard, with none before it, needs an image member, the
``extra_suffixes`` and a label member (unless ``label_suffixes`` is empty).
"""

from __future__ import annotations

import lzma
import posixpath
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO

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
_UNREADABLE = (tarfile.TarError, OSError, EOFError, lzma.LZMAError, pa.ArrowException)

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


class _Samples:
    """The samples of a shard, grouped from its members as they come: adjacent members
    sharing a key make a sample, closed when a member of another key comes."""

    def __init__(
        self,
        path: str,
        image_suffixes: Sequence[str],
        label_suffixes: Sequence[str],
        extra_suffixes: Sequence[str],
    ) -> None:
        self.path = path
        self.suffixes = (tuple(image_suffixes), tuple(label_suffixes), tuple(extra_suffixes))
        self.samples: list[TarSample] = []
        self.key: str | None = None
        self.members: dict[str, Member] = {}  # of the open sample, by suffix
        self.links: list[tarfile.TarInfo] = []  # its link members
        self.cut = False  # whether a member of the open sample is cut short

    def add(self, info: tarfile.TarInfo) -> None:
        """Group a file or link member (the caller leaves out the others)."""
        key, suffix = split_key(info.name)
        if key != self.key:
            self.close()
            self.key, self.members, self.links = key, {}, []
        if info.isfile():
            self.members[suffix] = Member(info.name, info.offset_data, info.size)
        else:
            self.links.append(info)

    def close(self) -> None:
        """Record the open sample, whole.

        Raises:
            SourceError: it has no image member or lacks one of the extra suffixes.
        """
        if self.key is None:
            return
        sample = self._sample()
        if sample is None:
            raise self._incomplete()
        self.samples.append(sample)

    def _sample(self) -> TarSample | None:
        """The open sample, or None when it lacks its image or one of the extras."""
        images, labels, extras = self.suffixes
        image = next((self.members[s] for s in images if s in self.members), None)
        if image is None or any(s not in self.members for s in extras):
            return None
        label = next((self.members[s] for s in labels if s in self.members), None)
        return TarSample(self.key or "", image, label, tuple(self.members[s] for s in extras))

    def _incomplete(self) -> SourceError:
        """The error for an open sample without its image or one of the extras, naming its
        link members (which are not followed) if it has any."""
        images, _, extras = self.suffixes
        found = ", ".join(sorted(self.members))
        links = "".join(
            f"; {link.name} is a link to {link.linkname!r}, and a shard's links are not "
            "followed: store the file itself in the shard"
            for link in self.links
        )
        image = next((self.members[s] for s in images if s in self.members), None)
        if image is None:
            return SourceError(
                f"sample {self.key!r} has no image member (found: {found}){links}; expected "
                f"one of {', '.join(images)}",
                path=self.path,
                member=([m.name for m in self.links] + [m.name for m in self.members.values()])[0],
            )
        missing = next(s for s in extras if s not in self.members)
        return SourceError(
            f"sample {self.key!r} has no .{missing} member (found: {found}){links}; every "
            "sample needs the members= asked for",
            path=self.path,
            member=image.name,
        )

    def before_cut(self) -> list[TarSample]:
        """The samples of a shard cut short: those closed, and the open one when it has the
        members of the sample before it (see the module docstring)."""
        sample = None if self.cut or self.key is None else self._sample()
        if sample is None:
            return self.samples
        if self.samples:
            before = self.samples[-1]
            if _suffix(sample.image) != _suffix(before.image) or (
                _suffix(sample.label) != _suffix(before.label)
            ):
                return self.samples
        elif sample.label is None and self.suffixes[1]:
            return self.samples
        return [*self.samples, sample]


def _suffix(member: Member | None) -> str | None:
    return None if member is None else split_key(member.name)[1]


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
    must also have. Directories, and members without a key or a suffix (``README``,
    ``.hidden``), are left out, as WebDataset leaves them out. ``size`` is the shard's size
    in bytes.

    Raises:
        SourceError: the shard is not a readable tar, or a sample has no image member or
            lacks one of ``extra_suffixes``.
    """
    group = _Samples(path, image_suffixes, label_suffixes, extra_suffixes)
    last: str | None = None
    compression = None
    try:
        compression = shard_compression(fs, path)
        with open_shard(fs, path, compression) as raw:
            total = (fs.get_file_info(path).size if size is None else size) or 0
            with tarfile.open(fileobj=raw, mode="r:") as tar:
                for info in tar:
                    last = info.name
                    if not _grouped(info):
                        continue
                    group.add(info)
                    if info.isfile() and not _present(raw, info, None if compression else total):
                        group.cut = True
                        raise tarfile.ReadError("unexpected end of data")
                end = tar.offset
            raw.seek(end)
            tail = raw.read(_END_OF_ARCHIVE)
        if not tail or tail.strip(b"\0"):  # (all zero: cut inside the end marker, nothing lost)
            raise tarfile.ReadError("no end-of-archive marker after the last member")
        group.close()
        return ShardIndex(group.samples, None, compression)
    except _UNREADABLE as exc:
        kind = f"{compression}-compressed tar shard" if compression else "tar shard"
        if last is None and not _cut_short(exc):
            raise SourceError(
                f"cannot read the {kind} ({type(exc).__name__}: {exc}); it is not a tar file "
                f"(WebDataset shards are tar files, plain or compressed whole with gzip, bzip2, "
                "zstd or xz)",
                path=path,
            ) from exc
        kept = group.before_cut()
        if len(kept) > len(group.samples) or group.key is None:  # the open sample kept
            lost = f"any member after {last!r} is lost" if last else "all of it is lost"
        else:
            lost = f"sample {group.key!r} and any after it are lost"
        error = SourceError(
            f"the {kind} is truncated ({exc}) after {len(kept)} complete sample(s): {lost}",
            path=path,
            member=last,
        )
        return ShardIndex(kept, error, compression)


def _grouped(info: tarfile.TarInfo) -> bool:
    """Whether a member belongs to a sample: a file or a link (an error if its sample has
    nothing else) named ``key.suffix``."""
    stem, _, suffix = posixpath.basename(info.name).partition(".")
    return bool(stem and suffix) and (info.isfile() or info.issym() or info.islnk())


def _present(raw: IO[bytes], info: tarfile.TarInfo, total: int | None) -> bool:
    """Whether all of a member's data is in the shard: within its ``total`` bytes (plain),
    or (compressed, ``total`` None) decompressed up to its last byte."""
    end = info.offset_data + info.size
    if total is not None or info.size == 0:
        return total is None or end <= total
    try:
        raw.seek(end - 1)
        return len(raw.read(1)) == 1
    except _UNREADABLE:
        return False


def _cut_short(exc: BaseException) -> bool:
    """Whether an error reading a shard's first header says the shard ends there (an empty
    or cut file, a compressed stream that ends early), rather than that it holds no tar."""
    if isinstance(exc, EOFError) or "Truncated compressed stream" in str(exc):  # lzma, pyarrow
        return True
    return isinstance(exc, tarfile.ReadError) and str(exc) in _CUT_SHORT


_CUT_SHORT = ("empty file", "truncated header", "unexpected end of data")  # tarfile's words
