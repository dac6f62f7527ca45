"""Images and encoders shared by the decoding tests (made here: no files, no downloads)."""

from __future__ import annotations

import io
import math
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from hypothesis import settings
from PIL import Image, ImageOps

import fastdata
from fastdata.decode import (
    JPEG_EXTENSION,
    ImageTransform,
)
from fastdata.decode import _libjpeg as _libjpeg

FEW = settings(max_examples=25, deadline=None)


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB uint8 image: smooth gradients, flat shapes with edges, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 128 + 100 * np.sin((x + y) / 17)], -1
    ).astype(np.uint8)
    for _ in range(4):
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        cv2.circle(img, (cx, cy), int(rng.integers(1, max(2, min(h, w) // 3))), color, -1)
    return np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)


def chw(img: np.ndarray) -> torch.Tensor:
    """An HWC image as torchvision takes it: a CHW tensor sharing its memory."""
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)


def cv_encode(rgb: np.ndarray, ext: str = ".jpg", *params: int) -> bytes:
    """Encode an RGB (or gray / RGBA / 16-bit) array with OpenCV, which expects BGR order."""
    if rgb.ndim == 3:
        rgb = rgb[..., [2, 1, 0, 3][: rgb.shape[2]]]
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(rgb), list(params))
    assert ok
    return buf.tobytes()


def pil_encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def pil_decode(data: bytes) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


RGB = photo(48, 64)
ALPHA = np.dstack([RGB, np.linspace(0, 255, 48 * 64).reshape(48, 64).astype(np.uint8)])

# name -> (encoded bytes, original RGB pixels the decode should reproduce)
FORMATS = {
    "jpeg": (cv_encode(RGB, ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90), RGB),
    "jpeg-progressive": (pil_encode(Image.fromarray(RGB), "JPEG", progressive=True), RGB),
    "jpeg-gray": (cv_encode(RGB[..., 1], ".jpg"), np.repeat(RGB[..., 1:2], 3, 2)),
    "png-rgb": (cv_encode(RGB, ".png"), RGB),
    "png-gray": (cv_encode(RGB[..., 0], ".png"), np.repeat(RGB[..., :1], 3, 2)),
    "png-rgba": (cv_encode(ALPHA, ".png"), RGB),
    "png-palette": (
        pil_encode(Image.fromarray(RGB).quantize(64), "PNG"),
        np.asarray(Image.fromarray(RGB).quantize(64).convert("RGB")),
    ),
    "webp-lossy": (pil_encode(Image.fromarray(RGB), "WEBP", quality=85), RGB),
    "webp-lossless": (pil_encode(Image.fromarray(RGB), "WEBP", lossless=True), RGB),
    "webp-alpha": (pil_encode(Image.fromarray(ALPHA), "WEBP", lossless=True, exact=True), RGB),
    "bmp": (cv_encode(RGB, ".bmp"), RGB),
}


def exif_jpeg(rgb: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pil_encode(Image.fromarray(rgb), "JPEG", quality=95, exif=exif.tobytes())


def fake_png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 99))


RRC_224 = ImageTransform(size=224, crop="random-resized", flip=True)


def exif_segment(orientation: int, kind: int = 3, order: str = "<") -> bytes:
    """An APP1 Exif segment whose one IFD entry is the orientation, as SHORT (3) or LONG (4)."""
    value = struct.pack(order + ("HH" if kind == 3 else "I"), orientation, *([0] * (kind == 3)))
    ifd = struct.pack(order + "HHHI", 1, 0x0112, kind, 1) + value + struct.pack(order + "I", 0)
    tiff = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8) + ifd
    payload = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


_jpeg = _libjpeg._jpeg  # the extension itself (None when it was not built or disagrees)
needs_extension = pytest.mark.skipif(
    not JPEG_EXTENSION,
    reason="fastdata.decode._jpeg was not built (no libjpeg-turbo headers)",
)
SAMPLINGS = {
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "440": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440,
    "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
}


