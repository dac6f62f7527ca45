"""Decoding stage: encoded image bytes in, uint8 HWC RGB numpy arrays out.

Plain functions over bytes and numpy arrays (no torch, no files, no DataLoader), so every
source (folders, Parquet columns, tar members) shares one tested path:

- :func:`decode_image` decodes with ``cv2.imdecode`` straight to RGB
  (``IMREAD_COLOR_RGB``), applies the EXIF orientation, and normalises gray, palette,
  RGBA and 16-bit images to 3-channel uint8 (4 with ``keep_alpha``).
- Given the size the pipeline needs, it decodes a large JPEG at 1/2, 1/4 or 1/8 resolution
  (libjpeg scales in the DCT domain: several times faster, and never smaller than asked);
  :func:`reduction_factor` makes that choice from the header, which a small parser reads
  (:func:`image_size`) in microseconds without decoding. :func:`decode_for` takes that size
  from each sample's own transform geometry, so a random-resized crop whose box is large
  enough is decoded reduced too; and, with the ``fastdata._jpeg`` extension
  (:data:`REGION_DECODE`), only the region of the JPEG around the box, with the whole
  decode's pixels.
- :func:`decode_many` decodes (and transforms) a batch on a thread pool: OpenCV releases the
  GIL, so threads scale across cores inside one DataLoader worker.
- Bad data raises :class:`~fastdata.errors.DecodeError` naming the item; never a black image.

The transforms (:func:`resize`, :func:`center_crop`, :func:`random_resized_crop`,
:func:`resized_center_crop`, :func:`hflip`, :class:`ImageTransform`, :func:`sample_rng`) are
re-exported from here.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import cv2
import numpy as np

try:  # the C extension, built when libjpeg-turbo's headers were there at install time
    from fastdata import _jpeg
except ImportError:  # pragma: no cover - depends on the build
    _jpeg = None  # type: ignore[assignment]

from fastdata._transforms import (
    INTERPOLATIONS,
    Geometry,
    ImageTransform,
    Size,
    center_crop,
    hflip,
    output_hw,
    random_resized_crop,
    random_resized_crop_params,
    resize,
    resized_center_crop,
    sample_rng,
)
from fastdata.errors import DecodeError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "INTERPOLATIONS",
    "REGION_DECODE",
    "Geometry",
    "ImageHeader",
    "ImageTransform",
    "center_crop",
    "decode_for",
    "decode_image",
    "decode_many",
    "hflip",
    "image_header",
    "image_size",
    "limit_opencv_threads",
    "output_hw",
    "random_resized_crop",
    "random_resized_crop_params",
    "reduction_factor",
    "resize",
    "resized_center_crop",
    "sample_rng",
]

ImageData = bytes | bytearray | memoryview | np.ndarray
"""Encoded image bytes: any bytes-like object, or a 1-D uint8 array."""

DEFAULT_MAX_PIXELS = 178_956_970
"""Images whose header claims more pixels are refused before any memory is allocated (a
decompression bomb guard). The value is Pillow's ``DecompressionBombError`` threshold."""

_REDUCED_FLAGS = {
    1: 0,
    2: cv2.IMREAD_REDUCED_GRAYSCALE_2,
    4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
    8: cv2.IMREAD_REDUCED_GRAYSCALE_8,
}
# The REDUCED_GRAYSCALE bits carry only the scale: OpenCV reads the colour mode from the
# other bits, so REDUCED_GRAYSCALE_k | IMREAD_COLOR_RGB decodes RGB at 1/k. (REDUCED_COLOR_k
# includes the BGR bit, which OpenCV refuses to combine with IMREAD_COLOR_RGB.)

# flags 7 = COLOR | ANYCOLOR | ANYDEPTH: OpenCV keeps the stored channels (alpha included) and
# depth, and, unlike IMREAD_UNCHANGED, still applies the EXIF orientation.
_KEEP_CHANNELS = cv2.IMREAD_COLOR_BGR | cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH
_TO_RGBA = {1: cv2.COLOR_GRAY2RGBA, 3: cv2.COLOR_BGR2RGBA, 4: cv2.COLOR_BGRA2RGBA}

