"""Decoding a batch on a thread pool (:func:`decode_many`) and capping OpenCV's own threads
(:func:`limit_opencv_threads`): OpenCV releases the GIL, so threads scale across cores inside one
DataLoader worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

from fastdata._torch_compat import WorkerPool
from fastdata._validate import check_int
from fastdata.decode._decode import DEFAULT_MAX_PIXELS, decode_for, decode_image
from fastdata.decode._headers import ImageData
from fastdata.decode._resize import Size
from fastdata.decode._transforms import ImageTransform

__all__ = ["decode_many", "limit_opencv_threads"]


def decode_many(
    items: Sequence[ImageData],
    /,
    *,
    threads: int,
    sources: Sequence[str | None] | None = None,
    transform: ImageTransform | None = None,
    rngs: Sequence[np.random.Generator | None] | None = None,
    size: Size | None = None,
    keep_alpha: bool = False,
    exif: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
) -> list[np.ndarray]:
    """Decode (and optionally transform) a batch on ``threads`` threads, in order.

    ``cv2.imdecode`` and ``cv2.resize`` release the GIL, so the threads run in parallel
    inside one process (one DataLoader worker, or the main process). The output equals
    ``[transform.apply(*decode_for(x, transform, rng)) for x, rng in zip(items, rngs)]``
    with a ``transform`` (each JPEG decoded at the resolution its box allows), and
    ``[decode_image(x, size=size) for x in items]`` without one.

    Threads and OpenCV: this function does not change OpenCV's own thread count, which is
    process-wide. When a pool decodes, call :func:`limit_opencv_threads` once per process
    (the DataLoader's worker init does) so that ``cv2.resize`` inside each decode thread
    does not start its own pool; ``imdecode`` itself is single-threaded.

    Args:
        items: encoded images.
        threads: decode threads; 1 decodes in the calling thread. A pool is started and
            shut down per call.
        sources: each item's name for error messages; default ``"item <i>"``.
        transform: applied to each image in its thread; each JPEG is decoded at the
            resolution its geometry allows (see :func:`decode_for`).
        rngs: each item's generator for a random ``transform`` (see ``sample_rng``).
        size: as for :func:`decode_image`; only without a ``transform``.
        keep_alpha: as for :func:`decode_image`.
        exif: as for :func:`decode_image`.
        max_pixels: as for :func:`decode_image`.

    Raises:
        DecodeError: for the first item (in order) that fails, naming its source.
    """
    threads = check_int("threads", threads, minimum=1)
    if size is not None and transform is not None:
        raise ValueError(
            "pass size= or transform=, not both: with a transform, each sample's geometry "
            "decides the decoded size"
        )
    n = len(items)
    for name, seq in (("sources", sources), ("rngs", rngs)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries for {n} items: give one per item")
    options: dict[str, Any] = {"keep_alpha": keep_alpha, "exif": exif, "max_pixels": max_pixels}

    def one(i: int) -> np.ndarray:
        source = sources[i] if sources is not None else f"item {i}"
        if transform is None:
            return decode_image(items[i], size=size, source=source, **options)
        rng = rngs[i] if rngs is not None else None
        image, geometry = decode_for(items[i], transform, rng, source=source, **options)
        return transform.apply(image, geometry)

    if threads == 1 or n <= 1:
        return [one(i) for i in range(n)]
    with WorkerPool(min(threads, n), thread_name_prefix="fastdata-decode") as pool:
        return list(pool.map(one, range(n)))


def limit_opencv_threads(n: int) -> int:
    """Cap OpenCV's internal thread pool at ``n`` threads for this process; returns the
    previous count so it can be restored.

    OpenCV parallelises ``cv2.resize`` and colour conversions over all cores by default.
    With ``num_workers`` processes each running ``decode_threads`` threads, that multiplies
    into oversubscription; a DataLoader worker that decodes on its own pool should call
    ``limit_opencv_threads(1)``. The setting is process-wide, hence not changed implicitly
    by :func:`decode_many`.
    """
    n = check_int("n", n, minimum=1)
    previous = cv2.getNumThreads()
    cv2.setNumThreads(n)
    return previous
