"""Image transforms on uint8 HWC numpy arrays: crops, flip, and the per-sample transform that
combines them with a resize (:mod:`fastdata.decode._resize`).

These are the CPU half of the image pipeline: they run inside the decode threads (OpenCV
releases the GIL) and keep images as uint8, so 4x fewer bytes cross to the device than with
float32; normalization happens on the device. Randomness always comes from a
``numpy.random.Generator`` passed in (see :func:`sample_rng`), never from a global RNG, so a
sample's augmentation is a pure function of ``(seed, epoch, index)``.

Sizes follow torchvision: an ``int`` is the shorter side (aspect ratio kept), a pair is
``(height, width)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import cv2
import numpy as np

from fastdata._validate import constructor_keywords_checked
from fastdata.decode._center import (
    Window,
    center_crop,
    center_crop_box,
    center_scale,
    center_window,
    resample_window,
    resized_center_crop,
)
from fastdata.decode._resize import (
    INTERPOLATIONS,
    Size,
    _pair,
    _resample_into,
    output_hw,
    resize,
)

__all__ = [
    "Geometry",
    "ImageTransform",
    "Window",
    "center_crop",
    "center_crop_box",
    "hflip",
    "random_resized_crop",
    "random_resized_crop_params",
    "resized_center_crop",
]

_CROPS = ("center", "random-resized")


class Geometry(NamedTuple):
    """What :meth:`ImageTransform.geometry` decides for one image."""

    box: tuple[int, int, int, int]
    """``(top, left, height, width)`` of the source region used."""
    size: tuple[int, int]
    """``(height, width)`` of the output."""
    flip: bool
    """Mirror the output left-right."""
    window: Window | None = None
    """For a centre crop with ``interpolation="antialias"``: where the output lies in the
    whole image resized, so that the box is resampled at the whole image's scale (the
    pixels of resize-then-crop); ``None``: the box is resized to the output."""

    def smallest_source(self, src_hw: tuple[int, int]) -> tuple[int, int]:
        """The smallest ``(height, width)`` the image of ``src_hw`` may be decoded at while
        the box still covers at least the output size along both axes: the ``size`` hint
        that lets :func:`fastdata.decode.decode_image` decode a JPEG at 1/2, 1/4 or 1/8."""
        _, _, h, w = self.box
        return math.ceil(src_hw[0] * self.size[0] / h), math.ceil(src_hw[1] * self.size[1] / w)

    def reduced(self, factor: int, hw: tuple[int, int], grid: tuple[int, int] = (0, 0)) -> Geometry:
        """This geometry for the same image decoded at ``1 / factor`` (libjpeg's DCT
        scaling: reduced pixel ``i`` covers source pixels ``[i * factor - g, (i + 1) *
        factor - g)``, ``g`` the axis's ``grid`` offset) into ``hw``: the box's position
        and size divided by ``factor`` and rounded, so each edge sits within half a reduced
        pixel of the exact one, then moved inside ``hw``. A box of at least ``factor`` times
        the output stays at least the output. A geometry with a ``window`` (a centre crop)
        keeps its window, moved to the reduced image with its fractional offset, and takes
        the box its taps cover there.

        ``grid`` is ``(0, 0)`` for an image in its stored orientation, whose reduced pixels
        start at its top left corner. An EXIF orientation that reverses an axis moves that
        corner to the other end: the last reduced pixel there covers the image's first
        pixels and ``factor * n - size`` pixels before them (see
        :func:`fastdata.decode._libjpeg.reduced_grid`)."""
        if factor == 1:
            return self
        if self.window is not None:
            box, window = self.window.reduced(factor, hw, grid, self.size)
            return Geometry(box, self.size, self.flip, window)
        top, left, h, w = self.box
        # each edge rounded on its own (halves up): rounding the start and the size would
        # put the far edge up to a whole reduced pixel off
        y0, x0 = _half_up((top + grid[0]) / factor), _half_up((left + grid[1]) / factor)
        y1, x1 = _half_up((top + grid[0] + h) / factor), _half_up((left + grid[1] + w) / factor)
        top, left, h, w = y0, x0, y1 - y0, x1 - x0
        h, w = min(max(h, 1), hw[0]), min(max(w, 1), hw[1])
        top, left = min(top, hw[0] - h), min(left, hw[1] - w)
        return Geometry((top, left, h, w), self.size, self.flip)


def _half_up(x: float) -> int:
    return math.floor(x + 0.5)


def hflip(img: np.ndarray) -> np.ndarray:
    """The image mirrored left-right, as a new contiguous array (``torch.from_numpy`` rejects
    the negative strides of ``img[:, ::-1]``)."""
    return cv2.flip(img, 1)


def _check_range(name: str, value: Sequence[float]) -> tuple[float, float]:
    lo, hi = (float(v) for v in value)
    if not 0 < lo <= hi:
        raise ValueError(f"{name}={tuple(value)!r}: expected 0 < low <= high")
    return lo, hi


def random_resized_crop_params(
    src_hw: tuple[int, int],
    *,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    rng: np.random.Generator,
) -> tuple[int, int, int, int]:
    """The ``(top, left, height, width)`` box of a random-resized crop.

    Same sampling as torchvision's ``RandomResizedCrop.get_params``: up to 10 tries of an area
    fraction uniform in ``scale`` and an aspect ratio log-uniform in ``ratio``, keeping the
    first box that fits, placed uniformly; otherwise the central crop closest to ``ratio``.
    Only ``rng`` supplies randomness.
    """
    return _random_resized_box(
        src_hw, _check_range("scale", scale), _check_range("ratio", ratio), rng
    )


def _random_resized_box(
    src_hw: tuple[int, int],
    scale: tuple[float, float],
    ratio: tuple[float, float],
    rng: np.random.Generator,
) -> tuple[int, int, int, int]:
    """:func:`random_resized_crop_params` of checked ranges (``ImageTransform`` checks its own
    once)."""
    (lo_scale, hi_scale), (lo_ratio, hi_ratio) = scale, ratio
    height, width = src_hw
    area = height * width
    log_lo, log_hi = math.log(lo_ratio), math.log(hi_ratio)
    for _ in range(10):
        # lo + (hi - lo) * random() is Generator.uniform(lo, hi) bit for bit, in a third of
        # its time (no argument checks)
        target_area = area * (lo_scale + (hi_scale - lo_scale) * rng.random())
        aspect = math.exp(log_lo + (log_hi - log_lo) * rng.random())
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < lo_ratio:
        w, h = width, round(width / lo_ratio)
    elif in_ratio > hi_ratio:
        w, h = round(height * hi_ratio), height
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def random_resized_crop(
    img: np.ndarray,
    size: Size,
    *,
    scale: Sequence[float] = (0.08, 1.0),
    ratio: Sequence[float] = (3 / 4, 4 / 3),
    rng: np.random.Generator,
    interpolation: str = "antialias",
) -> np.ndarray:
    """A random box (see :func:`random_resized_crop_params`) resized to ``size``.

    ``size`` is the exact output (``int`` = square), as in torchvision's RandomResizedCrop.
    """
    top, left, h, w = random_resized_crop_params(img.shape[:2], scale=scale, ratio=ratio, rng=rng)
    return resize(img[top : top + h, left : left + w], _pair(size), interpolation=interpolation)


@constructor_keywords_checked
@dataclass(frozen=True)
class ImageTransform:
    """The per-sample transform of the image streams: resize, crop, random flip.

    A frozen, JSON-friendly config (``ImageTransform(**json.loads(text))`` round-trips the
    ``dataclasses.asdict`` of one); calling it transforms one uint8 HWC image.

    Attributes:
        size: output size. With ``crop`` it is the crop size (``int`` = square); without,
            the resize target (``int`` = shorter side, so the output size varies; a pair
            fixes it). ``None`` with ``crop=None`` keeps the decoded size.
        crop: ``"center"`` (resize the shorter side to ``size / crop_pct``, then take the
            centre: the usual evaluation recipe, torchvision's ``Resize`` + ``CenterCrop``,
            whose pixels it gives with ``"antialias"``, computed from the crop's source
            region only; see :func:`resized_center_crop`),
            ``"random-resized"`` (torchvision's RandomResizedCrop with ``scale`` and
            ``ratio``), or ``None``.
        flip: mirror left-right with probability 0.5 (torchvision's RandomHorizontalFlip).
        interpolation: a name from :data:`INTERPOLATIONS` (default ``"antialias"``:
            torchvision's resampling, and the fastest to shrink).
        scale: area fraction range of the random-resized crop.
        ratio: aspect ratio range of the random-resized crop.
        crop_pct: fraction of the resized image the centre crop keeps (0.875: 256 -> 224).
    """

    size: Size | None = None
    crop: Literal["center", "random-resized"] | None = None
    flip: bool = False
    interpolation: str = "antialias"
    scale: tuple[float, float] = (0.08, 1.0)
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    crop_pct: float = 0.875

    def __post_init__(self) -> None:
        # JSON gives lists; store tuples so the config stays hashable and compares equal.
        if self.size is not None and not isinstance(self.size, (int, np.integer)):
            object.__setattr__(self, "size", _pair(self.size))
        elif self.size is not None:
            _pair(self.size)
        object.__setattr__(self, "scale", _check_range("scale", self.scale))
        object.__setattr__(self, "ratio", _check_range("ratio", self.ratio))
        if self.crop is not None and self.crop not in _CROPS:
            raise ValueError(f"crop={self.crop!r}: expected one of {_CROPS} or None")
        if self.crop is not None and self.size is None:
            raise ValueError(f"crop={self.crop!r} needs a size, e.g. size=224")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(
                f"interpolation={self.interpolation!r}: expected one of {sorted(INTERPOLATIONS)}"
            )
        if not 0 < self.crop_pct <= 1:
            raise ValueError(f"crop_pct={self.crop_pct!r}: expected 0 < crop_pct <= 1")

    @property
    def output_size(self) -> tuple[int, int] | None:
        """``(height, width)`` of every output when fixed (stacking collate), else ``None``
        (variable sizes: use a padding or nested collate)."""
        if self.size is not None and (self.crop is not None or isinstance(self.size, tuple)):
            return _pair(self.size)
        return None

    @property
    def decode_size(self) -> Size | None:
        """The smallest decoded size this transform needs whatever the sample: the ``size``
        hint for :func:`fastdata.decode.decode_image`, which may then decode a JPEG at
        reduced resolution. ``None`` for the random-resized crop, whose crop can cover as
        little as ``scale[0]`` of the image; :func:`fastdata.decode.decode_for` (what the
        streams use) decides per sample instead, from the sample's own box."""
        if self.crop == "center" and self.size is not None:
            return center_scale(self.size, self.crop_pct)
        if self.crop is None:
            return self.size
        return None

    def geometry(self, src_hw: tuple[int, int], rng: np.random.Generator | None = None) -> Geometry:
        """Where this transform takes its pixels from and what it makes of them, for an
        image of ``src_hw``: the source box, the output size and the flip. Every backend
        (OpenCV here, torch on a device for ``decode_device``) applies the same geometry,
        so a sample is cropped and flipped alike whatever decodes it.

        ``rng`` (from :func:`sample_rng`) is required when the transform is random
        (``crop="random-resized"`` or ``flip=True``).
        """
        size = self.size
        box = (0, 0, *src_hw)
        out_hw = src_hw
        if size is not None and self.crop == "random-resized":
            box = _random_resized_box(src_hw, self.scale, self.ratio, _require_rng(rng))
            out_hw = _pair(size)
        elif size is not None and self.crop == "center":
            resize_to = center_scale(size, self.crop_pct)
            if self.interpolation == "antialias":
                box, window = center_window(src_hw, resize_to, size)
                flip = self.flip and _require_rng(rng).random() < 0.5
                return Geometry(box, _pair(size), flip, window)
            box, out_hw = center_crop_box(src_hw, resize_to, size)
        elif size is not None:
            out_hw = output_hw(src_hw, size)
        flip = self.flip and _require_rng(rng).random() < 0.5
        return Geometry(box, out_hw, flip)

    def __call__(
        self,
        img: np.ndarray,
        rng: np.random.Generator | None = None,
        *,
        out: np.ndarray | None = None,
    ) -> np.ndarray:
        """Transform one uint8 HWC image into a C-contiguous array (``img`` itself when
        there is nothing to do); ``rng`` as for :meth:`geometry`, ``out`` as for
        :meth:`apply`."""
        return self.apply(img, self.geometry(img.shape[:2], rng), out=out)

    def apply(
        self, img: np.ndarray, geometry: Geometry, *, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Apply a geometry to ``img``: one that :meth:`geometry` decided for ``img``'s size,
        or its :meth:`Geometry.reduced` version when ``img`` was decoded at reduced
        resolution. A box that does not fit ``img`` raises ``ValueError``.

        ``out``: a C-contiguous array of the output's shape to write the result into and
        return, such as ``batch[i]`` of a preallocated batch (no per-image array, no
        stacking copy).
        """
        (top, left, h, w), out_hw, flip, window = geometry
        height, width = img.shape[:2]
        if min(top, left) < 0 or min(h, w) <= 0 or top + h > height or left + w > width:
            raise ValueError(
                f"geometry box (top, left, height, width) = {geometry.box} does not fit a "
                f"{height}x{width} image: pass the geometry decided for this "
                "image (geometry() on its size, or reduced() to the size it was decoded at)"
            )
        region = img if (h, w) == img.shape[:2] else img[top : top + h, left : left + w]
        if window is not None:  # resampled at the whole image's scale: resize-then-crop
            return resample_window(region, window, out_hw, flip=flip, out=out)
        if (
            self.interpolation == "antialias"
            and out is not None
            and out.shape == (*out_hw, *img.shape[2:])
            and (h, w) != out_hw
            and _resample_into(region, out, flip=flip)
        ):
            return out  # resized and flipped in one pass, the crop read in place
        if out is None:
            resized = resize(region, out_hw, interpolation=self.interpolation)
            return hflip(resized) if flip else np.ascontiguousarray(resized)
        resize(region, out_hw, interpolation=self.interpolation, out=out)
        return cv2.flip(out, 1, dst=out) if flip else out  # in place, while still in cache


def _require_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """``rng``, which a random transform cannot do without."""
    if rng is None:
        raise ValueError(
            "this ImageTransform is random (random-resized crop or flip): pass "
            "rng=sample_rng(seed, epoch, index)"
        )
    return rng