# The most a region decode adds around a box per side: one iMCU (at most 4 x 8 pixels), and on
# the left up to one more to reach an iMCU boundary.
_REGION_MARGIN = 32

# OpenCV refuses images over these (read from the environment as OpenCV reads them); a region
# decode must not accept what the whole decode would refuse.
_OPENCV_LIMITS = tuple(
    int(os.environ.get(f"OPENCV_IO_MAX_IMAGE_{name}", default))
    for name, default in (("PIXELS", 1 << 30), ("WIDTH", 1 << 20), ("HEIGHT", 1 << 20))
)

REGION_DECODE = _jpeg is not None
"""Whether :func:`decode_for` can decode just the region of a JPEG around a sample's crop
(the ``fastdata._jpeg`` extension, built against libjpeg-turbo at install time)."""

# Start-of-frame markers (C4, C8 and CC are DHT, JPG and DAC, not frames).
_JPEG_SOF = frozenset({*range(0xC0, 0xD0)} - {0xC4, 0xC8, 0xCC})
_JPEG_STANDALONE = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class ImageHeader(NamedTuple):
    """What a header says about an image, read without decoding it."""

    format: str
    """``"jpeg"``, ``"png"`` or ``"webp"``."""
    height: int
    """Stored height (before any EXIF rotation)."""
    width: int
    """Stored width."""
    orientation: int = 1
    """EXIF orientation tag (1-8; 5-8 swap height and width); read for JPEG only."""


