"""One synthetic image and its encoding (fastdata.synthetic._pixels): shapes, dtypes,
determinism, channel order, and pixels that compress like photos."""

from __future__ import annotations

import math
from typing import Any

import cv2
import numpy as np
import pytest
from synthetic_helpers import decode

from fastdata import synthetic


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_synth_image_shape_dtype_and_determinism(channels: int, dtype: type) -> None:
    image = synthetic.synth_image(np.random.default_rng(5), 40, 70, channels=channels, dtype=dtype)
    again = synthetic.synth_image(np.random.default_rng(5), 40, 70, channels=channels, dtype=dtype)
    other = synthetic.synth_image(np.random.default_rng(6), 40, 70, channels=channels, dtype=dtype)
    assert image.shape == (40, 70, channels)
    assert image.dtype == dtype
    np.testing.assert_array_equal(image, again)
    assert not np.array_equal(image, other)
    assert image.std() > 0
    if dtype == np.uint16:
        assert image.max() > 255  # the whole 16-bit range is used, not 8-bit values


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"channels": 2}, "expected 1, 3 or 4"),
        ({"dtype": np.float32}, "uint8 or uint16"),
        ({"height": 0}, "height=0"),
    ],
)
def test_synth_image_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    args = {"height": 8, "width": 8, **kwargs}
    with pytest.raises(ValueError, match=match):
        synthetic.synth_image(np.random.default_rng(0), **args)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_round_trip_is_exact_and_in_rgb_order(channels: int) -> None:
    image = synthetic.synth_image(np.random.default_rng(0), 20, 30, channels=channels)
    decoded = decode(synthetic.encode_image(image, fmt="png"))
    if channels == 3:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    elif channels == 4:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGBA)
    np.testing.assert_array_equal(decoded.reshape(image.shape), image)
    gray16 = synthetic.synth_image(np.random.default_rng(0), 20, 30, channels=1, dtype=np.uint16)
    np.testing.assert_array_equal(decode(synthetic.encode_image(gray16, fmt="png")), gray16[..., 0])


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
def test_lossy_formats_keep_rgb_order(fmt: str) -> None:
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 0] = 255
    data = synthetic.encode_image(red, fmt=fmt, quality=95)
    rgb = decode(data, cv2.IMREAD_COLOR_RGB)
    assert rgb[..., 0].mean() > 240
    assert rgb[..., 1:].mean() < 15


@pytest.mark.parametrize(
    ("image", "kwargs", "match"),
    [
        (np.zeros((8, 8, 3), np.uint8), {"fmt": "gif"}, "expected one of"),
        (np.zeros((8, 8, 3), np.uint8), {"quality": 0}, r"in \[1, 100\]"),
        (np.zeros((8, 8, 3), np.uint8), {"quality": 101}, r"in \[1, 100\]"),
        (np.zeros((8, 8, 4), np.uint8), {"fmt": "jpeg"}, "4 channel"),
        (np.zeros((8, 8), np.uint8), {"fmt": "webp"}, "1 channel"),
        (np.zeros((8, 8), np.uint16), {"fmt": "jpeg"}, "uint16"),
        (np.zeros((8, 8, 3), np.float32), {"fmt": "png"}, "float32"),
        (np.zeros((2, 8, 8, 3), np.uint8), {}, "expected"),
    ],
)
def test_encode_image_rejects_what_the_format_cannot_hold(
    image: np.ndarray, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic.encode_image(image, **kwargs)


@pytest.mark.parametrize(("texture", "below_noise"), [("photo", 1.5), ("smooth", 3)])
def test_images_compress_like_photos_not_like_noise_or_flat_color(
    texture: str, below_noise: float
) -> None:
    rng = np.random.default_rng(0)
    photo = synthetic.synth_image(rng, 400, 400, texture=texture)
    noise = rng.integers(0, 256, photo.shape, dtype=np.uint8)
    flat = np.full_like(photo, 128)
    photo_size, noise_size, flat_size = (
        len(synthetic.encode_image(image, quality=90)) for image in (photo, noise, flat)
    )
    assert photo_size < noise_size / below_noise
    assert photo_size > 3 * flat_size


def bytes_per_pixel(images: list[tuple[bytes, int]]) -> float:
    pixels = sum(math.prod(decode(data).shape[:2]) for data, _ in images)
    return sum(len(data) for data, _ in images) / pixels


def test_default_images_have_the_entropy_of_imagenet_photos() -> None:
    """The documented target: about 0.55 bytes per pixel as JPEG at quality 90 (ImageNet's
    train set: about 110 KB at about 470x390, 0.6), about 100 KB at ImageNet's sizes; the
    smooth texture is several times smaller."""
    photos = synthetic.make_image_bytes(24, seed=1)
    smooth = synthetic.make_image_bytes(24, seed=1, texture="smooth")
    assert 0.5 <= bytes_per_pixel(photos) <= 0.62
    assert 80_000 <= np.mean([len(data) for data, _ in photos]) <= 130_000
    assert bytes_per_pixel(smooth) < bytes_per_pixel(photos) / 3
    assert synthetic.make_image_bytes(24, seed=1, texture="photo") == photos  # the default
    assert [label for _, label in smooth] == [label for _, label in photos]


@pytest.mark.parametrize("texture", ["photo", "smooth"])
def test_textures_keep_shape_range_and_channels(texture: str) -> None:
    for channels, dtype in [(1, np.uint8), (3, np.uint8), (4, np.uint8), (1, np.uint16)]:
        image = synthetic.synth_image(
            np.random.default_rng(2), 33, 47, channels=channels, dtype=dtype, texture=texture
        )
        assert image.shape == (33, 47, channels) and image.dtype == dtype
        assert image.std() > 0
    rgb = synthetic.synth_image(np.random.default_rng(2), 64, 64, texture=texture)
    assert not np.array_equal(rgb[..., 0], rgb[..., 1])  # colour, not gray
