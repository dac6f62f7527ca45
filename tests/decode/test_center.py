"""Centre crops against torchvision's evaluation recipe, ``Resize(s)`` + ``CenterCrop(size)``
on tensors: ``crop="center"`` gives its pixels (it used to resize a box rounded to whole
source pixels, grey levels off)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as tvf
from decode_helpers import chw, cv_encode, exif_jpeg, photo, psnr
from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastdata.decode import (
    ImageTransform,
    Window,
    decode_for,
    decode_image,
    output_hw,
    resized_center_crop,
    sample_rng,
)
from fastdata.decode import _center as center_module
from fastdata.decode import _resize as resize_module


def recipe(img: np.ndarray, resize_to: int, crop: tuple[int, int]) -> np.ndarray:
    """torchvision's Resize(resize_to) + CenterCrop(crop) on the image as a tensor."""
    resized = tvf.resize(chw(img), [resize_to], antialias=True)
    return tvf.center_crop(resized, list(crop)).permute(1, 2, 0).numpy()


@st.composite
def crops(draw: st.DrawFn) -> tuple[int, int, int, int, int]:
    """An image size (odd and even, portrait and landscape), a shorter side to resize to
    (shrinking or enlarging) and a crop that fits the resized image, its sides up to it."""
    h, w = draw(st.integers(8, 320)), draw(st.integers(8, 320))
    resize_to = draw(st.integers(4, 300))
    new_h, new_w = output_hw((h, w), resize_to)
    ch = draw(st.integers(max(1, new_h - 3), new_h) | st.integers(1, new_h))
    cw = draw(st.integers(max(1, new_w - 3), new_w) | st.integers(1, new_w))
    return h, w, resize_to, ch, cw


@settings(max_examples=150, deadline=None)
@given(crops(), st.integers(0, 2**32 - 1))
@example((400, 500, 256, 224, 224), 0)  # ImageNet-sized: edges on whole source pixels
@example((333, 517, 256, 224, 224), 0)
@example((517, 333, 256, 256, 224), 0)  # the crop is the resized image's whole width
@example((375, 500, 375, 375, 375), 0)  # no resize: a plain crop
@example((99, 61, 200, 200, 200), 0)  # enlarging
def test_center_crop_is_torchvision_resize_then_center_crop(
    case: tuple[int, int, int, int, int], seed: int
) -> None:
    h, w, resize_to, ch, cw = case
    img = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    expected = recipe(img, resize_to, (ch, cw))
    np.testing.assert_array_equal(resized_center_crop(img, resize_to, (ch, cw)), expected)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(20, 400),
    st.integers(20, 400),
    st.integers(8, 224),
    st.sampled_from([0.875, 0.9, 0.95, 1.0, 0.5]),
    st.integers(0, 3),
)
def test_image_transform_center_is_the_recipe_flipped_and_into_slots(
    h: int, w: int, size: int, crop_pct: float, index: int
) -> None:
    """ImageTransform(crop="center") is Resize(floor(size / crop_pct)) + CenterCrop(size),
    flipped or not, into a new array or into a batch's slot."""
    img = photo(h, w, seed=index)
    transform = ImageTransform(size=size, crop="center", crop_pct=crop_pct, flip=True)
    expected = recipe(img, transform.decode_size, (size, size))
    rng = sample_rng(0, 0, index)
    geometry = transform.geometry((h, w), rng)
    if geometry.flip:
        expected = expected[:, ::-1]
    np.testing.assert_array_equal(transform.apply(img, geometry), expected)
    slot = np.empty((size, size, 3), np.uint8)
    assert transform.apply(img, geometry, out=slot) is slot
    np.testing.assert_array_equal(slot, expected)


def test_the_old_rounded_box_was_grey_levels_off() -> None:
    """The reported case: 16 ImageNet-sized photos were 1.4-6 grey levels off on average."""
    img = photo(425, 341, seed=3)
    expected = recipe(img, 256, (224, 224))
    np.testing.assert_array_equal(ImageTransform(size=224, crop="center")(img), expected)


