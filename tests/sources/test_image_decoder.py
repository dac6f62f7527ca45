"""fastdata.sources._image_decoder: rows of encoded images to uint8 batches — written into one
batch when the size is fixed, a list otherwise — and, under ``on_error="skip"``, a bad image's
place taken by the next row's, with the rows each batch took reported for an exact resume.
The decoder opens no file: it decodes the bytes its reader read (a null is a bad image)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow as pa
import pytest
import torch

from fastdata.errors import DecodeError, SourceError
from fastdata.sources._image_options import image_decoder
from fastdata.sources.base import INDEX, Context, FileBacked, declares
from fastdata.sources.images import ImageStream
from fastdata.synthetic import make_images

BAD = 2  # the row holding no image


def png(value: int, side: int = 12) -> bytes:
    ok, data = cv2.imencode(".png", np.full((side, side, 3), value, np.uint8))
    assert ok
    return data.tobytes()


def table(rows: int = 6, sides: tuple[int, ...] = ()) -> pa.Table:
    images = [
        b"not an image" if i == BAD else png(10 * i, sides[i] if sides else 12) for i in range(rows)
    ]
    return pa.table({"image": images, "label": list(range(rows)), INDEX: list(range(rows))})


def context(batch_size: int | None = 2) -> Context:
    return Context(epoch=0, seed=0, locate=lambda index: {"row": index}, batch_size=batch_size)


def decoder(**options: Any) -> Any:
    return image_decoder(options, "image", "label", (), ())


def values(images: torch.Tensor) -> list[int]:
    """The constant value of each image (they are filled with one value)."""
    return [int(image.float().mean().round()) for image in images]


def test_a_bad_image_raises_an_error_naming_its_row() -> None:
    good = table().slice(0, BAD)
    images, labels = decoder(size=8, crop="center").batch(good, context())
    assert images.shape == (2, 3, 8, 8) and labels.tolist() == [0, 1]
    with pytest.raises(DecodeError) as caught:
        decoder(size=8, crop="center").batch(table(), context())
    assert caught.value.row == BAD  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", [8, None])
def test_a_skipped_images_place_is_taken_by_the_next_rows(size: int | None) -> None:
    made = decoder(size=size, crop="center" if size else None, on_error="skip", decode_threads=2)
    with pytest.warns(UserWarning, match="skipped a bad image"):
        items = list(made.items(iter([table().slice(0, 4), table().slice(4)]), context(), 0))
    positions = [position for _, position in items]
    assert positions == [(2, 0), (5, 0), (6, 0)]  # rows taken: 0-1, 2-4 (2 skipped), 5
    assert [values(images) for (images, _), _ in items] == [[0, 10], [30, 40], [50]]
    assert [labels.tolist() for (_, labels), _ in items] == [[0, 1], [3, 4], [5]]
    assert made.skipped == 1


def test_one_item_per_row_leaves_skipped_rows_out() -> None:
    made = decoder(on_error="skip")
    with pytest.warns(UserWarning, match="skipped a bad image") as warned:
        items = list(made.items(iter([table()]), context(None), 0))
    assert warned[0].filename == __file__  # the line iterating, not the decoder's
    assert [label for (_, label), _ in items] == [0, 1, 3, 4, 5]
    assert [position for _, position in items] == [(1, 0), (2, 0), (4, 0), (5, 0), (6, 0)]


def test_images_of_different_sizes_make_a_list() -> None:
    good = table(2, sides=(12, 16))
    images, _ = decoder().batch(good, context())
    assert isinstance(images, list) and [i.shape for i in images] == [(3, 12, 12), (3, 16, 16)]
    same, _ = decoder().batch(table(2), context())
    assert isinstance(same, torch.Tensor) and same.shape == (2, 3, 12, 12)


def test_the_decoder_reads_no_file_it_decodes_the_readers_bytes(tmp_path: Path) -> None:
    make_images(tmp_path / "data", 4, classes=1, min_short=16, max_short=24)
    stream = ImageStream.from_folder(tmp_path / "data", size=8, crop="center", batch_size=4)
    assert not hasattr(stream.decoder, "fs") and not declares(stream.decoder, FileBacked)
    table = stream.reader.read(0, 0, 4)  # the files' bytes, read by the reader
    table = table.append_column(INDEX, pa.array(range(4), pa.int64()))
    shutil.rmtree(tmp_path / "data")  # nothing left for a decoder to open
    images, labels = stream.decoder.batch(table, context(4))
    assert images.shape == (4, 3, 8, 8) and labels.tolist() == [0, 0, 0, 0]


def test_a_null_image_is_a_bad_image_named_or_skipped() -> None:
    images = pa.array([png(0), None, png(20)], pa.large_binary())
    nulls = pa.table({"image": images, "label": [0, 1, 2], INDEX: [0, 1, 2]})
    with pytest.raises(SourceError, match="no image: the value is null") as caught:
        decoder(size=8, crop="center").batch(nulls, context(3))
    assert caught.value.row == 1  # type: ignore[attr-defined]
    made = decoder(size=8, crop="center", on_error="skip")
    with pytest.warns(UserWarning, match="no image"):
        [((batch, labels), _)] = list(made.items(iter([nulls]), context(3), 0))
    assert labels.tolist() == [0, 2] and values(batch) == [0, 20] and made.skipped == 1
