"""The writers of synthetic images, Parquet files, tar shards and token corpora (the package
docstring tells the guarantees).
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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fastdata._validate import check_choice, check_int, check_number
from fastdata.synthetic._image import CODECS, TEXTURES, codec, encode_image, synth_image

__all__ = [
    "encode_image",
    "make_image_bytes",
    "make_image_parquet",
    "make_images",
    "make_parquet",
    "make_tar_shards",
    "make_tokens",
    "synth_image",
]

_U8: np.dtype[Any] = np.dtype(np.uint8)
_U16: np.dtype[Any] = np.dtype(np.uint16)
# mode -> (channels, dtype) of the image synthesized for it.
_MODES = {"rgb": (3, _U8), "gray": (1, _U8), "rgba": (4, _U8), "gray16": (1, _U16)}
# Independent random streams per generator, so that adding one never shifts another.
_IMAGE_STREAM, _PARQUET_STREAM, _TOKENS_STREAM = 1, 2, 3
_LARGE_LONG_SIDE = (2000, 2400)  # ``large`` images: room for 1/2..1/8 DCT-domain decoding
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
_TOKENS_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("tokens", pa.list_(pa.int32())),
        pa.field("text", pa.string()),
    ]
)
_IMAGES_SCHEMA = pa.schema([pa.field(name, kind, nullable=False) for name, kind in _IMAGE_COLUMNS])
_WORDS = [a + b for a in ("ka", "lo", "mi", "su", "te") for b in ("n", "ra", "to", "vel")]


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
    root = _make_root(root, "class_*/img_*")
    class_width, index_width = _width(classes, 2), _width(n, 5)
    paths = []
    for i in range(n):
        data, label = spec.sample(i)
        folder = root / f"class_{label:0{class_width}d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"img_{i:0{index_width}d}{CODECS[fmt][0]}"
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
    check_int("row_group_size", row_group_size, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("max_tokens", max_tokens, minimum=1)
    check_number("null_fraction", null_fraction, minimum=0, maximum=1)
    root = _make_root(root, "part-*.parquet")
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


def make_tokens(
    root: str | os.PathLike[str],
    /,
    rows: int = _DEFAULT_ROWS,
    *,
    files: int = _DEFAULT_FILES,
    row_group_size: int = 4096,
    seed: int = 0,
    median_tokens: int = 256,
    sigma: float = 1.0,
    max_tokens: int = 8192,
    null_fraction: float = 0.0,
) -> list[Path]:
    """Write a pre-tokenized text corpus ``tokens-00000.parquet``...: id, tokens, text.

    Columns: ``id`` int64, the global document index ``0..rows-1`` in file order;
    ``tokens`` list<int32> of ids in [0, 32000) whose lengths are lognormal like documents'
    (median ``median_tokens``, log standard deviation ``sigma``, so a mean of
    ``median_tokens * exp(sigma**2 / 2)`` before clipping to [1, ``max_tokens``]); ``text``
    the same document as a string of one short word per token (token ``t`` spelled as word
    ``t % 20`` of a fixed list), so ``text.split(" ")`` has as many words as ``tokens`` has
    ids. A null document (probability ``null_fraction``) is null in both ``tokens`` and
    ``text``. Rows are split across files as in :func:`make_parquet`; file ``k`` is drawn from
    its own random stream ``(seed, k)``, so the files are a pure function of the arguments.

    Args:
        root: the folder to write into; created if missing.
        rows: total number of documents.
        files: number of files.
        row_group_size: rows per row group.
        seed: non-negative seed.
        median_tokens: the median document length before clipping, at least 1.
        sigma: the spread of the log-lengths, >= 0 (0: every document ``median_tokens``).
        max_tokens: the longest document, at least 1.
        null_fraction: probability in [0, 1] of a null document.

    Returns:
        The paths written, in file order.

    Raises:
        ValueError: an option outside its valid values, or a file whose tokens or text
            bytes reach 2**31 (more than a list<int32> / string column can offset).
    """
    ranges = _file_ranges(rows, files, None)
    check_int("row_group_size", row_group_size, minimum=1)
    check_int("seed", seed, minimum=0)
    check_int("median_tokens", median_tokens, minimum=1)
    check_int("max_tokens", max_tokens, minimum=1)
    if not (isinstance(sigma, numbers.Real) and 0.0 <= sigma < math.inf):
        raise ValueError(f"sigma={sigma!r}: expected a finite number >= 0")
    check_number("null_fraction", null_fraction, minimum=0, maximum=1)
    root = _make_root(root, "tokens-*.parquet")
    paths, width = [], _width(len(ranges), 5)
    for k, ids in enumerate(ranges):
        rng = np.random.default_rng([seed, _TOKENS_STREAM, k])
        null = rng.random(len(ids)) < null_fraction
        lengths = np.rint(rng.lognormal(math.log(median_tokens), sigma, len(ids)))
        lengths = np.where(null, 0, np.clip(lengths, 1, max_tokens)).astype(np.int64)
        total = int(lengths.sum())
        # each token is a word of <= 5 bytes plus a space
        if total * 6 >= 2**31:
            raise ValueError(
                f"file {k} would hold {total} tokens, too many for the int32 offsets of its "
                f"text column: use more files or shorter documents"
            )
        token_ids = rng.integers(0, _TOKEN_VOCAB, total, dtype=np.int32)
        words = pa.array(_WORDS).take(pa.array(token_ids % len(_WORDS)))
        table = pa.Table.from_arrays(
            [
                pa.array(np.arange(ids.start, ids.stop, dtype=np.int64)),
                _lists(lengths, pa.array(token_ids), null),
                pc.binary_join(_lists(lengths, words, null), " "),
            ],
            schema=_TOKENS_SCHEMA,
        )
        path = root / f"tokens-{k:0{width}d}.parquet"
        paths.append(_write_parquet(table, path, row_group_size))
    return paths


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
    check_int("row_group_size", row_group_size, minimum=1)
    root = _make_root(root, "part-*.parquet")
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
    check_int("shards", shards, minimum=1)
    ranges = _file_ranges(n, shards, None)
    root = _make_root(root, "shard-*.tar")
    paths, width, key_width = [], _width(shards, 5), _width(n, 6)
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


def _write_parquet(table: pa.Table, path: Path, row_group_size: int) -> Path:
    # Compression named explicitly: a change of pyarrow's default must not change the bytes.
    pq.write_table(table, path, row_group_size=row_group_size, compression="snappy")
    return path


def _file_ranges(rows: int, files: int, rows_per_file: Sequence[int] | None) -> list[range]:
    """The global row indices of each file: ``rows`` split evenly, or ``rows_per_file``."""
    check_int("rows", rows, minimum=0)
    check_int("files", files, minimum=1)
    if rows_per_file is None:
        base, extra = divmod(rows, files)
        counts = [base + (k < extra) for k in range(files)]
    else:
        counts = list(rows_per_file)
        if not counts:
            raise ValueError("rows_per_file=[] names no file: give one count per file, e.g. [8, 0]")
        for k, count in enumerate(counts):
            check_int(f"rows_per_file[{k}]", count, minimum=0)
        if rows not in (_DEFAULT_ROWS, sum(counts)) or files not in (_DEFAULT_FILES, len(counts)):
            raise ValueError(
                f"rows={rows}, files={files} disagree with rows_per_file={counts} ({sum(counts)} "
                f"rows in {len(counts)} files): pass only rows_per_file, or make them agree"
            )
    ends = itertools.accumulate(counts)
    return [range(end - count, end) for count, end in zip(counts, ends, strict=True)]


def _width(count: int, minimum: int) -> int:
    """Digits that number ``0..count-1`` with zero padding, so names sort in index order."""
    return max(minimum, len(str(count - 1)))


def _make_root(root: str | os.PathLike[str], outputs: str) -> Path:
    """``root``, created if missing, without the files a previous call wrote there (those
    matching the glob ``outputs``; empty folders they leave are removed too), so that it holds
    exactly what this call writes: a stale ``part-00004.parquet`` of an earlier ``files=5``
    would otherwise be read with the new files. Other files are left alone."""
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    stale = sorted(path.glob(outputs))
    for old in stale:
        old.unlink()
    for folder in sorted({old.parent for old in stale} - {path}, reverse=True):
        if not any(folder.iterdir()):
            folder.rmdir()
    return path
