"""Tests of the decoding stage: formats, EXIF, reduced decode, transforms, errors, threads.

Images are made here with OpenCV and Pillow encoders (no files, no downloads). References
are independent decoders (Pillow), torchvision's own functions, or plain numpy.
"""

from __future__ import annotations

import io
import json
import math
import pickle
import random
import struct
import zlib
from dataclasses import asdict
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as tvf
import torchvision.transforms.v2.functional as tvf2
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageOps
from torchvision.transforms import RandomResizedCrop

import fastdata.decode as decode_module
from fastdata.decode import (
    DEFAULT_MAX_PIXELS,
    REGION_DECODE,
    Geometry,
    ImageTransform,
    center_crop,
    decode_for,
    decode_image,
    decode_many,
    hflip,
    image_header,
    image_size,
    limit_opencv_threads,
    output_hw,
    random_resized_crop,
    random_resized_crop_params,
    reduction_factor,
    resize,
    resized_center_crop,
    sample_rng,
)
from fastdata.errors import DecodeError
from fastdata.synthetic import make_images

FEW = settings(max_examples=25, deadline=None)


def photo(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A photo-like RGB uint8 image: smooth gradients, flat shapes with edges, mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack(
        [255 * x / max(w - 1, 1), 255 * y / max(h - 1, 1), 128 + 100 * np.sin((x + y) / 17)], -1
    ).astype(np.uint8)
    for _ in range(4):
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        cv2.circle(img, (cx, cy), int(rng.integers(1, max(2, min(h, w) // 3))), color, -1)
    return np.clip(img + rng.normal(0, 3, img.shape), 0, 255).astype(np.uint8)


def cv_encode(rgb: np.ndarray, ext: str = ".jpg", *params: int) -> bytes:
    """Encode an RGB (or gray / RGBA / 16-bit) array with OpenCV, which expects BGR order."""
    if rgb.ndim == 3:
        rgb = rgb[..., [2, 1, 0, 3][: rgb.shape[2]]]
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(rgb), list(params))
    assert ok
    return buf.tobytes()


def pil_encode(img: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def pil_decode(data: bytes) -> np.ndarray:
    return np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255**2 / mse)


RGB = photo(48, 64)
ALPHA = np.dstack([RGB, np.linspace(0, 255, 48 * 64).reshape(48, 64).astype(np.uint8)])

# name -> (encoded bytes, original RGB pixels the decode should reproduce)
FORMATS = {
    "jpeg": (cv_encode(RGB, ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90), RGB),
    "jpeg-progressive": (pil_encode(Image.fromarray(RGB), "JPEG", progressive=True), RGB),
    "jpeg-gray": (cv_encode(RGB[..., 1], ".jpg"), np.repeat(RGB[..., 1:2], 3, 2)),
    "png-rgb": (cv_encode(RGB, ".png"), RGB),
    "png-gray": (cv_encode(RGB[..., 0], ".png"), np.repeat(RGB[..., :1], 3, 2)),
    "png-rgba": (cv_encode(ALPHA, ".png"), RGB),
    "png-palette": (
        pil_encode(Image.fromarray(RGB).quantize(64), "PNG"),
        np.asarray(Image.fromarray(RGB).quantize(64).convert("RGB")),
    ),
    "webp-lossy": (pil_encode(Image.fromarray(RGB), "WEBP", quality=85), RGB),
    "webp-lossless": (pil_encode(Image.fromarray(RGB), "WEBP", lossless=True), RGB),
    "webp-alpha": (pil_encode(Image.fromarray(ALPHA), "WEBP", lossless=True, exact=True), RGB),
    "bmp": (cv_encode(RGB, ".bmp"), RGB),
}


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


def exif_jpeg(rgb: np.ndarray, orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return pil_encode(Image.fromarray(rgb), "JPEG", quality=95, exif=exif.tobytes())


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


@pytest.mark.parametrize("orientation", [1, 6])
def test_reduced_decode_respects_exif_rotation(orientation: int) -> None:
    data = exif_jpeg(photo(100, 240), orientation)
    target = (60, 25) if orientation == 6 else (25, 60)  # 4x fits only the right way round
    assert decode_image(data, size=target).shape[:2] == target


def fake_png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = struct.pack(">I", zlib.crc32(kind + body))
        return struct.pack(">I", len(body)) + kind + body + crc

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 99))


ENCODERS = {
    "jpeg": lambda img: cv_encode(img, ".jpg"),
    "png": lambda img: cv_encode(img, ".png"),
    "webp-lossy": lambda img: cv_encode(img, ".webp"),
    "webp-lossless": lambda img: pil_encode(Image.fromarray(img), "WEBP", lossless=True),
    "webp-vp8x": lambda img: pil_encode(
        Image.fromarray(np.dstack([img, img[..., 0]])), "WEBP", lossless=True
    ),
}


@FEW
@given(h=st.integers(1, 300), w=st.integers(1, 300), fmt=st.sampled_from(sorted(ENCODERS)))
def test_header_size_matches_decoded_size(h: int, w: int, fmt: str) -> None:
    data = ENCODERS[fmt](photo(h, w))
    header = image_header(data)
    assert header is not None
    assert header.format == fmt.split("-")[0]
    assert image_size(data) == (h, w) == decode_image(data).shape[:2]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=64), st.sampled_from([b"", b"\xff\xd8\xff", b"RIFF\0\0\0\0WEBP"]))
def test_garbage_is_none_or_decode_error_never_a_crash(tail: bytes, head: bytes) -> None:
    data = head + tail
    header = image_header(data)
    assert header is None or header.format in ("jpeg", "png", "webp")
    with pytest.raises(DecodeError):
        decode_image(data, source="fuzz")


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


RRC_224 = ImageTransform(size=224, crop="random-resized", flip=True)


def test_decode_for_reduces_random_resized_crops_of_large_jpegs(tmp_path) -> None:
    """Each sample's box is drawn on the header's size, then the JPEG is decoded at the
    largest reduction that keeps the box at least 224 px along both axes."""
    (path,) = make_images(tmp_path, 1, large=1)  # a photo-like JPEG of 1600+ px
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
        # DCT scaling then area resizing against area resizing alone (a test pattern with
        # detail near the output's Nyquist limit, like photo(), aliases differently in each)
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
        # within a reduced pixel of the exact box, edge by edge
        assert abs(t - top / k) <= 0.5 and abs(lft - left / k) <= 0.5
        assert abs(t + sh - (top + h) / k) <= 1 and abs(lft + sw - (left + w) / k) <= 1
    assert geometry.reduced(1, src) == geometry


def exif_segment(orientation: int, kind: int = 3, order: str = "<") -> bytes:
    """An APP1 Exif segment whose one IFD entry is the orientation, as SHORT (3) or LONG (4)."""
    value = struct.pack(order + ("HH" if kind == 3 else "I"), orientation, *([0] * (kind == 3)))
    ifd = struct.pack(order + "HHHI", 1, 0x0112, kind, 1) + value + struct.pack(order + "I", 0)
    tiff = (b"II" if order == "<" else b"MM") + struct.pack(order + "HI", 42, 8) + ifd
    payload = b"Exif\0\0" + tiff
    return b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload


def test_exif_orientation_as_long_and_the_first_exif_segment_rule() -> None:
    plain = cv_encode(photo(40, 60), ".jpg")
    for segments, expected in [
        (exif_segment(6, kind=4), 6),  # LONG, little-endian: OpenCV rotates too
        (exif_segment(1) + exif_segment(6), 1),  # the first Exif segment rules
        (exif_segment(8) + exif_segment(1), 8),
    ]:
        data = plain[:2] + segments + plain[2:]
        assert image_header(data).orientation == expected
        assert decode_image(data).shape[:2] == image_size(data)


def test_decode_for_falls_back_when_the_header_and_opencv_disagree() -> None:
    """Big-endian LONG orientation: the header says rotate, OpenCV does not. The sample is
    then decoded in full and cropped exactly as the plain path crops it."""
    plain = cv_encode(photo(2000, 3000, seed=2), ".jpg", cv2.IMWRITE_JPEG_QUALITY, 90)
    data = plain[:2] + exif_segment(6, kind=4, order=">") + plain[2:]
    assert image_size(data) != decode_image(data).shape[:2]  # the disagreement
    for index in range(4):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        np.testing.assert_array_equal(
            RRC_224.apply(image, geometry), RRC_224(decode_image(data), sample_rng(0, 0, index))
        )


# ------------------------------------------------------------------ region decoding
_jpeg = decode_module._jpeg  # the extension itself (None when it was not built)
needs_region = pytest.mark.skipif(
    not REGION_DECODE, reason="fastdata._jpeg was not built (libjpeg-turbo's headers missing)"
)
SAMPLINGS = {
    "444": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444,
    "422": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_422,
    "420": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_420,
    "440": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_440,
    "411": cv2.IMWRITE_JPEG_SAMPLING_FACTOR_411,
}


def jpeg(img: np.ndarray, sampling: str = "420", progressive: bool = False, restart: int = 0):
    """A JPEG of ``img`` (gray when 2-D) with the given chroma sampling and coding options."""
    return cv_encode(
        img,
        ".jpg",
        cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
        SAMPLINGS[sampling],
        cv2.IMWRITE_JPEG_PROGRESSIVE,
        int(progressive),
        cv2.IMWRITE_JPEG_RST_INTERVAL,
        restart,
    )


def whole_decode_for(data: bytes, transform: ImageTransform, rng: np.random.Generator | None):
    """decode_for with region decoding switched off: the reference."""
    return decode_for(data, transform, rng, region=False)


@needs_region
@settings(max_examples=150, deadline=None)
@given(
    hw=st.tuples(st.integers(8, 900), st.integers(8, 900)),
    sampling=st.sampled_from(["gray", *SAMPLINGS]),
    progressive=st.booleans(),
    restart=st.sampled_from([0, 3]),
    transform=st.sampled_from(
        [
            ImageTransform(size=224, crop="random-resized", flip=True),
            ImageTransform(size=48, crop="random-resized", interpolation="antialias"),
            ImageTransform(size=(40, 60), crop="center"),
            ImageTransform(size=100),
        ]
    ),
    seed=st.integers(0, 2**16),
)
def test_region_decode_gives_the_whole_decodes_pixels(
    hw: tuple[int, int],
    sampling: str,
    progressive: bool,
    restart: int,
    transform: ImageTransform,
    seed: int,
) -> None:
    """Decoding only the region around a sample's box, at any reduction, any chroma sampling,
    baseline or progressive, with restart markers or not: the sample is bit for bit the one
    the whole (possibly reduced) image gives."""
    img = photo(*hw, seed=seed)
    data = jpeg(
        img[:, :, 1] if sampling == "gray" else img,
        "444" if sampling == "gray" else sampling,
        progressive,
        restart,
    )
    image, geometry = decode_for(data, transform, sample_rng(seed, 0, 0))
    whole, whole_geometry = whole_decode_for(data, transform, sample_rng(seed, 0, 0))
    np.testing.assert_array_equal(
        transform.apply(image, geometry), transform.apply(whole, whole_geometry)
    )
    assert image.shape[0] <= whole.shape[0] and image.shape[1] <= whole.shape[1]


@needs_region
def test_region_decode_decodes_less_of_cropped_images(tmp_path) -> None:
    """Random-resized crops of ImageNet-sized and of large photos decode a region, which
    holds the box and at most one iMCU (and the alignment) around it."""
    paths = make_images(tmp_path, 4, large=2, seed=1)
    smaller = 0
    for index, path in enumerate(paths):
        data = path.read_bytes()
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        whole, _ = whole_decode_for(data, RRC_224, sample_rng(0, 0, index))
        top, left, h, w = geometry.box
        assert top + h <= image.shape[0] and left + w <= image.shape[1]
        assert image.shape[0] <= h + 32 and image.shape[1] <= w + 48  # 4:2:0: 16 x 16 iMCUs
        smaller += image.size < whole.size
    assert smaller >= 3


@needs_region
def test_region_decode_leaves_every_judgement_to_the_whole_decode() -> None:
    """What the region decoder would not see or cannot do goes the ordinary way: a JPEG
    truncated below the crop still raises, EXIF rotation, keep_alpha and CMYK are decoded
    whole, and corrupt data behaves as it does without region decoding."""
    data = jpeg(photo(400, 600), "420")
    small_crop = ImageTransform(size=(200, 200), crop="center")  # of 400 x 600: no reduction
    truncated = data[: len(data) * 3 // 4]  # the bottom rows are missing
    boxes = [whole_decode_for(data, RRC_224, sample_rng(0, 0, i))[1].box for i in range(100)]
    index, (top, left, h, w) = next((i, b) for i, b in enumerate(boxes) if b[0] + b[2] < 200)
    out = np.empty((400, 600, 3), np.uint8)
    assert _jpeg.decode_rgb_region(truncated, 1, top, left, h, w, out, 400, 600) is not None
    with pytest.raises(DecodeError, match="truncated"):  # though that region alone decodes
        decode_for(truncated, RRC_224, sample_rng(0, 0, index))
    rotated = data[:2] + exif_segment(6) + data[2:]
    image, _ = decode_for(rotated, small_crop)
    assert image.shape == (600, 400, 3)
    image, _ = decode_for(data, small_crop, keep_alpha=True)
    assert image.shape == (400, 600, 4)
    cmyk = pil_encode(Image.fromarray(photo(64, 96)).convert("CMYK"), "JPEG")
    image, _ = decode_for(cmyk, small_crop)
    assert image.shape == (64, 96, 3)
    rng = np.random.default_rng(3)
    for _ in range(20):
        corrupt = np.frombuffer(data, np.uint8).copy()
        corrupt[rng.integers(len(data) // 4, len(data) - 2, 8)] = rng.integers(0, 256, 8)
        outcomes = []
        for fn in (decode_for, whole_decode_for):
            try:
                outcomes.append(small_crop.apply(*fn(corrupt.tobytes(), small_crop, None)))
            except DecodeError as exc:
                outcomes.append(type(exc))
        if isinstance(outcomes[0], np.ndarray) and isinstance(outcomes[1], np.ndarray):
            np.testing.assert_array_equal(*outcomes)
        else:
            assert outcomes[0] == outcomes[1]


@needs_region
def test_region_decode_steps_aside_when_libjpeg_and_the_header_disagree(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Should libjpeg find another size than the header parser (which draws the box), the
    image is decoded whole and its box drawn again on the decoded size, as without regions."""
    data = jpeg(photo(400, 600))
    header = image_header(data)
    taller = header._replace(height=header.height + 40)
    monkeypatch.setattr(decode_module, "image_header", lambda *a, **k: taller)
    for index in range(6):
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        assert image.shape == (400, 600, 3)
        np.testing.assert_array_equal(
            RRC_224.apply(image, geometry), RRC_224(decode_image(data), sample_rng(0, 0, index))
        )


DATA = Path(__file__).parent / "data"
RRC_64 = ImageTransform(size=64, crop="random-resized", flip=True)


def same_samples(data: bytes, transform: ImageTransform, n: int) -> None:
    """decode_for's samples with and without region decoding are identical."""
    for index in range(n):
        rng = sample_rng(0, 0, index)
        region = transform.apply(*decode_for(data, transform, rng))
        whole = transform.apply(*decode_for(data, transform, sample_rng(0, 0, index), region=False))
        np.testing.assert_array_equal(region, whole)


@needs_region
@pytest.mark.parametrize("name", ["sampling-h4v2.jpg", "sampling-h2v4.jpg"])
def test_region_decode_is_exact_for_samplings_opencv_cannot_write(name: str) -> None:
    """Luma sampled 4x2 or 2x4 (files written with libjpeg's own encoder): decoded reduced,
    the chroma would be upsampled from a differently scaled DCT, which libjpeg-turbo before
    3.0 gets wrong in a cropped decode; such regions are declined."""
    same_samples((DATA / name).read_bytes(), ImageTransform(size=32, crop="random-resized"), 40)


@needs_region
@pytest.mark.parametrize("scans", [2, 4, 6, 8])
def test_region_decode_is_exact_for_incomplete_progressive_jpegs(scans: int) -> None:
    """A progressive JPEG cut after some scans (with its end marker restored, as a partial
    download might be): libjpeg smooths the missing coefficients across block edges, which a
    region's edges would change, so such files are decoded whole."""
    data = cv_encode(photo(333, 517, seed=9), ".jpg", cv2.IMWRITE_JPEG_PROGRESSIVE, 1)
    starts = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    assert len(starts) > scans
    same_samples(data[: starts[scans]] + b"\xff\xd9", RRC_64, 10)


@needs_region
@pytest.mark.parametrize("where", ["signed-short tag", "after the frame header"])
def test_region_decode_leaves_any_exif_to_the_whole_decode(where: str) -> None:
    """OpenCV applies orientations the header parser does not read (a SSHORT tag, an Exif
    segment after SOF): with any Exif segment the image is decoded whole, rotated as before."""
    data = jpeg(photo(300, 500))
    if where == "signed-short tag":
        data = data[:2] + exif_segment(6, kind=8) + data[2:]
    else:
        sof = data.index(b"\xff\xc0")
        end = sof + 2 + struct.unpack_from(">H", data, sof + 2)[0]
        data = data[:end] + exif_segment(6) + data[end:]
    assert image_header(data).orientation == 1 and decode_image(data).shape == (500, 300, 3)
    same_samples(data, RRC_64, 10)


@needs_region
def test_region_decode_respects_opencvs_pixel_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image OpenCV would refuse (OPENCV_IO_MAX_IMAGE_PIXELS, read as OpenCV reads it) is
    not decoded as a region: the whole decode gets to refuse it."""
    data = jpeg(photo(300, 500))
    whole = decode_for(data, RRC_64, sample_rng(0, 0, 1), region=False)[0].shape
    assert decode_for(data, RRC_64, sample_rng(0, 0, 1))[0].shape != whole  # a region
    monkeypatch.setattr(decode_module, "_OPENCV_LIMITS", (300 * 500 - 1, 1 << 20, 1 << 20))
    assert decode_for(data, RRC_64, sample_rng(0, 0, 1))[0].shape == whole


@needs_region
def test_region_decoder_validates_its_arguments() -> None:
    data = jpeg(photo(64, 64))
    with pytest.raises(ValueError, match="rows x cols x 3"):
        _jpeg.decode_rgb_region(data, 1, 0, 0, 8, 8, np.empty((8, 8, 3), np.uint8), 9, 8)
    with pytest.raises(ValueError, match="denom"):
        _jpeg.decode_rgb_region(data, 3, 0, 0, 8, 8, np.empty((8, 8, 3), np.uint8), 8, 8)
    out = np.empty((64, 64, 3), np.uint8)
    assert _jpeg.decode_rgb_region(data, 1, 60, 0, 8, 8, out, 64, 64) is None  # past the edge
    assert _jpeg.decode_rgb_region(b"not a jpeg", 1, 0, 0, 8, 8, out, 64, 64) is None
    assert _jpeg.decode_rgb_region(data, 1, 0, 0, 64, 64, out, 8, 8 * 64) is None  # no room
    big = 2**31 - 1  # left + width overflows 32 bits: refused, not written past out
    assert _jpeg.decode_rgb_region(data, 1, 0, big, 1, big, out, 64, 64) is None
    found = _jpeg.decode_rgb_region(data, 1, 20, 20, 8, 8, out, 64, 64)
    # 4:2:0 has 16 x 16 iMCUs: rows 4-44 (one iMCU around the box), columns 0-44 (one iMCU
    # to the left is column 4, which the decoder aligns down to 0)
    assert found == (16, 20, 40, 44, 64, 64)


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


# -- errors -------------------------------------------------------------------------------

JPEG = FORMATS["jpeg"][0]


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


def test_over_opencv_pixel_limit_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="OpenCV's size limit") as info:
        decode_image(fake_png_header(100_000, 100_000), max_pixels=None, source="big.png")
    assert info.value.path == "big.png"
    assert isinstance(info.value.__cause__, cv2.error)


def test_max_pixels_is_checked_before_decoding() -> None:
    data = cv_encode(photo(100, 100), ".png")
    with pytest.raises(DecodeError, match="10,000 pixels"):
        decode_image(data, max_pixels=9_999)
    assert decode_image(data, max_pixels=10_000).shape == (100, 100, 3)
    assert DEFAULT_MAX_PIXELS > 100_000_000


def test_float_images_with_alpha_are_refused() -> None:
    hdr = cv_encode(np.ones((4, 4, 3), np.float32), ".hdr")
    with pytest.raises(DecodeError, match="float32"):
        decode_image(hdr, keep_alpha=True)


def test_input_buffer_types() -> None:
    expected = decode_image(JPEG)
    for data in (bytearray(JPEG), memoryview(JPEG), np.frombuffer(JPEG, np.uint8)):
        np.testing.assert_array_equal(decode_image(data), expected)
    with pytest.raises(TypeError, match="uint8"):
        decode_image(np.frombuffer(JPEG, np.uint8).astype(np.int16))


# -- decode_many ---------------------------------------------------------------------------


def test_decode_many_equals_serial_map_in_order() -> None:
    items = [cv_encode(photo(30 + i, 50 + 2 * i, seed=i), ".jpg") for i in range(12)]
    serial = [decode_image(x) for x in items]
    for threads in (1, 2, 5):
        out = decode_many(items, threads=threads)
        assert len(out) == len(serial)
        for a, b in zip(out, serial, strict=True):
            np.testing.assert_array_equal(a, b)


def test_decode_many_applies_transform_with_per_item_rngs() -> None:
    items = [cv_encode(photo(200, 260, seed=i), ".jpg") for i in range(8)]
    transform = ImageTransform(size=64, crop="random-resized", flip=True)
    rngs = [sample_rng(7, 1, i) for i in range(8)]
    out = decode_many(items, threads=2, transform=transform, rngs=rngs)
    for i, img in enumerate(out):  # each sample decoded at the resolution its box allows
        expected = transform.apply(*decode_for(items[i], transform, sample_rng(7, 1, i)))
        np.testing.assert_array_equal(img, expected)


def test_decode_many_error_names_the_failing_item() -> None:
    items = [JPEG, JPEG, b"junk", JPEG]
    with pytest.raises(DecodeError) as info:
        decode_many(items, threads=2, sources=["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    assert info.value.path == "c.jpg"
    with pytest.raises(DecodeError) as info:
        decode_many(items, threads=2)
    assert info.value.path == "item 2"


def test_decode_many_validates_arguments() -> None:
    with pytest.raises(ValueError, match="threads"):
        decode_many([JPEG], threads=0)
    with pytest.raises(ValueError, match="one per item"):
        decode_many([JPEG, JPEG], threads=2, sources=["a.jpg"])
    assert decode_many([], threads=2) == []
    with pytest.raises(ValueError, match="not both"):
        decode_many([JPEG], threads=1, size=64, transform=ImageTransform(size=32))


def test_limit_opencv_threads_returns_previous() -> None:
    before = cv2.getNumThreads()
    try:
        assert limit_opencv_threads(1) == before
        assert cv2.getNumThreads() == 1
    finally:
        cv2.setNumThreads(before)
    with pytest.raises(ValueError, match="at least 1"):
        limit_opencv_threads(0)


# -- transforms ----------------------------------------------------------------------------


def chw(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(img)).permute(2, 0, 1)


def test_hflip_exact() -> None:
    img = photo(31, 47)
    out = hflip(img)
    np.testing.assert_array_equal(out, img[:, ::-1])
    np.testing.assert_array_equal(out, tvf.hflip(chw(img)).permute(1, 2, 0).numpy())
    assert out.flags.c_contiguous
    assert out.dtype == np.uint8


@FEW
@given(h=st.integers(1, 60), w=st.integers(1, 60), ch=st.integers(1, 60), cw=st.integers(1, 60))
def test_center_crop_exact_against_torchvision(h: int, w: int, ch: int, cw: int) -> None:
    img = np.arange(h * w * 3, dtype=np.uint32).reshape(h, w, 3).astype(np.uint8)
    if ch > h or cw > w:
        with pytest.raises(ValueError, match="larger than the image"):
            center_crop(img, (ch, cw))
        return
    expected = tvf.center_crop(chw(img), [ch, cw]).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(center_crop(img, (ch, cw)), expected)


@settings(max_examples=200, deadline=None)
@given(h=st.integers(1, 2000), w=st.integers(1, 2000), size=st.integers(1, 500))
def test_resize_shorter_side_like_torchvision(h: int, w: int, size: int) -> None:
    assert output_hw((h, w), size) == tuple(tvf._compute_resized_output_size((h, w), [size]))


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_resize_shrink_is_exact_box_filter(factor: int) -> None:
    img = np.random.default_rng(factor).integers(0, 256, (12 * factor, 8 * factor, 3), np.uint8)
    out = resize(img, (12, 8))
    means = img.reshape(12, factor, 8, factor, 3).mean(axis=(1, 3))
    assert np.abs(out - means).max() <= 0.5  # the block mean, correctly rounded (ties vary)
    assert out.dtype == np.uint8


def test_resize_enlarge_is_bilinear_like_torch() -> None:
    img = photo(20, 30)
    out = resize(img, (45, 70))
    expected = torch.nn.functional.interpolate(
        chw(img)[None].float(), size=(45, 70), mode="bilinear", align_corners=False
    )[0]
    diff = np.abs(out.astype(int) - expected.round().permute(1, 2, 0).numpy().astype(int))
    assert diff.max() <= 1
    assert out.dtype == np.uint8


def test_resize_keeps_dtype_and_validates() -> None:
    img = photo(40, 60)
    assert resize(img, 40) is img
    for name in ("nearest", "linear", "cubic", "area", "lanczos", "antialias"):
        out = resize(img, 100, interpolation=name)
        assert out.shape == (100, 150, 3)
        assert out.dtype == np.uint8
    with pytest.raises(ValueError, match="interpolation"):
        resize(img, 10, interpolation="bicubic")
    with pytest.raises(ValueError, match="positive"):
        resize(img, 0)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 300),
    w=st.integers(1, 300),
    out_h=st.integers(1, 300),
    out_w=st.integers(1, 300),
    channels=st.sampled_from([0, 1, 3, 4]),
    seed=st.integers(0, 2**16),
)
def test_resize_antialias_is_exactly_torchvision(
    h: int, w: int, out_h: int, out_w: int, channels: int, seed: int
) -> None:
    """interpolation="antialias" gives torchvision's tensor Resize pixels, bit for bit,
    shrinking and enlarging, gray (HW) and 1/3/4-channel HWC images."""
    shape = (h, w) if channels == 0 else (h, w, channels)
    img = np.random.default_rng(seed).integers(0, 256, shape, np.uint8)
    out = resize(img, (out_h, out_w), interpolation="antialias")
    chw = torch.from_numpy(img[:, :, None] if channels == 0 else img).permute(2, 0, 1)
    expected = tvf2.resize(chw, [out_h, out_w], antialias=True).permute(1, 2, 0).numpy()
    np.testing.assert_array_equal(out, expected[:, :, 0] if channels == 0 else expected)
    assert out.flags.c_contiguous and out.dtype == np.uint8
    into = np.zeros_like(out)  # written in place (a slot of a batch)
    assert resize(img, (out_h, out_w), interpolation="antialias", out=into) is into
    np.testing.assert_array_equal(into, out)


def test_resize_antialias_is_pil_bilinear_within_one_level() -> None:
    """The recipe's PIL resampling, which area averaging is not (the reason to pick it)."""
    for img, size in [(photo(300, 400), (224, 224)), (photo(300, 400, seed=1), (96, 128))]:
        pil = np.asarray(Image.fromarray(img).resize(size[::-1], Image.BILINEAR), dtype=int)
        assert np.abs(resize(img, size, interpolation="antialias") - pil).max() <= 1
    noise = np.random.default_rng(0).integers(0, 256, (300, 400, 3), np.uint8)
    pil = np.asarray(Image.fromarray(noise).resize((224, 224), Image.BILINEAR), dtype=int)
    assert np.abs(resize(noise, (224, 224), interpolation="antialias") - pil).max() <= 1
    assert np.abs(resize(noise, (224, 224), interpolation="area") - pil).max() > 10


@given(
    h=st.integers(1, 60),
    w=st.integers(1, 60),
    out_h=st.integers(1, 60),
    out_w=st.one_of(st.just(1), st.integers(1, 60)),
    channels=st.sampled_from([0, 3]),
    seed=st.integers(0, 2**16),
)
def test_resize_antialias_float32_is_pil_bilinear(
    h: int, w: int, out_h: int, out_w: int, channels: int, seed: int
) -> None:
    """float32 images resample as PIL's float mode does (torch's own float kernel does not
    for outputs one pixel wide), gray or RGB, into ``out`` or a new array alike."""
    gray = np.random.default_rng(seed).integers(0, 256, (h, w)).astype(np.float32)
    pil = np.asarray(Image.fromarray(gray, mode="F").resize((out_w, out_h), Image.BILINEAR))
    img = gray if channels == 0 else np.repeat(gray[:, :, None], channels, axis=2)
    got = resize(img, (out_h, out_w), interpolation="antialias")
    into = np.full_like(got, np.nan)
    assert resize(img, (out_h, out_w), interpolation="antialias", out=into) is into
    np.testing.assert_array_equal(into, got)
    for channel in range(channels) if channels else [None]:
        plane = got if channel is None else got[:, :, channel]
        np.testing.assert_allclose(plane, pil, atol=0.01)


def test_resize_antialias_takes_views_out_and_refuses_other_dtypes() -> None:
    img = photo(200, 300)
    expected = resize(img[20:180, 30:250].copy(), (64, 80), interpolation="antialias")
    for view in (img[20:180, 30:250], img[::-1][20:180, 30:250][::-1]):
        copy = view.copy()
        read_only = view.copy()
        read_only.flags.writeable = False
        for variant in (view, read_only):
            got = resize(variant, (64, 80), interpolation="antialias")
            np.testing.assert_array_equal(got, resize(copy, (64, 80), interpolation="antialias"))
    np.testing.assert_array_equal(
        resize(img[20:180, 30:250], (64, 80), interpolation="antialias"), expected
    )
    out = np.zeros((64, 80, 3), np.uint8)
    assert resize(img[20:180, 30:250], (64, 80), interpolation="antialias", out=out) is out
    np.testing.assert_array_equal(out, expected)
    floats = resize(img.astype(np.float32), (64, 80), interpolation="antialias")
    assert floats.dtype == np.float32 and floats.shape == (64, 80, 3)
    for size in [(64, 80), img.shape[:2]]:  # refused even when there is nothing to resize
        with pytest.raises(ValueError, match="uint16"):
            resize(img.astype(np.uint16), size, interpolation="antialias")


def test_transform_antialias_is_torchvision_resized_crop_and_flip() -> None:
    """ImageTransform(interpolation="antialias") reproduces torchvision's RandomResizedCrop +
    RandomHorizontalFlip on the same box and flip, bit for bit."""
    img = photo(300, 400)
    transform = ImageTransform(size=96, crop="random-resized", flip=True, interpolation="antialias")
    flips = set()
    for index in range(12):
        (top, left, h, w), _, flip = geometry = transform.geometry(
            (300, 400), sample_rng(0, 0, index)
        )
        expected = tvf2.resized_crop(
            torch.from_numpy(img).permute(2, 0, 1), top, left, h, w, [96, 96], antialias=True
        )
        expected = (tvf2.horizontal_flip(expected) if flip else expected).permute(1, 2, 0)
        np.testing.assert_array_equal(transform.apply(img, geometry), expected.numpy())
        flips.add(flip)
    assert flips == {False, True}


def tv_params(
    hw: tuple[int, int], scale: tuple[float, float], ratio: tuple[float, float]
) -> tuple[int, int, int, int]:
    return RandomResizedCrop.get_params(torch.empty(1, *hw), list(scale), list(ratio))


@pytest.mark.parametrize("hw", [(300, 500), (500, 300), (10, 1000), (1000, 10), (7, 7)])
@pytest.mark.parametrize("ratio", [(3 / 4, 4 / 3), (0.5, 0.5), (2.0, 3.0)])
def test_random_resized_crop_fallback_is_exactly_torchvision(
    hw: tuple[int, int], ratio: tuple[float, float]
) -> None:
    """An area fraction above 1 never fits: both take the same deterministic centre box."""
    scale = (2.0, 3.0)
    ours = random_resized_crop_params(hw, scale=scale, ratio=ratio, rng=sample_rng(0, 0, 0))
    assert ours == tv_params(hw, scale, ratio)


def test_random_resized_crop_whole_image_is_exactly_torchvision() -> None:
    params = random_resized_crop_params(
        (64, 64), scale=(1.0, 1.0), ratio=(1.0, 1.0), rng=sample_rng(0, 0, 0)
    )
    assert params == tv_params((64, 64), (1.0, 1.0), (1.0, 1.0)) == (0, 0, 64, 64)


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    grid = np.sort(np.concatenate([a, b]))
    cdf_a = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    cdf_b = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(cdf_a - cdf_b).max())


@pytest.mark.parametrize("hw", [(300, 500), (40, 400)])
def test_random_resized_crop_distribution_matches_torchvision(hw: tuple[int, int]) -> None:
    n = 3000
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    scale, ratio = (0.08, 1.0), (3 / 4, 4 / 3)
    ours = np.array(
        [random_resized_crop_params(hw, scale=scale, ratio=ratio, rng=rng) for _ in range(n)]
    )
    theirs = np.array([tv_params(hw, scale, ratio) for _ in range(n)])
    critical = 1.95 * math.sqrt(2 / n)  # KS test at alpha = 0.001
    for column, name in enumerate(["top", "left", "height", "width"]):
        assert ks_statistic(ours[:, column], theirs[:, column]) < critical, name


def test_random_resized_crop_is_reproducible_and_ignores_global_rng() -> None:
    img = photo(120, 160)
    np.random.seed(1)
    random.seed(1)
    state = np.random.get_state()
    first = random_resized_crop(img, 32, rng=sample_rng(5, 2, 17))
    assert np.random.get_state()[1].tolist() == state[1].tolist()  # global RNG untouched
    np.random.seed(2)
    random.seed(2)
    torch.manual_seed(2)
    np.testing.assert_array_equal(first, random_resized_crop(img, 32, rng=sample_rng(5, 2, 17)))
    others = {
        random_resized_crop_params((120, 160), rng=sample_rng(5, epoch, index))
        for epoch in range(3)
        for index in range(10)
    }
    assert len(others) > 25  # epochs and indices get independent streams


def test_random_resized_crop_crops_then_resizes() -> None:
    img = photo(120, 160)
    box = random_resized_crop_params((120, 160), rng=sample_rng(0, 0, 3))
    top, left, h, w = box
    out = random_resized_crop(img, (24, 40), rng=sample_rng(0, 0, 3))
    np.testing.assert_array_equal(out, resize(img[top : top + h, left : left + w], (24, 40)))
    assert out.dtype == np.uint8
    with pytest.raises(ValueError, match="scale"):
        random_resized_crop(img, 24, scale=(0.9, 0.1), rng=sample_rng(0, 0, 0))


# -- ImageTransform ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("transform", "shape"),
    [
        (ImageTransform(size=224, crop="center"), (224, 224, 3)),
        (ImageTransform(size=(96, 128), crop="center"), (96, 128, 3)),
        (ImageTransform(size=64, crop="random-resized", flip=True), (64, 64, 3)),
        (ImageTransform(size=100), (100, 133, 3)),
        (ImageTransform(size=(50, 60)), (50, 60, 3)),
        (ImageTransform(), (300, 400, 3)),
    ],
)
def test_image_transform_output_shapes(transform: ImageTransform, shape: tuple) -> None:
    img = photo(300, 400)
    out = transform(img, sample_rng(0, 0, 0))
    assert out.shape == shape
    assert out.dtype == np.uint8
    assert out.flags.c_contiguous
    fixed = transform.output_size
    assert fixed is None or fixed == shape[:2]


@settings(max_examples=40, deadline=None)
@given(
    h=st.integers(8, 120),
    w=st.integers(8, 120),
    size=st.integers(4, 64),
    crop=st.sampled_from(["center", "random-resized"]),
    flip=st.booleans(),
    channels=st.sampled_from([3, 4]),
    index=st.integers(0, 1000),
)
def test_image_transform_into_out_equals_a_new_array(
    h: int, w: int, size: int, crop: str, flip: bool, channels: int, index: int
) -> None:
    """Writing into a batch slot gives what a fresh result holds, whatever the geometry."""
    img = photo(h, w, seed=index)
    if channels == 4:
        img = cv2.cvtColor(img, cv2.COLOR_RGB2RGBA)
    transform = ImageTransform(size=size, crop=crop, flip=flip)
    expected = transform(img, sample_rng(0, 0, index))
    batch = np.full((2, *expected.shape), 7, dtype=np.uint8)
    result = transform(img, sample_rng(0, 0, index), out=batch[1])
    assert np.shares_memory(result, batch[1])
    np.testing.assert_array_equal(batch[1], expected)
    assert (batch[0] == 7).all()  # nothing written outside the slot


def test_image_transform_out_is_validated() -> None:
    img = photo(60, 80)
    transform = ImageTransform(size=32, crop="center", flip=False)
    read_only = np.empty((32, 32, 3), np.uint8)
    read_only.flags.writeable = False
    for bad in (
        np.empty((32, 31, 3), np.uint8),
        np.empty((32, 32, 3), np.float32),
        np.empty((32, 64, 3), np.uint8)[:, ::2],
        read_only,
    ):
        with pytest.raises(ValueError, match="writeable C-contiguous uint8 array of shape"):
            transform(img, out=bad)
    same = photo(32, 32)  # already the output size: copied into out
    out = np.zeros((32, 32, 3), np.uint8)
    assert resize(same, (32, 32), out=out) is out
    np.testing.assert_array_equal(out, same)


def test_image_transform_center_is_resize_then_crop() -> None:
    transform = ImageTransform(size=224, crop="center")
    assert transform.decode_size == 256
    aligned = photo(400, 500)  # crop edges fall on whole source pixels: exact
    expected = center_crop(resize(aligned, 256), 224)
    np.testing.assert_array_equal(transform(aligned), expected)
    for h, w in [(300, 401), (333, 517), (517, 333)]:  # within half a source pixel
        img = photo(h, w, seed=h)
        two_step = center_crop(resize(img, 256), 224)
        assert psnr(resized_center_crop(img, 256, 224), two_step) >= 40
        assert psnr(transform(img), two_step) >= 40
    with pytest.raises(ValueError, match="larger than the image"):
        resized_center_crop(aligned, 100, 224)


def test_image_transform_is_deterministic_per_sample() -> None:
    img = photo(200, 300)
    transform = ImageTransform(size=64, crop="random-resized", flip=True)
    a = transform(img, sample_rng(0, 3, 9))
    np.testing.assert_array_equal(a, transform(img, sample_rng(0, 3, 9)))
    flips = {bool(sample_rng(0, 0, i).random() < 0.5) for i in range(20)}
    assert flips == {True, False}
    with pytest.raises(ValueError, match="rng=sample_rng"):
        transform(img)


def test_image_transform_config_round_trips_through_json() -> None:
    transform = ImageTransform(size=(96, 128), crop="random-resized", flip=True, scale=(0.2, 1))
    assert ImageTransform(**json.loads(json.dumps(asdict(transform)))) == transform
    assert ImageTransform(size=160).decode_size == 160
    assert transform.decode_size is None  # a small random crop needs every source pixel


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"crop": "center"}, "needs a size"),
        ({"size": 10, "crop": "middle"}, "expected one of"),
        ({"size": 10, "interpolation": "bicubic"}, "interpolation"),
        ({"size": 0}, "positive"),
        ({"size": 10, "ratio": (2.0, 1.0)}, "ratio"),
        ({"size": 10, "crop_pct": 1.5}, "crop_pct"),
    ],
)
def test_image_transform_validates(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ImageTransform(**kwargs)
