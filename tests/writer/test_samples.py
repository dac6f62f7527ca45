"""The samples to write (fastdata.writer._samples): an ImageFolder's, found as the streams find
them, and a list file's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import fastdata as fd
from fastdata.writer import Sample, folder_samples, list_samples
from fastdata.writer._samples import image_suffix, suffix_of

from .writer_helpers import SMALL


def test_folder_samples_are_the_streams_samples_with_their_sizes(folder: Path) -> None:
    samples, classes = folder_samples(folder)
    stream = fd.ImageStream.from_folder(folder)
    assert classes == list(stream.classes) == sorted(p.name for p in folder.iterdir())
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    assert sorted(s.image for s in samples) == [str(p) for p in files]
    for sample in samples:
        path = Path(str(sample.image))
        assert sample.size == path.stat().st_size
        assert sample.label == classes.index(path.relative_to(folder).parts[0])
        assert sample.key is None and sample.extras is None


def test_folder_samples_take_the_streams_options(folder: Path) -> None:
    samples, classes = folder_samples(folder, extensions=(".png",), allow_empty=True)
    assert samples and all(str(s.image).endswith(".png") for s in samples)
    assert {s.label for s in samples} == {classes.index("class_01")}


def test_list_samples_reads_paths_and_labels(folder: Path, tmp_path: Path) -> None:
    images = sorted(folder.rglob("*.jpg"))[:3]
    listing = tmp_path / "list.txt"
    listing.write_text(f"{images[0]}\t2\n\n{os.path.relpath(images[1], tmp_path)}\t0\n")
    assert list_samples(listing) == [Sample(str(images[0]), 2), Sample(str(images[1]), 0)]
    listing.write_text(f"{images[2]}\tcat\n")
    with pytest.raises(ValueError, match=r"line 1: label 'cat' is not an integer"):
        list_samples(listing)


def test_list_samples_skip_blank_lines_and_take_unlabelled_paths(tmp_path: Path) -> None:
    listing = tmp_path / "sub" / "list.txt"
    listing.parent.mkdir()
    listing.write_text("a.jpg\r\n   \n../b.png\t7\n")
    assert list_samples(listing) == [
        Sample(os.path.join(listing.parent, "a.jpg"), None),
        Sample(str(tmp_path / "b.png"), 7),
    ]
    assert list_samples(tmp_path / "sub" / "list.txt") == list_samples(str(listing))
    listing.write_text("a.jpg\t\n")
    with pytest.raises(ValueError, match="label '' is not an integer"):
        list_samples(listing)


def test_a_list_file_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    listing = tmp_path / "list.txt"
    listing.write_text("a.jpg\t1\n", encoding="utf-8-sig")  # as Windows Notepad saves it
    assert list_samples(listing) == [Sample(str(tmp_path / "a.jpg"), 1)]


def test_the_suffix_is_the_files_extension_or_the_bytes_format() -> None:
    assert image_suffix("/data/a/IMG_1.JPEG", "k") == "jpeg"
    assert image_suffix("b.png", "k") == "png"
    # JPEG's other extensions: written as .jpg members, which from_tar reads
    assert image_suffix("c.jfif", "k") == image_suffix("d.JPE", "k") == "jpg"
    with pytest.raises(ValueError, match=r"extension 'txt'.*on_error='skip'"):
        image_suffix("notes.txt", "k")
    for fmt, suffix in (("jpeg", "jpg"), ("png", "png"), ("webp", "webp")):
        data = fd.synthetic.make_image_bytes(1, fmt=fmt, **SMALL)[0][0]
        assert image_suffix(data, "k") == suffix
    with pytest.raises(ValueError, match="sample 'k': the bytes are not a jpeg"):
        image_suffix(b"GIF89a" + bytes(20), "k")
    assert suffix_of("notes.txt")[0] == "" and suffix_of("a.jpg") == ("jpg", "")
    assert "found no known header: b'<html>" in suffix_of(b"<html>404</html>")[1]
