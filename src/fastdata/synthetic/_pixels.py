"""Synthetic image pixels and their encoding, for :mod:`fastdata.synthetic`.

:func:`synth_image` draws a photo-like image from a random generator alone (see its
docstring for the two textures); :func:`encode_image` encodes it with OpenCV.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt

from fastdata._validate import check_choice, check_int

__all__ = ["CODECS", "TEXTURES", "codec", "encode_image", "synth_image"]

_U8: np.dtype[Any] = np.dtype(np.uint8)
_U16: np.dtype[Any] = np.dtype(np.uint16)
# fmt -> (file extension, channel counts, dtypes) that OpenCV encodes and decodes unchanged.
CODECS = {
    "jpeg": (".jpg", (1, 3), (_U8,)),
    "png": (".png", (1, 3, 4), (_U8, _U16)),
    "webp": (".webp", (3, 4), (_U8,)),
}

_GRADIENT_RANGES = ((64.0, 192.0), (-96.0, 96.0), (-96.0, 96.0))  # base, slope down, slope right
_NOISE_SIGMA = 3.0  # in 8-bit levels: photo-like grain that JPEG cannot code for free
_NOISE_TILE = 256  # noise is drawn once per image on a tile and repeated: 20x cheaper
# texture="photo": detail in octaves of value noise (cells of 1 to 32 px, coarser ones
# stronger, the middle ones clipped into sharp-edged blobs like foliage or gravel), its
# strength varying across the image and from image to image, over the smooth composition.
# Tuned so that JPEGs at quality 90 hold about 0.55 bytes per pixel, as ImageNet's do. The
# cells grow with the image past a shorter side of _DETAIL_SIDE px: a larger photo of the same
# kind of scene has its detail spread over more pixels (a 12-megapixel camera JPEG holds far
# fewer bytes per pixel than an ImageNet one).
TEXTURES = ("photo", "smooth")
_LUMA_CELLS, _LUMA_SLOPE, _EDGE_CELLS, _EDGE_GAIN = (1, 2, 4, 8, 16, 32), 0.2, (4, 8), 4.0
_CHROMA_CELLS, _CHROMA_SLOPE = (2, 4, 8), 0.3
_LUMA_LEVELS, _CHROMA_LEVELS = 50.0, 16.0  # standard deviations, in 8-bit levels
_STRENGTH = (0.6, 1.4)  # per image: some photos are busy, some are mostly sky
_DETAIL_SIDE = 500


def synth_image(
    rng: np.random.Generator,
    height: int,
    width: int,
    *,
    channels: int = 3,
    dtype: npt.DTypeLike = np.uint8,
    texture: str = "photo",
) -> np.ndarray:
    """A photo-like image: smooth gradients and 3 to 8 filled shapes, textured.

    Decoding cost follows the entropy of the data: a smooth image decodes several times
    faster than a photo of its size, and would flatter every decoder in a benchmark. With
    ``texture="photo"`` (the default) the image carries detail at every scale, as photos of
    foliage, fur or gravel do, so that a JPEG of it at quality 90 holds about 0.55 bytes per
    pixel, as ImageNet's JPEGs do (about 110 KB at 470x390); ``"smooth"`` adds only mild
    gaussian grain instead (about 0.15 bytes per pixel: small files, fast to write and to
    decode, for tests that need speed rather than realism).

    Args:
        rng: the only source of randomness; the same generator state gives the same image.
        height: rows, at least 1.
        width: columns, at least 1.
        channels: 1 (gray), 3 (RGB) or 4 (RGBA).
        dtype: ``np.uint8`` or ``np.uint16`` (full 16-bit range, for 16-bit PNG).
        texture: ``"photo"`` or ``"smooth"``.

    Returns:
        An array of shape ``(height, width, channels)`` in RGB(A) order.

    Raises:
        ValueError: a size, channel count or dtype outside the valid values.
    """
    check_int("height", height, minimum=1)
    check_int("width", width, minimum=1)
    if channels not in (1, 3, 4):
        raise ValueError(f"channels={channels!r} is not supported: expected 1, 3 or 4")
    out = np.dtype(dtype)
    if out not in (np.uint8, np.uint16):
        raise ValueError(f"dtype={out} is not supported: expected uint8 or uint16")
    check_choice("texture", texture, TEXTURES)
    ys = np.linspace(-0.5, 0.5, height, dtype=np.float32)[:, None, None]
    xs = np.linspace(-0.5, 0.5, width, dtype=np.float32)[None, :, None]
    base, slope_y, slope_x = (
        rng.uniform(lo, hi, channels).astype(np.float32) for lo, hi in _GRADIENT_RANGES
    )
    image = (base + ys * slope_y) + xs * slope_x  # float32 (height, width, channels), 8-bit scale
    for _ in range(int(rng.integers(3, 9))):
        _draw_shape(image, rng)
    if texture == "photo":
        _add_detail(image, rng)
    else:
        _add_grain(image, rng)
    if out == np.uint16:
        image *= 257  # 255 * 257 = 65535: use the whole 16-bit range
    np.clip(image, 0, np.iinfo(out).max, out=image)
    return image.astype(out)


def _add_grain(image: np.ndarray, rng: np.random.Generator) -> None:
    """Add mild gaussian grain (``texture="smooth"``), drawn on one tile and repeated."""
    height, width, channels = image.shape
    tile = rng.standard_normal(
        (min(height, _NOISE_TILE), min(width, _NOISE_TILE), channels), dtype=np.float32
    )
    tile *= _NOISE_SIGMA
    for y in range(0, height, _NOISE_TILE):
        for x in range(0, width, _NOISE_TILE):
            block = image[y : y + _NOISE_TILE, x : x + _NOISE_TILE]
            block += tile[: block.shape[0], : block.shape[1]]


def _add_detail(image: np.ndarray, rng: np.random.Generator) -> None:
    """Add photo-like detail (``texture="photo"``): one luminance texture over every channel,
    and a weaker, coarser texture per colour channel."""
    height, width, channels = image.shape
    strength = rng.uniform(*_STRENGTH)
    scale = max(1, round(min(height, width) / _DETAIL_SIDE))
    luma = _octaves(rng, height, width, 1, _LUMA_CELLS, _LUMA_SLOPE, scale)
    activity = cv2.resize(_noise(rng, 4, 4, 1), (width, height), interpolation=cv2.INTER_CUBIC)
    np.clip(activity * (2 / 255), 0.15, 2.0, out=activity)  # busy here, smooth there
    luma *= activity * (strength * _LUMA_LEVELS / max(float(luma.std()), 1e-6))
    image += luma[:, :, None]
    if channels >= 3:
        chroma = _octaves(rng, height, width, 3, _CHROMA_CELLS, _CHROMA_SLOPE, scale)
        chroma *= strength * _CHROMA_LEVELS / max(float(chroma.std()), 1e-6)
        image[:, :, :3] += chroma


def _octaves(
    rng: np.random.Generator,
    height: int,
    width: int,
    channels: int,
    cells: Sequence[int],
    slope: float,
    scale: int,
) -> np.ndarray:
    """Value noise summed over ``cells`` (grid spacings, times ``scale`` pixels), each octave
    weighted by ``cell ** slope``; the luminance octaves of :data:`_EDGE_CELLS` are clipped
    into sharp-edged blobs. Float32 ``(height, width)``, or ``(height, width, channels)``."""
    total = np.zeros((height, width, channels) if channels > 1 else (height, width), np.float32)
    for cell in cells:
        step = cell * scale
        rows, cols = -(-height // step) + 1, -(-width // step) + 1
        grid = _noise(rng, rows, cols, channels)
        grid -= 127.5
        if step > 1:
            grid = cv2.resize(grid, (cols * step, rows * step), interpolation=cv2.INTER_LINEAR)
        grid = grid[:height, :width]
        if channels == 1 and cell in _EDGE_CELLS:
            grid = np.clip(grid * _EDGE_GAIN, -127.5, 127.5)
        cv2.scaleAdd(grid, float(cell**slope), total, dst=total)
    return total


def _noise(rng: np.random.Generator, rows: int, cols: int, channels: int) -> np.ndarray:
    """Uniform noise in [0, 255] as float32, from random bytes (several times cheaper than
    gaussian draws)."""
    shape = (rows, cols, channels) if channels > 1 else (rows, cols)
    return (
        np.frombuffer(rng.bytes(rows * cols * channels), np.uint8).reshape(shape).astype(np.float32)
    )


def _draw_shape(image: np.ndarray, rng: np.random.Generator) -> None:
    """Fill one random circle, rectangle or star-shaped polygon into ``image`` in place."""
    height, width, channels = image.shape
    color = tuple(rng.uniform(0.0, 255.0, size=(channels,)).tolist())
    center = (int(rng.integers(0, width)), int(rng.integers(0, height)))
    radius = int(rng.integers(max(1, min(height, width) // 16), max(2, min(height, width) // 3)))
    kind = int(rng.integers(0, 3))
    if kind == 0:
        cv2.circle(image, center, radius, color, thickness=-1, lineType=cv2.LINE_AA)
    elif kind == 1:
        corner = (int(rng.integers(0, width)), int(rng.integers(0, height)))
        cv2.rectangle(image, center, corner, color, thickness=-1, lineType=cv2.LINE_AA)
    else:
        vertices = int(rng.integers(3, 8))
        angles = np.sort(rng.uniform(0.0, 2 * np.pi, vertices))
        radii = radius * rng.uniform(0.3, 1.0, vertices)
        points = np.stack([center[0] + radii * np.cos(angles), center[1] + radii * np.sin(angles)])
        cv2.fillPoly(image, [np.rint(points.T).astype(np.int32)], color, lineType=cv2.LINE_AA)


def encode_image(image: np.ndarray, /, *, fmt: str = "jpeg", quality: int = 90) -> bytes:
    """Encode an RGB(A) or gray image with OpenCV, converting to OpenCV's BGR(A) order first.

    Args:
        image: ``(H, W)``, ``(H, W, 1)``, ``(H, W, 3)`` RGB or ``(H, W, 4)`` RGBA; uint8, or
            uint16 for PNG.
        fmt: ``"jpeg"`` (1 or 3 channels), ``"png"`` (1, 3 or 4) or ``"webp"`` (3 or 4).
        quality: JPEG / WebP quality in [1, 100]. PNG is lossless and ignores it (it is written
            at the fixed zlib level 1 so that files stay byte-identical across OpenCV defaults).

    Returns:
        The encoded file contents.

    Raises:
        ValueError: an unknown format, a bad quality, or a shape/dtype the format cannot hold.
    """
    ext, valid_channels, valid_dtypes = codec(fmt)
    check_int("quality", quality, minimum=1, maximum=100)
    if image.ndim not in (2, 3):
        raise ValueError(f"image.shape={image.shape}: expected (H, W) or (H, W, C)")
    channels = 1 if image.ndim == 2 else image.shape[2]
    if channels not in valid_channels or image.dtype not in valid_dtypes:
        raise ValueError(
            f"fmt={fmt!r} cannot hold an image with {channels} channel(s) of {image.dtype}: "
            f"it takes {valid_channels} channels of {[str(d) for d in valid_dtypes]}"
        )
    if channels == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    elif channels == 4:
        image = cv2.cvtColor(image, cv2.COLOR_RGBA2BGRA)
    flag = {"jpeg": cv2.IMWRITE_JPEG_QUALITY, "webp": cv2.IMWRITE_WEBP_QUALITY}.get(fmt)
    params = [cv2.IMWRITE_PNG_COMPRESSION, 1] if flag is None else [flag, quality]
    ok, buffer = cv2.imencode(ext, image, params)
    if not ok:
        raise RuntimeError(f"OpenCV could not encode a {image.shape} {image.dtype} image as {fmt}")
    return buffer.tobytes()


def codec(fmt: str) -> tuple[str, tuple[int, ...], tuple[np.dtype[Any], ...]]:
    """The codec entry of ``fmt``; ValueError listing the formats if there is none."""
    if fmt not in CODECS:
        raise ValueError(f"fmt={fmt!r} is not supported: expected one of {list(CODECS)}")
    return CODECS[fmt]
