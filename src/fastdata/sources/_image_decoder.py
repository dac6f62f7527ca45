"""ImageDecoder: rows of encoded images (or image paths) to uint8 tensors, off the GIL.

Each row's bytes are decoded and transformed by :func:`fastdata.decode.decode_for` (reduced
resolution and region decoding where the crop allows) and augmented (``augment=``, see
:mod:`fastdata.augment`) on a pool of decode threads; OpenCV and libjpeg release the GIL.
With a fixed output size, every image is written straight into its slot of one
``(N, H, W, C)`` batch, which a DataLoader worker allocates in shared memory
(:func:`fastdata.workers.batch_buffer`). A bad image raises a
:class:`~fastdata.DecodeError` / :class:`~fastdata.SourceError` naming where it is, or, with
``on_error="skip"``, is left out and counted.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import wait
from contextlib import contextmanager
from typing import Any, Literal

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import torch

from fastdata._augment import SampleAugment
from fastdata._device_decode import decode_on_device
from fastdata._env import worker_slot
from fastdata._transforms import ImageTransform, sample_rng
from fastdata.decode import decode_for
from fastdata.errors import DecodeError, SourceError
from fastdata.sources.base import INDEX, Context
from fastdata.workers import ThreadPools, batch_buffer, receiver_sharing

__all__ = ["ImageDecoder", "OnError"]

log = logging.getLogger("fastdata")

OnError = Literal["raise", "skip"]
_MAX_WORKERS = 1024  # slots of the shared skip counter
_FAILURES = (SourceError, OSError, pa.ArrowException, ValueError, cv2.error)


class ImageDecoder:
    """A :class:`fastdata.sources.Decoder` of images; the options are
    :class:`fastdata.ImageStream`'s.

    Args:
        image_column: the column holding encoded bytes, or paths when ``filesystem`` is set.
        label_column: the column of integer labels, or None.
        filesystem: where the paths of ``image_column`` are (None: it holds bytes).
    """

    needs_index = True

    def __init__(
        self,
        *,
        transform: ImageTransform,
        image_column: str,
        label_column: str | None,
        filesystem: pafs.FileSystem | None,
        decode_threads: int,
        decode_device: torch.device | None,
        on_error: OnError,
        augment: SampleAugment | None = None,
        keep_alpha: bool,
        max_pixels: int | None,
        reduced_decode: bool,
    ) -> None:
        self.transform = transform
        self.image_column, self.label_column, self.fs = image_column, label_column, filesystem
        self.decode_threads = decode_threads
        self.decode_device = decode_device
        self.on_error = on_error
        self.keep_alpha = keep_alpha
        self.max_pixels = max_pixels
        self.reduced_decode = reduced_decode
        self.augment = augment
        self.random = transform.crop == "random-resized" or transform.flip or augment is not None
        self.skip_counts = torch.zeros(_MAX_WORKERS, dtype=torch.int64).share_memory_()
        self._skip_lock = threading.Lock()
        self._warned = False
        self._pools = ThreadPools()
        # The sharing strategy of the process that pickled this decoder for its workers
        # (None: not pickled, so the worker's own, inherited by fork, is the one).
        self._receiver: str | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_receiver"] = receiver_sharing()
        del state["_skip_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._skip_lock = threading.Lock()

    # ----------------------------------------------------------------- the Decoder protocol
    def batch(self, table: pa.Table, context: Context) -> Any:
        """``images`` (``(N, C, H, W)`` uint8, channels-last in memory, when the output size
        is fixed; else a list of ``(C, H, W)``), or ``(images, labels)``."""
        batch: Any
        if self.decode_device is None and self.transform.output_size is not None:
            batch, labels = self._decoded_batch(table, context)
        else:
            decoded = self._decoded(table, context)
            batch = [img for img, _ in decoded]
            labels = [label for _, label in decoded]
            if batch and len({img.shape for img in batch}) == 1:
                batch = _stack(batch)
        if self.label_column is None:
            return batch
        return batch, torch.tensor(labels, dtype=torch.int64)

    def rows(self, table: pa.Table, context: Context) -> Iterator[Any]:
        """``image`` or ``(image, label)`` per row; skipped images are left out."""
        chunk = max(self.decode_threads * 4, 16)
        for start in range(0, table.num_rows, chunk):
            for image, label in self._decoded(table.slice(start, chunk), context):
                yield image if self.label_column is None else (image, label)

    @property
    def skipped(self) -> int:
        """Images left out by ``on_error="skip"`` so far, over all workers."""
        return int(self.skip_counts.sum())

    # ----------------------------------------------------------------- one image
    def _bytes(self, row: dict[str, Any]) -> bytes:
        value = row[self.image_column]
        if isinstance(value, dict):  # struct<bytes, path> (Hugging Face datasets.Image)
            value = value["bytes"]
        if self.fs is None:
            return value
        with self.fs.open_input_file(value) as f:
            return f.read()

    def _rng(self, index: int, context: Context) -> np.random.Generator | None:
        return sample_rng(context.seed, context.epoch, index) if self.random else None

    def _load(
        self, row: dict[str, Any], out: np.ndarray | None, context: Context
    ) -> tuple[np.ndarray | None, float, float]:
        """Bytes -> decoded -> transformed HWC uint8 (None when skipped; written into
        ``out`` when given), and the seconds spent decoding (reading included) and
        transforming."""
        index = row[INDEX]
        rng = self._rng(index, context)
        start = time.perf_counter()
        try:
            image, geometry = decode_for(
                self._bytes(row),
                self.transform,
                rng,
                keep_alpha=self.keep_alpha,
                max_pixels=self.max_pixels,
                reduce=self.reduced_decode,
            )
            decoded = time.perf_counter()
            result = self.transform.apply(image, geometry, out=out)
        except _FAILURES as exc:
            self._failed(index, exc, context)
            return None, time.perf_counter() - start, 0.0
        if self.augment is not None:
            assert rng is not None  # augment makes the decoder random
            with _naming(index, context):
                augmented = self.augment(result, rng, fixed=out is not None)
            result = augmented if out is None else _into(out, augmented)
        return result, decoded - start, time.perf_counter() - decoded

    def _failed(self, index: int, exc: Exception, context: Context) -> None:
        """Raise ``exc`` as an error naming the item at ``index``, or (``on_error="skip"``)
        count, log and warn once."""
        if isinstance(exc, SourceError):
            reason = exc.reason
        elif isinstance(exc, ValueError | cv2.error):
            reason = f"cannot decode or transform ({type(exc).__name__}: {exc})"
        else:
            reason = f"cannot read ({exc})"
        kind = SourceError if isinstance(exc, SourceError | OSError) else DecodeError
        kind = DecodeError if isinstance(exc, DecodeError) else kind
        error = kind(reason, **context.locate(index))
        if self.on_error == "raise":
            raise error from exc
        with self._skip_lock:  # decode threads skip concurrently
            self.skip_counts[worker_slot()[0] % _MAX_WORKERS] += 1
            first, self._warned = not self._warned, True
        if first:
            warnings.warn(
                f"skipped a bad image (on_error='skip'): {error}; further skips in this "
                "process are logged at INFO and counted in ImageStream.skipped",
                stacklevel=3,
            )
        log.info("skipped a bad image (on_error='skip'): %s", error)

    # ----------------------------------------------------------------- many images
    def _map(self, fn: Callable[..., Any], *args: Sequence[Any]) -> list:
        """``list(map(fn, *args))`` on the decode threads. Returns, or raises the first
        error, only once every call has finished: none still writes into a batch that is
        being dropped (whose shared-memory segment may then be reused)."""
        if self.decode_threads == 1 or len(args[0]) <= 1:
            return list(map(fn, *args))
        pool = self._pools.get("decode", self.decode_threads)
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
        data: list[bytes] = []
        fetched: list[dict[str, Any]] = []
        for row in rows:
            try:
                data.append(self._bytes(row))
                fetched.append(row)
            except _FAILURES as exc:
                self._failed(row[INDEX], exc, context)
        rngs = [self._rng(row[INDEX], context) for row in fetched]
        assert self.decode_device is not None  # the caller's branch
        images = decode_on_device(
            data,
            self.decode_device,
            transform=self.transform,
            rngs=rngs,
            max_pixels=self.max_pixels,
            on_error=lambda i, exc: self._failed(fetched[i][INDEX], exc, context),
        )
        if self.augment is not None:  # which makes every rng a generator
            for i, (row, rng) in enumerate(zip(fetched, rngs, strict=True)):
                if images[i] is not None:
                    with _naming(row[INDEX], context):
                        images[i] = self.augment.on_device(images[i], rng)  # type: ignore[arg-type]
        by_index = {row[INDEX]: image for row, image in zip(fetched, images, strict=True)}
        return [by_index.get(row[INDEX]) for row in rows]

    def _label(self, row: dict[str, Any]) -> Any:
        return None if self.label_column is None else row[self.label_column]

    def _decoded(self, table: pa.Table, context: Context) -> list[tuple[torch.Tensor, Any]]:
        """The table's images as ``(C, H, W)`` uint8 tensors (channels-last views of the
        decoded HWC arrays on the CPU path), with their labels; skipped images left out."""
        rows = table.to_pylist()
        if self.decode_device is not None:
            start = time.perf_counter()
            images = self._load_on_device(rows, context)
            if context.times is not None:
                context.times.add("decode", time.perf_counter() - start, len(rows))
        else:
            loaded = self._load_all(rows, [None] * len(rows), context)
            images = [None if img is None else _chw(img) for img, _, _ in loaded]
        pairs = zip(images, rows, strict=True)
        return [(img, self._label(row)) for img, row in pairs if img is not None]

    def _decoded_batch(self, table: pa.Table, context: Context) -> tuple[torch.Tensor, list[Any]]:
        """The table's images decoded on the CPU straight into one ``(N, C, H, W)`` batch
        (fixed output size only), and the labels of the images kept.

        Each transform writes into its slot of the batch, which in a DataLoader worker is
        allocated in shared memory (as torch's ``default_collate`` does there): no
        per-image array, no stacking copy, no copy into shared memory on the way out.
        """
        rows = table.to_pylist()
        channels = 4 if self.keep_alpha else 3
        assert self.transform.output_size is not None  # the caller checked
        shape = (len(rows), *self.transform.output_size, channels)
        batch, slots = batch_buffer(shape, receiver=self._receiver)
        loaded = self._load_all(rows, list(slots), context)
        kept = [i for i, (img, _, _) in enumerate(loaded) if img is not None]
        if len(kept) < len(rows):  # skipped images: close the gaps (a copy, rarely taken)
            batch = batch[kept]
        return batch.permute(0, 3, 1, 2), [self._label(rows[i]) for i in kept]


@contextmanager
def _naming(index: int, context: Context) -> Iterator[None]:
    """Add the image's location to an error raised inside (an augmentation's)."""
    try:
        yield
    except Exception as exc:
        where = ", ".join(f"{k}={v}" for k, v in context.locate(index).items() if v is not None)
        if sys.version_info >= (3, 11):  # notes are new in 3.11
            exc.add_note(f"while augmenting the image at {where}")
        raise


def _into(out: np.ndarray, image: np.ndarray) -> np.ndarray:
    """``out`` holding ``image`` (of its shape)."""
    if image is not out:
        np.copyto(out, image)
    return out


def _chw(image: np.ndarray) -> torch.Tensor:
    """A ``(C, H, W)`` view of a decoded HWC (or HW) array."""
    return torch.from_numpy(image[:, :, None] if image.ndim == 2 else image).permute(2, 0, 1)


def _stack(images: list[torch.Tensor]) -> torch.Tensor:
    """Same-size images as one ``(N, C, H, W)`` batch, stacked as NHWC (one contiguous copy)
    and returned channels-last, like the images."""
    return torch.stack([img.permute(1, 2, 0) for img in images]).permute(0, 3, 1, 2)
