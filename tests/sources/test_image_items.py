"""fastdata.sources._image_items: what an image stream's items look like — an image, with
its label, with the other columns of its sample — and the layouts of the images; the
encoded images of a table's rows, read in place."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from fastdata.ragged import Ragged
from fastdata.sources._image_items import ItemColumns, chw, encoded_rows, image_item, stack
from fastdata.sources.base import INDEX, ORIGIN

IMAGE = torch.zeros(3, 4, 5, dtype=torch.uint8)


def test_an_item_without_other_columns_is_the_image_or_image_and_label() -> None:
    assert image_item(IMAGE, {}, ItemColumns(None)) is IMAGE
    image, label = image_item(IMAGE, {"y": np.int64(3)}, ItemColumns("y"))
    assert image is IMAGE and label == 3 and type(label) is int


def test_a_batchs_labels_are_int64() -> None:
    _, labels = image_item(IMAGE[None], {"y": [1, 2]}, ItemColumns("y"))
    assert labels.dtype == torch.int64 and labels.tolist() == [1, 2]


def test_other_columns_make_a_dict_with_json_parsed_and_the_origin() -> None:
    columns = ItemColumns("y", ("caption", "meta"), frozenset({"meta"}), origin=True)
    assert columns.others == ["y", "caption", "meta"]
    row = {"y": 1, "caption": "a cat", "meta": '{"w": 2}', ORIGIN: {"row": 4}}
    assert image_item(IMAGE, row, columns) == {
        "image": IMAGE, "label": 1, "caption": "a cat", "meta": {"w": 2}, ORIGIN: {"row": 4},
    }  # fmt: skip
    texts = Ragged.from_rows(['{"w": 1}', "null"])
    batch = image_item(IMAGE[None], {"y": [0, 1], "caption": ["a", "b"], "meta": texts,
                                     ORIGIN: [{}, {}]}, columns)  # fmt: skip
    assert batch["meta"] == [{"w": 1}, None]


def test_images_are_channels_first_views_of_channels_last_memory() -> None:
    hwc = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    image = chw(hwc)
    assert image.shape == (3, 4, 5) and image.stride() == (1, 15, 3)  # HWC memory
    hwc[1, 2] = [7, 8, 9]  # a view: no copy
    assert image[:, 1, 2].tolist() == [7, 8, 9]
    assert chw(hwc[:, :, 0]).shape == (1, 4, 5)  # a grey image gets its channel
    batch = stack([image, image + 1])
    assert batch.shape == (2, 3, 4, 5)
    assert batch.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(batch[1], image + 1)


@pytest.mark.parametrize("kind", [pa.binary(), pa.large_binary()])
def test_encoded_images_are_views_of_the_tables_buffers(kind: pa.DataType) -> None:
    values = [b"abc", None, b"", b"defgh", b"ij"]
    chunks = [pa.array(values[:3], kind), pa.array(values[3:], kind).slice(1)]
    table = pa.table({"image": pa.chunked_array(chunks), INDEX: [0, 1, 2, 4]})
    rows = encoded_rows(table, "image")
    assert [r[INDEX] for r in rows] == [0, 1, 2, 4]
    assert [None if r["image"] is None else bytes(r["image"]) for r in rows] == [
        b"abc", None, b"", b"ij"
    ]  # fmt: skip
    data = chunks[0].buffers()[2]
    assert np.frombuffer(rows[0]["image"], np.uint8).ctypes.data == data.address  # no copy


def test_a_structs_images_are_its_python_values() -> None:
    images = pa.array([{"bytes": b"abc", "path": "a.jpg"}, {"bytes": None, "path": "b.jpg"}])
    rows = encoded_rows(pa.table({"image": images, INDEX: [5, 6]}), "image")
    assert rows == [
        {"image": {"bytes": b"abc", "path": "a.jpg"}, INDEX: 5},
        {"image": {"bytes": None, "path": "b.jpg"}, INDEX: 6},
    ]
