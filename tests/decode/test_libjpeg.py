"""JPEGs through the libjpeg-turbo extension (fastdata.decode._libjpeg): OpenCV's pixels at
every scale, the import-time self-check, EXIF orientation of whole images, regions and
reduced grids, libjpeg's verdict, and OpenCV's size limits."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest
from decode_helpers import (
    CLEAN,
    CORPUS,
    SAMPLINGS,
    _jpeg,
    jpeg,
    needs_extension,
    opencv,
    photo,
    run_python,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fastdata.decode import _libjpeg as _libjpeg
from fastdata.decode._headers import ImageHeader, image_header
from fastdata.errors import DecodeError

DATA = Path(__file__).parents[1] / "data"


def parity_corpus() -> list[bytes]:
    """Every chroma sampling OpenCV writes, baseline and progressive, with and without
    restart markers, gray, odd sizes; and two samplings only libjpeg's own encoder writes."""
    rng = np.random.default_rng(0)
    corpus = []
    for i, sampling in enumerate(["gray", *SAMPLINGS] * 3):
        img = photo(int(rng.integers(1, 400)), int(rng.integers(1, 400)), seed=i)
        corpus.append(
            jpeg(
                img[:, :, 1] if sampling == "gray" else img,
                "444" if sampling == "gray" else sampling,
                progressive=bool(i % 2),
                restart=int(rng.integers(0, 3)),
            )
        )
    return corpus + [
        (DATA / name).read_bytes() for name in ("sampling-h4v2.jpg", "sampling-h2v4.jpg")
    ]


@needs_extension
@pytest.mark.parametrize("factor", [1, 2, 4, 8])
def test_whole_decodes_are_opencvs_pixels_bit_for_bit(factor: int) -> None:
    for data in parity_corpus():
        header = image_header(data)
        found = _libjpeg.decode(np.frombuffer(data, np.uint8), header, factor, None, None)
        assert found is not None and found[1] == (0, 0)
        np.testing.assert_array_equal(found[0], opencv(data, factor))


def fake_extension(decode_rgb) -> types.ModuleType:
    module = types.ModuleType("fake_jpeg")
    module.decode_rgb = decode_rgb
    return module


@needs_extension
def test_the_self_check_refuses_an_extension_that_differs_from_opencv() -> None:
    assert _libjpeg.agrees_with_opencv(_jpeg)

    def off_by_one(data, denom, top, left, height, width, out, rows, cols):
        found = _jpeg.decode_rgb(data, denom, top, left, height, width, out, rows, cols)
        np.frombuffer(out, np.uint8)[:1] ^= 1  # one level off in one pixel
        return found

    def fails(*args):
        raise MemoryError

    for module in (fake_extension(off_by_one), fake_extension(fails)):
        assert not _libjpeg.agrees_with_opencv(module)
    assert not _libjpeg.agrees_with_opencv(fake_extension(lambda *args: None))


