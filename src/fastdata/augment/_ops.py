"""The image operations of fastdata's own augmentations, on uint8 HWC RGB numpy arrays.

Each follows the arithmetic of torchvision's ``transforms.v2`` kernel for uint8 tensors (the
same matrix for the geometric ones, the same blend, clamp and truncation for the colour ones),
computed with OpenCV and lookup tables: a few tens of microseconds for a 224 px image where
torchvision's tensor kernels take up to milliseconds (an affine warp there is a float
``grid_sample``). Results agree with torchvision's to within a grey level of rounding: every
colour op, and every geometric op with bilinear interpolation (OpenCV samples at 1/32 px,
torch in floating point). With nearest interpolation a sample point exactly half-way between
two pixels (a column of ShearY at some magnitudes, lines of a rotation at some angles, most at
135 degrees) is rounded up by OpenCV and to even by torch, so that pixel is its neighbour's:
against torchvision 0.29 at every magnitude, on a 64 x 48 photo ShearY was up to 253 grey
levels off on 0.5% of the pixels and Rotate up to 21 on 2.4%; on the 60 x 76 synthetic image
of tests/augment/test_ops.py, 255 on 0.55% and 158 on 1.8%. OpenCV releases the GIL, so the
decode threads run these in parallel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import cv2
import numpy as np

__all__ = [
    "adjust_brightness",
    "adjust_contrast",
    "adjust_saturation",
    "adjust_sharpness",
    "affine",
    "autocontrast",
    "equalize",
    "posterize",
    "rotate",
    "solarize",
]

_LEVELS = np.arange(256, dtype=np.float32)
_INTERPOLATION = {"nearest": cv2.INTER_NEAREST, "bilinear": cv2.INTER_LINEAR}
# torchvision's adjust_sharpness kernel: 1s around a 5, normalised
_SMOOTH = np.array([[1, 1, 1], [1, 5, 1], [1, 1, 1]], np.float32) / 13


def inverse_affine_matrix(
    center: tuple[float, float],
    angle: float,
    translate: tuple[float, float],
    shear: tuple[float, float],
) -> tuple[float, ...]:
    """The output-to-input map ``(a, b, c, d, e, f)`` of torchvision's ``affine`` (scale 1):
    ``T * C * RotateShear * C^-1`` inverted, in coordinates relative to the image centre
    (torchvision's ``_get_inverse_affine_matrix``)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    c = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - c * math.tan(sx)
    matrix = [d, -b, 0.0, -c, a, 0.0]
    cx, cy = center
    x, y = cx + translate[0], cy + translate[1]
    matrix[2] += cx - matrix[0] * x - matrix[1] * y
    matrix[5] += cy - matrix[3] * x - matrix[4] * y
    return tuple(matrix)


def affine(
    img: np.ndarray,
    *,
    angle: float = 0.0,
    translate: tuple[float, float] = (0.0, 0.0),
    shear: tuple[float, float] = (0.0, 0.0),
    corner: bool = False,
    interpolation: str = "nearest",
    fill: Sequence[float] = (0.0, 0.0, 0.0),
) -> np.ndarray:
    """torchvision's ``affine(img, angle, translate, scale=1, shear)``: about the image centre,
    or about the top-left corner with ``corner`` (``center=[0, 0]``, what the shears of the
    auto-augment policies use); outside pixels become ``fill``."""
    h, w = img.shape[:2]
    center = (-w * 0.5, -h * 0.5) if corner else (0.0, 0.0)
    a, b, c, d, e, f = inverse_affine_matrix(center, angle, translate, shear)
    # torchvision samples the map at pixel centres relative to the image centre; OpenCV maps
    # pixel indices: move the origin to pixel (0, 0) on both sides.
    cx, cy = (w - 1) * 0.5, (h - 1) * 0.5
    matrix = np.array([[a, b, c + cx - a * cx - b * cy], [d, e, f + cy - d * cx - e * cy]])
    return cv2.warpAffine(
        img,
        matrix,
        (w, h),
        flags=_INTERPOLATION[interpolation] | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=tuple(float(v) for v in fill),
    )


def rotate(
    img: np.ndarray, angle: float, *, interpolation: str = "nearest", fill: Sequence[float]
) -> np.ndarray:
    """torchvision's ``rotate(img, angle)``: counter-clockwise about the centre, same size."""
    return affine(img, angle=-angle, interpolation=interpolation, fill=fill)


def _lut(img: np.ndarray, table: np.ndarray) -> np.ndarray:
    """``table`` (256 values, or 256 x channels) looked up for every pixel."""
    table = np.clip(table, 0, 255).astype(np.uint8)  # torch's clamp_, then .to(uint8) truncates
    return cv2.LUT(img, table if table.ndim == 1 else table[None])


def adjust_brightness(img: np.ndarray, factor: float) -> np.ndarray:
    """``x * factor``, clamped (torchvision's ``adjust_brightness``)."""
    return _lut(img, _LEVELS * np.float32(factor))


def _gray(img: np.ndarray) -> np.ndarray:
    """torchvision's grayscale of a uint8 image as float32 (``0.2989 R + 0.587 G + 0.114 B``,
    floored)."""
    weights = np.array([[0.2989, 0.587, 0.114]], np.float32)
    return np.floor(cv2.transform(img.astype(np.float32), weights))


def _blend(img: np.ndarray, other: np.ndarray, factor: float) -> np.ndarray:
    """``img * factor + other * (1 - factor)``, clamped and truncated to uint8."""
    mixed = cv2.addWeighted(img.astype(np.float32), factor, other, 1.0 - factor, 0.0)
    return np.clip(mixed, 0, 255, out=mixed).astype(np.uint8)


def adjust_saturation(img: np.ndarray, factor: float) -> np.ndarray:
    """A blend with the image's grayscale (torchvision's ``adjust_saturation``)."""
    gray = _gray(img)
    return _blend(img, cv2.merge([gray] * img.shape[2]), factor)


def adjust_contrast(img: np.ndarray, factor: float) -> np.ndarray:
    """A blend with the mean of the image's grayscale (torchvision's ``adjust_contrast``)."""
    mean = np.float32(_gray(img).mean(dtype=np.float64))
    return _lut(img, _LEVELS * np.float32(factor) + mean * np.float32(1 - factor))


def adjust_sharpness(img: np.ndarray, factor: float) -> np.ndarray:
    """A blend with a 3x3 smoothing of the image, edges kept (torchvision's
    ``adjust_sharpness``)."""
    h, w = img.shape[:2]
    if h <= 2 or w <= 2:
        return img
    blurred = cv2.filter2D(img, -1, _SMOOTH, borderType=cv2.BORDER_REPLICATE)
    out = img.copy()
    out[1:-1, 1:-1] = _blend(img[1:-1, 1:-1], blurred[1:-1, 1:-1].astype(np.float32), factor)
    return out


def posterize(img: np.ndarray, bits: int) -> np.ndarray:
    """Keep the ``bits`` high bits of every value."""
    if bits >= 8:
        return img
    return _lut(img, np.arange(256) & ((0xFF << (8 - bits)) & 0xFF))


def solarize(img: np.ndarray, threshold: float) -> np.ndarray:
    """Invert the values ``>= threshold``."""
    return _lut(img, np.where(threshold <= _LEVELS, 255 - _LEVELS, _LEVELS))


def _histograms(img: np.ndarray) -> np.ndarray:
    """Each channel's histogram, ``(channels, 256)``."""
    channels = img.shape[2]
    return np.stack(
        [cv2.calcHist([img], [c], None, [256], [0, 256]).reshape(-1) for c in range(channels)]
    ).astype(np.int64)


def autocontrast(img: np.ndarray) -> np.ndarray:
    """Stretch each channel's range to 0-255 (torchvision's ``autocontrast``)."""
    hist = _histograms(img)
    present = hist > 0
    low = present.argmax(axis=1).astype(np.float32)
    high = (255 - present[:, ::-1].argmax(axis=1)).astype(np.float32)
    flat = high == low
    scale = (high - low) * np.float32(1 / 255)
    low[flat], scale[flat] = 0, 1
    return _lut(img, (_LEVELS[:, None] - low) / scale)


def equalize(img: np.ndarray) -> np.ndarray:
    """Equalize each channel's histogram the way PIL (and torchvision) do."""
    hist = _histograms(img)
    table = np.empty((256, img.shape[2]), np.int64)
    for c, counts in enumerate(hist):
        last = 255 - int((counts[::-1] > 0).argmax())
        step = (int(counts.sum()) - int(counts[last])) // 255
        if step == 0:  # a channel of (nearly) one value is left as it is
            table[:, c] = np.arange(256)
            continue
        table[0, c] = 0
        table[1:, c] = (np.cumsum(counts)[:-1] + step // 2) // step
    return _lut(img, table)
