"""Reduced (DCT-domain) decoding: the factor, decode_image(size=...), decode_for's geometry."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
from decode_helpers import (
    FEW,
    RRC_224,
    cv_encode,
    exif_jpeg,
    photo,
    psnr,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata.decode._decode as decode_module
from fastdata.decode import (
    Geometry,
    ImageTransform,
    decode_for,
    decode_image,
    image_header,
    reduction_factor,
    sample_rng,
)
from fastdata.synthetic import make_images


@pytest.mark.parametrize("orientation", [1, 6])
def test_reduced_decode_respects_exif_rotation(orientation: int) -> None:
    data = exif_jpeg(photo(100, 240), orientation)
    target = (60, 25) if orientation == 6 else (25, 60)  # 4x fits only the right way round
    assert decode_image(data, size=target).shape[:2] == target


SIZE = st.integers(1, 600)


@settings(max_examples=200, deadline=None)
@given(
    src=st.tuples(st.integers(1, 6000), st.integers(1, 6000)),
    target=st.one_of(SIZE, st.tuples(SIZE, SIZE)),
)
def test_reduction_factor_is_largest_that_keeps_target(
    src: tuple[int, int], target: int | tuple[int, int]
) -> None:
    k = reduction_factor(src, target)
    assert k in (1, 2, 4, 8)
    need = (target, target) if isinstance(target, int) else target
    have = (min(src),) * 2 if isinstance(target, int) else src
    if k > 1:  # a reduced decode is never below the target on either axis
        assert all(s >= k * t for s, t in zip(have, need, strict=True))
    if k < 8:  # and the next factor would be
        assert any(s < 2 * k * t for s, t in zip(have, need, strict=True))


def test_reduction_factor_examples() -> None:
    assert reduction_factor((2000, 3000), 224) == 8
    assert reduction_factor((2000, 3000), 256) == 4  # 2000 / 8 = 250 < 256
    assert reduction_factor((448, 3000), 224) == 2
    assert reduction_factor((447, 3000), 224) == 1
    assert reduction_factor((2000, 3000), (224, 1000)) == 2
    assert reduction_factor((2000, 3000), None) == 1


@FEW
@given(
    h=st.integers(16, 400),
    w=st.integers(16, 400),
    target=st.one_of(st.integers(1, 200), st.tuples(st.integers(1, 200), st.integers(1, 200))),
)
def test_reduced_decode_picked_exactly_when_allowed(
    h: int, w: int, target: int | tuple[int, int]
) -> None:
    data = cv_encode(photo(h, w), ".jpg", cv2.IMWRITE_JPEG_QUALITY, 95)
    k = reduction_factor((h, w), target)
    out = decode_image(data, size=target)
    assert out.shape == (math.ceil(h / k), math.ceil(w / k), 3)
    if isinstance(target, int):  # never below the target, unless the source already is
        assert min(out.shape[:2]) >= min(h, w, target)
    else:
        assert out.shape[0] >= min(h, target[0])
        assert out.shape[1] >= min(w, target[1])


@pytest.mark.parametrize("k", [2, 4, 8])
def test_reduced_decode_matches_full_decode_and_area_resize(k: int) -> None:
    data = cv_encode(photo(960, 1280, seed=k), ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90)
    reduced = decode_image(data, size=(960 // k, 1280 // k))
    full = decode_image(data)
    expected = cv2.resize(full, reduced.shape[1::-1], interpolation=cv2.INTER_AREA)
    assert reduced.shape == (960 // k, 1280 // k, 3)
    assert psnr(reduced, expected) >= 35  # DCT-domain scaling is a box filter too


def test_decode_for_reduces_random_resized_crops_of_large_jpegs(tmp_path) -> None:
    """Each sample's box is drawn on the header's size, then the JPEG is decoded at the
    largest reduction that keeps the box at least 224 px along both axes."""
    (path,) = make_images(tmp_path, 1, large=1, texture="smooth")  # a JPEG of 1600+ px
    data = path.read_bytes()
    full = decode_image(data)
    factors = []
    for index in range(12):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index), region=False)
        expected = RRC_224.geometry(full.shape[:2], sample_rng(0, 0, index))
        k = round(full.shape[0] / image.shape[0])
        assert image.shape[:2] == tuple(math.ceil(n / k) for n in full.shape[:2])
        assert k == reduction_factor(expected.box[2:], expected.size)
        assert geometry == expected.reduced(k, image.shape[:2])
        assert min(geometry.box[2:]) >= 224  # never below the output size
        # DCT scaling then resizing against resizing alone, on a smooth image (detail near
        # the output's Nyquist limit, as in photo textures, aliases differently in each)
        assert psnr(RRC_224.apply(image, geometry), RRC_224.apply(full, expected)) >= 35
        factors.append(k)
    assert min(factors) >= 2 and max(factors) >= 4


def test_decode_for_without_reduce_is_the_plain_path(tmp_path) -> None:
    """reduce=False decodes large JPEGs in full: exactly transform(decode_image(data))."""
    (path,) = make_images(tmp_path, 1, large=1)
    data = path.read_bytes()
    full = decode_image(data)
    for index in range(4):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index), reduce=False)
        assert image.shape == full.shape
        np.testing.assert_array_equal(
            RRC_224.apply(image, geometry), RRC_224(full, sample_rng(0, 0, index))
        )


@pytest.mark.parametrize("ext", [".jpg", ".png"])
def test_decode_for_is_the_plain_path_when_nothing_is_reduced(ext: str) -> None:
    data = cv_encode(photo(375, 500, seed=1), ext)
    for index in range(8):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 1, index))
        np.testing.assert_array_equal(
            RRC_224.apply(image, geometry), RRC_224(decode_image(data), sample_rng(0, 1, index))
        )


@settings(max_examples=200, deadline=None)
@given(
    src=st.tuples(st.integers(16, 4000), st.integers(16, 4000)),
    box_frac=st.tuples(st.floats(0.05, 1), st.floats(0.05, 1), st.floats(0, 1), st.floats(0, 1)),
    size=st.tuples(st.integers(1, 300), st.integers(1, 300)),
)
def test_geometry_reduced_keeps_the_box_inside_and_at_least_the_output(
    src: tuple[int, int],
    box_frac: tuple[float, float, float, float],
    size: tuple[int, int],
) -> None:
    fh, fw, ft, fl = box_frac
    h, w = max(1, round(src[0] * fh)), max(1, round(src[1] * fw))
    top, left = round((src[0] - h) * ft), round((src[1] - w) * fl)
    geometry = Geometry((top, left, h, w), size, False)
    k = reduction_factor(src, geometry.smallest_source(src))
    new = (math.ceil(src[0] / k), math.ceil(src[1] / k))  # libjpeg's reduced size
    reduced = geometry.reduced(k, new)
    t, lft, sh, sw = reduced.box
    assert t >= 0 and t + sh <= new[0] and lft >= 0 and lft + sw <= new[1]
    assert reduced.size == size and reduced.flip is False
    if k > 1:  # reduced only when the box still covers the output at 1/k
        assert sh >= size[0] and sw >= size[1]
        # within half a reduced pixel of the exact box, edge by edge, where not moved inside
        assert abs(t - top / k) <= 0.5 and abs(lft - left / k) <= 0.5
        assert abs(t + sh - (top + h) / k) <= 0.5 and abs(lft + sw - (left + w) / k) <= 0.5
    assert geometry.reduced(1, src) == geometry


def test_decode_for_falls_back_when_the_header_and_the_decoder_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should the header claim another size than the decoder finds (an unusual file), the
    sample is decoded in full and cropped exactly as the plain path crops it."""
    data = cv_encode(photo(2000, 3000, seed=2), ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90)
    plain = [RRC_224(decode_image(data), sample_rng(0, 0, index)) for index in range(4)]
    header = image_header(data)
    monkeypatch.setattr(
        decode_module, "image_header", lambda *a, **k: header._replace(height=header.height + 40)
    )
    for index in range(4):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        assert image.shape == (2000, 3000, 3)
        np.testing.assert_array_equal(RRC_224.apply(image, geometry), plain[index])


@pytest.mark.parametrize("hw", [(1, 3882), (3882, 1), (2, 4000)])
@pytest.mark.parametrize("crop", ["center", "random-resized"])
def test_slivers_of_images_still_crop(hw: tuple[int, int], crop: str) -> None:
    data = cv_encode(photo(*hw), ".jpg")
    transform = ImageTransform(size=224, crop=crop)
    image, geometry = decode_for(data, transform, sample_rng(0, 0, 0))
    assert min(geometry.box[2:]) >= 1
    assert transform.apply(image, geometry).shape == (224, 224, 3)


def test_apply_refuses_a_box_outside_the_image() -> None:
    transform = ImageTransform(size=32, crop="center")
    geometry = transform.geometry((300, 400))
    with pytest.raises(ValueError, match="does not fit a 150x200 image"):
        transform.apply(photo(150, 200), geometry)


def test_png_and_webp_are_never_reduced() -> None:
    """OpenCV would decode them fully and then resize with plain bilinear: no gain."""
    for ext in (".png", ".webp"):
        assert decode_image(cv_encode(photo(200, 200), ext), size=20).shape == (200, 200, 3)
