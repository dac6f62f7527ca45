"""fastdata's augmentations (:class:`TrivialAugmentWide`, :class:`RandomErasing`) and
:class:`BatchAugment` (the package docstring tells how they run).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from fastdata._validate import check_choice, check_int, check_number, constructor_keywords_checked
from fastdata.augment import _ops as ops
from fastdata.augment._base import Augmentation, globals_seeded

__all__ = ["Augmentation", "BatchAugment", "RandomErasing", "TrivialAugmentWide"]

Fill = float | tuple[float, ...]


def _levels(bins: int, high: float) -> np.ndarray:
    return np.linspace(0.0, high, bins, dtype=np.float32)


# TrivialAugment's "wide" space, as torchvision's TrivialAugmentWide: (op, magnitudes, signed)
_WIDE: tuple[tuple[str, Callable[[int], np.ndarray] | None, bool], ...] = (
    ("Identity", None, False),
    ("ShearX", lambda n: _levels(n, 0.99), True),
    ("ShearY", lambda n: _levels(n, 0.99), True),
    ("TranslateX", lambda n: _levels(n, 32.0), True),
    ("TranslateY", lambda n: _levels(n, 32.0), True),
    ("Rotate", lambda n: _levels(n, 135.0), True),
    ("Brightness", lambda n: _levels(n, 0.99), True),
    ("Color", lambda n: _levels(n, 0.99), True),
    ("Contrast", lambda n: _levels(n, 0.99), True),
    ("Sharpness", lambda n: _levels(n, 0.99), True),
    ("Posterize", lambda n: np.round(8 - np.arange(n) / ((n - 1) / 6)), False),
    ("Solarize", lambda n: np.linspace(1.0, 0.0, n, dtype=np.float32), False),
    ("AutoContrast", None, False),
    ("Equalize", None, False),
)


def _apply_op(
    image: np.ndarray, op: str, magnitude: float, *, interpolation: str, fill: Sequence[float]
) -> np.ndarray:
    """One operation of the auto-augment policies at ``magnitude``, as torchvision applies it
    (``_AutoAugmentBase._apply_image_or_video_transform``)."""
    shear = math.degrees(math.atan(magnitude))
    if op == "Identity":
        return image
    if op in ("ShearX", "ShearY"):
        shears = (shear, 0.0) if op == "ShearX" else (0.0, shear)
        return ops.affine(image, shear=shears, corner=True, interpolation=interpolation, fill=fill)
    if op in ("TranslateX", "TranslateY"):
        shift = (int(magnitude), 0) if op == "TranslateX" else (0, int(magnitude))
        return ops.affine(image, translate=shift, interpolation=interpolation, fill=fill)
    if op == "Rotate":
        return ops.rotate(image, magnitude, interpolation=interpolation, fill=fill)
    colour = {
        "Brightness": ops.adjust_brightness,
        "Color": ops.adjust_saturation,
        "Contrast": ops.adjust_contrast,
        "Sharpness": ops.adjust_sharpness,
    }
    if op in colour:
        return colour[op](image, 1.0 + magnitude)
    if op == "Posterize":
        return ops.posterize(image, int(magnitude))
    if op == "Solarize":
        return ops.solarize(image, 255.0 * magnitude)
    return ops.autocontrast(image) if op == "AutoContrast" else ops.equalize(image)


def _per_channel(value: Fill, channels: int) -> tuple[float, ...]:
    """A checked fill (one value, or one per channel) as one value per channel."""
    values = value if isinstance(value, tuple) else (value,)
    return values * channels if len(values) == 1 else values


def _fill(name: str, value: Fill) -> tuple[float, ...]:
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    return tuple(check_number(name, v, minimum=0, maximum=255) for v in values)


@constructor_keywords_checked
@dataclass(frozen=True)
class TrivialAugmentWide(Augmentation):
    """torchvision's ``TrivialAugmentWide`` on uint8 HWC arrays: one operation drawn
    uniformly from 14 (identity, shears, translations, rotation, brightness, colour,
    contrast, sharpness, posterize, solarize, autocontrast, equalize) at a magnitude drawn
    uniformly from ``num_magnitude_bins``, with a random sign where it has one: the same
    space and magnitudes as torchvision's, computed with OpenCV
    (:mod:`fastdata.augment._ops`), several times faster than torchvision's tensor kernels
    and than PIL.

    Args:
        num_magnitude_bins: magnitudes per operation (at least 2).
        interpolation: of the geometric operations, ``"nearest"`` (torchvision's default) or
            ``"bilinear"`` (what torchvision's ImageNet recipe passes). With ``"bilinear"``
            every operation is within one grey level of torchvision's; with ``"nearest"``,
            ShearY and Rotate put a few pixels (up to 2.4%) that lie exactly half-way between
            two source pixels on the other neighbour, up to the full range off (see
            :mod:`fastdata.augment._ops`).
        fill: the value of pixels moved in from outside the image: one value, or one per
            channel, in pixel units.
    """

    num_magnitude_bins: int = 31
    interpolation: Literal["nearest", "bilinear"] = "nearest"
    fill: Fill = 0.0

    def __post_init__(self) -> None:
        check_int("num_magnitude_bins", self.num_magnitude_bins, minimum=2)
        check_choice("interpolation", self.interpolation, ("nearest", "bilinear"))
        object.__setattr__(self, "fill", _fill("fill", self.fill))

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        op, magnitudes, signed = _WIDE[int(rng.integers(len(_WIDE)))]
        magnitude = 0.0
        if magnitudes is not None:
            bins = self.num_magnitude_bins
            magnitude = float(magnitudes(bins)[int(rng.integers(bins))])
            if signed and rng.random() <= 0.5:
                magnitude = -magnitude
        fill = _per_channel(self.fill, image.shape[2])
        return _apply_op(image, op, magnitude, interpolation=self.interpolation, fill=fill)


@constructor_keywords_checked
@dataclass(frozen=True)
class RandomErasing(Augmentation):
    """torchvision's ``RandomErasing`` on uint8 HWC arrays (in place): with probability
    ``p``, a rectangle of ``scale`` of the area and aspect ratio in ``ratio`` (log-uniform),
    placed uniformly, is set to ``value``; when 10 draws find no rectangle that fits, the
    image is left as it is.

    ``value`` is in pixel units: a number, one per channel, or ``"random"`` (uniform random
    bytes). torchvision's recipe erases *normalized* images to 0, which is the mean colour;
    on uint8 that is ``value=tuple(round(255 * m) for m in fastdata.IMAGENET.mean)``.
    """

    p: float = 0.5
    scale: tuple[float, float] = (0.02, 0.33)
    ratio: tuple[float, float] = (0.3, 3.3)
    value: Fill | Literal["random"] = 0.0

    def __post_init__(self) -> None:
        check_number("p", self.p, minimum=0, maximum=1)
        for name in ("scale", "ratio"):
            low, high = (
                check_number(name, v, minimum=0, exclusive_minimum=True)
                for v in getattr(self, name)
            )
            if low > high:
                raise ValueError(
                    f"{name}={getattr(self, name)!r}: expected (low, high), low <= high"
                )
            object.__setattr__(self, name, (low, high))
        if self.value != "random":
            object.__setattr__(self, "value", _fill("value", self.value))  # type: ignore[arg-type]

    def __call__(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if rng.random() >= self.p:
            return image
        height, width, channels = image.shape
        log_low, log_high = (math.log(r) for r in self.ratio)
        for _ in range(10):
            area = height * width * rng.uniform(*self.scale)
            aspect = math.exp(rng.uniform(log_low, log_high))
            h, w = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if h < height and w < width:
                top, left = int(rng.integers(height - h + 1)), int(rng.integers(width - w + 1))
                box = image[top : top + h, left : left + w]
                if isinstance(self.value, str):  # "random"
                    box[...] = rng.integers(0, 256, box.shape, dtype=np.uint8)
                else:
                    value = _per_channel(self.value, channels)
                    box[...] = np.asarray(value, np.float64).round().astype(np.uint8)
                return image
        return image


@constructor_keywords_checked
class BatchAugment:
    """A batch augmentation seeded by the training step.

    ``BatchAugment(transform, seed=s)(images, labels, step=k)`` returns ``transform(images,
    labels)`` computed with the global generators (torch's CPU one and the CUDA device's of
    the batch's tensors, Python's ``random``, numpy's legacy ``np.random``) seeded from
    ``(s, k)`` and restored afterwards: the draws of step ``k`` are the same in every run, so
    a run resumed from a checkpoint at step ``k`` mixes its batches exactly as the
    uninterrupted run did. Pass the global step your checkpoint saves.

    ``transform`` is any function of the batch that draws from those generators:
    torchvision's ``v2.MixUp`` / ``v2.CutMix`` (``v2.RandomChoice([...])`` of both, as
    torchvision's ImageNet recipe), on the device after :class:`fastdata.DeviceNormalize`.
    ``MixUp`` needs float images (normalized ones); ``CutMix`` also works on uint8.
    """

    def __init__(self, transform: Callable[..., Any], *, seed: int = 0) -> None:
        if not callable(transform):
            raise TypeError(f"transform={transform!r}: expected a callable of the batch")
        self.transform = transform
        self.seed = check_int("seed", seed, minimum=0)

    def __call__(self, *batch: Any, step: int) -> Any:
        """``transform(*batch)``, seeded by ``(seed, step)``."""
        step = check_int("step", step, minimum=0)
        seed = int(np.random.SeedSequence([self.seed, step]).generate_state(1, np.uint64)[0])
        devices = [t.device for t in batch if isinstance(t, torch.Tensor)]
        with globals_seeded(seed, devices):
            return self.transform(*batch)

    def __repr__(self) -> str:
        return f"BatchAugment({self.transform!r}, seed={self.seed})"
