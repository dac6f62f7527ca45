"""Decoding one image from bytes: :func:`decode_image`, :func:`verify_image` and
:func:`decode_for` (the package docstring tells the whole stage)."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from fastdata.decode import _libjpeg
from fastdata.decode._headers import (
    ImageData,
    ImageHeader,
    as_array,
    image_header,
    oriented_hw,
    tiff_kind,
    tiff_straight_alpha,
)
from fastdata.decode._resize import Size
from fastdata.decode._transforms import Geometry, ImageTransform
from fastdata.errors import DecodeError

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "JPEG_EXTENSION",
    "decode_for",
    "decode_image",
    "image_size",
    "reduction_factor",
    "verify_image",
]

DEFAULT_MAX_PIXELS = 178_956_970
"""Images whose header claims more pixels are refused before any memory is allocated (a
decompression bomb guard). The value is Pillow's ``DecompressionBombError`` threshold."""

JPEG_EXTENSION = _libjpeg.EXTENSION
"""Whether JPEGs are decoded through the ``fastdata.decode._jpeg`` extension (built at install time
against libjpeg-turbo, and found at import to give OpenCV's pixels): then corrupt
entropy-coded data is a :class:`~fastdata.errors.DecodeError`, and :func:`decode_for` decodes
only the region of a JPEG around a sample's crop. Without it OpenCV decodes JPEGs whole and
reports corrupt data only on stderr: such files decode, to partly grey or garbled images."""

# flags 7 = COLOR | ANYCOLOR | ANYDEPTH: OpenCV keeps the stored channels (alpha included) and
# depth, and, unlike IMREAD_UNCHANGED, still applies the EXIF orientation.
_KEEP_CHANNELS = cv2.IMREAD_COLOR_BGR | cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH
_TO_RGBA = {1: cv2.COLOR_GRAY2RGBA, 3: cv2.COLOR_BGR2RGBA, 4: cv2.COLOR_BGRA2RGBA}
# flags 6 = ANYCOLOR | ANYDEPTH: gray stays one channel and colour is BGR, at the stored depth
# (with IMREAD_COLOR_RGB, OpenCV fails on 32-bit gray TIFFs); alpha is dropped.
_ANY = cv2.IMREAD_ANYCOLOR | cv2.IMREAD_ANYDEPTH
_TO_RGB = {1: cv2.COLOR_GRAY2RGB, 3: cv2.COLOR_BGR2RGB, 4: cv2.COLOR_BGRA2RGB}


