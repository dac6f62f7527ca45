"""fastdata.sources._image_options: the options of every ImageStream constructor, taken out
of the stream's options and checked into the decoder they describe."""

from __future__ import annotations

from typing import Any

import pytest

from fastdata.decode import ImageTransform
from fastdata.sources._image_options import DECODER_OPTIONS, image_decoder
from fastdata.sources.base import ORIGIN


def decoder(extra_columns: tuple[str, ...] = (), **options: Any) -> Any:
    return image_decoder(options, "image", "label", extra_columns, ())


def test_the_decoder_options_are_taken_out_and_the_stream_options_left() -> None:
    options = {"size": 8, "crop": "center", "on_error": "skip", "batch_size": 4, "seed": 1}
    made = image_decoder(options, "image", "label", (), ())
    assert options == {"batch_size": 4, "seed": 1}
    assert made.transform == ImageTransform(size=8, crop="center")
    assert made.on_error == "skip" and made.varying
    assert {"size", "on_error", "decode_threads"} <= DECODER_OPTIONS
    assert not DECODER_OPTIONS & {"batch_size", "shuffle", "rank"}


def test_the_defaults_keep_the_size_and_raise_on_a_bad_image() -> None:
    made = decoder()
    assert made.transform == ImageTransform()
    assert (made.on_error, made.decode_threads, made.keep_alpha) == ("raise", 1, False)
    assert not made.random


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"transform": ImageTransform(size=4), "size": 8}, ValueError, "either transform="),
        ({"transform": "resize"}, TypeError, "expected a fastdata.ImageTransform"),
        ({"crop": "corner"}, ValueError, "crop"),
        ({"on_error": "ignore"}, ValueError, "on_error"),
        ({"decode_threads": 0}, ValueError, "decode_threads"),
        ({"augment": [lambda image: image], "keep_alpha": True}, ValueError, "keep_alpha"),
        ({"origin": "yes"}, TypeError, "origin"),
    ],
)
def test_a_bad_option_is_refused_naming_it(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words):
        decoder(**options)


def test_origin_may_not_shadow_an_extra_column() -> None:
    with pytest.raises(ValueError, match="origin=True adds"):
        decoder(extra_columns=(ORIGIN,), origin=True)
    assert decoder(extra_columns=(ORIGIN,)).varying is False
