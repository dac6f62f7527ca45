"""Decoding benchmarks: fastdata's decode stage against the usual Pillow recipe and OpenCV.

The JPEGs have photo-like entropy (``fastdata.synthetic.synth_image``, quality 90: about 0.56
bytes per pixel, as ImageNet's), recorded in each result's ``extra_info["data"]``.

- ``decode-jpeg``: 400x500 JPEGs -> 224x224 uint8 CHW tensors.
  fastdata: ``decode_many`` on 2 threads with ``ImageTransform(size=224, crop="center")``
  (resize the shorter side to 256, centre crop 224). Baseline ``pil``: ``Image.open`` +
  ``convert("RGB")`` + torchvision ``Resize(256)`` + ``CenterCrop(224)`` + ``PILToTensor``,
  one image after another as a Dataset's ``__getitem__`` does.
- ``decode-checked``: decoding alone, the 400x500 JPEGs, one thread. fastdata:
  ``decode_image``, which decodes through the ``fastdata.decode._jpeg`` extension and raises on
  anything libjpeg warns about (corrupt data); baseline ``opencv-imdecode``: ``cv2.imdecode``
  to RGB, which only prints such warnings. The ratio is the cost of the check (1.0: none).
  Sides alternate within each round.
- ``jpeg-check``: what the GPU path (``decode_device``) spends on the CPU per JPEG before
  nvJPEG: the extension's read-through check (entropy decoding, no pixels), against
  baseline ``opencv-imdecode``, a whole CPU decode of the same bytes. Sides alternate.
- ``decode-reduced``: 2048x2730 JPEGs -> the same 224 centre crop. fastdata decodes at 1/8
  resolution in the DCT domain; baseline ``full-decode`` decodes every pixel then resizes.
  Both single-threaded, so the ratio is the reduction alone.
- ``decode-reduced-crop``: the same large JPEGs -> a 224 random-resized crop with flip, each
  sample's box drawn from ``sample_rng(0, 0, i)``. fastdata: ``decode_for`` (the box is
  drawn on the header's size, and the JPEG decoded at the largest reduction that keeps the
  box at least 224 px) + ``ImageTransform.apply``, what ``ImageStream`` does; baseline
  ``full-decode``: the same transform on the fully decoded image. Single-threaded.
- ``decode-region``: the 400x500 JPEGs -> the 224 random-resized crop with flip, boxes from
  ``sample_rng(0, 0, i)``, one thread. fastdata: ``decode_for`` + ``ImageTransform.apply``,
  which decodes only the region of each JPEG around its box (``fastdata.decode._jpeg``,
  libjpeg-turbo); baseline ``whole-image``: the same with ``region=False``, which decodes the
  whole image. The pixels are checked equal. Sides alternate within each round. Fails when
  the extension was not built (libjpeg-turbo's headers missing).
- ``resize-antialias``: resampling alone, the 224 random-resized crops of the decoded
  400x500 JPEGs (boxes from ``sample_rng(0, 0, i)``), one thread. fastdata:
  ``resize(..., interpolation="antialias")`` (the default: torch's vectorised antialiased
  bilinear, torchvision's own). Baselines: ``area``, ``interpolation="auto"`` (OpenCV's
  INTER_AREA when shrinking), and ``pil-bilinear``, Pillow's ``crop`` + ``resize(BILINEAR)``,
  what the torchvision recipe's ``RandomResizedCrop`` runs on PIL images. Sides alternate
  within each round.

OpenCV's own thread pool and torch's intra-op threads are capped at one thread for this
module, as in a DataLoader worker running a decode pool (``limit_opencv_threads``, and torch
sets its own), so threads do not oversubscribe.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from typing import Any

import cv2
import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import transforms

from fastdata.decode import (
    JPEG_EXTENSION,
    ImageTransform,
    decode_for,
    decode_image,
    decode_many,
    limit_opencv_threads,
    resize,
    sample_rng,
)
from fastdata.decode import _libjpeg as _libjpeg
from fastdata.synthetic import encode_image, synth_image

from conftest import describe_images, measure, measure_interleaved, scaled

CENTER_224 = ImageTransform(size=224, crop="center")
RRC_224 = ImageTransform(size=224, crop="random-resized", flip=True)


def photo_jpeg(h: int, w: int, seed: int) -> bytes:
    """A JPEG (quality 90) with the entropy of a photo (``synth_image``'s default texture)."""
    return encode_image(synth_image(np.random.default_rng(seed), h, w), quality=90)


@pytest.fixture(scope="module", autouse=True)
def _one_thread_each() -> Iterator[None]:
    """One thread for OpenCV's pool and torch's intra-op pool, as in a DataLoader worker."""
    previous, previous_torch = limit_opencv_threads(1), torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    cv2.setNumThreads(previous)
    torch.set_num_threads(previous_torch)


@pytest.fixture(scope="module")
def small_jpegs() -> list[bytes]:
    return [photo_jpeg(400, 500, seed) for seed in range(scaled(64, 256))]


@pytest.fixture(scope="module")
def large_jpegs() -> list[bytes]:
    return [photo_jpeg(2048, 2730, seed) for seed in range(scaled(6, 32))]


def to_tensors(images: list[np.ndarray]) -> list[torch.Tensor]:
    """HWC uint8 arrays as CHW uint8 tensors (zero-copy), what PILToTensor hands on."""
    return [torch.from_numpy(img).permute(2, 0, 1) for img in images]


@pytest.mark.benchmark(group="decode-jpeg")
def test_decode_jpeg_fastdata(benchmark: Any, small_jpegs: list[bytes]) -> None:
    out = measure(
        benchmark,
        lambda: to_tensors(decode_many(small_jpegs, threads=2, transform=CENTER_224)),
        role="fastdata",
        items=len(small_jpegs),
    )
    assert out[0].shape == (3, 224, 224)
    benchmark.extra_info["data"] = describe_images(small_jpegs)


@pytest.mark.benchmark(group="decode-jpeg")
def test_decode_jpeg_pil(benchmark: Any, small_jpegs: list[bytes]) -> None:
    recipe = transforms.Compose(
        [transforms.Resize(256), transforms.CenterCrop(224), transforms.PILToTensor()]
    )
    out = measure(
        benchmark,
        lambda: [recipe(Image.open(io.BytesIO(b)).convert("RGB")) for b in small_jpegs],
        role="baseline:pil",
        items=len(small_jpegs),
    )
    assert out[0].shape == (3, 224, 224)
    benchmark.extra_info["data"] = describe_images(small_jpegs)


def against_imdecode(benchmark: Any, jpegs: list[bytes], fn: Callable[[bytes], Any]) -> list:
    """Time ``fn`` over ``jpegs`` against ``cv2.imdecode`` of the same bytes, alternately
    (one thread); returns the results of ``fn`` and of ``cv2.imdecode``."""
    assert JPEG_EXTENSION, "fastdata.decode._jpeg was not built: install libjpeg-turbo's headers"
    arrays = [np.frombuffer(data, np.uint8) for data in jpegs]
    got = measure_interleaved(
        benchmark,
        lambda: [fn(data) for data in jpegs],
        {"opencv-imdecode": lambda: [cv2.imdecode(a, cv2.IMREAD_COLOR_RGB) for a in arrays]},
        items=len(jpegs),
        rounds=scaled(15, 9),
    )
    benchmark.extra_info["data"] = describe_images(jpegs)
    return [got["fastdata"], got["opencv-imdecode"]]


@pytest.mark.benchmark(group="decode-checked")
def test_decode_checked(benchmark: Any, small_jpegs: list[bytes]) -> None:
    ours, theirs = against_imdecode(benchmark, small_jpegs, decode_image)
    for image, expected in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(image, expected)  # the same pixels, checked


@pytest.mark.benchmark(group="jpeg-check")
def test_jpeg_check(benchmark: Any, small_jpegs: list[bytes]) -> None:
    verdicts, _ = against_imdecode(benchmark, small_jpegs, _libjpeg.check)
    assert all(verdict is True for verdict in verdicts)


# A 224 centre crop, decoded at the reduction its size allows or in full.
REDUCED: dict[str, Callable[[int, bytes], np.ndarray]] = {
    "fastdata": lambda i, data: CENTER_224(decode_image(data, size=CENTER_224.decode_size)),
    "baseline:full-decode": lambda i, data: CENTER_224(decode_image(data)),
}
# A 224 random-resized crop, each decoded at the reduction its box allows, or in full.
REDUCED_CROP: dict[str, Callable[[int, bytes], np.ndarray]] = {
    "fastdata": lambda i, data: RRC_224.apply(*decode_for(data, RRC_224, sample_rng(0, 0, i))),
    "baseline:full-decode": lambda i, data: RRC_224(decode_image(data), sample_rng(0, 0, i)),
}


def measure_large(
    benchmark: Any, large_jpegs: list[bytes], role: str, sample: Callable[[int, bytes], np.ndarray]
) -> None:
    """Time ``sample(i, data)`` over the large JPEGs, as ``role``."""
    out = measure(
        benchmark,
        lambda: [sample(i, data) for i, data in enumerate(large_jpegs)],
        role=role,
        items=len(large_jpegs),
    )
    assert out[0].shape == (224, 224, 3)
    benchmark.extra_info["data"] = describe_images(large_jpegs)


@pytest.mark.benchmark(group="decode-reduced")
@pytest.mark.parametrize("role", list(REDUCED))
def test_decode_reduced(benchmark: Any, large_jpegs: list[bytes], role: str) -> None:
    measure_large(benchmark, large_jpegs, role, REDUCED[role])


@pytest.mark.benchmark(group="decode-reduced-crop")
@pytest.mark.parametrize("role", list(REDUCED_CROP))
def test_decode_reduced_crop(benchmark: Any, large_jpegs: list[bytes], role: str) -> None:
    measure_large(benchmark, large_jpegs, role, REDUCED_CROP[role])


@pytest.mark.benchmark(group="decode-region")
def test_decode_region(benchmark: Any, small_jpegs: list[bytes]) -> None:
    assert JPEG_EXTENSION, "fastdata.decode._jpeg was not built: install libjpeg-turbo's headers"

    def run(region: bool) -> list[np.ndarray]:
        return [
            RRC_224.apply(*decode_for(data, RRC_224, sample_rng(0, 0, i), region=region))
            for i, data in enumerate(small_jpegs)
        ]

    got = measure_interleaved(
        benchmark,
        lambda: run(True),
        {"whole-image": lambda: run(False)},
        items=len(small_jpegs),
        rounds=scaled(15, 9),
    )
    for ours, theirs in zip(got["fastdata"], got["whole-image"], strict=True):
        np.testing.assert_array_equal(ours, theirs)
    benchmark.extra_info["data"] = describe_images(small_jpegs)


@pytest.mark.benchmark(group="resize-antialias")
def test_resize_antialias(benchmark: Any, small_jpegs: list[bytes]) -> None:
    images = [decode_image(b) for b in small_jpegs]
    pil_images = [Image.fromarray(img) for img in images]
    boxes = [
        RRC_224.geometry(img.shape[:2], sample_rng(0, 0, i)).box for i, img in enumerate(images)
    ]

    def ours(interpolation: str) -> list[np.ndarray]:
        return [
            resize(img[top : top + h, left : left + w], (224, 224), interpolation=interpolation)
            for img, (top, left, h, w) in zip(images, boxes, strict=True)
        ]

    def pil() -> list[np.ndarray]:
        return [
            np.asarray(im.crop((left, top, left + w, top + h)).resize((224, 224), Image.BILINEAR))
            for im, (top, left, h, w) in zip(pil_images, boxes, strict=True)
        ]

    got = measure_interleaved(
        benchmark,
        lambda: ours("antialias"),
        {"area": lambda: ours("auto"), "pil-bilinear": pil},
        items=len(images),
        rounds=scaled(15, 9),
    )
    # The recipe's pixels, to a grey level (2 of the 38.5 million values of full mode: two).
    pairs = zip(got["fastdata"], got["pil-bilinear"], strict=True)
    assert max(np.abs(ours.astype(int) - theirs).max() for ours, theirs in pairs) <= 2
    benchmark.extra_info["data"] = describe_images(small_jpegs)
