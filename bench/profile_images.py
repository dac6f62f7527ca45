"""Where one training image's time goes on photo-like JPEGs: ``python bench/profile_images.py``.

Prints, per image on one thread (bytes already in memory, OpenCV and torch limited to one
thread), the median over rounds of each step of fastdata's training path next to the plain
``cv2.imdecode`` that the ``images-ceiling`` benchmark's ``decode-only-ceiling`` counts, then
how two processes decoding at once compare with one thread times two. The data is that of
bench/test_bench_images.py (``make_images``: ImageNet's sizes and entropy); the numbers
behind docs/benchmarks.md's "Where an image's time goes".

Steps: ``entropy`` reads the whole file at 1/8 scale (``fastdata.decode._jpeg.check``: Huffman
decoding, with almost no inverse DCT or colour work left); ``scaled 1/2`` is a whole decode
at half scale (a quarter of the inverse DCT, upsampling and colour work);
``region`` is the extension's decode of the random-resized crop's region (the default,
into the thread's reused buffer, as the streams do);
``resize`` is the crop's copy, the antialiased resize to 224 and the flip into a batch slot;
``draw`` is the sample's generator, header and crop decision; ``stream`` is the whole
per-image cost of ``ImageStream`` in-process (``decode_threads=1``, reading the files).
"""

from __future__ import annotations

import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import torch

from fastdata.decode import (
    ImageTransform,
    _jpeg,  # type: ignore[attr-defined]
    _libjpeg,
    decode_for,
    image_header,
    sample_rng,
)
from fastdata.sources.images import ImageStream
from fastdata.synthetic import make_images

IMAGES = 1024
ROUNDS = 5
TRAIN = ImageTransform(size=224, crop="random-resized", flip=True, interpolation="antialias")


def per_image_ms(fn: Callable[[], int]) -> float:
    """Median milliseconds per image of ``fn`` (which returns the images it did)."""
    times = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        n = fn()
        times.append((time.perf_counter() - start) / n * 1e3)
    return statistics.median(times)


def decode_share(encoded: list[np.ndarray], share: int, shares: int) -> int:
    for data in encoded[share::shares]:
        cv2.imdecode(data, cv2.IMREAD_COLOR_RGB)
    return len(encoded[share::shares])


def main(root: Path) -> None:
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    make_images(root, IMAGES, classes=8, seed=0)
    paths = sorted(root.glob("*/*.jpg"))
    encoded = [np.frombuffer(path.read_bytes(), np.uint8) for path in paths]
    headers = [image_header(data) for data in encoded]
    assert all(header is not None for header in headers)
    pixels = sum(h.height * h.width for h in headers if h is not None)
    print(
        f"{len(paths)} JPEGs, {sum(map(len, encoded)) / pixels:.3f} bytes/pixel, "
        f"{np.mean([len(d) for d in encoded]) / 1e3:.1f} KB mean, "
        f"{pixels / len(paths) / 1e6:.2f} MP mean"
    )
    slot = np.empty((224, 224, 3), np.uint8)
    some = encoded[:128]  # the resize step's regions, decoded beforehand (few: little memory)
    decided = [decode_for(d, TRAIN, sample_rng(0, 0, i)) for i, d in enumerate(some)]

    def scaled(num: int) -> int:
        for data, header in zip(encoded, headers, strict=True):
            assert header is not None
            h, w = -(-header.height * num // 8), -(-header.width * num // 8)
            out = np.empty((h, w, 3), np.uint8)
            assert _jpeg.decode_rgb(data, 8 // num, 0, 0, h, w, out, h, w) is not None
        return len(encoded)

    def region() -> int:  # into the thread's reused buffer, as the streams decode
        for i, data in enumerate(encoded):
            decode_for(data, TRAIN, sample_rng(0, 0, i), reuse=True)
        return len(encoded)

    def draw() -> int:
        for i, data in enumerate(encoded):
            header = image_header(data)
            assert header is not None
            TRAIN.geometry((header.height, header.width), sample_rng(0, 0, i))
        return len(encoded)

    def stream() -> int:
        images = ImageStream.from_folder(
            root, transform=TRAIN, batch_size=64, decode_threads=1, shuffle=True, seed=0
        )
        return sum(len(labels) for _, labels in images)

    steps: dict[str, Callable[[], int]] = {
        "cv2.imdecode": lambda: decode_share(encoded, 0, 1),
        "entropy": lambda: sum(_libjpeg.check(d) is True for d in encoded),
        "scaled 1/2": lambda: scaled(4),
        "region": region,
        "resize": lambda: sum(TRAIN.apply(im, g, out=slot) is slot for im, g in decided),
        "draw": draw,
        "stream": stream,
    }
    whole = per_image_ms(steps["cv2.imdecode"])
    print(f"{'step':14s} {'ms/image':>9s} {'x cv2.imdecode':>15s}")
    for name, fn in steps.items():
        ms = whole if name == "cv2.imdecode" else per_image_ms(fn)
        print(f"{name:14s} {ms:9.3f} {ms / whole:15.2f}")

    context = multiprocessing.get_context("fork")
    rates = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        workers = [context.Process(target=decode_share, args=(encoded, k, 2)) for k in range(2)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        rates.append(len(encoded) / (time.perf_counter() - start))
    print(
        f"cv2.imdecode in 2 processes at once: {statistics.median(rates):.0f} images/s, "
        f"{statistics.median(rates) * whole / 2e3:.2f}x of one thread's rate times 2"
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tmp))
