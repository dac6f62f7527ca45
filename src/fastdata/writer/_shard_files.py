"""Writing one shard of :func:`fastdata.writer.write_shards`: read its images, check each
with the decode check the streams use (:func:`fastdata.decode.verify_image`), write the tar or
Parquet file to a temporary name, then publish it (rename, or upload) whole. This is what each
worker process or Ray task runs; everything here pickles."""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from hashlib import sha1
from typing import IO, Any, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from fastdata.decode import DEFAULT_MAX_PIXELS, verify_image
from fastdata.errors import DecodeError, SourceError
from fastdata.sources.filesystem import unlink
from fastdata.writer._destination import BadImage, Destination
from fastdata.writer._samples import SKIP_HINT

__all__ = [
    "BadImage",
    "Item",
    "ShardTask",
    "column_value",
    "member",
    "write_shard",
]

_READ_THREADS = 8  # images read at once while writing a shard (hides a remote's latency)
_READ_BATCH = 64  # images read ahead of the writer (bounds the memory of a shard)


class Item(NamedTuple):
    """A sample as the shards hold it: key, image (path or bytes), size, label, suffix, and
    its other fields (name, value), in the writer's order; ``bad``: why planning found it
    no image to write (``on_error="skip"``: its shard leaves it out, listing it)."""

    key: str
    image: str | bytes
    size: int
    label: int | None
    suffix: str
    extras: tuple[tuple[str, Any], ...] = ()
    bad: str = ""

    def plan(self) -> list[Any]:
        """What decides the sample's place and bytes in the shards: with its path (or its
        bytes' hash), so that other images of the same sizes make another plan."""
        image = self.image if isinstance(self.image, str) else sha1(self.image).hexdigest()
        extras = [
            [name, type(value).__name__, sha1(member(value)).hexdigest()]
            for name, value in self.extras
        ]  # the type too: "1" and 1 are the same member but other Parquet columns
        bad = [self.bad] if self.bad else []  # (a good sample's plan is as before)
        return [self.key, self.size, self.label, self.suffix, image, *extras, *bad]


def member(value: Any) -> bytes:
    """An extra field as a tar member's bytes: text as UTF-8, bytes as they are, anything
    else as JSON text (numbers, lists such as tokens, dicts)."""
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    return _json(value).encode()


def column_value(value: Any) -> Any:
    """An extra field as a Parquet value: a dict as JSON text, anything else as it is (text,
    bytes, numbers, lists of numbers: Arrow's own types)."""
    return _json(value) if isinstance(value, dict) else value


