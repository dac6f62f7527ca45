"""Resizing (fastdata.decode._resize): the output size, each interpolation against torch,
torchvision and PIL, the antialias path's C extension bit for bit, and its torch fallback."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as tvf
import torchvision.transforms.v2.functional as tvf2
from decode_helpers import chw, photo
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import fastdata.decode._resize as resize_module
from fastdata._torch_compat import upsample_bilinear_aa
from fastdata.decode import ImageTransform, output_hw, resize, sample_rng
from fastdata.decode._resize import _resample


@settings(max_examples=200, deadline=None)
@given(h=st.integers(1, 2000), w=st.integers(1, 2000), size=st.integers(1, 500))
def test_resize_shorter_side_like_torchvision(h: int, w: int, size: int) -> None:
    assert output_hw((h, w), size) == tuple(tvf._compute_resized_output_size((h, w), [size]))


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_resize_shrink_is_exact_box_filter(factor: int) -> None:
    img = np.random.default_rng(factor).integers(0, 256, (12 * factor, 8 * factor, 3), np.uint8)
    out = resize(img, (12, 8), interpolation="auto")
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


needs_resample = pytest.mark.skipif(
    _resample is None, reason="fastdata.decode._resample was not built (no C compiler)"
)


@needs_resample
@settings(max_examples=150, deadline=None)
@given(
    hw=st.tuples(st.integers(1, 400), st.integers(1, 400)),
    out_hw=st.tuples(st.integers(1, 250), st.integers(1, 250)),
    channels=st.sampled_from([1, 3, 4]),
    margins=st.tuples(*[st.integers(0, 9)] * 4),
    flip=st.booleans(),
    simd=st.booleans(),
    smooth=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_the_resize_extension_is_torchs_kernel_bit_for_bit(
    hw: tuple[int, int],
    out_hw: tuple[int, int],
    channels: int,
    margins: tuple[int, int, int, int],
    flip: bool,
    simd: bool,
    smooth: bool,
    seed: int,
) -> None:
    """fastdata.decode._resample.resize, on a crop read in place (rows at the parent's stride, the
    crop touching the parent's last row or not), with or without its AVX2 passes and the
    flip, gives torch's antialiased bilinear uint8 pixels (shrinking by up to 400x and
    enlarging), also on smooth images, where rounding ties are common."""
    top, bottom, left, right = margins
    rng = np.random.default_rng(seed)
    parent = rng.integers(0, 256, (hw[0] + top + bottom, hw[1] + left + right, channels), np.uint8)
    if smooth:
        parent = cv2.GaussianBlur(parent, (0, 0), 3).reshape(parent.shape)
    crop = parent[top : top + hw[0], left : left + hw[1]]
    expected = torch.empty((*out_hw, channels), dtype=torch.uint8)
    upsample_bilinear_aa(
        torch.from_numpy(crop.copy()).permute(2, 0, 1)[None],
        out_hw,
        expected.permute(2, 0, 1)[None],
    )
    out = np.empty((*out_hw, channels), np.uint8)
    _resample.resize(crop, out, flip, simd)
    np.testing.assert_array_equal(out, expected.numpy()[:, ::-1] if flip else expected.numpy())


@needs_resample
def test_the_resize_extension_refuses_what_it_cannot_read() -> None:
    img = photo(40, 50)
    out = np.empty((20, 20, 3), np.uint8)
    for src, into in [
        (img.astype(np.float32), out),  # another dtype
        (img[:, ::-1], out),  # columns backwards
        (img[:, :, :2], out),  # channels not contiguous with the next pixel
        (np.zeros((40, 50, 5), np.uint8), np.empty((20, 20, 5), np.uint8)),  # 5 channels
        (img, np.empty((20, 20, 4), np.uint8)),  # channels differ
        (img, np.empty((20, 40, 3), np.uint8)[:, ::2]),  # out not contiguous
        (img[:0], out),  # empty
    ]:
        with pytest.raises((ValueError, BufferError)):
            _resample.resize(src, into, False)


def test_antialias_without_the_extension_is_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built without a C compiler, torch computes the same pixels (and the flip)."""
    img = photo(120, 160)
    transform = ImageTransform(size=48, crop="random-resized", flip=True, interpolation="antialias")
    geometries = [transform.geometry((120, 160), sample_rng(1, 0, i)) for i in range(8)]
    with_extension = [
        transform.apply(img, g, out=np.empty((48, 48, 3), np.uint8)) for g in geometries
    ]
    monkeypatch.setattr(resize_module, "_resample", None)
    for geometry, expected in zip(geometries, with_extension, strict=True):
        np.testing.assert_array_equal(
            transform.apply(img, geometry, out=np.empty((48, 48, 3), np.uint8)), expected
        )
        np.testing.assert_array_equal(transform.apply(img, geometry), expected)


@settings(max_examples=100, deadline=None)
@given(
    hw=st.tuples(st.integers(1, 3000), st.integers(1, 3000)),
    size=st.tuples(st.integers(1, 500), st.integers(1, 500)),
)
def test_a_pair_is_the_output_size_as_it_is(hw: tuple[int, int], size: tuple[int, int]) -> None:
    assert output_hw(hw, size) == size
    assert output_hw(hw, list(size)) == size


@settings(max_examples=100, deadline=None)
@given(h=st.integers(1, 3000), w=st.integers(1, 3000), size=st.integers(1, 500))
def test_one_size_keeps_the_aspect_within_a_pixel(h: int, w: int, size: int) -> None:
    out_h, out_w = output_hw((h, w), size)
    assert min(out_h, out_w) == size
    long_side = size * max(h, w) / min(h, w)
    assert abs(max(out_h, out_w) - long_side) < 1