def test_without_the_extension_the_same_weights_in_float_are_within_a_grey_level(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(resize_module, "_resample", None)
    for h, w in [(300, 401), (517, 333), (64, 64)]:
        img = photo(h, w, seed=h)
        got = resized_center_crop(img, 56, (48, 40)).astype(int)
        assert np.abs(got - recipe(img, 56, (48, 40))).max() <= 1
        gray = np.ascontiguousarray(img[:, :, 0])  # one channel, float32: the float path
        as_float = resized_center_crop(gray.astype(np.float32), 56, 48)
        assert as_float.dtype == np.float32 and as_float.shape == (48, 48)


def test_opencv_interpolations_resize_the_rounded_box() -> None:
    """Only "antialias" has a windowed resampler; the others resize the box rounded to whole
    source pixels, close to the two-step version."""
    transform = ImageTransform(size=224, crop="center", interpolation="auto")
    img = photo(333, 517)
    assert transform.geometry(img.shape[:2]).window is None
    two_step = recipe(img, 256, (224, 224))
    assert psnr(transform(img), two_step) >= 35


def test_the_window_box_covers_the_taps_only() -> None:
    transform = ImageTransform(size=224, crop="center")
    geometry = transform.geometry((400, 500))
    assert isinstance(geometry.window, Window)
    top, left, h, w = geometry.box
    # the crop covers 350 x 350 source pixels; the taps reach a pixel or two beyond
    assert 350 < h <= 356 and 350 < w <= 356 and (top, left) == geometry.window.origin
    with pytest.raises(ValueError, match="taps leave"):  # a region too small for the window
        center_module.resample_window(photo(40, 40), geometry.window, (224, 224))


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_reduced_decode_of_a_center_crop_stays_close_to_the_recipe(orientation: int) -> None:
    """Decoded at 1/2 or less (the box covers at least twice the output), the window is
    resampled on the reduced image at its place in the full one, EXIF orientation included:
    close to the recipe on the full decode, not equal (libjpeg's DCT scaling)."""
    data = exif_jpeg(photo(900, 1203), orientation)
    transform = ImageTransform(size=96, crop="center")
    image, geometry = decode_for(data, transform)
    assert max(image.shape[:2]) < 700  # decoded reduced
    full = decode_image(data)
    expected = recipe(full, transform.decode_size, (96, 96))
    assert psnr(transform.apply(image, geometry), expected) >= 35
    exact, exact_geometry = decode_for(data, transform, reduce=False)
    np.testing.assert_array_equal(transform.apply(exact, exact_geometry), expected)


def test_region_decode_keeps_the_window() -> None:
    data = cv_encode(photo(400, 600), ".jpg")
    transform = ImageTransform(size=(200, 200), crop="center")
    image, geometry = decode_for(data, transform)
    expected = recipe(decode_image(data), transform.decode_size, (200, 200))
    np.testing.assert_array_equal(transform.apply(image, geometry), expected)
    assert torch.equal(torch.from_numpy(transform(decode_image(data))), torch.from_numpy(expected))


@pytest.mark.skipif(resize_module._resample is None, reason="needs the _resample extension")
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_the_extension_window_is_exact_in_its_plain_loops_and_vector_passes(channels: int) -> None:
    img = np.random.default_rng(channels).integers(0, 256, (301, 257, channels), dtype=np.uint8)
    (top, left, h, w), window = center_module.center_window((301, 257), 150, (120, 99))
    region = img[top : top + h, left : left + w]
    expected = tvf.center_crop(tvf.resize(chw(img), [150], antialias=True), [120, 99])
    expected_hwc = expected.permute(1, 2, 0).numpy()
    for simd in (False, True):
        for flip in (False, True):
            out = np.empty((120, 99, channels), np.uint8)
            resize_module._resample.resize(region, out, flip, simd, window.axes())
            np.testing.assert_array_equal(out, expected_hwc[:, ::-1] if flip else expected_hwc)
    with pytest.raises(TypeError, match="window: two"):
        resize_module._resample.resize(region, out, False, True, (1, 2))
