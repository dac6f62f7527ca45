"""decode_many: a batch on a thread pool, in order, errors naming the item."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from decode_helpers import (
    JPEG,
    cv_encode,
    photo,
)

from fastdata.decode import (
    ImageTransform,
    decode_for,
    decode_image,
    decode_many,
    limit_opencv_threads,
    sample_rng,
)
from fastdata.errors import DecodeError

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
    with pytest.raises(ValueError, match=r"threads=0: expected an integer >= 1"):
        decode_many([JPEG], threads=0)
    with pytest.raises(TypeError, match=r"threads='2': expected an integer >= 1, got str"):
        decode_many([JPEG], threads="2")
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
    with pytest.raises(ValueError, match=r"n=0: expected an integer >= 1"):
        limit_opencv_threads(0)
    with pytest.raises(TypeError, match=r"n=1.5: expected an integer >= 1, got float"):
        limit_opencv_threads(1.5)
