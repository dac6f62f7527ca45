"""Deterministic synthetic data for demos, tests and benchmarks: images, Parquet, tar shards.

Nothing is downloaded: every file is a pure function of the arguments (byte-identical for the
same numpy, OpenCV and pyarrow versions), so tests and benchmarks rebuild their data anywhere,
at any size. Image ``i`` depends only on the seed, ``i`` and the image options, so the
ImageFolder tree, the Parquet binary column and the tar shards hold the same images and labels
as :func:`make_image_bytes`. Bad arguments raise ValueError naming the value and the valid
values (TypeError for a count that is not an integer).
"""

from __future__ import annotations

import io
import itertools
import math
import numbers
import os
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fastdata._validate import check_choice

__all__ = [
    "encode_image",
    "make_image_bytes",
    "make_image_parquet",
    "make_images",
    "make_parquet",
    "make_tar_shards",
    "synth_image",
]

_U8: np.dtype[Any] = np.dtype(np.uint8)
_U16: np.dtype[Any] = np.dtype(np.uint16)
# fmt -> (file extension, channel counts, dtypes) that OpenCV encodes and decodes unchanged.
_CODECS = {
    "jpeg": (".jpg", (1, 3), (_U8,)),
    "png": (".png", (1, 3, 4), (_U8, _U16)),
    "webp": (".webp", (3, 4), (_U8,)),
}
# mode -> (channels, dtype) of the image synthesized for it.
_MODES = {"rgb": (3, _U8), "gray": (1, _U8), "rgba": (4, _U8), "gray16": (1, _U16)}
# Independent random streams per generator, so that adding one never shifts another.
_IMAGE_STREAM, _PARQUET_STREAM = 1, 2
_LARGE_LONG_SIDE = (2000, 2400)  # ``large`` images: room for 1/2..1/8 DCT-domain decoding
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
_TEXTURES = ("photo", "smooth")
_LUMA_CELLS, _LUMA_SLOPE, _EDGE_CELLS, _EDGE_GAIN = (1, 2, 4, 8, 16, 32), 0.2, (4, 8), 4.0
_CHROMA_CELLS, _CHROMA_SLOPE = (2, 4, 8), 0.3
_LUMA_LEVELS, _CHROMA_LEVELS = 50.0, 16.0  # standard deviations, in 8-bit levels
_STRENGTH = (0.6, 1.4)  # per image: some photos are busy, some are mostly sky
_DETAIL_SIDE = 500
_DEFAULT_ROWS, _DEFAULT_FILES = 10_000, 4
_TOKEN_VOCAB, _TOKEN_MEDIAN = 32_000, 24  # token ids in [0, vocab); lognormal length median
_IMAGE_COLUMNS = (("id", pa.int64()), ("image", pa.binary()), ("label", pa.int32()))
_ROWS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("label", pa.int32(), nullable=False),
        pa.field("x", pa.float32()),
        pa.field("text", pa.string()),
        pa.field("tokens", pa.list_(pa.int32())),
    ]
)
_IMAGES_SCHEMA = pa.schema([pa.field(name, kind, nullable=False) for name, kind in _IMAGE_COLUMNS])
_WORDS = [a + b for a in ("ka", "lo", "mi", "su", "te") for b in ("n", "ra", "to", "vel")]


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
    _check_int("height", height, 1)
    _check_int("width", width, 1)
    if channels not in (1, 3, 4):
        raise ValueError(f"channels={channels!r} is not supported: expected 1, 3 or 4")
    out = np.dtype(dtype)
    if out not in (np.uint8, np.uint16):
        raise ValueError(f"dtype={out} is not supported: expected uint8 or uint16")
    check_choice("texture", texture, _TEXTURES)
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
    ext, valid_channels, valid_dtypes = _codec(fmt)
    _check_int("quality", quality, 1, 100)
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