def image_size(data: ImageData, /, *, exif: bool = True) -> tuple[int, int] | None:
    """``(height, width)`` of the decoded image as read from the header (EXIF rotation
    applied for JPEG when ``exif``), or ``None`` when unknown. See :func:`image_header`."""
    header = image_header(data, exif=exif)
    return None if header is None else oriented_hw(header)


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
    """8-bit samples from samples of any depth OpenCV decodes, scaled by the sample type's
    range as torchvision's ``ToDtype(torch.uint8, scale=True)`` scales them (with rounding):
    16-bit by 255/65535 (OpenCV and Pillow drop the low byte instead, which darkens by up to
    one level; 10- and 12-bit TIFFs come from OpenCV stretched to 16 bits), other integers
    from 0 to their type's maximum (negatives clip to 0), floating point from 0.0 to 1.0
    (clipped, NaN as 0)."""
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return ((img.astype(np.uint32) + 128) // 257).astype(np.uint8)
    if np.issubdtype(img.dtype, np.integer):
        scaled = np.clip(img, 0, None).astype(np.float64) * (255 / np.iinfo(img.dtype).max)
    elif np.issubdtype(img.dtype, np.floating):
        scaled = np.nan_to_num(img.astype(np.float64), nan=0.0, posinf=1.0, neginf=0.0) * 255
    else:
        raise DecodeError(
            f"unsupported sample type {img.dtype}: convert the image to 8 or 16 bits",
            path=source,
        )
    return np.rint(np.clip(scaled, 0, 255)).astype(np.uint8)


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
        exif: apply the EXIF orientation (rotate/flip as a viewer would). For JPEGs it is
            read by :func:`image_header`, as Pillow reads it, whichever decoder runs.
        max_pixels: refuse images whose header claims more pixels, before allocating (and,
            for a header :func:`image_header` cannot read, images that decode to more);
            ``None`` leaves only OpenCV's own limit (2**30 pixels).
        source: the item's name (file, tar member, ``"file.parquet row 12"``), put into the
            error's location.

    Returns:
        ``(H, W, 3)`` uint8 RGB, or ``(H, W, 4)`` RGBA with ``keep_alpha``. Gray and palette
        images are expanded to RGB; deeper samples are scaled to 8 bits by their type's
        range, with rounding: 16-bit by 255/65535, other integers from 0 to their type's
        maximum, floating point from 0.0 to 1.0 (clipped). Colours come as stored, beside
        an unassociated alpha too (a TIFF's, which OpenCV alone would premultiply).

    Raises:
        DecodeError: empty, truncated, corrupt (for JPEGs: anything libjpeg warns about, with
            :data:`JPEG_EXTENSION`) or unrecognised data, or an image over the pixel limit.
            Never returns a placeholder.
    """
    buf = as_array(data)
    if buf.size == 0:
        raise DecodeError(
            "empty image data (0 bytes): the file or value holds no image; replace or "
            "remove the item",
            path=source,
        )
    header = image_header(buf, exif=exif)
    if header is not None:
        _check_pixels(header.height, header.width, max_pixels, "header claims", source)
    if header is not None and header.format == "jpeg":
        factor = reduction_factor(oriented_hw(header), size)
        image = _decode_jpeg(buf, header, factor, source)
        return cv2.cvtColor(image, cv2.COLOR_RGB2RGBA) if keep_alpha else image
    if header is not None and header.format == "tiff":  # libtiff would premultiply: see there
        buf = straight if (straight := tiff_straight_alpha(buf)) is not None else buf
    flags = 0 if exif else cv2.IMREAD_IGNORE_ORIENTATION
    # Decoded at the stored depth and scaled here: OpenCV's own 8-bit conversion truncates
    # 16-bit samples and fails on 32-bit and floating-point ones.
    img = None if keep_alpha else _rgb_at_depth(buf, flags)
    if img is None:  # alpha kept, or gray samples OpenCV will not turn into RGB at depth
        stored = _imdecode(buf, flags | (_KEEP_CHANNELS if keep_alpha else _ANY), header, source)
        channels = 1 if stored.ndim == 2 else stored.shape[2]
        img = cv2.cvtColor(
            _to_uint8(stored, source), (_TO_RGBA if keep_alpha else _TO_RGB)[channels]
        )
    else:
        img = _to_uint8(img, source)
    if header is None:  # a header no parser read: the decoded size is checked instead
        height, width = img.shape[:2]
        _check_pixels(height, width, max_pixels, "decodes to", source)
        if bytes(buf[:3]) == b"\xff\xd8\xff":  # a JPEG to OpenCV, whose header libjpeg skips
            _libjpeg.verify(buf, source)  # bytes about, with a warning
    return img


def verify_image(
    data: ImageData,
    /,
    *,
    max_pixels: int | None = DEFAULT_MAX_PIXELS,
    source: str | None = None,
) -> None:
    """Raise the :class:`~fastdata.errors.DecodeError` :func:`decode_image` would raise for
    ``data``, doing no more of the decode than that takes: a JPEG that libjpeg reads to its
    end without a warning about its data (with :data:`JPEG_EXTENSION`: entropy decoding
    only, no pixels) within the pixel limits passes; anything else is decoded and dropped.
    What :func:`fastdata.writer.write_shards` checks each image with.

    Raises:
        DecodeError: as :func:`decode_image`.
    """
    buf = as_array(data)
    header = image_header(buf) if buf.size else None
    if header is not None and header.format == "jpeg" and _libjpeg.within_opencv_limits(header):
        _check_pixels(header.height, header.width, max_pixels, "header claims", source)
        if _libjpeg.check(buf) is True:
            return
    decode_image(buf, max_pixels=max_pixels, source=source)


def _rgb_at_depth(buf: np.ndarray, flags: int) -> np.ndarray | None:
    """RGB at the stored depth, from OpenCV's own colour conversion (every 8- and 16-bit
    image, and colour floats: for 8-bit images exactly ``IMREAD_COLOR_RGB``'s pixels); None
    where it declines (gray 32-bit and float TIFFs; corrupt data, which the caller's decode
    then names)."""
    try:
        return cv2.imdecode(buf, flags | cv2.IMREAD_COLOR_RGB | cv2.IMREAD_ANYDEPTH)
    except cv2.error:
        return None


def _check_pixels(
    height: int, width: int, max_pixels: int | None, claim: str, source: str | None
) -> None:
    """Refuse an image of more than ``max_pixels``."""
    if max_pixels is not None and height * width > max_pixels:
        raise DecodeError(
            f"image {claim} {width}x{height} = {height * width:,} pixels, over "
            f"max_pixels={max_pixels:,} (a possible decompression bomb); pass a larger "
            "max_pixels if the image is genuine",
            path=source,
        )


def _decode_jpeg(
    buf: np.ndarray, header: ImageHeader, factor: int, source: str | None
) -> np.ndarray:
    """A whole JPEG at ``1 / factor``, oriented: through the extension when it decodes it,
    else through OpenCV, and the extension then checks the data."""
    found = _libjpeg.decode(buf, header, factor, None, source)
    if found is not None:
        image = found[0]
    else:
        flags = cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION
        image = _imdecode(buf, flags | _libjpeg.REDUCED_FLAGS[factor], header, source)
        _libjpeg.verify(buf, source)
    return _libjpeg.orient(image, header.orientation)


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
    kind = tiff_kind(buf) if header is not None and header.format == "tiff" else None
    if kind is not None:
        reason = (
            f"OpenCV could not decode this {kind} TIFF ({buf.size:,} bytes): it is corrupt or "
            "truncated, or a kind OpenCV's TIFF reader lacks (16-bit CMYK, 2- or 4-bit gray "
            "without a palette); convert it to an 8- or 16-bit RGB or gray TIFF or PNG, or "
            "remove it"
        )
    elif header is not None:
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
    reuse: bool = False,
) -> tuple[np.ndarray, Geometry]:
    """Decode one image for ``transform``, at the lowest resolution its geometry allows.

    For a JPEG the geometry (crop box, output size, flip) is decided on the header's size
    first, drawing from ``rng`` exactly as :meth:`ImageTransform.geometry` on the decoded
    image would; the JPEG is then decoded at 1/2, 1/4 or 1/8 when the box still covers the
    output size at that scale along both axes (a random-resized crop of a 12-megapixel photo
    usually does; one of a 500-px image never does), and the box is divided to match.
    Other formats decode in full and get their geometry from the decoded size.

    With :data:`JPEG_EXTENSION` (and ``region``, the default), only the region of a JPEG
    around the box is decoded (libjpeg-turbo skips the transforms of the rows above and
    below it and of the iMCU columns beside it; a random-resized crop keeps about half of an
    image on average): the pixels of the box are exactly those of the whole decode, and the
    image returned is that region. With an EXIF orientation, the region decoded is the one
    the box maps to in the stored image, oriented afterwards. The whole file is still read,
    so errors are exactly :func:`decode_image`'s. Decoded whole instead: ``keep_alpha``,
    colour spaces other than gray and YCbCr, incomplete progressive JPEGs and rare samplings
    that a reduced region would upsample differently.

    ``transform.apply(image, geometry)`` then gives the sample: identical to
    ``transform(decode_image(data), rng)`` when nothing is reduced, and otherwise close to it
    (libjpeg's DCT scaling and area resizing differ slightly, and the box edges are rounded
    to the reduced grid, within half a reduced pixel, except a centre crop's, whose window is
    resampled at its place in the full image; docs/guides/images.md gives the PSNR
    measured on photo-like images). The reduced grid starts at the stored image's top left,
    which an EXIF orientation may turn to another corner: the box is placed on the grid as
    it lies in the oriented image (:func:`fastdata.decode._libjpeg.reduced_grid`). Should the
    header disagree with the decoder on the image's size, the image is decoded in full and
    the geometry drawn on it, from the same random state, as the plain path does.
    ``reduce=False`` decodes in full always: exactly ``transform(decode_image(data), rng)``.
    ``reuse=True`` decodes a region into a buffer the calling thread reuses: the image
    returned is valid until the thread's next ``decode_for(..., reuse=True)``, for a caller
    that applies the geometry at once (as the streams do, into a batch's slot).

    Returns:
        The decoded image and the geometry to apply to it.

    Raises:
        DecodeError: as :func:`decode_image`.
    """
    options: dict[str, Any] = {
        "keep_alpha": keep_alpha,
        "exif": exif,
        "max_pixels": max_pixels,
        "source": source,
    }
    header = image_header(data, exif=exif) if reduce else None
    if header is None or header.format != "jpeg":
        image = decode_image(data, **options)
        return image, transform.geometry(image.shape[:2], rng)
    _check_pixels(header.height, header.width, max_pixels, "header claims", source)
    src_hw = oriented_hw(header)
    state = None if rng is None else rng.bit_generator.state
    geometry = transform.geometry(src_hw, rng)
    hint = geometry.smallest_source(src_hw)
    factor = reduction_factor(src_hw, hint)  # the factor decode_image picks from this hint
    scaled_hw = (-(-src_hw[0] // factor), -(-src_hw[1] // factor))
    scaled = geometry.reduced(
        factor, scaled_hw, _libjpeg.reduced_grid(header.orientation, src_hw, factor)
    )
    if region and not keep_alpha:
        found = _libjpeg.decode_oriented(
            as_array(data), header, factor, scaled.box, source, reuse=reuse
        )
        if found is not None:
            image, (row, col) = found
            return image, scaled._replace(box=(row, col, *scaled.box[2:]))
    image = decode_image(data, size=hint, **options)
    if image.shape[:2] == scaled_hw:
        return image, scaled
    # The header and the decoder disagree on the size (an unusual file): draw the same
    # randoms again on the image as the decoder sees it, in full.
    if rng is not None and state is not None:
        rng.bit_generator.state = state
    image = image if factor == 1 else decode_image(data, **options)
    return image, transform.geometry(image.shape[:2], rng)
