"""JPEGs through the ``fastdata.decode._jpeg`` extension (libjpeg-turbo): OpenCV's pixels, and
libjpeg's warnings as errors.

``cv2.imdecode`` turns a JPEG whose entropy-coded data is corrupt into an image and prints
libjpeg's warning on stderr, with no file name. The extension decodes the same way (the same
pixels as OpenCV's bundled libjpeg-turbo: checked at import, see :data:`EXTENSION`) and
stops at the first warning, which :func:`decode` raises as a
:class:`~fastdata.errors.DecodeError`. What the extension declines (a colour space other than
gray or YCbCr, a JPEG libjpeg cannot read) is decoded by OpenCV and then read once more by
:func:`verify`, so no JPEG escapes the check while the extension is there.

Orientation is applied here for every JPEG (:func:`orient`, from the header parser's EXIF
reading, which is Pillow's), whichever decoder produced the pixels.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from types import ModuleType

import cv2
import numpy as np

from fastdata.decode._headers import ImageHeader
from fastdata.errors import DecodeError

__all__ = [
    "EXTENSION",
    "REDUCED_FLAGS",
    "check",
    "decode",
    "decode_oriented",
    "orient",
    "reduced_grid",
    "verify",
    "within_opencv_limits",
]

REDUCED_FLAGS = {
    1: 0,
    2: cv2.IMREAD_REDUCED_GRAYSCALE_2,
    4: cv2.IMREAD_REDUCED_GRAYSCALE_4,
    8: cv2.IMREAD_REDUCED_GRAYSCALE_8,
}
"""OpenCV's flag for a JPEG decode at 1/k. The REDUCED_GRAYSCALE bits carry only the scale:
OpenCV reads the colour mode from the other bits, so REDUCED_GRAYSCALE_k | IMREAD_COLOR_RGB
decodes RGB at 1/k (REDUCED_COLOR_k includes the BGR bit, which OpenCV refuses to combine
with IMREAD_COLOR_RGB)."""

# What a region decode adds around a box: the chroma upsampling's reach per side (at most 8
# pixels, for 4:1:1) and, on the left, up to an iMCU less one pixel (31 at most) to reach an
# iMCU boundary; 2 x 32 rows and 3 x 32 columns more than the box hold it.
_REGION_MARGIN = 32

# OpenCV refuses images over these (read from the environment as OpenCV reads them); the
# extension must not accept what cv2.imdecode would refuse.
_OPENCV_LIMITS = tuple(
    int(os.environ.get(f"OPENCV_IO_MAX_IMAGE_{name}", default))
    for name, default in (("PIXELS", 1 << 30), ("WIDTH", 1 << 20), ("HEIGHT", 1 << 20))
)

_ORIENT: dict[int, Callable[[np.ndarray], np.ndarray]] = {
    2: lambda img: cv2.flip(img, 1),
    3: lambda img: cv2.rotate(img, cv2.ROTATE_180),
    4: lambda img: cv2.flip(img, 0),
    5: cv2.transpose,
    6: lambda img: cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE),
    7: lambda img: cv2.rotate(cv2.transpose(img), cv2.ROTATE_180),
    8: lambda img: cv2.rotate(img, cv2.ROTATE_90_COUNTERCLOCKWISE),
}


def agrees_with_opencv(module: ModuleType) -> bool:
    """Whether ``module`` (the extension) decodes a small JPEG exactly as OpenCV does:
    baseline and progressive 4:2:0, whole, at 1/2, and a region. The extension links the
    system's libjpeg-turbo, OpenCV its own copy; should the two ever differ, the extension
    must not be used."""
    ys, xs = np.mgrid[0:40, 0:56]
    image = np.stack([xs * 4, ys * 6, (xs * ys) % 251], -1).astype(np.uint8)  # edges, texture
    try:
        for progressive in (0, 1):
            data = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_PROGRESSIVE, progressive])[1]
            for factor, box in ((1, None), (2, None), (1, (16, 24, 8, 8))):
                flags = cv2.IMREAD_COLOR_RGB | REDUCED_FLAGS[factor]
                expected = cv2.imdecode(data, flags)
                if expected is None:
                    return False
                hw = expected.shape[:2]
                top, left, h, w = box or (0, 0, *hw)
                out = np.zeros_like(expected)
                found = module.decode_rgb(data, factor, top, left, h, w, out, *hw)
                if not isinstance(found, tuple) or found[4:] != hw:
                    return False
                row, col = found[:2]  # the box in what was decoded: only it must be exact
                got = out[: found[2], : found[3]][row : row + h, col : col + w]
                if not np.array_equal(got, expected[top : top + h, left : left + w]):
                    return False
    except Exception:  # an extension that fails on a valid JPEG is as unusable
        return False
    return True


try:  # the C extension, built when libjpeg-turbo's headers were there at install time
    from fastdata.decode import _jpeg
except ImportError:  # pragma: no cover - depends on the build
    _jpeg = None  # type: ignore[assignment]

if _jpeg is not None and not agrees_with_opencv(_jpeg):  # pragma: no cover - the build decides
    warnings.warn(
        f"fastdata.decode._jpeg (libjpeg-turbo {_jpeg.LIBJPEG_TURBO_VERSION_NUMBER}) decodes "
        "differently from OpenCV's libjpeg-turbo: JPEGs are decoded by OpenCV alone, without "
        "region decoding or corrupt-data detection. Rebuild fastdata against the libjpeg-turbo "
        "version OpenCV bundles (cv2.getBuildInformation() names it)",
        RuntimeWarning,
        stacklevel=2,
    )
    _jpeg = None  # type: ignore[assignment]

EXTENSION = _jpeg is not None  # documented as fastdata.decode.JPEG_EXTENSION


# Regions up to this many bytes are decoded into a buffer each thread keeps (decode(reuse=True)):
# 16 MiB, a 5-megapixel region; larger ones get their own array, so no thread holds more.
_REUSED_BYTES = 16 << 20


class _Scratch(threading.local):
    """The buffer of one thread's reused decodes, grown on demand up to _REUSED_BYTES."""

    buffer: np.ndarray = np.empty(0, np.uint8)


