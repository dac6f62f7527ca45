"""ImageFiles, the reader of ``ImageStream.from_folder`` and ``from_files``: the reader
contract (fastdata.check_reader), also with the image decoder skipping a bad file."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import pytest

import fastdata as fd
from fastdata import check_reader

SMALL = {"min_short": 16, "max_short": 24}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("files")
    fd.synthetic.make_images(root, 40, classes=3, **SMALL)
    return root


def image_keys(batch: Any) -> list[str]:
    """One key per image of a batch ``(images, labels)``: a hash of its pixels."""
    images = batch[0]
    return [hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest() for image in images]


@pytest.mark.parametrize("files_per_unit", [1, 7, 64])
def test_a_folders_reader_keeps_the_contract(folder: Path, files_per_unit: int) -> None:
    stream = fd.ImageStream.from_folder(folder, files_per_unit=files_per_unit)
    check_reader(stream.reader, batch_size=5, shuffle=True)


def test_a_file_lists_reader_keeps_the_contract(folder: Path) -> None:
    paths = sorted(folder.rglob("*.jpg"))
    labels = [int(p.parent.name.split("_")[-1]) for p in paths]
    reader = fd.ImageStream.from_files(paths, labels, files_per_unit=6).reader
    fewer = fd.ImageStream.from_files(paths[:-1], labels[:-1], files_per_unit=6).reader
    check_reader(reader, changed=fewer, batch_size=4, shuffle=True)


def test_decoded_images_keep_the_contract_when_a_bad_file_is_skipped(
    folder: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    bad = sorted(copy.rglob("*.jpg"))[11]
    bad.write_bytes(b"not an image")
    stream = fd.ImageStream.from_folder(
        copy, size=8, crop="center", on_error="skip", files_per_unit=8
    )
    assert stream.varying  # a decoder of a varying number of rows per batch: exact positions
    check_reader(stream.reader, decoder=stream.decoder, key=image_keys, batch_size=4)
