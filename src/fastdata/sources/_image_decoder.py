"""ImageDecoder: rows of encoded images to uint8 tensors, off the GIL.

Each row's bytes (read by the reader: the decoder opens no file, so a cache wrapping the
reader's filesystem sees every image) are decoded and transformed by
:func:`fastdata.decode.decode_for` (reduced resolution and region decoding where the crop
allows) and augmented (``augment=``, see :mod:`fastdata.augment`) on a pool of decode
threads; OpenCV and libjpeg release the GIL.
With a fixed output size, every image is written straight into its slot of one
``(N, H, W, C)`` batch, which a DataLoader worker allocates in shared memory
(:func:`fastdata.workers.batch_buffer`). A bad image raises a
:class:`~fastdata.DecodeError` / :class:`~fastdata.SourceError` naming where it is, or, with
``on_error="skip"``, is left out and counted, and its place in the batch is taken by the
next row's image: a batch is never empty and never smaller than ``batch_size`` except the
last of a reader. Such a decoder takes a varying number of rows per batch, so it reports the
position each batch reached (``varying``, :meth:`ImageDecoder.items`) and resume stays exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import wait
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from fastdata.augment import SampleAugment
from fastdata.decode import (
    ImageTransform,
    decode_for,
    decode_on_device,
    reused_sample_rng,
    sample_rng,
)
from fastdata.errors import SourceError
from fastdata.sources._arrow_types import take_rows
from fastdata.sources._feed import RowFeed
from fastdata.sources._image_errors import FAILURES, BadImages, OnError, naming
from fastdata.sources._image_items import ItemColumns, chw, encoded_rows, image_item, stack
from fastdata.sources._labels import int_labels
from fastdata.sources.base import INDEX, ArrowDecoder, Context
from fastdata.workers import ThreadPools, batch_buffer, item_pool, receiver_sharing

__all__ = ["ImageDecoder", "OnError"]

_NO_BYTES = (
    "no image: the value is null (a file its reader could not read under on_error='skip', "
    "see the log; or a null in the data)"
)
_ONLY_PATH = (
    "no image: the struct's bytes are null and its path is {!r} (a Hugging Face image column "
    "that refers to a file instead of holding it): write the dataset with its images embedded "
    "(datasets' push_to_hub embeds them), or read the files with from_files"
)


class ImageDecoder:
    """A :class:`fastdata.sources.Decoder` of images; the options are
    :class:`fastdata.ImageStream`'s.

    Args:
        image_column: the column holding encoded bytes: binary, or a struct with a binary
            ``bytes`` field (Hugging Face ``datasets.Image``). A null is a bad image.
        label_column: the column of integer labels, or None.
        extra_columns: other columns of a sample (a caption, tokens, metadata), carried
            beside the image as :class:`~fastdata.sources.ArrowDecoder` converts them; items
            are then dicts ``{"image", "label", *extra_columns}``.
        json_columns: those of ``extra_columns`` holding JSON text, parsed.
        origin: items carry ``"origin"``, where each image came from (the reader's
            location of its row).
    """

    needs_index = True

    def __init__(
        self,
        *,
        transform: ImageTransform,
        image_column: str,
        label_column: str | None,
        decode_threads: int,
        decode_device: torch.device | None,
        on_error: OnError,
        augment: SampleAugment | None = None,
        keep_alpha: bool,
        max_pixels: int | None,
        reduced_decode: bool,
        extra_columns: Sequence[str] = (),
        json_columns: Sequence[str] = (),
        origin: bool = False,
    ) -> None:
        self.transform = transform
        self.image_column, self.label_column = image_column, label_column
        self.decode_threads = decode_threads
        self.decode_device = decode_device
        self.on_error = on_error
        self.keep_alpha = keep_alpha
        self.max_pixels = max_pixels
        self.reduced_decode = reduced_decode
        self.augment = augment
        self._columns = ItemColumns(
            label_column, tuple(extra_columns), frozenset(json_columns), origin
        )
        self._arrow = ArrowDecoder(origin=origin)
        self.random = transform.crop == "random-resized" or transform.flip or augment is not None
        self._bad = BadImages(on_error)
        self._pools = ThreadPools()
        # The sharing strategy of the process that pickled this decoder for its workers
        # (None: not pickled, so the worker's own, inherited by fork, is the one).
        self._receiver: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_receiver": receiver_sharing()}

    # ----------------------------------------------------------------- the Decoder protocol
    @property
    def varying(self) -> bool:
        """Whether a batch may take more rows than it has images (``on_error="skip"``: the
        rows of skipped images are replaced by the following rows)."""
        return self.on_error == "skip"

    def batch(self, table: pa.Table, context: Context) -> Any:
        """``images`` (``(N, C, H, W)`` uint8, channels-last in memory, when the output size
        is fixed; else a list of ``(C, H, W)``), or ``(images, labels)``, or with extra
        columns a dict of them all, of the rows of ``table`` (``on_error="raise"``: none is
        skipped)."""
        return self._filled(RowFeed(iter([table])), table.num_rows, context)[0]

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        """``image``, ``(image, label)`` or a dict with the extra columns, per row; skipped
        images are left out."""
        for _, item in self._row_items(table, context):
            yield item

    def items(
        self, tables: Iterator[pa.Table], context: Context, offset: int
    ) -> Iterator[tuple[Any, tuple[int, int]]]:
        """The items of a reader's ``tables`` under ``on_error="skip"``, each with the rows
        taken once it is made (counted from the reader's start; ``offset`` is always 0, no
        item ends inside a row): batches of ``context.batch_size`` images, a skipped image's
        place taken by the next row's (only the reader's last batch may be smaller), or one
        item per decoded row."""
        feed = RowFeed(tables)
        taken = 0
        if context.batch_size is None:
            while (table := feed.take(self._chunk)) is not None:
                for row, item in self._row_items(table, context):
                    yield item, (taken + row + 1, 0)
                taken += table.num_rows
            return
        while True:
            batch, rows = self._filled(feed, context.batch_size, context)
            taken += rows
            if batch is None:
                return
            yield batch, (taken, 0)

    @property
    def _chunk(self) -> int:
        """Rows decoded at once in row mode: enough to keep the decode threads busy."""
        return max(self.decode_threads * 4, 16)

    def _row_items(self, table: pa.Table, context: Context) -> Iterator[tuple[int, Any]]:
        """``(row in table, item)`` of each image not skipped."""
        for start in range(0, table.num_rows, self._chunk):
            piece = table.slice(start, self._chunk)
            images = self._decoded(piece, context)
            kept = [row for row, image in enumerate(images) if image is not None]
            if not kept:
                continue
            others: Iterable[dict[str, Any]] = [{}] * len(kept)
            if self._with_others:
                taken = take_rows(piece, kept) if len(kept) < piece.num_rows else piece
                others = self._arrow.rows(self._others(taken, context), context)
            for row, values in zip(kept, others, strict=True):
                yield start + row, image_item(images[row], values, self._columns)

    @property
    def skipped(self) -> int:
        """Images left out by ``on_error="skip"`` so far, over all workers."""
        return self._bad.skipped

    # ----------------------------------------------------------------- one image
    def _bytes(self, row: dict[str, Any]) -> bytes | memoryview:
        value = row[self.image_column]
        if isinstance(value, dict):  # struct<bytes, path> (Hugging Face datasets.Image)
            if value["bytes"] is None and value.get("path"):
                raise SourceError(_ONLY_PATH.format(value["path"]))
            value = value["bytes"]
        if value is None:
            raise SourceError(_NO_BYTES)
        return value

    def _rng(
        self, index: int, context: Context, *, reused: bool = False
    ) -> np.random.Generator | None:
        """The sample's generator (:func:`sample_rng`), None when nothing is random;
        ``reused``: the decode thread's own, valid until its next image."""
        if not self.random:
            return None
        make = reused_sample_rng if reused else sample_rng
        return make(context.seed, context.epoch, index)

    def _load(
        self, row: dict[str, Any], out: np.ndarray | None, context: Context
    ) -> tuple[np.ndarray | None, float, float]:
        """Bytes -> decoded -> transformed HWC uint8 (None when skipped; written into
        ``out`` when given), and the seconds spent decoding and transforming."""
        index = row[INDEX]
        rng = self._rng(index, context, reused=True)
        start = time.perf_counter()
        try:
            image, geometry = decode_for(
                self._bytes(row),
                self.transform,
                rng,
                keep_alpha=self.keep_alpha,
                max_pixels=self.max_pixels,
                reduce=self.reduced_decode,
                reuse=out is not None,  # the region is transformed into out at once
            )
            decoded = time.perf_counter()
            result = self.transform.apply(image, geometry, out=out)
        except FAILURES as exc:
            self._bad.failed(index, exc, context)
            return None, time.perf_counter() - start, 0.0
        if self.augment is not None:
            assert rng is not None  # augment makes the decoder random
            with naming(index, context):
                augmented = self.augment(result, rng, fixed=out is not None)
            result = augmented if out is None else _into(out, augmented)
        return result, decoded - start, time.perf_counter() - decoded

    # ----------------------------------------------------------------- many images
    def _map(self, fn: Callable[..., Any], *args: Sequence[Any]) -> list:
        """``list(map(fn, *args))`` on the decode threads (in thread workers, the threads
        they share, which take the earliest batch's images first). Returns, or raises the first
        error, only once every call has finished: none still writes into a batch that is
        being dropped (whose shared-memory segment may then be reused)."""
        pool = item_pool(self._pools, "decode", self.decode_threads)
        if pool is None or len(args[0]) <= 1:
            return list(map(fn, *args))
        futures = [pool.submit(fn, *call) for call in zip(*args, strict=True)]
        wait(futures)
        return [future.result() for future in futures]

    def _load_all(
        self, rows: list[dict[str, Any]], outs: Sequence[np.ndarray | None], context: Context
    ) -> list[tuple[np.ndarray | None, float, float]]:
        """:meth:`_load` over ``rows`` on the decode threads, the times recorded."""
        loaded = self._map(self._load, rows, outs, [context] * len(rows))
        if context.times is not None:
            context.times.add("decode", sum(d for _, d, _ in loaded), len(rows))
            context.times.add("transform", sum(t for _, _, t in loaded), len(rows))
        return loaded

    def _load_on_device(
        self, rows: list[dict[str, Any]], context: Context
    ) -> list[torch.Tensor | None]:
        """The rows decoded and transformed on :attr:`decode_device` (None when skipped)."""
        data: list[np.ndarray] = []
        fetched: list[dict[str, Any]] = []
        for row in rows:
            try:
                data.append(np.frombuffer(self._bytes(row), np.uint8))
                fetched.append(row)
            except FAILURES as exc:
                self._bad.failed(row[INDEX], exc, context)
        rngs = [self._rng(row[INDEX], context) for row in fetched]
        assert self.decode_device is not None  # the caller's branch
        images = decode_on_device(
            data,
            self.decode_device,
            transform=self.transform,
            rngs=rngs,
            max_pixels=self.max_pixels,
            on_error=lambda i, exc: self._bad.failed(fetched[i][INDEX], exc, context),
        )
        if self.augment is not None:  # which makes every rng a generator
            for i, (row, rng) in enumerate(zip(fetched, rngs, strict=True)):
                if images[i] is not None:
                    with naming(row[INDEX], context):
                        images[i] = self.augment.on_device(images[i], rng)  # type: ignore[arg-type]
        by_index = {row[INDEX]: image for row, image in zip(fetched, images, strict=True)}
        return [by_index.get(row[INDEX]) for row in rows]

    @property
    def _other_columns(self) -> list[str]:
        """The columns of an item besides the image."""
        return self._columns.others

    @property
    def _with_others(self) -> bool:
        """Whether an item holds more than the image: other columns, or its origin."""
        return bool(self._other_columns) or self._columns.origin

    def _others(self, table: pa.Table, context: Context) -> pa.Table:
        """The columns of ``table`` besides the image, its labels as int64 (:func:`int_labels`)."""
        others = table.select([*self._other_columns, INDEX])
        return (
            others if self.label_column is None else int_labels(others, self.label_column, context)
        )

    def _decoded(self, table: pa.Table, context: Context) -> list[torch.Tensor | None]:
        """The table's images as ``(C, H, W)`` uint8 tensors (channels-last views of the
        decoded HWC arrays on the CPU path), None where skipped."""
        rows = encoded_rows(table, self.image_column)
        if self.decode_device is not None:
            start = time.perf_counter()
            images = self._load_on_device(rows, context)
            if context.times is not None:
                context.times.add("decode", time.perf_counter() - start, len(rows))
            return images
        loaded = self._load_all(rows, [None] * len(rows), context)
        return [None if img is None else chw(img) for img, _, _ in loaded]

    def _batch_item(self, images: Any, kept: list[pa.Table], context: Context) -> Any:
        """:meth:`_item` of a batch of ``images``, whose rows are those of ``kept``."""
        if not self._with_others:
            return image_item(images, {}, self._columns)
        table = kept[0] if len(kept) == 1 else pa.concat_tables(kept)
        others = self._arrow.batch(self._others(table, context), context)
        return image_item(images, others, self._columns)

    def _filled(self, feed: RowFeed, size: int, context: Context) -> tuple[Any, int]:
        """The next batch of ``size`` images from ``feed``, and the rows it took: the rows
        of skipped images are replaced by the rows after them until ``size`` images are
        decoded or the rows end. The batch is None when no image is left."""
        if self.decode_device is None and self.transform.output_size is not None:
            return self._filled_in_place(feed, size, context)
        images: list[torch.Tensor] = []
        kept: list[pa.Table] = []
        taken = 0
        while len(images) < size and (table := feed.take(size - len(images))) is not None:
            taken += table.num_rows
            decoded = self._decoded(table, context)
            rows = [row for row, image in enumerate(decoded) if image is not None]
            images += [decoded[row] for row in rows]  # type: ignore[misc]
            kept.append(
                take_rows(table, pa.array(rows, pa.int64()))
                if len(rows) < table.num_rows
                else table
            )
        if not images:
            return None, taken
        batch = stack(images) if len({img.shape for img in images}) == 1 else images
        return self._batch_item(batch, kept, context), taken

    def _filled_in_place(self, feed: RowFeed, size: int, context: Context) -> tuple[Any, int]:
        """:meth:`_filled` on the CPU with a fixed output size: every image is decoded and
        transformed straight into its slot of one ``(N, C, H, W)`` batch, which in a
        DataLoader worker is allocated in shared memory (as torch's ``default_collate`` does
        there): no per-image array, no stacking copy, no copy into shared memory on the way
        out. The images after a skipped one move down a slot, and the next rows fill the
        batch up: the images keep the rows' order."""
        channels = 4 if self.keep_alpha else 3
        assert self.transform.output_size is not None  # the caller checked
        shape = (size, *self.transform.output_size, channels)
        batch, slots = batch_buffer(shape, receiver=self._receiver)
        kept: list[pa.Table] = []
        filled = taken = 0
        while filled < size and (table := feed.take(size - filled)) is not None:
            rows = encoded_rows(table, self.image_column)
            taken += len(rows)
            loaded = self._load_all(rows, list(slots[filled : filled + len(rows)]), context)
            good = [row for row, (image, _, _) in enumerate(loaded) if image is not None]
            for slot, row in enumerate(good):  # moved down over the slots of skipped images
                if slot != row:
                    batch[filled + slot] = batch[filled + row]
            kept.append(
                take_rows(table, pa.array(good, pa.int64())) if len(good) < len(rows) else table
            )
            filled += len(good)
        if not filled:
            return None, taken
        batch = batch[:filled]  # short only at the end of the reader's rows
        return self._batch_item(batch.permute(0, 3, 1, 2), kept, context), taken


def _into(out: np.ndarray, image: np.ndarray) -> np.ndarray:
    """``out`` holding ``image`` (of its shape)."""
    if image is not out:
        np.copyto(out, image)
    return out