_SCRATCH = _Scratch()


def decode(
    buf: np.ndarray,
    header: ImageHeader,
    factor: int,
    box: tuple[int, int, int, int] | None,
    source: str | None,
    *,
    reuse: bool = False,
) -> tuple[np.ndarray, tuple[int, int]] | None:
    """The JPEG decoded at ``1 / factor`` in its stored orientation, RGB: whole when ``box``
    is None, else the region around ``box`` (``top, left, height, width`` of the scaled
    image) with exactly the whole decode's pixels there; and where the box's corner lies in
    what is returned. None when the extension is absent or declines: decode with OpenCV.

    ``reuse``: decode into a buffer this thread keeps, for a caller that transforms the
    image before its next decode (the image is overwritten then): no allocation, and memory
    that is still in the cache.

    Raises:
        DecodeError: libjpeg warns about the data (corrupt; the whole file is read).
    """
    if _jpeg is None or not within_opencv_limits(header):
        return None
    hw = (-(-header.height // factor), -(-header.width // factor))
    top, left, h, w = box or (0, 0, *hw)
    rows, cols = (min(hw[0], h + 2 * _REGION_MARGIN), min(hw[1], w + 3 * _REGION_MARGIN))
    size = rows * cols * 3
    if reuse and size <= _REUSED_BYTES:
        if _SCRATCH.buffer.size < size:
            _SCRATCH.buffer = np.empty(size, np.uint8)
        out = _SCRATCH.buffer[:size].reshape(rows, cols, 3)
    else:
        out = np.empty((rows, cols, 3), np.uint8)
    found = _jpeg.decode_rgb(buf, factor, top, left, h, w, out, rows, cols)
    if isinstance(found, str):
        raise _corrupt(found, source)
    if found is None or found[4:] != hw:  # declined, or libjpeg and the header disagree
        return None
    row, col, n_rows, n_cols = found[:4]
    return out[:n_rows, :n_cols], (row, col)


def decode_oriented(
    buf: np.ndarray,
    header: ImageHeader,
    factor: int,
    box: tuple[int, int, int, int],
    source: str | None,
    *,
    reuse: bool = False,
) -> tuple[np.ndarray, tuple[int, int]] | None:
    """:func:`decode` of the region around ``box`` of the *oriented* image at ``1 /
    factor`` (the header's EXIF orientation applied): the stored region the box maps to,
    decoded and oriented, and where the box's corner lies in it. The pixels are those of
    the whole image decoded, oriented and cropped."""
    orientation = header.orientation
    stored_hw = (-(-header.height // factor), -(-header.width // factor))
    oriented_hw = stored_hw if orientation < 5 else stored_hw[::-1]
    stored = _turn_box(_INVERSE.get(orientation, orientation), box, oriented_hw)
    found = decode(buf, header, factor, stored, source, reuse=reuse)
    if found is None or orientation == 1:
        return found
    image, (row, col) = found
    top, left, _, _ = _turn_box(orientation, (row, col, *stored[2:]), image.shape[:2])
    return orient(image, orientation), (top, left)


_INVERSE = {6: 8, 8: 6}  # the orientation undoing each (the others undo themselves)


def _turn_box(
    orientation: int, box: tuple[int, int, int, int], hw: tuple[int, int]
) -> tuple[int, int, int, int]:
    """Where ``box`` (top, left, height, width) of an image of ``hw`` lies once the image
    is given EXIF ``orientation`` (:func:`orient`)."""
    top, left, h, w = box
    bottom, right = hw[0] - top - h, hw[1] - left - w
    return {
        1: (top, left, h, w),
        2: (top, right, h, w),
        3: (bottom, right, h, w),
        4: (bottom, left, h, w),
        5: (left, top, w, h),
        6: (left, bottom, w, h),
        7: (right, bottom, w, h),
        8: (right, top, w, h),
    }[orientation]


def check(data: bytes | bytearray | memoryview | np.ndarray) -> bool | str:
    """The extension's verdict on a whole JPEG: True when libjpeg reads it to its end without
    a warning, the warning when the data is corrupt, False when libjpeg cannot read it or the
    extension is absent (no verdict)."""
    return False if _jpeg is None else _jpeg.check(data)


def verify(buf: np.ndarray, source: str | None) -> None:
    """Raise what :func:`decode` would have raised for a JPEG OpenCV decoded instead."""
    verdict = check(buf)
    if isinstance(verdict, str):
        raise _corrupt(verdict, source)


def orient(image: np.ndarray, orientation: int) -> np.ndarray:
    """Apply an EXIF orientation (1-8) to a stored image, as a viewer (and Pillow's
    ``exif_transpose``) would."""
    turn = _ORIENT.get(orientation)
    return image if turn is None else turn(image)


# The axes of the oriented image (rows, columns) that run backwards through the stored one.
_REVERSED = {
    1: (False, False),
    2: (False, True),
    3: (True, True),
    4: (True, False),
    5: (False, False),
    6: (False, True),
    7: (True, True),
    8: (True, False),
}


def reduced_grid(orientation: int, hw: tuple[int, int], factor: int) -> tuple[int, int]:
    """Where a JPEG decoded at ``1 / factor`` and then oriented puts its reduced pixels on
    the oriented image of ``hw`` (full size): per axis, the source pixels by which the first
    reduced pixel starts before the image (:meth:`~fastdata.decode.Geometry.reduced`'s
    ``grid``). libjpeg's reduced pixels start at the stored image's top left; where the
    orientation reverses an axis, they start at its other end, and the first oriented one
    covers ``factor * ceil(n / factor) - n`` pixels beyond the image."""
    return tuple(  # type: ignore[return-value]
        -(-n // factor) * factor - n if reversed_ else 0
        for n, reversed_ in zip(hw, _REVERSED.get(orientation, (False, False)), strict=True)
    )


def within_opencv_limits(header: ImageHeader) -> bool:
    """Whether OpenCV decodes an image of this size (its ``OPENCV_IO_MAX_IMAGE_*``)."""
    max_pixels, max_width, max_height = _OPENCV_LIMITS
    return (
        header.height * header.width <= max_pixels
        and header.width <= max_width
        and header.height <= max_height
    )


def _corrupt(warning: str, source: str | None) -> DecodeError:
    return DecodeError(
        f"corrupt or truncated JPEG data (libjpeg: {warning}): decoded, it would hold "
        "garbage; re-download or re-encode the file, or remove it",
        path=source,
    )