def test_an_extension_that_differs_is_disabled_at_import_with_a_warning() -> None:
    code = """
import sys, types, warnings
fake = types.ModuleType("fastdata.decode._jpeg")
fake.decode_rgb = lambda *args: None
fake.check = lambda data: True
fake.LIBJPEG_TURBO_VERSION_NUMBER = 1005000
sys.modules["fastdata.decode._jpeg"] = fake
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import fastdata.decode
print(fastdata.decode.JPEG_EXTENSION, fastdata.decode._libjpeg._jpeg)
print(*[str(w.message) for w in caught])
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    first, message = result.stdout.splitlines()[:2]
    assert first == "False None"
    assert "decodes differently from OpenCV" in message and "1005000" in message


# Pillow's exif_transpose: the independent reference for each EXIF orientation
PIL_TRANSPOSE = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
SIZES = st.tuples(st.integers(1, 30), st.integers(1, 30))


@settings(max_examples=40, deadline=None)
@given(hw=SIZES, orientation=st.integers(1, 8), seed=st.integers(0, 2**32))
def test_orient_turns_an_image_as_pillow_does(
    hw: tuple[int, int], orientation: int, seed: int
) -> None:
    image = np.random.default_rng(seed).integers(0, 256, (*hw, 3), dtype=np.uint8)
    pil = Image.fromarray(image)
    want = pil if orientation == 1 else pil.transpose(PIL_TRANSPOSE[orientation])
    np.testing.assert_array_equal(_libjpeg.orient(image, orientation), np.asarray(want))


def coordinates(hw: tuple[int, int]) -> np.ndarray:
    """A uint8 image holding each pixel's stored row and column in its first two channels
    (sizes up to 255)."""
    rows, cols = np.mgrid[0 : hw[0], 0 : hw[1]].astype(np.uint8)
    return np.ascontiguousarray(np.stack([rows, cols, rows], -1))


@settings(max_examples=80, deadline=None)
@given(hw=SIZES, orientation=st.integers(1, 8), data=st.data())
def test_a_turned_box_holds_the_pixels_of_the_box_once_the_image_is_oriented(
    hw: tuple[int, int], orientation: int, data: st.DataObject
) -> None:
    top, left = data.draw(st.integers(0, hw[0] - 1)), data.draw(st.integers(0, hw[1] - 1))
    h, w = data.draw(st.integers(1, hw[0] - top)), data.draw(st.integers(1, hw[1] - left))
    stored = coordinates(hw)
    t, lft, th, tw = _libjpeg._turn_box(orientation, (top, left, h, w), hw)
    oriented = _libjpeg.orient(stored, orientation)
    region = _libjpeg.orient(stored[top : top + h, left : left + w], orientation)
    np.testing.assert_array_equal(oriented[t : t + th, lft : lft + tw], region)


@settings(max_examples=80, deadline=None)
@given(hw=SIZES, orientation=st.integers(1, 8), factor=st.sampled_from([1, 2, 4, 8]))
def test_the_reduced_grid_places_each_reduced_pixel_over_the_pixels_it_came_from(
    hw: tuple[int, int], orientation: int, factor: int
) -> None:
    """A stored pixel (r, c) falls in reduced pixel (r // factor, c // factor); oriented,
    reduced pixel k must cover oriented pixels [k * factor - grid, (k + 1) * factor - grid)."""
    full = _libjpeg.orient(coordinates(hw), orientation)
    reduced_hw = (-(-hw[0] // factor), -(-hw[1] // factor))
    reduced = _libjpeg.orient(coordinates(reduced_hw), orientation)
    oriented_hw = full.shape[:2]
    grid = _libjpeg.reduced_grid(orientation, oriented_hw, factor)
    for k_row in range(reduced.shape[0]):
        for k_col in range(reduced.shape[1]):
            rows = slice(max(k_row * factor - grid[0], 0), (k_row + 1) * factor - grid[0])
            cols = slice(max(k_col * factor - grid[1], 0), (k_col + 1) * factor - grid[1])
            covered = full[rows, cols, :2] // factor
            assert (covered == reduced[k_row, k_col, :2]).all(), (k_row, k_col)


@needs_extension
def test_verify_raises_exactly_for_what_libjpeg_warns_about_naming_the_source() -> None:
    for name, data in CLEAN.items():
        assert _libjpeg.check(data) is True, name
        _libjpeg.verify(np.frombuffer(data, np.uint8), "clean.jpg")
    warned = 0
    for name, data in CORPUS.items():
        buf = np.frombuffer(data, np.uint8)
        if not isinstance(_libjpeg.check(data), str):
            _libjpeg.verify(buf, name)  # no warning: nothing to raise
            continue
        warned += 1
        with pytest.raises(
            DecodeError, match=r"corrupt or truncated JPEG data \(libjpeg: "
        ) as info:
            _libjpeg.verify(buf, f"{name}.jpg")
        assert f"{name}.jpg" in str(info.value)
    assert warned  # the corpus holds files libjpeg warns about


def test_without_the_extension_there_is_no_verdict_and_no_decode(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_libjpeg, "_jpeg", None)
    data = CLEAN["baseline"]
    assert _libjpeg.check(data) is False
    _libjpeg.verify(np.frombuffer(data, np.uint8), "x.jpg")  # nothing to say
    header = image_header(data)
    assert _libjpeg.decode(np.frombuffer(data, np.uint8), header, 1, None, None) is None


def test_opencvs_size_limits_are_each_inclusive(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_libjpeg, "_OPENCV_LIMITS", (600, 30, 40))
    assert _libjpeg.within_opencv_limits(ImageHeader("jpeg", 20, 30))
    assert _libjpeg.within_opencv_limits(ImageHeader("jpeg", 40, 15))
    assert not _libjpeg.within_opencv_limits(ImageHeader("jpeg", 21, 30))  # pixels
    assert not _libjpeg.within_opencv_limits(ImageHeader("jpeg", 10, 31))  # width
    assert not _libjpeg.within_opencv_limits(ImageHeader("jpeg", 41, 1))  # height


@needs_extension
def test_a_jpeg_over_the_limits_is_left_to_opencv(monkeypatch: pytest.MonkeyPatch) -> None:
    data = CLEAN["baseline"]
    header = image_header(data)
    monkeypatch.setattr(
        _libjpeg, "_OPENCV_LIMITS", (header.height * header.width - 1, 10**6, 10**6)
    )
    assert _libjpeg.decode(np.frombuffer(data, np.uint8), header, 1, None, None) is None
