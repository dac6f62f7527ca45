"""Transforms: resize, crops, flip, antialias, ImageTransform, against torchvision."""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict

import cv2
import numpy as np
import pytest
import torch
import torchvision.transforms.functional as tvf
import torchvision.transforms.v2.functional as tvf2
from decode_helpers import (
    FEW,
    chw,
    photo,
    psnr,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision.transforms import RandomResizedCrop

from fastdata.decode import (
    ImageTransform,
    center_crop,
    hflip,
    random_resized_crop,
    random_resized_crop_params,
    resize,
    resized_center_crop,
    sample_rng,
)

# -- transforms ----------------------------------------------------------------------------


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


def test_transform_antialias_is_torchvision_resized_crop_and_flip() -> None:
    """ImageTransform(interpolation="antialias") reproduces torchvision's RandomResizedCrop +
    RandomHorizontalFlip on the same box and flip, bit for bit, into a new array or into a
    batch's slot (where the C extension crops, resizes and flips in one pass)."""
    img = photo(300, 400)
    transform = ImageTransform(size=96, crop="random-resized", flip=True, interpolation="antialias")
    flips = set()
    slot = np.empty((96, 96, 3), np.uint8)
    for index in range(12):
        (top, left, h, w), _, flip, _ = geometry = transform.geometry(
            (300, 400), sample_rng(0, 0, index)
        )
        expected = tvf2.resized_crop(
            torch.from_numpy(img).permute(2, 0, 1), top, left, h, w, [96, 96], antialias=True
        )
        expected = (tvf2.horizontal_flip(expected) if flip else expected).permute(1, 2, 0)
        np.testing.assert_array_equal(transform.apply(img, geometry), expected.numpy())
        assert transform.apply(img, geometry, out=slot) is slot
        np.testing.assert_array_equal(slot, expected.numpy())
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


@settings(max_examples=50, deadline=None)
@given(
    hw=st.tuples(st.integers(1, 2000), st.integers(1, 2000)),
    scale=st.tuples(st.floats(0.01, 1.0), st.floats(0.0, 1.0)),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_resized_crop_draws_as_generator_uniform(
    hw: tuple[int, int], scale: tuple[float, float], seed: int
) -> None:
    """The boxes are those of torchvision's algorithm with ``Generator.uniform`` draws: the
    cheaper ``lo + (hi - lo) * random()`` is the same number, bit for bit."""
    lo, hi = scale[0], scale[0] + (1 - scale[0]) * scale[1]
    ours, reference = sample_rng(seed, 0, 0), sample_rng(seed, 0, 0)
    height, width = hw
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    expected = None
    for _ in range(10):
        area = height * width * reference.uniform(lo, hi)
        aspect = math.exp(reference.uniform(*log_ratio))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(reference.integers(0, height - h + 1))
            expected = (top, int(reference.integers(0, width - w + 1)), h, w)
            break
    got = random_resized_crop_params(hw, scale=(lo, hi), rng=ours)
    if expected is not None:
        assert got == expected
    assert ours.bit_generator.state == reference.bit_generator.state


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


@pytest.mark.parametrize("interpolation", ["auto", "antialias"])
def test_image_transform_center_is_resize_then_crop(interpolation: str) -> None:
    transform = ImageTransform(size=224, crop="center", interpolation=interpolation)
    assert transform.decode_size == 256
    aligned = photo(400, 500)  # crop edges fall on whole source pixels: exact for area
    expected = center_crop(resize(aligned, 256, interpolation=interpolation), 224)
    np.testing.assert_array_equal(transform(aligned), expected)
    for h, w in [(300, 401), (333, 517), (517, 333)]:  # "auto": within half a source pixel
        img = photo(h, w, seed=h)
        two_step = center_crop(resize(img, 256, interpolation=interpolation), 224)
        if interpolation == "antialias":  # resampled at the whole image's scale: exact
            np.testing.assert_array_equal(transform(img), two_step)
        assert psnr(resized_center_crop(img, 256, 224, interpolation=interpolation), two_step) >= 40
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
