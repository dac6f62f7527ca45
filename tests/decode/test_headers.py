"""Header parsing: format, size and EXIF orientation read without decoding."""

from __future__ import annotations

import io

import numpy as np
import pytest
from decode_helpers import (
    FEW,
    cv_encode,
    exif_segment,
    photo,
    pil_encode,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fastdata.decode import (
    decode_image,
    image_header,
    image_size,
)
from fastdata.decode._headers import tiff_straight_alpha
from fastdata.errors import DecodeError
from real_world_files import RGB, tiff

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


def test_tiff_straight_alpha_marks_only_unassociated_8_bit_alpha_associated() -> None:
    """The copy OpenCV decodes an 8-bit unassociated-alpha TIFF from: ExtraSamples 2 -> 1,
    nothing else changed, the caller's bytes untouched; None for every other image."""
    rgba = photo(6, 8, seed=2)
    straight = np.dstack([rgba, rgba[..., 0]])
    data = pil_encode(Image.fromarray(straight, "RGBA"), "TIFF")
    buf = np.frombuffer(data, np.uint8)
    patched = tiff_straight_alpha(buf)
    assert patched is not None and bytes(buf) == data
    assert Image.open(io.BytesIO(patched.tobytes())).tag_v2[338] == (1,)
    assert np.count_nonzero(patched != buf) == 1
    assert tiff_straight_alpha(patched) is None  # associated already
    for other in (
        pil_encode(Image.fromarray(rgba), "TIFF"),  # no alpha
        pil_encode(Image.fromarray(straight, "RGBA"), "PNG"),
        tiff(straight.astype(np.uint16) * 257, 16, RGB, extra_samples=2),  # read as stored
    ):
        assert tiff_straight_alpha(np.frombuffer(other, np.uint8)) is None
    assert tiff_straight_alpha(np.frombuffer(data[:8], np.uint8)) is None  # IFD cut off
