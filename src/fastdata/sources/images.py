"""ImageStream: images decoded with OpenCV outside the GIL, from folders, file lists, Parquet
binary columns and tar shards — on the same plan (sharding, shuffling, resume) as Parquet.

Each source is a small *reader* that says how many samples each unit holds and reads a
range of them as an Arrow table (image bytes or paths, and labels). :class:`ImageStream`
decodes and transforms the rows on a thread pool and yields uint8 tensors.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from functools import cached_property
from typing import Any, Literal, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import torch
from torch.utils.data import get_worker_info

from fastdata._device_decode import check_decode_device, decode_on_device
from fastdata._env import worker_slot
from fastdata._transforms import ImageTransform, Size, sample_rng
from fastdata._validate import (
    check_bool,
    check_choice,
    check_int,
    check_size,
)
from fastdata.decode import DEFAULT_MAX_PIXELS, decode_for
from fastdata.errors import DecodeError, SourceError
from fastdata.sources._files import (
    Listing,
    as_filesystem,
    digest,
    paths_digest,
    resolve_files,
    walk,
)
from fastdata.sources._segments import shared_batch
from fastdata.sources._stream import PlannedStream
from fastdata.sources.parquet import ParquetStream
from fastdata.sources.plan import EvenBatches, Piece
from fastdata.sources.tar import (
    IMAGE_SUFFIXES,
    LABEL_SUFFIXES,
    TarSample,
    index_shard,
    read_samples,
)

__all__ = ["IMG_EXTENSIONS", "ImageStream"]

log = logging.getLogger("fastdata")

IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
"""File endings an image folder is scanned for (torchvision's, compared case-insensitively)."""

OnError = Literal["raise", "skip"]
_MAX_WORKERS = 1024  # slots of the shared skip counter


class _Reader(Protocol):
    """How one kind of source lists and reads its samples (see the module docstring)."""

    def unit_rows(self) -> list[int]: ...

    def read(self, unit: int, start: int, stop: int) -> pa.Table: ...

    def fetch(self, row: dict[str, Any]) -> bytes: ...

    def location(self, unit: int, row: int) -> dict[str, Any]: ...

    def identity(self) -> Any: ...


class _FilesReader:
    """Image files; a unit is a block of ``files_per_unit`` consecutive files."""

    def __init__(self, listing: Listing, labels: list[int] | None, per_unit: int) -> None:
        paths = listing.paths
        if labels is not None and len(labels) != len(paths):
            raise ValueError(f"{len(labels)} labels for {len(paths)} files: give one per file")
        self.per_unit = check_int("files_per_unit", per_unit, minimum=1)
        self.fs, self.paths, self.sizes, self.labels = listing.fs, paths, listing.sizes, labels

    def unit_rows(self) -> list[int]:
        n = len(self.paths)
        return [min(self.per_unit, n - s) for s in range(0, n, self.per_unit)]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        first = unit * self.per_unit
        columns = {"path": pa.array(self.paths[first + start : first + stop], pa.string())}
        if self.labels is not None:
            columns["label"] = pa.array(self.labels[first + start : first + stop], pa.int64())
        return pa.table(columns)

    def fetch(self, row: dict[str, Any]) -> bytes:
        with self.fs.open_input_file(row["path"]) as f:
            return f.read()

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": self.paths[unit * self.per_unit + row]}

    def identity(self) -> dict[str, Any]:
        return {
            "files": len(self.paths),
            "paths": paths_digest(self.paths),
            "labels": None if self.labels is None else digest(self.labels),
            "files_per_unit": self.per_unit,
            "content": digest(self.sizes),
        }


class _ParquetReader:
    """Encoded images in a binary column; a unit is a row group."""

    def __init__(self, stream: ParquetStream, image_column: str, label_column: str | None):
        self.stream, self.image_column, self.label_column = stream, image_column, label_column

    def unit_rows(self) -> list[int]:
        return self.stream._unit_rows()

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        table = self.stream._read_unit(unit).slice(start, stop - start)
        columns = {"data": table.column(self.image_column)}
        if self.label_column is not None:
            columns["label"] = table.column(self.label_column).cast(pa.int64())
        return pa.table(columns)

    def fetch(self, row: dict[str, Any]) -> bytes:
        return row["data"]

    def location(self, unit: int, row: int) -> dict[str, Any]:
        f, rg, _ = self.stream._units[unit]
        return {"path": self.stream.files[f], "row_group": rg, "row": row}

    def identity(self) -> dict[str, Any]:
        return self.stream._identity()


class _TarReader:
    """WebDataset tar shards; a unit is a shard."""

    def __init__(self, listing: Listing, index: list[list[TarSample]], label_field: str) -> None:
        self.fs, self.shards, self.sizes = listing
        self.index, self.label_field = index, label_field
        shards = self.shards
        with_labels = {s.label is not None for samples in index for s in samples}
        if len(with_labels) > 1:
            shard, sample = next(
                (shard, s)
                for shard, samples in zip(shards, index, strict=True)
                for s in samples
                if s.label is None
            )
            raise SourceError(
                "some samples have a label member and this one has none; label all or none",
                path=shard,
                member=sample.image.name,
            )
        self.labelled = with_labels == {True}

    def unit_rows(self) -> list[int]:
        return [len(samples) for samples in self.index]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        samples = self.index[unit][start:stop]
        table = read_samples(self.fs, self.shards[unit], samples, label_field=self.label_field)
        return table if self.labelled else table.drop_columns(["label"])

    def fetch(self, row: dict[str, Any]) -> bytes:
        return row["data"]

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": self.shards[unit], "member": self.index[unit][row].image.name}

    def identity(self) -> dict[str, Any]:
        members = [[s.image.name, s.image.size] for samples in self.index for s in samples]
        return {
            "shards": len(self.shards),
            "paths": paths_digest(self.shards),
            "samples": sum(self.unit_rows()),
            "content": digest([self.sizes, members]),
        }


class ImageStream(PlannedStream):
    """Images as uint8 tensors ``(C, H, W)`` with their labels, decoded outside the GIL.

    Build one with :meth:`from_folder`, :meth:`from_files`, :meth:`from_parquet` or
    :meth:`from_tar`. Items are ``(image, label)`` (``image`` alone for unlabelled data);
    with ``batch_size=N``, ``(images, labels)`` where ``images`` is a ``(N, C, H, W)`` tensor
    when every output has the same size (a crop or a fixed ``(h, w)``) and a list otherwise.
    Image tensors are channels-last in memory (a ``permute`` of HWC), which is what
    :class:`fastdata.DeviceNormalize` with ``channels_last=True`` wants. Each JPEG is decoded
    by :func:`fastdata.decode.decode_for`: at the lowest resolution its crop allows (see
    ``reduced_decode``) and, with the ``fastdata._jpeg`` extension, only the region around
    the crop, with the whole decode's pixels.

    The options are keyword-only and the same for every constructor. ``batch_size``,
    ``shuffle``, ``seed``, ``shuffle_buffer`` (counted in samples, default 2,048),
    ``drop_last``, ``even_batches``, ``rank``, ``world_size`` and ``read_ahead`` are as for
    :class:`fastdata.ParquetStream` (a window of images holds their encoded bytes for Parquet
    and tar sources, paths for files).

    Args:
        size: the output size of the per-sample :class:`fastdata.decode.ImageTransform`:
            an int = shorter side, or ``(h, w)``.
        crop: ``"center"`` or ``"random-resized"``; None resizes only. Random crops and
            flips are seeded per sample by ``(seed, epoch, index)``.
        flip: mirror left-right with probability 0.5.
        interpolation: a name of :data:`fastdata.decode.INTERPOLATIONS`: ``"antialias"``
            (torchvision's own resampling: the same pixels for images decoded in full, see
            ``reduced_decode``), ``"auto"`` (area averaging when shrinking, bilinear when
            enlarging), ...; None takes :class:`fastdata.ImageTransform`'s default.
        transform: an ``ImageTransform`` instead of ``size``/``crop``/``flip``/
            ``interpolation``.
        decode_threads: threads decoding in each process (OpenCV releases the GIL).
        decode_device: ``"cuda"`` (or ``"cuda:N"``) decodes JPEGs with nvJPEG
            (``torchvision.io.decode_jpeg``) and crops, resizes and flips on that device;
            images come out as tensors on it. Other formats, and JPEGs nvJPEG refuses, are
            decoded by OpenCV and copied over. CUDA cannot start in a forked DataLoader
            worker: use ``num_workers=0`` or ``multiprocessing_context="spawn"``. ``None``
            (default) decodes with OpenCV on the CPU threads.
        on_error: ``"raise"`` (default) stops at the first bad image with its location;
            ``"skip"`` leaves it out, logs its location and counts it in :attr:`skipped`.
            A skipped image shortens its batch (a batch whose every image was skipped is
            still yielded, empty, so the batch count stays that of the plan); with
            ``batch_size=None`` it shortens the stream instead, so resume stays exact only
            in batch mode.
        keep_alpha: as for :func:`fastdata.decode.decode_image`.
        max_pixels: as for :func:`fastdata.decode.decode_image`.
        reduced_decode: decode a JPEG at 1/2, 1/4 or 1/8 when its crop box still covers
            the output size at that scale (several times faster; pixels within about 40 dB
            PSNR of a full decode). False decodes every image in full: the pixels of a
            torchvision pipeline exactly, with ``interpolation="antialias"``, at that cost.
    """

    def __init__(
        self,
        reader: _Reader,
        /,
        *,
        size: Size | None = None,
        crop: Literal["center", "random-resized"] | None = None,
        flip: bool = False,
        interpolation: str | None = None,
        transform: ImageTransform | None = None,
        decode_threads: int = 1,
        decode_device: str | torch.device | None = None,
        on_error: OnError = "raise",
        keep_alpha: bool = False,
        max_pixels: int | None = DEFAULT_MAX_PIXELS,
        reduced_decode: bool = True,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int = 0,
        shuffle_buffer: int = 2048,
        drop_last: bool = False,
        even_batches: EvenBatches = None,
        rank: int | None = None,
        world_size: int | None = None,
        read_ahead: int = 2,
    ) -> None:
        super().__init__(
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            shuffle_buffer=shuffle_buffer,
            drop_last=drop_last,
            even_batches=even_batches,
            rank=rank,
            world_size=world_size,
            read_ahead=read_ahead,
        )
        custom = size is not None or crop is not None or flip or interpolation is not None
        if transform is not None and custom:
            raise ValueError("pass either transform= or size/crop/flip/interpolation, not both")
        if transform is not None and not isinstance(transform, ImageTransform):
            raise TypeError(f"transform={transform!r}: expected a fastdata.ImageTransform")
        if transform is None:
            shape = {"size": check_size("size", size, none="None to keep the decoded size")}
            shape["crop"] = check_choice("crop", crop, (None, "center", "random-resized"))
            shape["flip"] = check_bool("flip", flip)
            if interpolation is not None:
                shape["interpolation"] = interpolation
            transform = ImageTransform(**shape)
        self.transform = transform
        self.decode_threads = check_int("decode_threads", decode_threads, minimum=1)
        self.decode_device = check_decode_device(decode_device, self.transform)
        self.on_error = check_choice("on_error", on_error, ("raise", "skip"))
        self.keep_alpha = check_bool("keep_alpha", keep_alpha)
        self.max_pixels = check_int("max_pixels", max_pixels, minimum=1, none="None for no limit")
        self.reduced_decode = check_bool("reduced_decode", reduced_decode)
        self._reader = reader
        self._offsets = np.concatenate([[0], np.cumsum(reader.unit_rows())]).astype(np.int64)
        self._skip_counts = torch.zeros(_MAX_WORKERS, dtype=torch.int64).share_memory_()
        # The sharing strategy of the process that pickled this stream for its workers
        # (None: not pickled, so the worker's own, inherited by fork, is the one).
        self._receiver_sharing: str | None = None
        self._warned = False
        self.classes: list[str] | None = None
        """Class names of :meth:`from_folder` (index = label), else None."""

    # ----------------------------------------------------------------- constructors
    @classmethod
    def from_files(
        cls,
        paths: Sequence[str | os.PathLike[str]],
        labels: Sequence[int] | None = None,
        /,
        *,
        filesystem: Any = None,
        files_per_unit: int = 64,
        **options: Any,
    ) -> ImageStream:
        """Images from a list of files (local paths, URIs, or paths on ``filesystem``), with
        optional integer labels, one per file. ``files_per_unit`` files form one unit of
        the plan (the granularity of sharding and of the shuffle of unit order)."""
        listing = resolve_files([os.fspath(p) for p in paths], filesystem=filesystem)
        if len(listing.paths) != len(paths):
            raise ValueError("from_files takes files, not directories or globs")
        label_list = None if labels is None else [int(x) for x in labels]
        return cls(_FilesReader(listing, label_list, files_per_unit), **options)

    @classmethod
    def from_folder(
        cls, root: str | os.PathLike[str], /, *, filesystem: Any = None, **options: Any
    ) -> ImageStream:
        """An ImageFolder tree ``root/<class>/**/<image>``: classes are the sorted subfolder
        names, indexed like ``torchvision.datasets.ImageFolder`` (see :attr:`classes`)."""
        fs = as_filesystem(filesystem) or pafs.LocalFileSystem()
        base = os.path.abspath(root) if isinstance(fs, pafs.LocalFileSystem) else os.fspath(root)
        info = fs.get_file_info(base)
        if info.type != pafs.FileType.Directory:
            raise SourceError("no such directory", path=base)
        classes = sorted(
            i.base_name
            for i in fs.get_file_info(pafs.FileSelector(base))
            if i.type == pafs.FileType.Directory
        )
        paths, sizes, labels = [], [], []
        for index, name in enumerate(classes):
            images = walk(fs, f"{base}/{name}", IMG_EXTENSIONS, hidden=True)  # as torchvision
            paths += [p for p, _ in images]
            sizes += [n for _, n in images]
            labels += [index] * len(images)
        if not paths:
            raise SourceError(
                f"no images in class subfolders ({', '.join(IMG_EXTENSIONS)}); expected "
                "root/<class>/<image> like torchvision's ImageFolder",
                path=base,
            )
        listing = Listing(fs, paths, sizes)
        stream = cls(_FilesReader(listing, labels, options.pop("files_per_unit", 64)), **options)
        stream.classes = classes
        return stream

    @classmethod
    def from_parquet(
        cls,
        source: Any,
        /,
        *,
        image_column: str = "image",
        label_column: str | None = "label",
        filter: Any = None,
        filesystem: Any = None,
        **options: Any,
    ) -> ImageStream:
        """Encoded images in a binary column of Parquet files (read by :class:`ParquetStream`:
        a unit is a row group); ``label_column=None`` for unlabelled data."""
        columns = [image_column] + ([label_column] if label_column else [])
        parquet = ParquetStream(source, columns=columns, filter=filter, filesystem=filesystem)
        if not pa.types.is_binary(parquet.schema.field(image_column).type) and not (
            pa.types.is_large_binary(parquet.schema.field(image_column).type)
        ):
            raise SourceError(
                f"column {image_column!r} has type {parquet.schema.field(image_column).type}; "
                "expected binary (encoded image bytes)",
                path=parquet.files[0],
                column=image_column,
            )
        return cls(_ParquetReader(parquet, image_column, label_column), **options)

    @classmethod
    def from_tar(
        cls,
        shards: Any,
        /,
        *,
        filesystem: Any = None,
        image_suffixes: Sequence[str] = IMAGE_SUFFIXES,
        label_suffixes: Sequence[str] = LABEL_SUFFIXES,
        label_field: str = "label",
        **options: Any,
    ) -> ImageStream:
        """WebDataset tar shards (``key.jpg`` + ``key.cls`` or ``key.json``): a unit is a
        shard, read sequentially; member headers are indexed once, up front (in parallel).

        A sample's label is its first member with a suffix in ``label_suffixes`` (``()``
        for unlabelled data): ``.cls`` holds ASCII decimal, ``.json`` an integer or an
        object whose ``label_field`` is one."""
        listing = resolve_files(shards, filesystem=filesystem, suffixes=(".tar",))
        fs, files = listing.fs, listing.paths
        with ThreadPoolExecutor(8) as pool:
            index = list(
                pool.map(
                    lambda p: index_shard(
                        fs, p, image_suffixes=image_suffixes, label_suffixes=label_suffixes
                    ),
                    files,
                )
            )
        return cls(_TarReader(listing, index, label_field), **options)

    # ----------------------------------------------------------------- plan hooks
    def _unit_rows(self) -> list[int]:
        return self._reader.unit_rows()

    def _read_unit(self, unit: int) -> pa.Table:
        return self._read_piece(Piece(unit, 0, self._reader.unit_rows()[unit]))

    def _read_piece(self, piece: Piece) -> pa.Table:
        table = self._reader.read(piece.unit, piece.start, piece.stop)
        first = int(self._offsets[piece.unit]) + piece.start
        # Wrapped, not converted: the first pa.array(ndarray) of a process costs 6-14 ms of
        # one-off set-up, which every DataLoader worker of every epoch would pay.
        index = np.arange(first, first + piece.rows, dtype=np.int64)
        column = pa.Array.from_buffers(pa.int64(), piece.rows, [None, pa.py_buffer(index)])
        return table.append_column("index", column)

    def _identity(self) -> dict[str, Any]:
        return self._reader.identity()

    # ----------------------------------------------------------------- decoding
    @property
    def skipped(self) -> int:
        """Images left out by ``on_error="skip"`` so far, over all workers."""
        return int(self._skip_counts.sum())

    def _map(self, fn: Callable[..., Any], *args: Sequence[Any]) -> list:
        """``list(map(fn, *args))`` on the decode threads. Returns, or raises the first
        error, only once every call has finished: none still writes into a batch that is
        being dropped (whose shared-memory segment may then be reused)."""
        if self.decode_threads == 1 or len(args[0]) <= 1:
            return list(map(fn, *args))
        pool = self._thread_pool("decode", self.decode_threads)
        futures = [pool.submit(fn, *call) for call in zip(*args, strict=True)]
        wait(futures)
        return [future.result() for future in futures]

    def _load(
        self, row: dict[str, Any], out: np.ndarray | None = None
    ) -> tuple[np.ndarray | None, float, float]:
        """Bytes -> decoded -> transformed HWC uint8 (None when skipped; written into
        ``out`` when given), and the seconds spent decoding (fetch included) and
        transforming."""
        index = row["index"]
        start = time.perf_counter()
        try:
            image, geometry = decode_for(
                self._reader.fetch(row),
                self.transform,
                self._rng(index),
                keep_alpha=self.keep_alpha,
                max_pixels=self.max_pixels,
                reduce=self.reduced_decode,
            )
            decoded = time.perf_counter()
            result = self.transform.apply(image, geometry, out=out)
            return result, decoded - start, time.perf_counter() - decoded
        except (SourceError, OSError, pa.ArrowException) as exc:
            self._failed(index, exc)
            return None, time.perf_counter() - start, 0.0

    def _load_on_device(self, rows: list[dict[str, Any]]) -> list[torch.Tensor | None]:
        """The rows decoded and transformed on :attr:`decode_device` (None when skipped)."""
        data: list[bytes] = []
        fetched: list[dict[str, Any]] = []
        for row in rows:
            try:
                data.append(self._reader.fetch(row))
                fetched.append(row)
            except (SourceError, OSError, pa.ArrowException) as exc:
                self._failed(row["index"], exc)
        images = decode_on_device(
            data,
            self.decode_device,
            transform=self.transform,
            rngs=[self._rng(row["index"]) for row in fetched],
            max_pixels=self.max_pixels,
            on_error=lambda i, exc: self._failed(fetched[i]["index"], exc),
        )
        by_index = {row["index"]: image for row, image in zip(fetched, images, strict=True)}
        return [by_index.get(row["index"]) for row in rows]

    def _rng(self, index: int) -> np.random.Generator | None:
        return sample_rng(self._policy.seed, self.epoch, index) if self._random else None

    def _failed(self, index: int, exc: Exception) -> None:
        """Raise ``exc`` as an error naming the item at ``index``, or (``on_error="skip"``)
        count, log and warn once."""
        reason = exc.reason if isinstance(exc, SourceError) else f"cannot read ({exc})"
        kind = DecodeError if isinstance(exc, DecodeError) else SourceError
        error = kind(reason, **self._location(index))
        if self.on_error == "raise":
            raise error from exc
        self._skip_counts[worker_slot()[0] % _MAX_WORKERS] += 1
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"skipped a bad image (on_error='skip'): {error}; further skips in this "
                "process are logged at INFO and counted in ImageStream.skipped",
                stacklevel=3,
            )
        log.info("skipped a bad image (on_error='skip'): %s", error)

    @cached_property
    def _random(self) -> bool:
        return self.transform.crop == "random-resized" or self.transform.flip

    def _location(self, index: int) -> dict[str, Any]:
        unit = int(np.searchsorted(self._offsets, index, side="right")) - 1
        return self._reader.location(unit, index - int(self._offsets[unit]))

    def _decoded(self, table: pa.Table) -> list[tuple[torch.Tensor, int | None]]:
        """The table's images as ``(C, H, W)`` uint8 tensors (channels-last views of the
        decoded HWC arrays on the CPU path), with their labels; skipped images left out."""
        rows = table.to_pylist()
        if self.decode_device is not None:
            start = time.perf_counter()
            images = self._load_on_device(rows)
            if self._stage_times is not None:
                self._stage_times.add("decode", time.perf_counter() - start, len(rows))
        else:
            loaded = self._load_all(rows)
            images = [None if img is None else _chw(img) for img, _, _ in loaded]
        pairs = zip(images, rows, strict=True)
        return [(img, row.get("label")) for img, row in pairs if img is not None]

    def _load_all(
        self, rows: list[dict[str, Any]], outs: Sequence[np.ndarray | None] | None = None
    ) -> list[tuple[np.ndarray | None, float, float]]:
        """:meth:`_load` over ``rows`` on the decode threads, the times recorded."""
        loaded = self._map(self._load, rows, outs if outs is not None else [None] * len(rows))
        if self._stage_times is not None:
            self._stage_times.add("decode", sum(d for _, d, _ in loaded), len(rows))
            self._stage_times.add("transform", sum(t for _, _, t in loaded), len(rows))
        return loaded

    def _decoded_batch(self, table: pa.Table) -> tuple[torch.Tensor, list[Any]]:
        """The table's images decoded on the CPU straight into one ``(N, C, H, W)`` batch
        (fixed output size only), and the labels of the images kept.

        Each transform writes into its slot of the batch, which in a DataLoader worker is
        allocated in shared memory (as torch's ``default_collate`` does there): no
        per-image array, no stacking copy, no copy into shared memory on the way out.
        """
        rows = table.to_pylist()
        channels = 4 if self.keep_alpha else 3
        reuse = self._receiver_sharing in (None, "file_descriptor")
        batch, slots = _empty_batch((len(rows), *self.transform.output_size, channels), reuse)
        loaded = self._load_all(rows, list(slots))
        kept = [i for i, (img, _, _) in enumerate(loaded) if img is not None]
        if len(kept) < len(rows):  # skipped images: close the gaps (a copy, rarely taken)
            batch = batch[kept]
        return batch.permute(0, 3, 1, 2), [rows[i].get("label") for i in kept]

    def _make_rows(self, table: pa.Table) -> Iterator[Any]:
        chunk = max(self.decode_threads * 4, 16)
        for start in range(0, table.num_rows, chunk):
            for image, label in self._decoded(table.slice(start, chunk)):
                yield image if label is None else (image, label)

    def _make_batch(self, table: pa.Table) -> Any:
        batch: Any
        if self.decode_device is None and self.transform.output_size is not None:
            batch, labels = self._decoded_batch(table)
        else:
            decoded = self._decoded(table)
            batch = [img for img, _ in decoded]
            labels = [label for _, label in decoded]
            if batch and len({img.shape for img in batch}) == 1:
                batch = _stack(batch)
        if "label" not in table.column_names:
            return batch
        return batch, torch.tensor(labels, dtype=torch.int64)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        # Pickled by the process that will receive the batches (spawned workers do not
        # inherit its sharing strategy, which decides whether segments can be reused).
        state["_receiver_sharing"] = torch.multiprocessing.get_sharing_strategy()
        return state

    def __repr__(self) -> str:
        return (
            f"ImageStream({type(self._reader).__name__.strip('_')}, samples={self._offsets[-1]}, "
            f"transform={self.transform}, batch_size={self.batch_size})"
        )


def _chw(image: np.ndarray) -> torch.Tensor:
    """A ``(C, H, W)`` view of a decoded HWC (or HW) array."""
    return torch.from_numpy(image[:, :, None] if image.ndim == 2 else image).permute(2, 0, 1)


def _empty_batch(shape: tuple[int, ...], reuse: bool) -> tuple[torch.Tensor, np.ndarray]:
    """An uninitialised uint8 tensor of ``shape`` and a numpy array to fill it through.
    Inside a DataLoader worker it lives in shared memory (a reused segment where ``reuse``,
    see :mod:`fastdata.sources._segments`), so sending it to the main process moves no
    bytes."""
    if get_worker_info() is None:
        batch = torch.empty(shape, dtype=torch.uint8)
        return batch, batch.numpy()
    return shared_batch(shape, reuse=reuse)


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    """Same-size images as one ``(N, C, H, W)`` batch, stacked as NHWC (one contiguous copy)
    and returned channels-last, like the images."""
    return torch.stack([img.permute(1, 2, 0) for img in images]).permute(0, 3, 1, 2)
