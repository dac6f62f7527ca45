"""Synthetic images in every layout fastdata reads: bytes in memory, an ImageFolder tree, a
Parquet binary column, WebDataset tar shards; image ``i`` is the same in each."""

from __future__ import annotations

import io
import math
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from fastdata._validate import check_choice, check_int
from fastdata.synthetic._common import IMAGE_STREAM, digits, file_ranges, make_root, write_parquet
from fastdata.synthetic._pixels import CODECS, TEXTURES, codec, encode_image, synth_image

__all__ = ["make_image_bytes", "make_image_parquet", "make_images", "make_tar_shards"]

_U8: np.dtype[Any] = np.dtype(np.uint8)
_U16: np.dtype[Any] = np.dtype(np.uint16)
# mode -> (channels, dtype) of the image synthesized for it.
_MODES = {"rgb": (3, _U8), "gray": (1, _U8), "rgba": (4, _U8), "gray16": (1, _U16)}
_LARGE_LONG_SIDE = (2000, 2400)  # ``large`` images: room for 1/2..1/8 DCT-domain decoding
_IMAGE_COLUMNS = (("id", pa.int64()), ("image", pa.binary()), ("label", pa.int32()))
_IMAGES_SCHEMA = pa.schema([pa.field(name, kind, nullable=False) for name, kind in _IMAGE_COLUMNS])


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
        check_int("n", n, minimum=0)
        check_int("seed", self.seed, minimum=0)
        check_int("classes", self.classes, minimum=1)
        check_int("large", self.large, minimum=0)
        if self.large > n:
            raise ValueError(f"large={self.large} exceeds n={n}: at most n images can be large")
        check_int("min_short", self.min_short, minimum=16)
        check_int("max_short", self.max_short, minimum=self.min_short)
        check_int("quality", self.quality, minimum=1, maximum=100)
        check_choice("texture", self.texture, TEXTURES)
        _, valid_channels, valid_dtypes = codec(self.fmt)
        valid = [m for m, (c, d) in _MODES.items() if c in valid_channels and d in valid_dtypes]
        if self.mode not in valid:
            raise ValueError(
                f"mode={self.mode!r} is not available with fmt={self.fmt!r}: expected one of "
                f"{valid} (modes are {list(_MODES)}; gray16 needs png, rgba png or webp)"
            )
        return self

    def sample(self, i: int) -> tuple[bytes, int]:
        """Image ``i`` encoded, and its label ``i % classes``; a function of (options, i) only."""
        rng = np.random.default_rng([self.seed, IMAGE_STREAM, i])
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
    root = make_root(root, "class_*/img_*")
    class_width, index_width = digits(classes, 2), digits(n, 5)
    paths = []
    for i in range(n):
        data, label = spec.sample(i)
        folder = root / f"class_{label:0{class_width}d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"img_{i:0{index_width}d}{CODECS[fmt][0]}"
        path.write_bytes(data)
        paths.append(path)
    return sorted(paths)


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
    ranges = file_ranges(n, files, None)
    check_int("row_group_size", row_group_size, minimum=1)
    root = make_root(root, "part-*.parquet")
    paths, width = [], digits(files, 5)
    for k, ids in enumerate(ranges):
        samples = [spec.sample(i) for i in ids]
        columns = [
            pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
            pa.array([image for image, _ in samples], pa.binary()),
            pa.array([label for _, label in samples], pa.int32()),
        ]
        table = pa.Table.from_arrays(columns, schema=_IMAGES_SCHEMA)
        paths.append(write_parquet(table, root / f"part-{k:0{width}d}.parquet", row_group_size))
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
    check_int("shards", shards, minimum=1)
    ranges = file_ranges(n, shards, None)
    root = make_root(root, "shard-*.tar")
    paths, width, key_width = [], digits(shards, 5), digits(n, 6)
    for k, ids in enumerate(ranges):
        paths.append(root / f"shard-{k:0{width}d}.tar")
        with tarfile.open(paths[-1], "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in ids:
                data, label = spec.sample(i)
                key = f"sample-{i:0{key_width}d}"
                _add_member(tar, f"{key}{CODECS[fmt][0]}", data)
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