def _json(value: Any) -> str:
    """Compact JSON with sorted keys: the same value always gives the same bytes."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class ShardTask:
    """One shard to write: its name, samples and (Parquet) row groups, and what to do with
    an image the decode check refuses."""

    name: str
    items: list[Item]
    format: str
    row_groups: list[range]
    source: pafs.FileSystem
    destination: Destination
    extra_fields: tuple[pa.Field, ...] = ()  # Parquet: the extras' columns, of every shard
    on_error: str = "raise"
    max_pixels: int | None = DEFAULT_MAX_PIXELS
    digest: str = ""  # of the shard's plan, as the manifest records it


def write_shard(task: ShardTask) -> tuple[int, int, list[BadImage]]:
    """Write and publish one shard, after the record of the images it left out (if any);
    returns its ``(samples, bytes, images left out)``."""
    staged = task.destination.staged(task.name)
    bad: list[BadImage] = []
    try:
        if task.format == "tar":
            with open(staged, "wb") as out:
                _write_tar(out, task, bad)
        else:
            _write_parquet(staged, task, bad)
        size = os.path.getsize(staged)
        if bad:  # first: a shard that exists always has its record
            task.destination.record(task.name, task.digest, bad)
        task.destination.publish(staged, task.name)
    finally:
        unlink(staged)
    return len(task.items) - len(bad), size, bad


def _write_tar(out: IO[bytes], task: ShardTask, bad: list[BadImage]) -> None:
    # PAX: long keys are kept whole; the headers depend on names and sizes only.
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for item, data in zip(task.items, _contents(task), strict=True):
            if isinstance(data, BadImage):
                bad.append(data)
                continue
            _add(tar, f"{item.key}.{item.suffix}", data)
            if item.label is not None:
                _add(tar, f"{item.key}.cls", str(item.label).encode("ascii"))
            for name, value in item.extras:
                _add(tar, f"{item.key}.{name}", member(value))


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))  # shares the bytes: BytesIO copies on write only


def _write_parquet(path: str, task: ShardTask, bad: list[BadImage]) -> None:
    labelled = task.items[0].label is not None
    fields = [pa.field("key", pa.string(), False), pa.field("image", pa.binary(), False)]
    labels = [pa.field("label", pa.int64(), False)] if labelled else []
    schema = pa.schema(fields + labels + list(task.extra_fields))
    contents = _contents(task)
    # Images are compressed already; statistics of image bytes would only bloat the footer.
    with pq.ParquetWriter(
        path, schema, compression="none", use_dictionary=False, write_statistics=["key", "label"]
    ) as writer:
        for rows in task.row_groups:
            items, images = [], []
            for item in task.items[rows.start : rows.stop]:
                data = next(contents)
                if isinstance(data, BadImage):
                    bad.append(data)
                else:
                    items.append(item)
                    images.append(data)
            if not items:
                continue
            columns = [
                pa.array([item.key for item in items], pa.string()),
                pa.array(images, pa.binary()),
            ]
            if labelled:
                columns.append(pa.array([item.label for item in items], pa.int64()))
            for i, field in enumerate(task.extra_fields):
                values = [column_value(item.extras[i][1]) for item in items]
                columns.append(pa.array(values, field.type))
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), len(items))


def _contents(task: ShardTask) -> Iterator[bytes | BadImage]:
    """The shard's images in order, read and checked a batch at a time on a few threads."""
    check = partial(_checked, task)
    with ThreadPoolExecutor(_READ_THREADS) as pool:
        for start in range(0, len(task.items), _READ_BATCH):
            yield from pool.map(check, task.items[start : start + _READ_BATCH])


def _checked(task: ShardTask, item: Item) -> bytes | BadImage:
    """The item's image, or (``on_error="skip"``) a :class:`BadImage` where it cannot be
    read, or the decode check the streams make refuses it (or planning found it bad).

    Raises:
        SourceError: (``on_error="raise"``) the image cannot be read or does not decode;
            the file changed since the plan.
    """
    where = item.image if isinstance(item.image, str) else f"sample {item.key!r}"
    if item.bad:  # only under on_error="skip": planning raises otherwise
        return BadImage(item.key, where, item.bad)
    try:
        data = _read(task.source, item)
    except SourceError as exc:
        if task.on_error == "skip":
            return BadImage(item.key, where, exc.reason)
        raise SourceError(f"{exc.reason}; {SKIP_HINT}", path=where) from exc
    if len(data) != item.size:
        raise SourceError(
            f"the file has {len(data)} bytes, not the {item.size} it had when the shards "
            "were planned: it changed during the conversion; run it again",
            path=where,
        )
    try:
        verify_image(data, max_pixels=task.max_pixels, source=where)
    except DecodeError as exc:
        if task.on_error == "skip":
            return BadImage(item.key, where, exc.reason)
        raise DecodeError(f"{exc.reason}; {SKIP_HINT}", path=where) from exc
    return data


def _read(fs: pafs.FileSystem, item: Item) -> bytes:
    if isinstance(item.image, bytes):
        return item.image
    try:
        with fs.open_input_stream(item.image) as f:
            data = f.read()
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"cannot read the image ({exc})", path=item.image) from exc
    return data