def jpeg(img: np.ndarray, sampling: str = "420", progressive: bool = False, restart: int = 0):
    """A JPEG of ``img`` (gray when 2-D) with the given chroma sampling and coding options."""
    return cv_encode(
        img,
        ".jpg",
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
        SAMPLINGS[sampling],
        cv2.IMWRITE_JPEG_PROGRESSIVE,
        int(progressive),
        cv2.IMWRITE_JPEG_RST_INTERVAL,
        restart,
    )


JPEG = FORMATS["jpeg"][0]


def segment_end(data: bytes, marker: bytes) -> tuple[int, int]:
    """Start and end of the first segment with ``marker`` (two bytes, with its length)."""
    start = data.index(marker)
    return start, start + 2 + struct.unpack_from(">H", data, start + 2)[0]


def corrupt_jpegs(data: bytes, seed: int) -> dict[str, bytes]:
    """Damaged versions of a JPEG, named by what was done: the ways files break in the wild
    (bits flipped and bytes overwritten in the scan, cut downloads, lost markers, stray bytes)
    and two harmless changes (bytes after the end-of-image marker, no Huffman tables, for
    which libjpeg has the standard ones)."""
    rng = np.random.default_rng(seed)
    scan = segment_end(data, b"\xff\xda")[1]
    end = len(data) - 2  # the end-of-image marker

    def changed(position: int, new: bytes) -> bytes:
        return data[:position] + new + data[position + len(new) :]

    cases = {}
    for i in range(6):
        position = int(rng.integers(scan, end))
        cases[f"bit-flip-{i}"] = changed(position, bytes([data[position] ^ 1 << i]))
    for i in range(3):
        position = int(rng.integers(scan, end - 8))
        cases[f"bytes-overwritten-{i}"] = changed(position, rng.bytes(8))
    middle = (scan + end) // 2
    cases["marker-in-scan"] = data[:middle] + b"\xff\xd3" + data[middle:]
    cases["cut-in-scan"] = data[: int(rng.integers(scan + 10, end - 10))]
    cases["cut-in-header"] = data[: scan - 4]
    cases["no-end-marker"] = data[:end]
    cases["bytes-before-end-marker"] = data[:end] + b"\x00" * 64 + data[end:]
    for name, marker in (("frame", b"\xff\xc0"), ("quantisation", b"\xff\xdb")):
        if marker in data[:scan]:
            start, stop = segment_end(data, marker)
            cases[f"no-{name}-header"] = data[:start] + data[stop:]
    cases["no-start-marker"] = data[2:]
    cases["bytes-after-end-marker"] = data + b"\0trailing bytes"
    start, stop = segment_end(data, b"\xff\xc4")
    cases["no-huffman-tables"] = (
        data[:start] + data[stop:] if data.count(b"\xff\xc4") == 1 else data
    )
    return cases


HARMLESS = ("bytes-after-end-marker", "no-huffman-tables")
"""The cases of :func:`corrupt_jpegs` that are whole, valid images."""


CLEAN = {
    "baseline": jpeg(photo(120, 160, seed=1)),
    "restarts": jpeg(photo(120, 160, seed=2), "422", restart=2),
    "progressive": jpeg(photo(120, 160, seed=3), "444", progressive=True),
    "gray": jpeg(photo(96, 72, seed=4)[:, :, 0]),
}
"""Clean JPEGs of the kinds the corrupt corpus damages."""
CORPUS = {
    f"{kind}/{case}": damaged
    for seed, (kind, data) in enumerate(CLEAN.items())
    for case, damaged in corrupt_jpegs(data, seed).items()
}
"""``"kind/case"`` -> the damaged file: :func:`corrupt_jpegs` of each clean JPEG."""


def opencv(data: bytes, factor: int) -> np.ndarray:
    """OpenCV's RGB decode of a JPEG at ``1 / factor``, in its stored orientation."""
    flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION | _libjpeg.REDUCED_FLAGS[factor]
    return cv2.imdecode(np.frombuffer(data, np.uint8), flags)


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter that imports fastdata and these tests' helpers."""
    path = [str(Path(fastdata.__file__).parents[1]), str(Path(__file__).parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
