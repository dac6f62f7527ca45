"""The samples to write (fastdata.writer._samples): an ImageFolder's, found as the streams find
them, and a list file's."""

from __future__ import annotations

import os
import threading
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


def test_a_list_file_that_is_not_utf8_text_is_refused_naming_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Latin-1 list, a Parquet file (a Hugging Face export) or an Arrow file given as the
    list: the message names the file (and line) and says what a list must be, and for
    Parquet and Arrow how to read the data instead, not a bare codec error."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fastdata.cli import main

    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("a.jpg\t1\ncaf\xe9.jpg\t0\n".encode("latin-1"))
    with pytest.raises(
        ValueError,
        match=r"latin1.txt, line 2: not UTF-8 \(byte 0xe9 at "
        r"position 4 of the line\): a list of images is a UTF-8 text file",
    ):
        list_samples(latin1)  # fmt: skip
    table = pa.table({"image": [b"\x89PNG"], "label": [1]})
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(
        ValueError,
        match=r"train.parquet: a Parquet file, not a list of images"
        r".*read it with fastdata.ImageStream.from_parquet",
    ):
        list_samples(tmp_path / "train.parquet")  # fmt: skip
    with pa.ipc.new_stream(tmp_path / "data.arrow", table.schema) as writer:  # save_to_disk's
        writer.write_table(table)
    with pytest.raises(
        ValueError,
        match=r"data.arrow: an Arrow IPC stream file .*save_to_disk"
        r".*to_parquet.*ImageStream.from_parquet",
    ):
        list_samples(tmp_path / "data.arrow")  # fmt: skip
    (tmp_path / "images.zip").write_bytes(b"PK\x03\x04\x00\x00")
    with pytest.raises(ValueError, match=r"images.zip: a binary file \(a NUL byte at byte 4\)"):
        list_samples(tmp_path / "images.zip")
    assert main(["convert", str(tmp_path / "train.parquet"), str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert "train.parquet: a Parquet file" in error and "codec" not in error
    assert not (tmp_path / "out").exists()


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


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_list_read_from_a_pipe_keeps_every_line(tmp_path: Path) -> None:
    """The binary-file check read the list's first 4 KiB and then opened it again: a pipe
    (a FIFO, /dev/stdin, bash's <(...)) cannot be read twice, so the lines in those bytes
    were lost without a word (old code: 895 of 1,000 samples, the first half a path)."""
    lines = "".join(f"/data/class_{i % 3}/img_{i:07d}.jpg\t{i % 3}\n" for i in range(1000))
    fifo = tmp_path / "list.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_text, args=(lines,))
    writer.start()
    try:
        samples = list_samples(fifo)
    finally:
        writer.join()
    assert len(samples) == 1000
    assert samples[0] == Sample("/data/class_0/img_0000000.jpg", 0)
    assert samples[-1] == Sample("/data/class_0/img_0000999.jpg", 0)


def test_a_pipe_that_is_not_utf8_is_refused_without_reading_it_again(tmp_path: Path) -> None:
    """The message's line and byte came from opening the list again: a FIFO's second open
    waited for a writer for ever (old code: a hang)."""
    fifo = tmp_path / "latin1.fifo"
    os.mkfifo(fifo)
    text = "a.jpg\t0\n" + "caf\u00e9.jpg\t1\n"
    writer = threading.Thread(target=fifo.write_bytes, args=(text.encode("latin-1"),))
    writer.start()
    try:
        with pytest.raises(ValueError, match=r"latin1.fifo: not UTF-8 text: a list of images"):
            list_samples(fifo)
    finally:
        writer.join()


def test_a_list_is_told_from_a_binary_file_by_more_than_its_first_bytes(tmp_path: Path) -> None:
    """A list whose first path starts with PAR1 or ARROW1 was refused as a Parquet or Arrow
    file (old code); a UTF-16 list (Windows PowerShell 5.1's '>') was "a binary file"."""
    for first in ("PAR1/img_0001.jpg", "ARROW1/img_0001.jpg"):
        (tmp_path / "list.txt").write_text(f"{first}\t1\nb.jpg\t0\n")
        samples = list_samples(tmp_path / "list.txt")
        assert [s.label for s in samples] == [1, 0]
        assert samples[0].image == str(tmp_path / first)
    for encoding in ("utf-16", "utf-16-le", "utf-16-be"):  # with a BOM, and without
        (tmp_path / "list.txt").write_text("a.jpg\t1\nb.jpg\t0\n", encoding=encoding)
        with pytest.raises(ValueError, match=r"list.txt: UTF-16 text .*iconv -f utf-16 -t utf-8"):
            list_samples(tmp_path / "list.txt")
