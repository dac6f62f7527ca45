"""Centre crops: :func:`center_crop`, and the resize-then-crop of the evaluation recipe
(torchvision's ``Resize(s)`` + ``CenterCrop(size)``) computed from the crop's source region
only.

torchvision resizes the whole image and takes the central window of the result. Each pixel
of that window is a weighted sum over a few source pixels, with weights that depend only on
the whole image's scale and the pixel's index in the resized image; so the window can be
computed from the source region its taps cover, with those weights, and nothing else: the
:class:`Window` of a :class:`~fastdata.decode.Geometry`. The ``_resample`` extension
evaluates the kernel that way (torch's weights, rounding and precision, so the pixels are
torch's exactly); without it a float evaluation of the same weights is within a grey level.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from fastdata.decode import _resize
from fastdata.decode._resize import Size, _pair, output_hw, resize

__all__ = [
    "Window",
    "center_crop",
    "center_crop_box",
    "center_window",
    "resample_window",
    "resized_center_crop",
]

Box = tuple[int, int, int, int]
"""``(top, left, height, width)`` of a source region."""


class Window(NamedTuple):
    """Where a centre crop's output lies in the whole image resized: the output is the
    pixels from ``offset`` on of the whole image resized to ``resized``, and the geometry's
    box starts at pixel ``origin`` of the whole image as decoded (``image``). Decoded at
    ``1 / factor`` (libjpeg's DCT scaling), the whole image is ``source`` pixels at full
    resolution and the reduced pixels start ``grid`` source pixels before it (see
    :meth:`~fastdata.decode.Geometry.reduced`)."""

    image: tuple[int, int]
    """``(height, width)`` of the whole image as decoded."""
    source: tuple[int, int]
    """``(height, width)`` of the whole image at full resolution."""
    resized: tuple[int, int]
    """``(height, width)`` the whole image is resized to before the crop."""
    offset: tuple[int, int]
    """``(top, left)`` of the output in the resized image."""
    origin: tuple[int, int]
    """``(top, left)`` of the geometry's box in the whole image as decoded."""
    factor: int = 1
    grid: tuple[int, int] = (0, 0)

    def axes(self) -> tuple[tuple[int, int, int, int, float, float], ...]:
        """Per axis (rows, columns): ``(whole, total, start, origin, scale, shift)``, the
        ``window`` of ``_resample.resize``: output ``i`` of the resized axis is centred at
        source coordinate ``scale * (i + 0.5) + shift``, as torch computes it when the
        image is decoded in full (``scale`` = whole / total, ``shift`` = 0)."""
        return tuple(
            (
                self.image[a],
                self.resized[a],
                self.offset[a],
                self.origin[a],
                self.source[a] / (self.resized[a] * self.factor),
                self.grid[a] / self.factor,
            )
            for a in (0, 1)
        )

    def reduced(
        self, factor: int, hw: tuple[int, int], grid: tuple[int, int], size: tuple[int, int]
    ) -> tuple[Box, Window]:
        """This window, with an output of ``size``, for the image decoded at ``1 / factor``
        into ``hw`` (``self`` decided at full resolution), and the box its taps cover there."""
        whole = Window(hw, self.source, self.resized, self.offset, (0, 0), factor, grid)
        return _covering(whole, size)


def _span(whole: int, scale: float, shift: float, first: int, last: int) -> tuple[int, int]:
    """The source pixels ``[start, stop)`` the taps of outputs ``first`` to ``last`` read:
    torch's bounds (``_resample.c``'s arithmetic), one pixel wider each way (within the
    image) so that no rounding can put a tap outside."""
    support = scale if scale >= 1.0 else 1.0
    start = int(scale * (first + 0.5) + shift - support + 0.5)
    stop = int(scale * (last + 0.5) + shift + support + 0.5)
    return min(max(start - 1, 0), whole - 1), min(max(stop + 1, 1), whole)


def _covering(window: Window, crop: tuple[int, int]) -> tuple[Box, Window]:
    """The box the taps of a ``crop`` output cover in ``window``'s image, and ``window``
    with that box's origin."""
    (y0, y1), (x0, x1) = (
        _span(whole, scale, shift, start, start + length - 1)
        for (whole, _, start, _, scale, shift), length in zip(window.axes(), crop, strict=True)
    )
    return (y0, x0, y1 - y0, x1 - x0), window._replace(origin=(y0, x0))


def center_crop(img: np.ndarray, size: Size) -> np.ndarray:
    """The central ``size`` region (``int`` = square), placed as torchvision places it.

    Returns a view into ``img``. Unlike torchvision, an image smaller than the crop is an
    error rather than zero-padded: padding would hide a wrong pipeline behind black borders.
    """
    crop_h, crop_w = _pair(size)
    h, w = img.shape[:2]
    if crop_h > h or crop_w > w:
        raise ValueError(
            f"center_crop to {crop_h}x{crop_w} of a {h}x{w} image: the crop is larger than "
            "the image; resize the image first (ImageTransform(crop='center') does)"
        )
    top = round((h - crop_h) / 2.0)
    left = round((w - crop_w) / 2.0)
    return img[top : top + crop_h, left : left + crop_w]


def _resized_crop(
    src_hw: tuple[int, int], resize_to: Size, size: Size
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """The resized size, the crop's size and its ``(top, left)`` in the resized image."""
    new_h, new_w = output_hw(src_hw, resize_to)
    crop_h, crop_w = _pair(size)
    if crop_h > new_h or crop_w > new_w:
        raise ValueError(
            f"center crop {crop_h}x{crop_w} of an image resized to {new_h}x{new_w}: the crop "
            "is larger than the image; resize to a larger size"
        )
    offset = round((new_h - crop_h) / 2.0), round((new_w - crop_w) / 2.0)
    return (new_h, new_w), (crop_h, crop_w), offset


def center_window(src_hw: tuple[int, int], resize_to: Size, size: Size) -> tuple[Box, Window]:
    """The source box that ``center_crop(resize(img, resize_to), size)`` reads for an image
    of ``src_hw`` (the taps of the crop's pixels, a pixel more each way), and the
    :class:`Window` that resamples it into the crop's pixels exactly."""
    resized, crop, offset = _resized_crop(src_hw, resize_to, size)
    whole = Window(src_hw, src_hw, resized, offset, (0, 0))
    return _covering(whole, crop)


def center_crop_box(
    src_hw: tuple[int, int], resize_to: Size, size: Size
) -> tuple[Box, tuple[int, int]]:
    """The source box ``(top, left, height, width)`` that corresponds to the crop of
    ``center_crop(resize(img, resize_to), size)`` for an image of ``src_hw``, rounded to
    whole source pixels, and the crop's ``(height, width)``. Resizing that box to the crop
    is what ``ImageTransform(crop="center")`` does with an OpenCV interpolation: up to half
    a source pixel off the two-step version (:func:`center_window` is exact)."""
    h, w = src_hw
    (new_h, new_w), (crop_h, crop_w), (top, left) = _resized_crop(src_hw, resize_to, size)
    y0, y1 = round(top * h / new_h), round((top + crop_h) * h / new_h)
    x0, x1 = round(left * w / new_w), round((left + crop_w) * w / new_w)
    # a sliver of an image (say 1 x 4000 px) can round a side of the box to nothing
    y0, x0 = min(y0, h - 1), min(x0, w - 1)
    y1, x1 = max(y1, y0 + 1), max(x1, x0 + 1)
    return (y0, x0, y1 - y0, x1 - x0), (crop_h, crop_w)


def resample_window(
    region: np.ndarray,
    window: Window,
    out_hw: tuple[int, int],
    *,
    flip: bool = False,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The ``out_hw`` output of ``window`` from ``region`` (the box's pixels, a view is
    read in place), mirrored when ``flip``: torch's antialiased bilinear pixels of the whole
    image resized, through the ``_resample`` extension for uint8 images of 1 to 4 channels,
    else from the same weights in float64 (within a grey level; uint8 and float32)."""
    shape = (*out_hw, *region.shape[2:])
    if out is None:
        out = np.empty(shape, region.dtype)
    else:
        _resize._check_out(out, shape, region.dtype)
    ext = _resize._resample
    image = region if region.ndim == 3 else region[:, :, None]
    if (
        ext is not None
        and image.dtype == np.uint8
        and 1 <= image.shape[2] <= 4
        and image.strides[1:] == (image.shape[2], 1)
        and not np.may_share_memory(image, out)
    ):
        ext.resize(
            image,
            out.reshape((*out_hw, image.shape[2])),
            flip,
            _resize._RESAMPLE_AVX2,
            window.axes(),
        )
        return out
    if image.dtype not in (np.uint8, np.float32):
        raise ValueError(
            f"the centre crop's resampling takes uint8 or float32 images, not {image.dtype}"
        )
    rows, cols = (
        _weights(axis, n, length)
        for axis, n, length in zip(window.axes(), out_hw, image.shape[:2], strict=True)
    )
    result = np.einsum(
        "yi,ixc->yxc", rows, np.einsum("xj,ijc->ixc", cols, image.astype(np.float64))
    )
    if flip:
        result = result[:, ::-1]
    if image.dtype == np.uint8:
        result = np.clip(np.rint(result), 0, 255)
    out.reshape(result.shape)[...] = result
    return out


def _weights(axis: tuple[int, int, int, int, float, float], n: int, length: int) -> np.ndarray:
    """The ``(n, length)`` float weights of one axis of a window (torch's triangle filter,
    widened when shrinking, normalised), columns counted from the box's origin."""
    whole, _total, start, origin, scale, shift = axis
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    weights = np.zeros((n, length))
    for i in range(n):
        center = scale * (start + i + 0.5) + shift
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), whole)
        taps = np.arange(lo, hi)
        w = np.clip(1.0 - np.abs((taps - center + 0.5) * invscale), 0.0, None)
        if w.sum() > 0:
            w /= w.sum()
        if lo - origin < 0 or hi - origin > length:
            raise ValueError("the window's taps leave the region given")
        weights[i, lo - origin : hi - origin] = w
    return weights


def resized_center_crop(
    img: np.ndarray, resize_to: Size, size: Size, *, interpolation: str = "antialias"
) -> np.ndarray:
    """``center_crop(resize(img, resize_to), size)``, computed from the source region that
    survives the crop (for a 400x500 image resized to 256 and cropped to 224, 39% fewer
    pixels to filter).

    With ``"antialias"`` (the default) the pixels are the two-step version's: each is
    resampled with the whole image's scale at its place in the resized image (see
    :class:`Window`). With an OpenCV interpolation the region, rounded to whole source
    pixels (:func:`center_crop_box`), is resized to the crop: up to half a source pixel off
    the two-step version.
    """
    if interpolation == "antialias":
        (top, left, h, w), window = center_window(img.shape[:2], resize_to, size)
        return resample_window(img[top : top + h, left : left + w], window, _pair(size))
    (top, left, h, w), out_hw = center_crop_box(img.shape[:2], resize_to, size)
    return resize(img[top : top + h, left : left + w], out_hw, interpolation=interpolation)


def center_scale(size: Size, crop_pct: float) -> int:
    """The shorter side to resize to before a centre crop of ``size`` keeping ``crop_pct``."""
    return math.floor(max(_pair(size)) / crop_pct)