def _as_array(data: ImageData) -> np.ndarray:
    """A zero-copy 1-D uint8 view of the encoded bytes."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise TypeError(f"image data as a numpy array must be uint8, got {data.dtype}")
        return np.ascontiguousarray(data).reshape(-1)
    return np.frombuffer(data, dtype=np.uint8)


def _exif_orientation(buf: memoryview, start: int, end: int) -> int:
    """The orientation tag of an APP1 Exif payload ``buf[start:end]``; 1 when absent."""
    if end - start < 14 or bytes(buf[start : start + 6]) != b"Exif\0\0":
        return 1
    tiff = start + 6
    order = bytes(buf[tiff : tiff + 2])
    if order not in (b"II", b"MM"):
        return 1
    e = "<" if order == b"II" else ">"
    (ifd,) = struct.unpack_from(e + "I", buf, tiff + 4)
    pos = tiff + ifd
    if pos + 2 > end:
        return 1
    (count,) = struct.unpack_from(e + "H", buf, pos)
    for entry in range(pos + 2, min(pos + 2 + 12 * count, end - 11), 12):
        tag, kind = struct.unpack_from(e + "HH", buf, entry)
        if tag != 0x0112:
            continue
        if kind not in (3, 4):  # SHORT as the standard says, or LONG as some writers do
            return 1
        (value,) = struct.unpack_from(e + ("H" if kind == 3 else "I"), buf, entry + 8)
        return value if 1 <= value <= 8 else 1
    return 1


def _jpeg_header(buf: memoryview, exif: bool) -> ImageHeader | None:
    """Walk the JPEG segments up to the frame header (SOF), noting the EXIF orientation."""
    n, pos, orientation, seen_exif = len(buf), 2, 1, False
    while pos + 4 <= n:
        if buf[pos] != 0xFF:
            return None
        marker = buf[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        pos += 2
        if marker in _JPEG_STANDALONE:
            continue
        (length,) = struct.unpack_from(">H", buf, pos)
        if marker in _JPEG_SOF:
            if pos + 7 > n:
                return None
            height, width = struct.unpack_from(">HH", buf, pos + 3)
            # height 0 means "defined later by a DNL marker": unknown here.
            return ImageHeader("jpeg", height, width, orientation) if height else None
        if marker in (0xD9, 0xDA):  # end of image, start of scan: no frame header
            return None
        if marker == 0xE1 and exif and not seen_exif:  # the first Exif segment rules
            seen_exif = bytes(buf[pos + 2 : pos + 8]) == b"Exif\0\0"
            orientation = _exif_orientation(buf, pos + 2, min(pos + length, n))
        pos += length
    return None


def _webp_header(buf: memoryview) -> ImageHeader | None:
    """The canvas size from the first chunk of a WebP (lossy VP8, lossless VP8L or VP8X)."""
    chunk = bytes(buf[12:16])
    if chunk == b"VP8 " and len(buf) >= 30 and bytes(buf[23:26]) == b"\x9d\x01\x2a":
        width, height = struct.unpack_from("<HH", buf, 26)
        return ImageHeader("webp", height & 0x3FFF, width & 0x3FFF)
    if chunk == b"VP8L" and len(buf) >= 25 and buf[20] == 0x2F:
        (bits,) = struct.unpack_from("<I", buf, 21)
        return ImageHeader("webp", ((bits >> 14) & 0x3FFF) + 1, (bits & 0x3FFF) + 1)
    if chunk == b"VP8X" and len(buf) >= 30:
        width = int.from_bytes(bytes(buf[24:27]), "little") + 1
        height = int.from_bytes(bytes(buf[27:30]), "little") + 1
        return ImageHeader("webp", height, width)
    return None


def image_header(data: ImageData, /, *, exif: bool = True) -> ImageHeader | None:
    """Format, stored size and EXIF orientation from the header of a JPEG, PNG or WebP.

    Reads a few hundred bytes, no pixels (under 10 microseconds, about 10x cheaper than
    Pillow's lazy open). ``None`` for other formats and for headers it cannot parse; then
    the size is unknown and :func:`decode_image` simply decodes at full resolution.
    """
    buf = _as_array(data).data  # a memoryview: int indexing 10x faster than the array
    if len(buf) >= 24 and bytes(buf[:8]) == _PNG_SIGNATURE and bytes(buf[12:16]) == b"IHDR":
        width, height = struct.unpack_from(">II", buf, 16)
        return ImageHeader("png", height, width)
    if len(buf) >= 4 and buf[0] == 0xFF and buf[1] == 0xD8 and buf[2] == 0xFF:
        return _jpeg_header(buf, exif)
    if len(buf) >= 16 and bytes(buf[:4]) == b"RIFF" and bytes(buf[8:12]) == b"WEBP":
        return _webp_header(buf)
    return None


def image_size(data: ImageData, /, *, exif: bool = True) -> tuple[int, int] | None:
    """``(height, width)`` of the decoded image as read from the header (EXIF rotation
    applied for JPEG when ``exif``), or ``None`` when unknown. See :func:`image_header`."""
    header = image_header(data, exif=exif)
    return None if header is None else _oriented_hw(header)


def _oriented_hw(header: ImageHeader) -> tuple[int, int]:
    """``(height, width)`` after the EXIF rotation (orientations 5-8 transpose)."""
    if header.orientation >= 5:
        return header.width, header.height
    return header.height, header.width


def reduction_factor(src_hw: tuple[int, int], target: Size | None) -> int:
    """The largest JPEG decode reduction (1, 2, 4 or 8) that keeps the image at least
    ``target``: ``src / k >= target`` along both axes.

    ``target`` is an ``int`` shorter side (aspect ratio kept) or ``(height, width)``;
    ``None`` means "full resolution". libjpeg rounds reduced sizes up, so the decoded
    image is never smaller than ``target``.
    """
    if target is None:
        return 1
    src_h, src_w = src_hw
    if isinstance(target, (int, np.integer)):
        need_h = need_w = int(target)
        src_h = src_w = min(src_h, src_w)
    else:
        need_h, need_w = target
    if need_h <= 0 or need_w <= 0:
        raise ValueError(f"target={target!r}: sizes must be positive")
    for factor in (8, 4, 2):
        if src_h >= factor * need_h and src_w >= factor * need_w:
            return factor
    return 1


def _to_uint8(img: np.ndarray, source: str | None) -> np.ndarray:
    """8-bit samples: 16-bit ones scaled by 255/65535 with rounding (OpenCV and Pillow drop
    the low byte instead, which darkens by up to one level)."""
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)
    raise DecodeError(
        f"unsupported sample type {img.dtype} (a floating-point HDR/EXR/TIFF image): "
        "fastdata decodes 8- and 16-bit images; convert it to an 8-bit PNG or JPEG",
        path=source,
    )


def decode_image(
    data: ImageData,
    /,
    *,
    size: Size | None = None,
    keep_alpha: bool = False,
    exif: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    source: str | None = None,
) -> np.ndarray:
    """Decode one encoded image into a uint8 HWC RGB array.

    Args:
        data: the encoded bytes (JPEG, PNG, WebP, or anything else OpenCV reads).
        size: the smallest size the caller needs (``int`` = shorter side, or
            ``(height, width)``), usually ``ImageTransform.decode_size``. A JPEG at least
            2x/4x/8x larger along both axes is decoded at 1/2, 1/4 or 1/8 resolution (see
            :func:`reduction_factor`); other formats are decoded in full, since OpenCV
            would only decode fully and then resize. The result is *not* resized to
            ``size``.
        keep_alpha: return RGBA (4 channels; opaque images get alpha 255) instead of
            dropping the alpha channel.
        exif: apply the EXIF orientation (rotate/flip as a viewer would).
        max_pixels: refuse images whose header claims more pixels, before allocating;
            ``None`` leaves only OpenCV's own limit (2**30 pixels).
        source: the item's name (file, tar member, ``"file.parquet row 12"``), put into the
            error's location.

    Returns:
        ``(H, W, 3)`` uint8 RGB, or ``(H, W, 4)`` RGBA with ``keep_alpha``. Gray and palette
        images are expanded to RGB; 16-bit images are scaled to 8 bits with rounding.

    Raises:
        DecodeError: empty, truncated, corrupt or unrecognised data, or an image over the
            pixel limit. Never returns a placeholder.
    """
    buf = _as_array(data)
    if buf.size == 0:
        raise DecodeError(
            "empty image data (0 bytes): the file or value holds no image; replace or "
            "remove the item",
            path=source,
        )
    header = image_header(buf, exif=exif)
    if header is not None and max_pixels is not None:
        pixels = header.height * header.width
        if pixels > max_pixels:
            raise DecodeError(
                f"image header claims {header.width}x{header.height} = {pixels:,} pixels, "
                f"over max_pixels={max_pixels:,} (a possible decompression bomb); pass a "
                "larger max_pixels if the image is genuine",
                path=source,
            )
    flags = 0 if exif else cv2.IMREAD_IGNORE_ORIENTATION
    if header is not None and header.format == "jpeg":
        flags |= _REDUCED_FLAGS[reduction_factor(_oriented_hw(header), size)]
    if keep_alpha and (header is None or header.format != "jpeg"):
        img = _imdecode(buf, flags | _KEEP_CHANNELS, header, source)
        channels = 1 if img.ndim == 2 else img.shape[2]
        return cv2.cvtColor(_to_uint8(img, source), _TO_RGBA[channels])
    if header is not None and header.format == "png":
        flags |= cv2.IMREAD_ANYDEPTH  # read 16-bit PNGs as 16-bit, then scale properly
    img = _to_uint8(_imdecode(buf, flags | cv2.IMREAD_COLOR_RGB, header, source), source)
    return cv2.cvtColor(img, cv2.COLOR_RGB2RGBA) if keep_alpha else img


def _imdecode(
    buf: np.ndarray, flags: int, header: ImageHeader | None, source: str | None
) -> np.ndarray:
    """``cv2.imdecode`` with its two failure modes (``None`` and ``cv2.error``) turned into
    a :class:`DecodeError` that says why and what to do."""
    try:
        img = cv2.imdecode(buf, flags)
    except cv2.error as exc:
        detail = str(exc).strip().splitlines()[-1]
        if "MAX_IMAGE" in detail:
            reason = (
                f"image is over OpenCV's size limit ({detail}); if it is genuine, raise "
                "OPENCV_IO_MAX_IMAGE_PIXELS (and _WIDTH/_HEIGHT) in the environment before "
                "cv2 is imported, otherwise remove the file"
            )
        else:
            reason = f"OpenCV failed on corrupt data ({detail}); re-encode or remove the file"
        raise DecodeError(reason, path=source) from exc
    if img is not None:
        return img
    if header is not None:
        reason = (
            f"corrupt or truncated {header.format.upper()} data ({buf.size:,} bytes): "
            "OpenCV could not decode it; re-download or re-encode the file, or remove it"
        )
    else:
        reason = (
            f"not an image OpenCV can decode ({buf.size:,} bytes starting with "
            f"{bytes(buf[:8])!r}): an unsupported format, a text/HTML file, or corrupt data; "
            "convert it to JPEG, PNG or WebP, or remove it"
        )
    raise DecodeError(reason, path=source)


def decode_for(
    data: ImageData,
    transform: ImageTransform,
    rng: np.random.Generator | None = None,
    /,
    *,
    keep_alpha: bool = False,
    exif: bool = True,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    source: str | None = None,
    reduce: bool = True,
    region: bool = True,
) -> tuple[np.ndarray, Geometry]:
    """Decode one image for ``transform``, at the lowest resolution its geometry allows.

    For a JPEG the geometry (crop box, output size, flip) is decided on the header's size
    first, drawing from ``rng`` exactly as :meth:`ImageTransform.geometry` on the decoded
    image would; the JPEG is then decoded at 1/2, 1/4 or 1/8 when the box still covers the
    output size at that scale along both axes (a random-resized crop of a 12-megapixel photo
    usually does; one of a 500-px image never does), and the box is divided to match.
    Other formats decode in full and get their geometry from the decoded size.

    When the box leaves part of the image out and :data:`REGION_DECODE` is true (and
    ``region`` is, the default), only the region around the box is decoded (libjpeg-turbo
    skips the rows above and below it and the iMCU columns beside it; a random-resized crop
    keeps about half of an image on average): the pixels of the box are exactly those of the
    whole decode, and the image returned is that region. Decoded whole instead, so that
    errors and pixels are exactly :func:`decode_image`'s: a JPEG that does not end with its
    end-of-image marker, one with an Exif segment (unless ``exif=False``), ``keep_alpha``,
    CMYK, images over ``max_pixels`` or OpenCV's limits, incomplete progressive JPEGs, rare
    samplings that a reduced region would upsample differently, and anything libjpeg-turbo
    warns about.

    ``transform.apply(image, geometry)`` then gives the sample: identical to
    ``transform(decode_image(data), rng)`` when nothing is reduced, and otherwise close to it
    (libjpeg's DCT scaling and area resizing differ slightly, and the box edges are rounded
    to the reduced grid, within half a reduced pixel; about 40 dB PSNR on photos). Should the
    header disagree with OpenCV on the image's size or EXIF orientation, the image is decoded
    in full and the geometry drawn on it, from the same random state, as the plain path does.
    ``reduce=False`` decodes in full always: exactly ``transform(decode_image(data), rng)``.

    Returns:
        The decoded image and the geometry to apply to it.

    Raises:
        DecodeError: as :func:`decode_image`.
    """
    options = {"keep_alpha": keep_alpha, "exif": exif, "max_pixels": max_pixels, "source": source}
    header = image_header(data, exif=exif) if reduce else None
    if header is None or header.format != "jpeg":
        image = decode_image(data, **options)
        return image, transform.geometry(image.shape[:2], rng)
    src_hw = _oriented_hw(header)
    state = None if rng is None else rng.bit_generator.state
    geometry = transform.geometry(src_hw, rng)
    hint = geometry.smallest_source(src_hw)
    factor = reduction_factor(src_hw, hint)  # the factor decode_image picks from this hint
    if region and not keep_alpha:
        found = _decode_region(data, header, geometry, factor, exif, max_pixels)
        if found is not None:
            return found
    image = decode_image(data, size=hint, **options)
    if image.shape[:2] == tuple(-(-n // factor) for n in src_hw):
        return image, geometry.reduced(factor, image.shape[:2])
    # The header and OpenCV disagree on the size or the EXIF orientation (an unusual EXIF
    # layout, say): draw the same randoms again on the image as OpenCV decodes it, in full.
    if rng is not None:
        rng.bit_generator.state = state
    image = image if factor == 1 else decode_image(data, **options)
    return image, transform.geometry(image.shape[:2], rng)


def _decode_region(
    data: ImageData,
    header: ImageHeader,
    geometry: Geometry,
    factor: int,
    exif: bool,
    max_pixels: int | None,
) -> tuple[np.ndarray, Geometry] | None:
    """The region of a JPEG around ``geometry``'s box, decoded at ``1 / factor``, and the
    geometry in it; None when the whole image is to be decoded instead: when a region would
    not see what the whole decode sees (no end-of-image marker, over ``max_pixels`` or
    OpenCV's own limits, an Exif segment when EXIF orientation applies, since OpenCV reads
    orientations in layouts the header parser does not) or the extension declines it."""
    hw = (-(-header.height // factor), -(-header.width // factor))
    scaled = geometry.reduced(factor, hw)
    top, left, h, w = scaled.box
    buf = _as_array(data)
    if _jpeg is None or (h, w) == hw or buf.size < 4 or bytes(buf[-2:]) != b"\xff\xd9":
        return None
    pixels, (max_opencv, max_width, max_height) = header.height * header.width, _OPENCV_LIMITS
    if (max_pixels is not None and pixels > max_pixels) or pixels > max_opencv:
        return None
    if header.width > max_width or header.height > max_height:
        return None
    if exif and b"Exif\0\0" in (data if isinstance(data, bytes) else buf.tobytes()):
        return None
    rows, cols = min(hw[0], h + 2 * _REGION_MARGIN), min(hw[1], w + 3 * _REGION_MARGIN)
    out = np.empty((rows, cols, 3), np.uint8)
    found = _jpeg.decode_rgb_region(buf, factor, top, left, h, w, out, rows, cols)
    if found is None or found[4:] != hw:  # libjpeg and the header parser disagree: whole
        return None
    row, col, n_rows, n_cols = found[:4]
    return out[:n_rows, :n_cols], Geometry((row, col, h, w), scaled.size, scaled.flip)


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
    ``[transform(decode_image(x), rng) for x, rng in zip(items, rngs)]``.

    Threads and OpenCV: this function does not change OpenCV's own thread count, which is
    process-wide. When a pool decodes, call :func:`limit_opencv_threads` once per process
    (the DataLoader's worker init does) so that ``cv2.resize`` inside each decode thread
    does not start its own pool; ``imdecode`` itself is single-threaded.

    Args:
        items: encoded images.
        threads: decode threads; 1 decodes in the calling thread. A pool is started per
            call (about 1 ms: small against a batch of decodes at 1-3 ms each).
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
    if threads < 1:
        raise ValueError(f"threads={threads!r}: expected at least 1")
    if size is not None and transform is not None:
        raise ValueError(
            "pass size= or transform=, not both: with a transform, each sample's geometry "
            "decides the decoded size"
        )
    n = len(items)
    for name, seq in (("sources", sources), ("rngs", rngs)):
        if seq is not None and len(seq) != n:
            raise ValueError(f"{name} has {len(seq)} entries for {n} items: give one per item")
    options = {"keep_alpha": keep_alpha, "exif": exif, "max_pixels": max_pixels}

    def one(i: int) -> np.ndarray:
        source = sources[i] if sources is not None else f"item {i}"
        if transform is None:
            return decode_image(items[i], size=size, source=source, **options)
        rng = rngs[i] if rngs is not None else None
        image, geometry = decode_for(items[i], transform, rng, source=source, **options)
        return transform.apply(image, geometry)

    if threads == 1 or n <= 1:
        return [one(i) for i in range(n)]
    with ThreadPoolExecutor(min(threads, n), thread_name_prefix="fastdata-decode") as pool:
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
    if n < 1:
        raise ValueError(f"n={n!r}: expected at least 1 thread")
    previous = cv2.getNumThreads()
    cv2.setNumThreads(n)
    return previous
