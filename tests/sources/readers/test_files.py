"""ImageFiles, the reader of ``ImageStream.from_folder`` and ``from_files``: the reader
contract (fastdata.check_reader), also with the image decoder skipping a bad file; the
reader reads the files' bytes (on threads for a remote filesystem) and names a file it
cannot read, or leaves its image null under ``on_error="skip"``."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow.fs as pafs
import pytest

import fastdata as fd
from fastdata import check_reader
from fastdata.sources import RowReader
from fastdata.sources.base import declares

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


def test_a_tables_images_are_the_files_bytes_read_by_the_reader(folder: Path) -> None:
    paths = sorted(folder.rglob("*.jpg"))[:5]
    reader = fd.ImageStream.from_files(paths, list(range(5)), files_per_unit=5).reader
    table = reader.read(0, 1, 4)
    assert table.column_names == ["image", "label"]
    assert table.column("image").to_pylist() == [p.read_bytes() for p in paths[1:4]]
    assert table.column("label").to_pylist() == [1, 2, 3]


def test_any_files_are_read_in_any_order_as_a_row_reader(folder: Path) -> None:
    paths = sorted(folder.rglob("*.jpg"))[:12]
    reader = fd.ImageStream.from_files(paths, list(range(12)), files_per_unit=5).reader
    assert declares(reader, RowReader)  # a shuffled window is read in its order, not copied
    units, rows = np.array([2, 0, 1, 0]), np.array([1, 4, 0, 0])  # files 11, 4, 5, 0
    table = reader.read_rows(units, rows)
    assert table.column("label").to_pylist() == [11, 4, 5, 0]
    assert table.column("image").to_pylist() == [paths[i].read_bytes() for i in (11, 4, 5, 0)]
    assert (
        reader.read(1, 0, 1).to_pylist()
        == reader.read_rows(np.array([1]), np.array([0])).to_pylist()
    )


def test_files_on_a_remote_filesystem_are_read_on_threads_in_order(folder: Path) -> None:
    memory = fsspec.filesystem("memory")
    paths = sorted(folder.rglob("*.jpg"))[:12]
    for i, path in enumerate(paths):
        memory.pipe(f"/imgs/{i:02d}.jpg", path.read_bytes())
    remote = pafs.PyFileSystem(pafs.FSSpecHandler(memory))
    names = [f"/imgs/{i:02d}.jpg" for i in range(12)]
    reader = fd.ImageStream.from_files(names, filesystem=remote, files_per_unit=12).reader
    assert not reader._local  # the pool's path
    assert reader.read(0, 0, 12).column("image").to_pylist() == [p.read_bytes() for p in paths]


@pytest.mark.parametrize("how", ["deleted", "grown", "a directory"])
def test_a_file_that_cannot_be_read_is_named_or_left_null_under_skip(
    folder: Path, tmp_path: Path, how: str
) -> None:
    paths = [tmp_path / f"{i}.jpg" for i in range(3)]
    for path, source in zip(paths, sorted(folder.rglob("*.jpg")), strict=False):
        shutil.copy(source, path)
    raising = fd.ImageStream.from_files(paths, files_per_unit=3).reader
    skipping = fd.ImageStream.from_files(paths, files_per_unit=3, on_error="skip").reader
    size = paths[1].stat().st_size
    if how == "deleted":
        paths[1].unlink()
        reason = "No such file or directory"
    elif how == "grown":  # changed since listed: its listed size no longer holds
        paths[1].write_bytes(paths[1].read_bytes() + b"more")
        reason = f"its size changed since the stream listed it ({size} bytes, now {size + 4})"
    else:
        paths[1].unlink()
        paths[1].mkdir()
        reason = "directory"
    with pytest.raises(fd.SourceError, match="cannot read") as caught:
        raising.read(0, 0, 3)
    assert caught.value.path == str(paths[1])  # type: ignore[attr-defined]
    assert reason in caught.value.reason  # type: ignore[attr-defined]
    images = skipping.read(0, 0, 3).column("image").to_pylist()
    assert images[1] is None  # the decoder counts it as a bad image
    assert images[0] == paths[0].read_bytes() and images[2] == paths[2].read_bytes()
