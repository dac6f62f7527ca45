"""decode_image: formats, colour handling, EXIF orientation, errors naming the source."""

from __future__ import annotations

import io
import pickle

import cv2
import numpy as np
import pytest
from decode_helpers import (
    ALPHA,
    FORMATS,
    JPEG,
    RGB,
    cv_encode,
    exif_jpeg,
    fake_png_header,
    photo,
    pil_decode,
    pil_encode,
    psnr,
)
from PIL import Image

from fastdata.decode import (
    decode_image,
    image_header,
    image_size,
)
from fastdata.errors import DecodeError


@pytest.mark.parametrize("name", FORMATS)
def test_formats_decode_to_rgb_as_well_as_pillow(name: str) -> None:
    data, original = FORMATS[name]
    out = decode_image(data)
    assert out.shape == (48, 64, 3)
    assert out.dtype == np.uint8
    reference = pil_decode(data)
    if np.array_equal(reference, original):  # lossless: nothing less than exact will do
        np.testing.assert_array_equal(out, original)
    else:  # lossy: as close to the original as Pillow's decode of the same bytes
        assert psnr(out, original) >= psnr(reference, original) - 0.5
        assert psnr(out, reference) >= 35


def test_jpeg_pixels_equal_pillow_within_2() -> None:
    """Both link libjpeg-turbo: the issue allows a max abs difference of 2."""
    data = cv_encode(photo(300, 400, seed=3), ".jpg", cv2.IMWRITE_JPEG_QUALITY, 85)
    diff = np.abs(decode_image(data).astype(int) - pil_decode(data))
    assert diff.max() <= 2


def test_cmyk_jpeg_within_one_level_of_pillow() -> None:
    """OpenCV's CMYK -> RGB conversion rounds about one level brighter than Pillow's."""
    data = pil_encode(Image.fromarray(RGB).convert("CMYK"), "JPEG", quality=95)
    out = decode_image(data)
    assert out.shape == (48, 64, 3)
    assert np.abs(out.astype(int) - pil_decode(data)).max() <= 1


@pytest.mark.parametrize("gray", [False, True], ids=["rgb", "gray"])
def test_16bit_png_scales_with_rounding(gray: bool) -> None:
    values = np.random.default_rng(0).integers(0, 65536, (20, 30, 3), dtype=np.uint16)
    values[0, :3] = [0, 65535, 257 * 77 + 128]  # extremes and a value truncation gets wrong
    src = values[..., 0] if gray else values
    out = decode_image(cv_encode(src, ".png"))
    expected = np.round(src / 257).astype(np.uint8)
    if gray:
        expected = np.repeat(expected[..., None], 3, 2)
    np.testing.assert_array_equal(out, expected)


def test_keep_alpha_returns_rgba() -> None:
    np.testing.assert_array_equal(decode_image(FORMATS["png-rgba"][0], keep_alpha=True), ALPHA)
    np.testing.assert_array_equal(decode_image(FORMATS["webp-alpha"][0], keep_alpha=True), ALPHA)
    alpha16 = ALPHA.astype(np.uint16) * 257
    np.testing.assert_array_equal(decode_image(cv_encode(alpha16, ".png"), keep_alpha=True), ALPHA)
    for opaque in ("png-gray", "png-rgb", "jpeg"):
        data = FORMATS[opaque][0]
        rgba = decode_image(data, keep_alpha=True)
        assert rgba.shape == (48, 64, 4)
        np.testing.assert_array_equal(rgba[..., :3], decode_image(data))
        assert (rgba[..., 3] == 255).all()


STRAIGHT = np.dstack([RGB, np.random.default_rng(7).integers(0, 256, (48, 64), dtype=np.uint8)])


@pytest.mark.parametrize("compression", [None, "tiff_lzw", "tiff_adobe_deflate", "packbits"])
def test_pillow_rgba_tiff_keeps_its_stored_colours(compression: str | None) -> None:
    """Pillow writes RGBA TIFFs with unassociated alpha (ExtraSamples 2); OpenCV's 8-bit TIFF
    reader (libtiff's RGBA interface) multiplied their colours by alpha / 255."""
    data = pil_encode(Image.fromarray(STRAIGHT, "RGBA"), "TIFF", compression=compression)
    assert Image.open(io.BytesIO(data)).tag_v2[338] == (2,)
    pillow = Image.open(io.BytesIO(data))
    np.testing.assert_array_equal(decode_image(data), np.asarray(pillow.convert("RGB")))
    np.testing.assert_array_equal(decode_image(data, keep_alpha=True), np.asarray(pillow))
    np.testing.assert_array_equal(decode_image(data, keep_alpha=True), STRAIGHT)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applied_like_pillow(orientation: int) -> None:
    rgb = photo(40, 64, seed=orientation)
    data = exif_jpeg(rgb, orientation)
    out = decode_image(data)
    expected = pil_decode(data)  # exif_transpose: Pillow's reading of the tag
    assert out.shape == expected.shape
    assert np.abs(out.astype(int) - expected).max() <= 2
    assert image_size(data) == out.shape[:2]
    assert image_header(data).orientation == orientation
    stored = decode_image(data, exif=False)
    assert stored.shape == (40, 64, 3)
    assert image_size(data, exif=False) == (40, 64)


# -- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (JPEG[: len(JPEG) // 2], "truncated JPEG"),
        (JPEG[:200], "truncated JPEG"),
        (bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8)), "not an image"),
        (b"<html><body>404 Not Found</body></html>", "not an image"),
        (fake_png_header(100_000, 100_000), "max_pixels"),
    ],
    ids=["empty", "half-jpeg", "jpeg-header-only", "random", "html", "bomb"],
)
def test_bad_data_raises_decode_error_naming_the_source(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError, match=reason) as info:
        decode_image(data, source="shard-0001.tar/cat_42.jpg")
    assert info.value.path == "shard-0001.tar/cat_42.jpg"
    assert "shard-0001.tar/cat_42.jpg" in str(info.value)
    clone = pickle.loads(pickle.dumps(info.value))  # crosses DataLoader worker boundaries
    assert str(clone) == str(info.value)


def test_float_images_take_zero_to_one_with_alpha_too() -> None:
    values = np.array([0.0, 0.25, 1.0, 7.5], np.float32)  # 7.5: HDR radiance, clipped
    hdr = cv_encode(np.repeat(values, 3).reshape(1, 4, 3), ".hdr")
    rgba = decode_image(hdr, keep_alpha=True)
    assert rgba.shape == (1, 4, 4)
    np.testing.assert_array_equal(rgba[0, :, 3], 255)  # opaque
    np.testing.assert_allclose(rgba[0, :, 0], [0, 64, 255, 255], atol=1)  # RGBE rounds


def test_input_buffer_types() -> None:
    expected = decode_image(JPEG)
    for data in (bytearray(JPEG), memoryview(JPEG), np.frombuffer(JPEG, np.uint8)):
        np.testing.assert_array_equal(decode_image(data), expected)
    with pytest.raises(TypeError, match="uint8"):
        decode_image(np.frombuffer(JPEG, np.uint8).astype(np.int16))
