""":func:`write_shards` and the sample listings it converts (the package docstring tells the shard
layout and guarantees).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._validate import check_bytes, check_choice, check_file_name, check_int
from fastdata.decode import DEFAULT_MAX_PIXELS
from fastdata.errors import SourceError
from fastdata.sources.filesystem import as_filesystem, digest
from fastdata.sources.readers.tar import IMAGE_SUFFIXES
from fastdata.writer._destination import BadImage, Destination
from fastdata.writer._pool import write_in_pool
from fastdata.writer._samples import SKIP_HINT, Sample, check_labelled, image_suffix, suffix_of
from fastdata.writer._shard_files import (
    Item,
    ShardTask,
    column_value,
    member,
    write_shard,
)

__all__ = [
    "BadImage",
    "WriteProgress",
    "WriteResult",
    "split_by_bytes",
    "write_shards",
]

Format = Literal["parquet", "tar"]
_SUFFIX = {"parquet": ".parquet", "tar": ".tar"}
_TAR_BLOCK = 512
_INT64 = (-(2**63), 2**63 - 1)  # the labels' range: the Parquet column's, the tar reader's


class WriteProgress(NamedTuple):
    """Where a conversion is, after each shard (``on_progress``'s argument)."""

    shards_done: int
    shards: int
    samples_done: int
    bytes_done: int
    bad_images: int = 0  # left out so far (on_error="skip")


class WriteResult(NamedTuple):
    """What :func:`write_shards` did: every shard's path (in order), how many it wrote
    now, how many were already finished (kept), the samples and bytes written now, the
    images left out of the shards (``on_error="skip"``), in order, those of the finished
    shards too (each shard's record, ``_{shard}.left-out.json``, tells them), and how many
    shards of an earlier plan it deleted because their samples or options changed."""

    paths: list[str]
    written: int
    skipped: int
    samples: int
    bytes: int
    bad_images: tuple[BadImage, ...] = ()
    removed: int = 0


def split_by_bytes(sizes: Sequence[int], target: int) -> list[range]:
    """Consecutive ranges of ``sizes``' indices, each of at most ``target`` bytes in all,
    except a single item larger than it: a new range starts where the next item would
    take the current one over ``target``. Pure: the shards' (and row groups') plan."""
    ranges, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > target:
            ranges.append(range(start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        ranges.append(range(start, len(sizes)))
    return ranges


def write_shards(
    samples: Iterable[Sample | Mapping[str, Any]],
    dest: str | os.PathLike[str],
    /,
    *,
    format: Format = "parquet",
    target_shard_bytes: int | str = "256MB",
    row_group_bytes: int | str = "32MB",
    filesystem: Any = None,
    source_filesystem: Any = None,
    prefix: str = "shard",
    classes: Sequence[str] | None = None,
    workers: int | None = None,
    backend: Literal["local", "ray"] = "local",
    on_progress: Callable[[WriteProgress], None] | None = None,
    on_error: Literal["raise", "skip"] = "raise",
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    overwrite: bool = False,
) -> WriteResult:
    """Write ``samples`` into shards ``{dest}/{prefix}-000000.parquet`` (or ``.tar``), in
    order, each about ``target_shard_bytes``; resumable and deterministic (see the module
    docstring).

    Args:
        samples: :class:`Sample` objects, or dicts of their fields.
        dest: a local folder, a URI (``s3://bucket/out``), or a path on ``filesystem``.
        format: ``"parquet"`` (columns ``key``, ``image``, ``label`` and the extras; read
            with ``ImageStream.from_parquet``) or ``"tar"`` (WebDataset: ``{key}.{ext}``,
            ``{key}.cls`` and ``{key}.{extra}``; read with ``ImageStream.from_tar``).
        target_shard_bytes: bytes per shard (an int, or ``"256MB"``); a sample larger than
            this is a shard of its own.
        row_group_bytes: bytes per Parquet row group (the unit a stream reads and shards).
        filesystem: a ``pyarrow.fs`` or fsspec filesystem for ``dest``.
        source_filesystem: where the samples' image paths are (default: local disk).
        prefix: the shards' file name prefix: a name, not a path (no ``/``), that does not
            start with ``.`` or ``_`` (names the streams pass over).
        classes: class names (index = label), kept in the manifest
            (``{dest}/_fastdata_shards.json``, which also records the plan).
        workers: processes writing shards at once (default: the CPU count; 0 writes in
            this process); they exit when this process dies, however it dies, and stop at
            once on ``KeyboardInterrupt``. With ``backend="ray"``: tasks at once (default:
            Ray's choice).
        backend: ``"local"``, or ``"ray"``: every shard is written by a Ray Data task on
            the cluster ``ray.init`` connected to (``pip install "fastdata[ray]"``); the
            paths of the samples and of ``dest`` must be reachable from every node.
        on_progress: called with a :class:`WriteProgress` after each shard.
        on_error: what to do with a sample that is no image to write (see the module
            docstring): ``"raise"`` an error naming it, or ``"skip"`` it and list it in
            :attr:`WriteResult.bad_images`: an image the decode check refuses, a file that
            is missing or unreadable (a dangling link), a path without an image's extension,
            bytes of no image format (an HTML error page). The other samples keep their
            keys (by default their index among ``samples``) and their place in the plan.
        max_pixels: images over this many pixels are refused, as the streams refuse them
            by default (:data:`fastdata.decode.DEFAULT_MAX_PIXELS`); None for no limit.
        overwrite: delete the destination's manifest, its ``{prefix}-NNNNNN`` shards and the
            left-out records first, and write every shard anew. Without it, an earlier
            conversion's shards whose samples and options are unchanged are kept (its
            other shards are deleted and :attr:`WriteResult.removed` counts them), and a
            destination holding only other shards is refused.

    Raises:
        SourceError: with ``on_error="raise"``, an image file is missing or unreadable
            (named in the message).
        DecodeError: with ``on_error="raise"``, an image that does not decode (named).
        ValueError: bad options or samples (a label beyond int64; with ``on_error="raise"``,
            a path without an image's extension, bytes of no image format), or ``dest`` holds
            the shards of another conversion, or files named like the shards that its
            manifest does not list (a WebDataset ``ShardWriter``'s, say): pass
            ``overwrite=True`` to delete them; or other files of the format, at any depth
            (an export: streams would read them with the shards), which nothing deletes.
    """
    format = check_choice("format", format, ("parquet", "tar"))
    backend = check_choice("backend", backend, ("local", "ray"))
    shard_bytes = check_bytes("target_shard_bytes", target_shard_bytes)
    group_bytes = check_bytes("row_group_bytes", row_group_bytes)
    workers = check_int("workers", workers, minimum=0, none="None for the CPU count")
    on_error = check_choice("on_error", on_error, ("raise", "skip"))
    max_pixels = check_int("max_pixels", max_pixels, minimum=1, none="None for no limit")
    prefix = check_file_name("prefix", prefix)
    source_fs = as_filesystem(source_filesystem) or pafs.LocalFileSystem()
    items = _items(list(samples), source_fs, format, on_error)
    extra_fields = _extra_fields(items) if format == "parquet" else ()
    estimates = [_estimate(item, format) for item in items]
    ranges = split_by_bytes(estimates, shard_bytes)
    width = max(6, len(str(len(ranges) - 1)))
    names = [f"{prefix}-{i:0{width}d}{_SUFFIX[format]}" for i in range(len(ranges))]
    groups = [split_by_bytes(estimates[r.start : r.stop], group_bytes) for r in ranges]
    plans = [item.plan() for item in items]
    plan = digest([format, shard_bytes, group_bytes, names, plans])
    digests = [
        _shard_digest(format, name, rows, row_groups, extra_fields, plans)
        for name, rows, row_groups in zip(names, ranges, groups, strict=True)
    ]
    shards = [
        {"name": name, "samples": len(rows), "digest": shard_digest}
        for name, rows, shard_digest in zip(names, ranges, digests, strict=True)
    ]
    destination = Destination.open(dest, filesystem, prefix)
    manifest = {"format": format, "plan": plan, "samples": len(items), "classes": classes}
    claim = destination.claim({**manifest, "shards": shards}, overwrite=overwrite)
    done = claim.finished
    tasks = [
        ShardTask(
            name=name,
            items=[items[i] for i in rows],
            format=format,
            row_groups=row_groups,
            source=source_fs,
            destination=destination,
            extra_fields=extra_fields,
            on_error=on_error,
            max_pixels=max_pixels,
            digest=shard_digest,
        )
        for name, rows, row_groups, shard_digest in zip(names, ranges, groups, digests, strict=True)
        if name not in done
    ]
    progress = _Progress(on_progress, len(names), len(done), claim.bad)
    if backend == "ray":
        from fastdata.writer._ray import write_with_ray

        write_with_ray(tasks, workers, progress)
    elif workers == 0 or len(tasks) <= 1:
        for task in tasks:
            progress(task.name, write_shard(task))
    else:
        write_in_pool(tasks, min(workers or os.cpu_count() or 1, len(tasks)), progress)
    destination.done()
    paths = [destination.final(name) for name in names]
    bad = tuple(image for name in names for image in progress.bad.get(name, []))
    return WriteResult(
        paths, len(tasks), len(done), progress.samples, progress.bytes, bad, claim.removed
    )


def _shard_digest(
    format: Format,
    name: str,
    rows: range,
    row_groups: list[range],
    extra_fields: tuple[pa.Field, ...],
    plans: list[list[Any]],
) -> str:
    """The digest of what decides a shard's bytes (the manifest records it, so that a
    conversion whose plan changed keeps the shards it would write the same): its name,
    format, samples, and for Parquet its row groups and the extras' column types."""
    parquet = format == "parquet"
    layout = [[g.start, g.stop] for g in row_groups] if parquet else []
    types = [str(field.type) for field in extra_fields]
    return digest([format, name, layout, types, plans[rows.start : rows.stop]])


class _Progress:
    """Counts finished shards (and the images they left out, the finished shards' too)
    and reports them to ``on_progress``."""

    def __init__(
        self,
        callback: Callable[[WriteProgress], None] | None,
        total: int,
        done: int,
        bad: dict[str, list[BadImage]],
    ):
        self.callback, self.total, self.done = callback, total, done
        self.samples = self.bytes = 0
        self.bad = dict(bad)  # by shard name, which orders them

    def __call__(self, name: str, result: tuple[int, int, list[BadImage]]) -> None:
        self.done += 1
        self.samples += result[0]
        self.bytes += result[1]
        self.bad[name] = list(result[2])
        if self.callback is not None:
            bad = sum(map(len, self.bad.values()))
            self.callback(WriteProgress(self.done, self.total, self.samples, self.bytes, bad))


def _items(
    samples: list[Sample | Mapping[str, Any]], fs: pafs.FileSystem, format: Format, on_error: str
) -> list[Item]:
    """The samples checked, with their sizes (stat'ed where unknown), keys and suffixes;
    under ``on_error="skip"`` a sample that is no image to write is an :class:`Item` whose
    ``bad`` says why (its shard lists it), in its place and with its key."""
    if not samples:
        raise ValueError("samples is empty: nothing to write")
    parsed = [s if isinstance(s, Sample) else Sample(**s) for s in samples]
    check_labelled(parsed)
    names = _extra_names(parsed[0].extras, format)
    local = isinstance(fs, pafs.LocalFileSystem)
    paths = {
        i: os.path.abspath(s.image) if local else os.fspath(s.image)
        for i, s in enumerate(parsed)
        if isinstance(s.image, str | os.PathLike)
    }
    unknown = [paths[i] for i in paths if parsed[i].size is None]
    sizes = dict(_sizes(unknown, fs)) if unknown else {}  # None: no such file
    skip = on_error == "skip"
    width = max(9, len(str(len(parsed) - 1)))
    items, keys = [], set()
    for i, s in enumerate(parsed):
        key = f"{i:0{width}d}" if s.key is None else s.key
        if not isinstance(key, str) or not key or "." in key.rsplit("/", 1)[-1] or key in keys:
            raise ValueError(
                f"sample {i}: key={key!r}: keys must be unique, non-empty strings without '.' "
                "in their last path part (a tar member is '{key}.{suffix}')"
            )
        keys.add(key)
        label = None if s.label is None else _label(i, s, paths.get(i))
        extras = dict(s.extras or {})
        if set(extras) != set(names):
            raise ValueError(
                f"sample {i}: extras {sorted(extras)} differ from the first sample's "
                f"{sorted(names)}: every sample needs the same fields"
            )
        fields = tuple((name, _plain(f"sample {i}: extras[{name!r}]", extras[name], format))
                       for name in names)  # fmt: skip
        if isinstance(s.image, bytes | bytearray | memoryview):
            image: str | bytes = bytes(s.image)
            size: int | None = len(image)
        elif i in paths:
            image = paths[i]
            size = sizes.get(image, 0) if s.size is None else s.size
            if size is None and not skip:
                raise SourceError(f"no such image file; {SKIP_HINT}", path=image)
        else:
            raise TypeError(f"sample {i}: image={s.image!r}: expected a path or bytes")
        if size is None:
            suffix, bad = "", "no such image file"
        else:
            suffix, bad = suffix_of(image) if skip else (image_suffix(image, key), "")
        items.append(Item(key, image, 0 if bad or size is None else size, label, suffix,
                          fields, bad))  # fmt: skip
    return items


def _label(i: int, sample: Sample, path: str | None) -> int:
    """A sample's label, checked: an integer that fits int64."""
    where = f"sample {i} ({path})" if path else f"sample {i}"
    label = check_int(f"{where}: label", sample.label)
    if not _INT64[0] <= label <= _INT64[1]:
        raise ValueError(
            f"{where}: label={label}: labels are int64 (the Parquet column's type, what the "
            f"streams read), from {_INT64[0]} to {_INT64[1]}"
        )
    return int(label)


# Names the shards use themselves. A tar ".json" extra is allowed: with a ".cls" label it is
# data; without labels read it with ImageStream.from_tar(..., label_suffixes=()).
_RESERVED = {"parquet": ("key", "image", "label"), "tar": ("cls", *IMAGE_SUFFIXES)}


def _extra_names(extras: Mapping[str, Any] | None, format: Format) -> list[str]:
    """The extra fields' names (the first sample's), checked: a tar member suffix or a
    Parquet column name that is not the key's, image's or label's."""
    names = list(extras or {})
    for name in names:
        if not isinstance(name, str) or not name or "." in name or "/" in name:
            raise ValueError(f"extras name {name!r}: expected a non-empty name without '.' or '/'")
        if name in _RESERVED[format]:
            raise ValueError(
                f"extras name {name!r} is taken by the {format} shard's own "
                f"{'columns' if format == 'parquet' else 'members'} {_RESERVED[format]}"
            )
    return names


def _plain(what: str, value: Any, format: Format) -> Any:
    """An extra value as plain Python: bytes-like as bytes, numpy values as Python's."""
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return value.tolist()  # a numpy array or scalar
    if value is None and format == "tar":
        raise ValueError(
            f"{what} is None: a tar sample's member cannot be left out (the reader needs "
            "every sample to have it); give a value, or write Parquet, where it is a null"
        )
    return value


def _extra_fields(items: list[Item]) -> tuple[pa.Field, ...]:
    """The Parquet columns of the extras: one Arrow type per field over all samples, so
    every shard has the same schema (SchemaError names the field that cannot be one)."""
    fields = []
    for i, (name, _) in enumerate(items[0].extras):
        try:
            values = pa.array([column_value(item.extras[i][1]) for item in items])
            if pa.types.is_null(values.type):
                raise pa.ArrowInvalid("every value is None")
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise ValueError(
                f"extras field {name!r}: its values make no one Arrow column ({exc})"
            ) from exc
        fields.append(pa.field(name, values.type))
    return tuple(fields)


def _sizes(paths: list[str], fs: pafs.FileSystem) -> Iterable[tuple[str, int | None]]:
    """Each file's size, None where there is no such file."""
    for info in fs.get_file_info(paths):
        yield info.path, int(info.size or 0) if info.type == pafs.FileType.File else None


def _estimate(item: Item, format: Format) -> int:
    """Bytes a sample takes in a shard: its image, and for tar the member headers and
    the padding to 512-byte blocks (a label member is one header and one block); none for
    a sample left out."""
    if item.bad:
        return 0
    extras = [len(member(value)) for _, value in item.extras]
    if format == "parquet":
        return item.size + sum(extras)
    blocks = sum(1 + -(-size // _TAR_BLOCK) for size in [item.size, *extras])
    return _TAR_BLOCK * (blocks + (2 if item.label is not None else 0))