@dataclass(frozen=True)
class _ImageSpec:
    """Validated image options shared by every image layout; ``sample(i)`` makes image ``i``."""

    seed: int
    classes: int
    fmt: str
    quality: int
    mode: str
    large: int
    min_short: int
    max_short: int
    texture: str

    def validated(self, n: int) -> _ImageSpec:
        """``self`` once every option (and the image count ``n``) is valid; else ValueError."""
        _check_int("n", n, 0)
        _check_int("seed", self.seed, 0)
        _check_int("classes", self.classes, 1)
        _check_int("large", self.large, 0)
        if self.large > n:
            raise ValueError(f"large={self.large} exceeds n={n}: at most n images can be large")
        _check_int("min_short", self.min_short, 16)
        _check_int("max_short", self.max_short, self.min_short)
        _check_int("quality", self.quality, 1, 100)
        check_choice("texture", self.texture, _TEXTURES)
        _, valid_channels, valid_dtypes = _codec(self.fmt)
        valid = [m for m, (c, d) in _MODES.items() if c in valid_channels and d in valid_dtypes]
        if self.mode not in valid:
            raise ValueError(
                f"mode={self.mode!r} is not available with fmt={self.fmt!r}: expected one of "
                f"{valid} (modes are {list(_MODES)}; gray16 needs png, rgba png or webp)"
            )
        return self

    def sample(self, i: int) -> tuple[bytes, int]:
        """Image ``i`` encoded, and its label ``i % classes``; a function of (options, i) only."""
        rng = np.random.default_rng([self.seed, _IMAGE_STREAM, i])
        ratio = rng.uniform(1.0, 4 / 3)
        if i < self.large:
            long = int(rng.integers(_LARGE_LONG_SIDE[0], _LARGE_LONG_SIDE[1] + 1))
            short = max(math.ceil(long / ratio), -(-3 * long // 4))  # keeps long/short <= 4/3
        else:
            short = int(rng.integers(self.min_short, self.max_short + 1))
            long = min(int(short * ratio), 4 * short // 3)
        height, width = (long, short) if rng.random() < 0.5 else (short, long)
        channels, dtype = _MODES[self.mode]
        pixels = synth_image(
            rng, height, width, channels=channels, dtype=dtype, texture=self.texture
        )
        return encode_image(pixels, fmt=self.fmt, quality=self.quality), i % self.classes


def make_image_bytes(
    n: int,
    /,
    *,
    seed: int = 0,
    classes: int = 4,
    fmt: str = "jpeg",
    quality: int = 90,
    mode: str = "rgb",
    large: int = 0,
    min_short: int = 300,
    max_short: int = 500,
    texture: str = "photo",
) -> list[tuple[bytes, int]]:
    """``n`` encoded images with their labels, in memory: the content of every image layout.

    Args:
        n: number of images.
        seed: non-negative seed; image ``i`` depends only on the seed, ``i`` and the options.
        classes: labels are ``i % classes``, so classes are balanced (to within one image).
        fmt: ``"jpeg"``, ``"png"`` or ``"webp"``.
        quality: JPEG / WebP quality in [1, 100] (PNG is lossless and ignores it).
        mode: ``"rgb"``, ``"gray"`` (jpeg, png), ``"rgba"`` (png, webp) or ``"gray16"``
            (16-bit single channel, png only).
        large: the first ``large`` images get a long side of 2000-2400 px, for tests of
            reduced-resolution decoding.
        min_short: smallest short side of the other images (at least 16).
        max_short: largest short side; short sides are uniform in [min_short, max_short], the
            aspect ratio uniform in 3:4..4:3 with a random orientation, like ImageNet.
        texture: ``"photo"`` (the default: about 0.55 bytes per pixel as JPEG at quality 90,
            ImageNet's entropy, so that decoding costs what it costs on photos) or
            ``"smooth"`` (about 0.15: small, fast files for tests); see :func:`synth_image`.

    Returns:
        ``[(encoded image, label), ...]`` in index order.

    Raises:
        ValueError: an option outside its valid values, or a mode the format cannot hold.
    """
    spec = _ImageSpec(
        seed, classes, fmt, quality, mode, large, min_short, max_short, texture
    ).validated(n)
    return [spec.sample(i) for i in range(n)]


def make_images(
    root: str | os.PathLike[str],
    /,
    n: int = 32,
    *,
    classes: int = 4,
    seed: int = 0,
    fmt: str = "jpeg",
    quality: int = 90,
    mode: str = "rgb",
    large: int = 0,
    min_short: int = 300,
    max_short: int = 500,
    texture: str = "photo",
) -> list[Path]:
    """Write an ImageFolder tree ``root/class_XX/img_XXXXX.jpg`` of :func:`make_image_bytes`.

    Class folders are zero-padded so that their sorted order is the class index, as
    ``torchvision.datasets.ImageFolder`` assigns it; image numbers are the global index ``i``.
    Only classes that get an image get a folder (with ``n < classes`` that is the first ``n``),
    so the folder order still matches the labels. Files of the same names are overwritten;
    other files under ``root`` are left alone.

    The image options ``classes``, ``seed``, ``fmt``, ``quality``, ``mode``, ``large``,
    ``min_short``, ``max_short`` and ``texture`` are as in :func:`make_image_bytes`; ``fmt`` also
    sets the file extension.

    Args:
        root: the folder to write into; created if missing.
        n: number of images.

    Returns:
        The paths written, sorted.

    Raises:
        ValueError: an option outside its valid values, or a mode the format cannot hold.
    """
    spec = _ImageSpec(
        seed, classes, fmt, quality, mode, large, min_short, max_short, texture
    ).validated(n)
    root = _make_root(root)
    class_width, index_width = _width(classes, 2), _width(n, 5)
    paths = []
    for i in range(n):
        data, label = spec.sample(i)
        folder = root / f"class_{label:0{class_width}d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"img_{i:0{index_width}d}{_CODECS[fmt][0]}"
        path.write_bytes(data)
        paths.append(path)
    return sorted(paths)


def make_parquet(
    root: str | os.PathLike[str],
    /,
    rows: int = _DEFAULT_ROWS,
    *,
    files: int = _DEFAULT_FILES,
    row_group_size: int = 1024,
    seed: int = 0,
    null_fraction: float = 0.0,
    max_tokens: int = 512,
    rows_per_file: Sequence[int] | None = None,
) -> list[Path]:
    """Write Parquet files ``part-00000.parquet``... of tabular rows with a ragged column.

    Columns: ``id`` int64, the global row index ``0..rows-1`` in file order (so readers can
    check exactly-once delivery); ``label`` int32 in 0..9; ``x`` float32 standard normal;
    ``text`` string of 1-8 short words; ``tokens`` list<int32> of ids in [0, 32000) with
    long-tailed lengths like tokenized text (lognormal, median 24, clipped to [1, max_tokens]).
    ``id`` and ``label`` are non-nullable. Columns are built vectorised: a million rows take
    seconds, mostly in the Parquet writer. Rows are split as evenly as possible, earlier files
    taking the remainder, so with ``rows < files`` the last files are empty (one empty row
    group). File ``k`` is drawn from its own random stream ``(seed, k)``.

    Args:
        root: the folder to write into; created if missing.
        rows: total number of rows.
        files: number of files.
        row_group_size: rows per row group (the last group of a file may be smaller).
        seed: non-negative seed.
        null_fraction: probability in [0, 1] of a null, drawn independently for ``x``,
            ``text`` and ``tokens`` (never ``id`` or ``label``).
        max_tokens: the longest ``tokens`` list, at least 1.
        rows_per_file: exact row counts, one per file, zeros allowed (for tests of empty
            files). It fixes the layout: ``rows`` and ``files`` must then keep their defaults
            or agree with it.

    Returns:
        The paths written, in file order.

    Raises:
        ValueError: an option outside its valid values, or a file with 2**31 tokens or more.
    """
    ranges = _file_ranges(rows, files, rows_per_file)
    _check_int("row_group_size", row_group_size, 1)
    _check_int("seed", seed, 0)
    _check_int("max_tokens", max_tokens, 1)
    if not 0.0 <= null_fraction <= 1.0:
        raise ValueError(f"null_fraction={null_fraction!r} is not a probability: expected [0, 1]")
    root = _make_root(root)
    paths, width = [], _width(len(ranges), 5)
    for k, ids in enumerate(ranges):
        rng = np.random.default_rng([seed, _PARQUET_STREAM, k])
        table = _rows_table(rng, ids, null_fraction, max_tokens)
        paths.append(_write_parquet(table, root / f"part-{k:0{width}d}.parquet", row_group_size))
    return paths


def _rows_table(
    rng: np.random.Generator, ids: range, null_fraction: float, max_tokens: int
) -> pa.Table:
    """The rows with global indices ``ids`` of :func:`make_parquet`, drawn from ``rng``."""
    count = len(ids)
    x_null, text_null, tokens_null = (rng.random(count) < null_fraction for _ in range(3))
    label = rng.integers(0, 10, count, dtype=np.int32)
    x = rng.standard_normal(count, dtype=np.float32)
    words = np.where(text_null, 0, rng.integers(1, 9, count))
    lengths = np.rint(rng.lognormal(math.log(_TOKEN_MEDIAN), 1.0, count))
    lengths = np.where(tokens_null, 0, np.clip(lengths, 1, max_tokens)).astype(np.int64)
    if lengths.sum() >= 2**31:
        raise ValueError(
            f"{count} rows make {lengths.sum()} tokens, over the 2**31 a list<int32> column of "
            f"one file can offset: use more files or a smaller max_tokens"
        )
    vocabulary = pa.array(_WORDS).take(rng.integers(0, len(_WORDS), int(words.sum())))
    text = pc.binary_join(_lists(words, vocabulary, text_null), " ")
    token_ids = pa.array(rng.integers(0, _TOKEN_VOCAB, int(lengths.sum()), dtype=np.int32))
    columns = [
        pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
        pa.array(label),
        pa.array(x, mask=x_null),
        text,
        _lists(lengths, token_ids, tokens_null),
    ]
    return pa.Table.from_arrays(columns, schema=_ROWS_SCHEMA)


def _lists(lengths: np.ndarray, values: pa.Array, null: np.ndarray) -> pa.ListArray:
    """A list array of consecutive ``values`` slices of ``lengths``, null where ``null``."""
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum(lengths)
    return pa.ListArray.from_arrays(pa.array(offsets), values, mask=pa.array(null))


def make_image_parquet(
    root: str | os.PathLike[str],
    /,
    n: int = 64,
    *,
    files: int = 2,
    row_group_size: int = 16,
    seed: int = 0,
    classes: int = 4,
    fmt: str = "jpeg",
    quality: int = 90,
    mode: str = "rgb",
    large: int = 0,
    min_short: int = 300,
    max_short: int = 500,
    texture: str = "photo",
) -> list[Path]:
    """Write :func:`make_image_bytes` as Parquet ``part-00000.parquet``...: id, image, label.

    Columns: ``id`` int64 (the image index ``i``, in file order), ``image`` binary (the encoded
    file) and ``label`` int32, all non-nullable. Images are split across files as evenly as
    possible, as in :func:`make_parquet` (so with ``n < files`` the last files are empty).

    The image options ``classes``, ``seed``, ``fmt``, ``quality``, ``mode``, ``large``,
    ``min_short``, ``max_short`` and ``texture`` are as in :func:`make_image_bytes`.

    Args:
        root: the folder to write into; created if missing.
        n: number of images.
        files: number of files.
        row_group_size: rows per row group.

    Returns:
        The paths written, in file order.

    Raises:
        ValueError: an option outside its valid values, or a mode the format cannot hold.
    """
    spec = _ImageSpec(
        seed, classes, fmt, quality, mode, large, min_short, max_short, texture
    ).validated(n)
    ranges = _file_ranges(n, files, None)
    _check_int("row_group_size", row_group_size, 1)
    root = _make_root(root)
    paths, width = [], _width(files, 5)
    for k, ids in enumerate(ranges):
        samples = [spec.sample(i) for i in ids]
        columns = [
            pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
            pa.array([image for image, _ in samples], pa.binary()),
            pa.array([label for _, label in samples], pa.int32()),
        ]
        table = pa.Table.from_arrays(columns, schema=_IMAGES_SCHEMA)
        paths.append(_write_parquet(table, root / f"part-{k:0{width}d}.parquet", row_group_size))
    return paths


def make_tar_shards(
    root: str | os.PathLike[str],
    /,
    n: int = 64,
    *,
    shards: int = 4,
    seed: int = 0,
    classes: int = 4,
    fmt: str = "jpeg",
    quality: int = 90,
    mode: str = "rgb",
    large: int = 0,
    min_short: int = 300,
    max_short: int = 500,
    texture: str = "photo",
) -> list[Path]:
    """Write :func:`make_image_bytes` as WebDataset tar shards ``shard-00000.tar``...

    Sample ``i`` has key ``sample-000012`` (six digits at least) and two adjacent members,
    ``{key}.jpg`` (or ``.png`` / ``.webp``) with the encoded image, then ``{key}.cls`` with the
    label in ASCII decimal. Samples are split across shards as evenly as possible, in index
    order. The archives are byte-deterministic: USTAR format, mtime 0, uid/gid 0, empty
    user/group names, mode 0o644.

    The image options ``classes``, ``seed``, ``fmt``, ``quality``, ``mode``, ``large``,
    ``min_short``, ``max_short`` and ``texture`` are as in :func:`make_image_bytes`.

    Args:
        root: the folder to write into; created if missing.
        n: number of samples.
        shards: number of tar files (with ``n < shards`` the last ones are empty archives).

    Returns:
        The paths written, in shard order.

    Raises:
        ValueError: an option outside its valid values, or a mode the format cannot hold.
    """
    spec = _ImageSpec(
        seed, classes, fmt, quality, mode, large, min_short, max_short, texture
    ).validated(n)
    _check_int("shards", shards, 1)
    ranges = _file_ranges(n, shards, None)
    root = _make_root(root)
    paths, width, key_width = [], _width(shards, 5), _width(n, 6)
    for k, ids in enumerate(ranges):
        paths.append(root / f"shard-{k:0{width}d}.tar")
        with tarfile.open(paths[-1], "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in ids:
                data, label = spec.sample(i)
                key = f"sample-{i:0{key_width}d}"
                _add_member(tar, f"{key}{_CODECS[fmt][0]}", data)
                _add_member(tar, f"{key}.cls", str(label).encode("ascii"))
    return paths


def _add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    """Append a regular file with fixed metadata, so the archive bytes depend on data only."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def _write_parquet(table: pa.Table, path: Path, row_group_size: int) -> Path:
    # Compression named explicitly: a change of pyarrow's default must not change the bytes.
    pq.write_table(table, path, row_group_size=row_group_size, compression="snappy")
    return path


def _file_ranges(rows: int, files: int, rows_per_file: Sequence[int] | None) -> list[range]:
    """The global row indices of each file: ``rows`` split evenly, or ``rows_per_file``."""
    _check_int("rows", rows, 0)
    _check_int("files", files, 1)
    if rows_per_file is None:
        base, extra = divmod(rows, files)
        counts = [base + (k < extra) for k in range(files)]
    else:
        counts = list(rows_per_file)
        if not counts:
            raise ValueError("rows_per_file=[] names no file: give one count per file, e.g. [8, 0]")
        for k, count in enumerate(counts):
            _check_int(f"rows_per_file[{k}]", count, 0)
        if rows not in (_DEFAULT_ROWS, sum(counts)) or files not in (_DEFAULT_FILES, len(counts)):
            raise ValueError(
                f"rows={rows}, files={files} disagree with rows_per_file={counts} ({sum(counts)} "
                f"rows in {len(counts)} files): pass only rows_per_file, or make them agree"
            )
    ends = itertools.accumulate(counts)
    return [range(end - count, end) for count, end in zip(counts, ends, strict=True)]


def _codec(fmt: str) -> tuple[str, tuple[int, ...], tuple[np.dtype[Any], ...]]:
    """The codec entry of ``fmt``; ValueError listing the formats if there is none."""
    if fmt not in _CODECS:
        raise ValueError(f"fmt={fmt!r} is not supported: expected one of {list(_CODECS)}")
    return _CODECS[fmt]


def _check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    """Raise unless ``value`` is an integer (not a bool) in ``[minimum, maximum]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name}={value!r} must be an integer, not {type(value).__name__}")
    value = int(value)
    if value < minimum or (maximum is not None and value > maximum):
        valid = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name}={value} is out of range: expected an integer {valid}")


def _width(count: int, minimum: int) -> int:
    """Digits that number ``0..count-1`` with zero padding, so names sort in index order."""
    return max(minimum, len(str(count - 1)))


def _make_root(root: str | os.PathLike[str]) -> Path:
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path
