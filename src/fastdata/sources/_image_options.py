"""The options of every :class:`~fastdata.ImageStream` constructor (:class:`ImageOptions`,
documented on ``ImageStream``), and the decoder they describe, checked."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import torch

from fastdata._validate import check_bool, check_choice, check_int, check_size
from fastdata.augment import SampleAugment
from fastdata.decode import DEFAULT_MAX_PIXELS, ImageTransform, Size, check_decode_device
from fastdata.sources._image_decoder import ImageDecoder, OnError
from fastdata.sources.base import ORIGIN
from fastdata.sources.options import StreamOptions

__all__ = ["DECODER_OPTIONS", "ImageOptions", "image_decoder"]


class ImageOptions(StreamOptions, total=False):
    """The options of every :class:`ImageStream` constructor (keyword-only), documented on
    :class:`ImageStream`; the stream options are :class:`fastdata.PlannedStream`'s."""

    size: Size | None
    crop: Literal["center", "random-resized"] | None
    flip: bool
    interpolation: str | None
    transform: ImageTransform | None
    augment: Callable[..., Any] | Sequence[Callable[..., Any]] | None
    decode_threads: int
    decode_device: str | torch.device | None
    on_error: OnError
    keep_alpha: bool
    max_pixels: int | None
    reduced_decode: bool
    origin: bool


DECODER_OPTIONS = frozenset(ImageOptions.__annotations__) - frozenset(StreamOptions.__annotations__)


def image_decoder(
    options: dict[str, Any],
    image_column: str,
    label_column: str | None,
    extra_columns: tuple[str, ...],
    json_columns: tuple[str, ...],
) -> ImageDecoder:
    """The decoder the image options describe (taken out of ``options``), checked."""
    mine = {key: options.pop(key) for key in list(options) if key in DECODER_OPTIONS}
    transform = mine.get("transform")
    shape = {k: mine[k] for k in ("size", "crop", "flip", "interpolation") if k in mine}
    if transform is not None and any(v not in (None, False) for v in shape.values()):
        raise ValueError("pass either transform= or size/crop/flip/interpolation, not both")
    if transform is not None and not isinstance(transform, ImageTransform):
        raise TypeError(f"transform={transform!r}: expected a fastdata.ImageTransform")
    if transform is None:
        fixed = {"size": check_size("size", shape.get("size"), none="None to keep the size")}
        fixed["crop"] = check_choice("crop", shape.get("crop"), (None, "center", "random-resized"))
        fixed["flip"] = check_bool("flip", shape.get("flip", False))
        if shape.get("interpolation") is not None:
            fixed["interpolation"] = shape["interpolation"]
        transform = ImageTransform(**fixed)
    origin = check_bool("origin", mine.get("origin", False))
    if origin and ORIGIN in extra_columns:
        raise ValueError(
            f"origin=True adds the item's {ORIGIN!r}, and an extra column (or member) has that "
            "name; leave it out, or pass origin=False"
        )
    max_pixels = mine.get("max_pixels", DEFAULT_MAX_PIXELS)
    decode_device = check_decode_device(mine.get("decode_device"), transform)
    augment = None if mine.get("augment") is None else SampleAugment(mine["augment"])
    if augment is not None and mine.get("keep_alpha"):
        raise ValueError("augment= works on RGB images; it cannot be combined with keep_alpha")
    if augment is not None and decode_device is not None and augment.has_arrays:
        raise ValueError(
            "augment= with decode_device: fastdata.augment's augmentations run on CPU arrays; "
            "pass tensor callables (torchvision transforms), which run on the device"
        )
    return ImageDecoder(
        transform=transform,
        image_column=image_column,
        label_column=label_column,
        extra_columns=extra_columns,
        json_columns=json_columns,
        decode_threads=check_int("decode_threads", mine.get("decode_threads", 1), minimum=1),
        decode_device=decode_device,
        augment=augment,
        on_error=check_choice("on_error", mine.get("on_error", "raise"), ("raise", "skip")),
        keep_alpha=check_bool("keep_alpha", mine.get("keep_alpha", False)),
        max_pixels=check_int("max_pixels", max_pixels, minimum=1, none="None for no limit"),
        reduced_decode=check_bool("reduced_decode", mine.get("reduced_decode", True)),
        origin=origin,
    )
