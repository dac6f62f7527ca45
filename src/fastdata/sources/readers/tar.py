"""TarShards: WebDataset-layout tar shards; a unit is a shard.

A sample is a run of adjacent members sharing a key (the member name up to the first dot of
its base name): ``sample-000012.jpg`` + ``sample-000012.cls`` (or ``.json``). Each shard's
member headers are indexed once, up front; shards are then read sequentially with seeks over
the members a piece does not need; nothing is extracted to disk and member names are never
used as paths.

A shard compressed whole (``.tar.gz`` / ``.tgz``, as WebDataset writes and reads them, and
``.tar.bz2``, ``.tar.zst``, ``.tar.xz``; recognised by its first bytes, whatever its name) is
read through a decompressor (:mod:`._compressed`): indexing decompresses it once, and reading
seeks forward by decompressing, so each reader keeps the decompressor of the shard it reads
open between pieces; a compressed shard read out of order is decompressed again from its
start. Images are compressed already: compressing a shard saves little and costs the
decompression on every read.

A shard that ends early is found while indexing: a member whose data is cut short, a header
cut in two, a compressed stream that ends before its end marker, or a shard that stops between
members without tar's end-of-archive marker (two zero blocks), where the samples after the cut
are lost without a trace in the file. Under ``on_error="raise"`` each is a
:class:`fastdata.SourceError` naming the shard and the last member read; under ``"skip"`` the
shard's complete samples before the cut are kept (see :mod:`._tar_index` for the sample the
cut came in) and each truncated shard is counted in :attr:`skipped`. A file that is no tar
shard at all (its first block is no tar header) is an error under either policy: skipping it
would leave its samples out without a trace. A shard cut short, changed or removed after it
was indexed is found when read: under ``"skip"`` its samples from there on come as null
images, which the image decoder counts and leaves out, as it does image files that went away.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import lzma
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, Any

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._validate import check_choice
from fastdata.errors import SourceError
from fastdata.sources._files import Listing, paths_digest
from fastdata.sources.filesystem import digest
from fastdata.sources.readers._compressed import Streams
from fastdata.sources.readers._tar_index import (
    IMAGE_SUFFIXES,
    LABEL_SUFFIXES,
    Member,
    ShardIndex,
    TarSample,
    index_shard,
)
from fastdata.sources.readers._tar_values import TEXT_SUFFIXES, member_column, parse_label

__all__ = [
    "IMAGE_SUFFIXES",
    "LABEL_SUFFIXES",
    "SHARD_SUFFIXES",
    "TEXT_SUFFIXES",
    "TarSample",
    "TarShards",
    "index_shard",
]

log = logging.getLogger("fastdata")

_INDEX_THREADS = 8

SHARD_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.zst", ".tar.xz")
"""The names a directory or glob of shards is scanned for."""


def read_samples(
    fs: pafs.FileSystem,
    path: str,
    samples: list[TarSample],
    *,
    label_field: str = "label",
    extra_suffixes: Sequence[str] = (),
    file: IO[bytes] | None = None,
) -> pa.Table:
    """The image bytes and labels of ``samples`` (consecutive samples of one shard), and a
    column per extra member suffix (text for :data:`TEXT_SUFFIXES`, else bytes); see
    :func:`parse_label` for the label members. Members are read in the order they lie in
    the shard, from ``file`` when given (a compressed shard's decompressor, which seeks
    forward cheaply only), else from the shard opened here."""
    data: list[bytes] = []
    labels: list[int | None] = []
    extras: list[list[bytes]] = [[] for _ in extra_suffixes]
    opened = file is not None or not samples  # (no samples: no file is opened)
    with contextlib.nullcontext(file) if opened else fs.open_input_file(path) as f:
        for sample in samples:
            members = [sample.image, *sample.extras] + ([sample.label] if sample.label else [])
            read = {m.offset: _read(f, m) for m in sorted(members, key=_offset)}
            data.append(read[sample.image.offset])
            for column, member in zip(extras, sample.extras, strict=True):
                column.append(read[member.offset])
            if sample.label is None:
                labels.append(None)
                continue
            text = read[sample.label.offset]
            labels.append(parse_label(text, sample.label.name, path, label_field))
    columns = {"data": pa.array(data, pa.binary()), "label": pa.array(labels, pa.int64())}
    for position, (suffix, values) in enumerate(zip(extra_suffixes, extras, strict=True)):
        names = [sample.extras[position].name for sample in samples]
        columns[suffix] = member_column(suffix, values, names, path)
    return pa.table(columns)


def _offset(member: Member) -> int:
    return member.offset


def _read(f: Any, member: Member) -> bytes:
    if f.tell() != member.offset:
        f.seek(member.offset)
    data = f.read(member.size)
    if len(data) != member.size:
        raise _CutShortError(member.name, len(data), member.size)
    return data


class _CutShortError(EOFError):
    """A member whose bytes end early: its shard was cut short since it was indexed."""

    def __init__(self, member: str, read: int, size: int) -> None:
        super().__init__(f"member {member} is cut short: {read} of {size} bytes")
        self.member = member


def _why(exc: BaseException) -> str:
    """What went wrong reading a shard, for a message."""
    return str(exc) if isinstance(exc, _CutShortError) else f"{type(exc).__name__}: {exc}"


_CHANGED = (OSError, EOFError, lzma.LZMAError, pa.ArrowException)
"""What reading a shard that was cut, changed or removed since it was indexed raises."""


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
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self._cut: set[str] = set()  # shards found cut short since indexed (logged)

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
        self.compressions = [i.compression for i in indexes]
        self._streams = Streams()
        truncated = [i.truncated for i in indexes if i.truncated is not None]
        if truncated and self.on_error == "raise":
            first = truncated[0]
            raise SourceError(
                f"{first.reason}; rewrite the shard, or pass on_error='skip' to read the "
                "samples before the cut",
                path=first.path,
                member=first.member,
            )
        if truncated and not any(i.samples for i in indexes):  # skipping would leave nothing
            raise SourceError(
                f"every tar shard ends before a complete sample ({len(truncated)} truncated, "
                f"the first: {truncated[0].reason}); on_error='skip' would leave no sample",
                path=truncated[0].path,
                member=truncated[0].member,
            )
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
        try:
            table = self._read(unit, samples)
        except _CHANGED as exc:
            if self.on_error == "raise":
                raise SourceError(
                    f"cannot read the tar shard ({_why(exc)}); it was cut "
                    "short, changed or went away since it was indexed: build the stream "
                    "again once it is whole, or pass on_error='skip' to skip its samples "
                    "from there on",
                    path=self.shards[unit],
                    member=getattr(exc, "member", samples[0].image.name if samples else None),
                ) from exc
            table = self._before_cut(unit, samples)
        return table if self.labelled else table.drop_columns(["label"])

    def _before_cut(self, unit: int, samples: list[TarSample]) -> pa.Table:
        """``samples`` of a shard that cannot be read whole any more (``on_error="skip"``):
        those before the first one that cannot be read, then null images (which the
        image decoder counts in ``ImageStream.skipped`` and leaves out); logged once."""
        tables = []
        for sample in samples:
            try:
                tables.append(self._read(unit, [sample]))
            except _CHANGED as exc:
                if self.shards[unit] not in self._cut:
                    self._cut.add(self.shards[unit])
                    log.warning(
                        "a tar shard was cut short, changed or went away since it was indexed "
                        "(%s): its samples from %s on are skipped, each counted in "
                        "ImageStream.skipped (on_error='skip') [file=%s]",
                        _why(exc),
                        sample.image.name,
                        self.shards[unit],
                    )
                break
        empty = self._read(unit, [])  # the columns' types
        lost = len(samples) - len(tables)
        nulls = pa.table({f.name: pa.nulls(lost, f.type) for f in empty.schema})
        return pa.concat_tables([empty, *tables, nulls])

    def _read(self, unit: int, samples: list[TarSample]) -> pa.Table:
        """:func:`read_samples` of a shard, through the reader's open decompressor of a
        compressed one (kept open for the next piece when all went well)."""
        path, compression = self.shards[unit], self.compressions[unit]
        read = functools.partial(
            read_samples,
            self.fs,
            path,
            samples,
            label_field=self.label_field,
            extra_suffixes=self.extra_suffixes,
        )
        if compression is None or not samples:
            return read()
        head = samples[0]
        first = min(m.offset for m in (head.image, head.label, *head.extras) if m is not None)
        stream = self._streams.take(self.fs, path, compression, first)
        try:
            table = read(file=stream)
        except BaseException:
            stream.close()
            raise
        self._streams.give(path, stream)
        return table

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

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_streams": None}  # decompressors stay in their process

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._streams = Streams()

    def __repr__(self) -> str:
        return f"TarShards({len(self.shards)} shards, {sum(self.unit_rows())} samples)"
