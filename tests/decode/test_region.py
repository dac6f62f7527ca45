"""Region decoding: only the part of a JPEG around a sample's box, the whole decode's pixels."""

from __future__ import annotations

import struct
from pathlib import Path

import cv2
import numpy as np
import pytest
from decode_helpers import (
    RRC_224,
    SAMPLINGS,
    _jpeg,
    cv_encode,
    exif_segment,
    jpeg,
    needs_extension,
    photo,
    pil_encode,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import fastdata.decode._decode as decode_module
from fastdata.decode import (
    ImageTransform,
    decode_for,
    decode_image,
    image_header,
    sample_rng,
)
from fastdata.decode import _libjpeg as _libjpeg
from fastdata.errors import DecodeError
from fastdata.synthetic import make_images


def whole_decode_for(data: bytes, transform: ImageTransform, rng: np.random.Generator | None):
    """decode_for with region decoding switched off: the reference."""
    return decode_for(data, transform, rng, region=False)


@needs_extension
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


@needs_extension
def test_region_decode_decodes_less_of_cropped_images(tmp_path) -> None:
    """Random-resized crops of ImageNet-sized and of large photos decode a region, which
    holds the box, the chroma upsampling's reach around it and the alignment to iMCUs."""
    paths = make_images(tmp_path, 4, large=2, seed=1)
    smaller = 0
    for index, path in enumerate(paths):
        data = path.read_bytes()
        image, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        whole, _ = whole_decode_for(data, RRC_224, sample_rng(0, 0, index))
        top, left, h, w = geometry.box
        assert top + h <= image.shape[0] and left + w <= image.shape[1]
        # 4:2:0: 4 px of upsampling reach per side, and up to 15 more to the left's iMCU
        assert image.shape[0] <= h + 8 and image.shape[1] <= w + 8 + 15
        smaller += image.size < whole.size
    assert smaller >= 3


@needs_extension
def test_a_reused_region_buffer_gives_the_same_samples(tmp_path) -> None:
    """decode_for(reuse=True) gives the samples a fresh array gives; the thread's buffer is
    reused by its next decode (the documented contract), and images too large for it get
    an array of their own."""
    paths = make_images(tmp_path, 6, seed=3)
    held = []
    for index, path in enumerate(paths):
        data = path.read_bytes()
        fresh, geometry = decode_for(data, RRC_224, sample_rng(0, 0, index))
        reused, reused_geometry = decode_for(data, RRC_224, sample_rng(0, 0, index), reuse=True)
        assert reused_geometry == geometry
        np.testing.assert_array_equal(
            RRC_224.apply(reused, reused_geometry), RRC_224.apply(fresh, geometry)
        )
        held.append(reused)
    assert np.shares_memory(held[0], held[-1])  # one buffer, overwritten by each decode
    big = jpeg(photo(3000, 3000, seed=1), "420", False, 0)  # 27 MB decoded: over the limit
    whole = ImageTransform()
    image, _ = decode_for(big, whole, None, reuse=True)
    assert not np.shares_memory(image, held[-1])


@needs_extension
def test_region_decode_leaves_every_judgement_to_the_whole_decode() -> None:
    """The region decoder reads the whole file, so a JPEG truncated below the crop raises as
    the whole decode does; what it cannot do goes the ordinary way: keep_alpha and CMYK are
    decoded whole (an EXIF rotation is a region too); and corrupt data behaves as it does
    without region decoding."""
    data = jpeg(photo(400, 600), "420")
    small_crop = ImageTransform(size=(200, 200), crop="center")  # of 400 x 600: no reduction
    truncated = data[: len(data) * 3 // 4]  # the bottom rows are missing
    boxes = [whole_decode_for(data, RRC_224, sample_rng(0, 0, i))[1].box for i in range(100)]
    index, (top, left, h, w) = next((i, b) for i, b in enumerate(boxes) if b[0] + b[2] < 200)
    out = np.empty((400, 600, 3), np.uint8)
    verdict = _jpeg.decode_rgb(truncated, 1, top, left, h, w, out, 400, 600)
    assert verdict == "Premature end of JPEG file"  # though the region's rows are all there
    with pytest.raises(DecodeError, match="truncated"):
        decode_for(truncated, RRC_224, sample_rng(0, 0, index))
    rotated = data[:2] + exif_segment(6) + data[2:]
    image, geometry = decode_for(rotated, small_crop)
    assert image.shape[0] < 600 and image.shape[1] < 400  # a region of the rotated image
    np.testing.assert_array_equal(
        small_crop.apply(image, geometry), small_crop(decode_image(rotated))
    )
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


@needs_extension
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


DATA = Path(__file__).parents[1] / "data"
RRC_64 = ImageTransform(size=64, crop="random-resized", flip=True)


def same_samples(data: bytes, transform: ImageTransform, n: int) -> None:
    """decode_for's samples with and without region decoding are identical."""
    for index in range(n):
        rng = sample_rng(0, 0, index)
        region = transform.apply(*decode_for(data, transform, rng))
        whole = transform.apply(*decode_for(data, transform, sample_rng(0, 0, index), region=False))
        np.testing.assert_array_equal(region, whole)


@needs_extension
@pytest.mark.parametrize("name", ["sampling-h4v2.jpg", "sampling-h2v4.jpg"])
def test_region_decode_is_exact_for_samplings_opencv_cannot_write(name: str) -> None:
    """Luma sampled 4x2 or 2x4 (files written with libjpeg's own encoder): decoded reduced,
    the chroma would be upsampled from a differently scaled DCT, which libjpeg-turbo before
    3.0 gets wrong in a cropped decode; such regions are declined."""
    same_samples((DATA / name).read_bytes(), ImageTransform(size=32, crop="random-resized"), 40)


@needs_extension
@pytest.mark.parametrize("scans", [2, 4, 6, 8])
def test_region_decode_is_exact_for_incomplete_progressive_jpegs(scans: int) -> None:
    """A progressive JPEG cut after some scans (with its end marker restored, as a partial
    download might be): libjpeg smooths the missing coefficients across block edges, which a
    region's edges would change, so such files are decoded whole."""
    data = cv_encode(photo(333, 517, seed=9), ".jpg", cv2.IMWRITE_JPEG_PROGRESSIVE, 1)
    starts = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    assert len(starts) > scans
    same_samples(data[: starts[scans]] + b"\xff\xd9", RRC_64, 10)


@needs_extension
@pytest.mark.parametrize("where", ["signed-short tag", "after the frame header"])
def test_region_decode_of_rotated_images_is_the_rotated_whole_decode(where: str) -> None:
    """An EXIF orientation in any layout Pillow reads (a SSHORT tag, an Exif segment after
    SOF) is read from the header; the region decoded is the stored one the box maps to,
    rotated: the samples of the whole decode, rotated and cropped. An Exif segment that keeps
    orientation 1 changes nothing."""
    data = jpeg(photo(300, 500))
    if where == "signed-short tag":
        rotated = data[:2] + exif_segment(6, kind=8) + data[2:]
    else:
        sof = data.index(b"\xff\xc0")
        end = sof + 2 + struct.unpack_from(">H", data, sof + 2)[0]
        rotated = data[:end] + exif_segment(6) + data[end:]
    assert image_header(rotated).orientation == 6 and decode_image(rotated).shape == (500, 300, 3)
    whole = decode_for(rotated, RRC_64, sample_rng(0, 0, 0), region=False)[0]
    assert decode_for(rotated, RRC_64, sample_rng(0, 0, 0))[0].size < whole.size
    same_samples(rotated, RRC_64, 10)
    upright = data[:2] + exif_segment(1) + data[2:]
    whole = decode_for(upright, RRC_64, sample_rng(0, 0, 0), region=False)[0]
    assert decode_for(upright, RRC_64, sample_rng(0, 0, 0))[0].size < whole.size
    same_samples(upright, RRC_64, 10)


@needs_extension
def test_region_decode_respects_opencvs_pixel_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image OpenCV would refuse (OPENCV_IO_MAX_IMAGE_PIXELS, read as OpenCV reads it) is
    not decoded as a region: the whole decode gets to refuse it."""
    data = jpeg(photo(300, 500))
    whole = decode_for(data, RRC_64, sample_rng(0, 0, 1), region=False)[0].shape
    assert decode_for(data, RRC_64, sample_rng(0, 0, 1))[0].shape != whole  # a region
    monkeypatch.setattr(_libjpeg, "_OPENCV_LIMITS", (300 * 500 - 1, 1 << 20, 1 << 20))
    assert decode_for(data, RRC_64, sample_rng(0, 0, 1))[0].shape == whole


@needs_extension
def test_region_decoder_validates_its_arguments() -> None:
    data = jpeg(photo(64, 64))
    with pytest.raises(ValueError, match="rows x cols x 3"):
        _jpeg.decode_rgb(data, 1, 0, 0, 8, 8, np.empty((8, 8, 3), np.uint8), 9, 8)
    with pytest.raises(ValueError, match="denom"):
        _jpeg.decode_rgb(data, 3, 0, 0, 8, 8, np.empty((8, 8, 3), np.uint8), 8, 8)
    out = np.empty((64, 64, 3), np.uint8)
    assert _jpeg.decode_rgb(data, 1, 60, 0, 8, 8, out, 64, 64) is None  # past the edge
    assert _jpeg.decode_rgb(b"not a jpeg", 1, 0, 0, 8, 8, out, 64, 64) is None
    assert _jpeg.decode_rgb(data, 1, 0, 0, 64, 64, out, 8, 8 * 64) is None  # no room
    big = 2**31 - 1  # left + width overflows 32 bits: refused, not written past out
    assert _jpeg.decode_rgb(data, 1, 0, big, 1, big, out, 64, 64) is None
    found = _jpeg.decode_rgb(data, 1, 20, 20, 8, 8, out, 64, 64)
    # 4:2:0: rows 16-32 (the box and the 4 rows its chroma upsampling reads on each side),
    # columns 16-32 (4 columns to the left is column 16, an iMCU boundary already)
    assert found == (4, 4, 16, 16, 64, 64)
    # columns 0-33: 4 to the left of a box at column 13 is column 9, aligned down to the iMCU at 0
    assert _jpeg.decode_rgb(data, 1, 20, 13, 8, 16, out, 64, 64) == (4, 13, 16, 33, 64, 64)
