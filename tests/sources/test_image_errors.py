"""fastdata.sources._image_errors: a bad image raised as an error naming where it is, or,
under ``on_error="skip"``, counted over every worker, warned about once and logged."""

from __future__ import annotations

import logging
import pickle
import warnings
from multiprocessing.reduction import ForkingPickler

import cv2
import pytest
import torch.multiprocessing  # noqa: F401  (registers the shared-memory reductions)

from fastdata.errors import DecodeError, SourceError
from fastdata.sources._image_errors import BadImages, naming
from fastdata.sources.base import Context

CONTEXT = Context(epoch=0, seed=0, locate=lambda index: {"path": f"img{index}.jpg", "row": index})


@pytest.mark.parametrize(
    ("exc", "kind", "words"),
    [
        (ValueError("bad huffman"), DecodeError, "cannot decode or transform"),
        (cv2.error("resize"), DecodeError, "cannot decode or transform"),
        (OSError("gone"), SourceError, "cannot read"),
        (SourceError("too many pixels"), SourceError, "too many pixels"),
        (DecodeError("not an image"), DecodeError, "not an image"),
    ],
)
def test_a_bad_image_raises_an_error_naming_it(
    exc: Exception, kind: type[Exception], words: str
) -> None:
    with pytest.raises(kind, match=words) as caught:
        BadImages("raise").failed(7, exc, CONTEXT)
    assert type(caught.value) is kind
    assert caught.value.path == "img7.jpg"  # type: ignore[attr-defined]
    assert caught.value.__cause__ is exc


def test_skipped_images_are_counted_warned_once_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bad = BadImages("skip")
    with (
        caplog.at_level(logging.INFO, logger="fastdata"),
        warnings.catch_warnings(record=True) as seen,
    ):
        warnings.simplefilter("always")
        for index in range(3):
            bad.failed(index, ValueError("corrupt"), CONTEXT)
    assert bad.skipped == 3
    assert len([w for w in seen if "skipped a bad image" in str(w.message)]) == 1
    assert [r.getMessage().count("img") for r in caplog.records] == [1, 1, 1]


def test_a_pickled_copy_counts_into_the_same_shared_counts() -> None:
    bad = BadImages("skip")
    copy = pickle.loads(ForkingPickler.dumps(bad))  # as a DataLoader worker receives it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        copy.failed(0, ValueError("corrupt"), CONTEXT)
    assert bad.skipped == copy.skipped == 1


def test_an_error_inside_an_augmentation_gets_the_images_location() -> None:
    with pytest.raises(RuntimeError) as caught, naming(4, CONTEXT):
        raise RuntimeError("bad op")
    assert caught.value.__notes__ == ["while augmenting the image at path=img4.jpg, row=4"]
