"""write_shards and ``fastdata convert`` given what a real source holds (the inputs a new-user
review found, 7 Dec): samples that are no image at all (bytes of an HTML error page, a dangling
link, a listed file that is missing or not an image) skipped and listed under
``on_error="skip"`` as images that do not decode are; empty class folders; a shard prefix
that is no file name; labels beyond int64; list files with a byte order mark or the other
JPEG extensions."""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import fastdata as fd
from fastdata.cli import main
from fastdata.writer import Sample, folder_samples, write_shards

from .writer_helpers import SMALL, tree_bytes

HTML = b"<html><body>404 Not Found</body></html>"  # what a scrape saves for a dead link


def sources(tmp_path: Path) -> list[Sample]:
    """Four good JPEGs, and between them: an HTML page's bytes, a listed file that is gone,
    a text file, and a dangling link."""
    images = fd.synthetic.make_image_bytes(4, fmt="jpeg", **SMALL)
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "link.jpg").symlink_to(tmp_path / "nowhere.jpg")
    return [
        Sample(images[0][0], 0),
        Sample(HTML, 1),
        Sample(images[1][0], 1),
        Sample(str(tmp_path / "gone.jpg"), 0),
        Sample(str(tmp_path / "notes.txt"), 1),
        Sample(images[2][0], 0),
        Sample(str(tmp_path / "link.jpg"), 1, size=0),  # as folder_samples lists it
        Sample(images[3][0], 1),
    ]


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_samples_that_are_no_image_are_left_out_listed_and_keep_the_others_keys(
    tmp_path: Path, format: str
) -> None:
    samples = sources(tmp_path)
    result = write_shards(samples, tmp_path / "a", format=format, on_error="skip",
                          target_shard_bytes="3kB", workers=0)  # fmt: skip
    assert result.samples == 4
    assert [(bad.key, bad.image) for bad in result.bad_images] == [
        ("000000001", "sample '000000001'"),
        ("000000003", str(tmp_path / "gone.jpg")),
        ("000000004", str(tmp_path / "notes.txt")),
        ("000000006", str(tmp_path / "link.jpg")),
    ]
    reasons = [bad.reason for bad in result.bad_images]
    assert reasons[0].startswith("the bytes are not a jpeg") and "b'<html>" in reasons[0]
    assert reasons[1] == "no such image file"
    assert reasons[2].startswith("the extension 'txt' is not an image's")
    assert reasons[3].startswith("cannot read the image")
    if format == "tar":
        names = []
        for path in result.paths:
            with tarfile.open(path) as tar:
                names += tar.getnames()
        assert [n for n in names if n.endswith(".jpg")] == [
            f"00000000{i}.jpg" for i in (0, 2, 5, 7)
        ]
        stream = fd.ImageStream.from_tar(tmp_path / "a", size=16, crop="center", batch_size=None)
    else:
        keys = [k for p in result.paths for k in pq.read_table(p)["key"].to_pylist()]
        assert keys == [f"00000000{i}" for i in (0, 2, 5, 7)]
        stream = fd.ImageStream.from_parquet(
            tmp_path / "a", size=16, crop="center", batch_size=None
        )
    assert [int(label) for _, label in stream] == [0, 1, 0, 1]
    again = write_shards(samples, tmp_path / "b", format=format, on_error="skip",
                         target_shard_bytes="3kB", workers=2)  # fmt: skip
    assert again.bad_images == result.bad_images and len(result.paths) >= 2
    assert tree_bytes(tmp_path / "a") == tree_bytes(tmp_path / "b")  # the same shards


def test_samples_that_are_no_image_stop_a_strict_conversion_naming_them(tmp_path: Path) -> None:
    samples = sources(tmp_path)
    cases = [
        (1, ValueError, r"sample '000000001': the bytes are not a jpeg.*on_error='skip'"),
        (3, fd.SourceError, r"no such image file; or pass on_error='skip'.*gone\.jpg"),
        (4, ValueError, r"notes\.txt: the extension 'txt'.*on_error='skip'"),
    ]
    for index, error, message in cases:
        with pytest.raises(error, match=message):
            write_shards([samples[0], samples[index]], tmp_path / f"o{index}", workers=0)
    with pytest.raises(fd.SourceError, match=r"cannot read the image.*on_error='skip'.*link\.jpg"):
        write_shards([samples[0], samples[6]], tmp_path / "o6", workers=0)


def test_convert_skips_a_dangling_link_and_a_listed_file_that_is_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fd.synthetic.make_images(tmp_path / "train", 4, classes=2, **SMALL)
    (tmp_path / "train" / "class_01" / "dangling.jpg").symlink_to(tmp_path / "nowhere.jpg")
    out = tmp_path / "out"
    assert main(["convert", str(tmp_path / "train"), str(out), "--on-error", "skip"]) == 0
    err = capsys.readouterr().err
    assert f"left out {tmp_path / 'train' / 'class_01' / 'dangling.jpg'}: cannot read" in err
    assert "4 samples" in err and "1 image left out" in err
    listing = tmp_path / "list.txt"
    images = sorted((tmp_path / "train").rglob("img_*.jpg"))
    listing.write_text(f"{images[0]}\t0\n{tmp_path / 'deleted.jpg'}\t1\n{images[1]}\t1\n")
    assert main(["convert", str(listing), str(tmp_path / "l"), "--on-error", "skip"]) == 0
    assert f"left out {tmp_path / 'deleted.jpg'}: no such image file" in capsys.readouterr().err
    assert main(["convert", str(listing), str(tmp_path / "strict")]) == 1
    assert "no such image file; or pass on_error='skip'" in capsys.readouterr().err


def test_convert_takes_allow_empty_for_an_empty_class_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "train"
    fd.synthetic.make_images(root, 4, classes=2, **SMALL)
    (root / ".ipynb_checkpoints").mkdir()  # a hidden folder is a class, as in torchvision
    assert main(["convert", str(root), str(tmp_path / "strict")]) == 1
    assert "pass allow_empty=True (fastdata convert --allow-empty)" in capsys.readouterr().err
    out = tmp_path / "out"
    assert main(["convert", str(root), str(out), "--allow-empty", "--format", "tar"]) == 0
    stream = fd.ImageStream.from_tar(out, size=16, crop="center", batch_size=None)
    _, classes = folder_samples(root, allow_empty=True)
    assert classes == [".ipynb_checkpoints", "class_00", "class_01"]
    assert sorted(int(label) for _, label in stream) == [1, 1, 2, 2]  # torchvision's indices


def test_the_prefix_is_a_file_name_the_streams_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    image = fd.synthetic.make_image_bytes(1, fmt="png", **SMALL)[0][0]
    for prefix, message in [
        ("", "non-empty file name"),
        ("train/shard", "a file name, not a path"),
        ("a\\b", "a file name, not a path"),
        (".shard", "start with '.' or '_'"),
        ("_shard", "start with '.' or '_'"),
    ]:
        with pytest.raises(
            ValueError, match=f"prefix={prefix!r}: .*{message}".replace("\\", "\\\\")
        ):
            write_shards([Sample(image)], tmp_path / "o", prefix=prefix)
        with pytest.raises(SystemExit) as exit:
            main(["convert", str(tmp_path), str(tmp_path / "o"), "--prefix", prefix])
        assert exit.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # refused before anything was made
    with pytest.raises(TypeError, match="prefix=1: expected a str"):
        write_shards([Sample(image)], tmp_path / "o", prefix=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_label_beyond_int64_is_refused_naming_the_sample(tmp_path: Path, format: str) -> None:
    image = fd.synthetic.make_image_bytes(1, fmt="png", **SMALL)[0][0]
    good = write_shards([Sample(image, 2**63 - 1), Sample(image, -(2**63))], tmp_path / "ok",
                        format=format)  # fmt: skip
    assert good.samples == 2
    for label in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(ValueError, match=rf"sample 1: label={label}: labels are int64"):
            write_shards([Sample(image, 0), Sample(image, label)], tmp_path / "o", format=format)


def test_labels_on_some_samples_only_are_refused_naming_the_first_that_differs(
    tmp_path: Path,
) -> None:
    image = fd.synthetic.make_image_bytes(1, fmt="png", **SMALL)[0][0]
    labelled = [Sample(image, 1, key="a"), Sample(image, 2, key="b"), Sample("x/c.png", key="c")]
    with pytest.raises(
        ValueError,
        match=r"sample 2, key 'c', image 'x/c.png' has no label, "
        r"but sample 0 has label=1: .*give every sample a label, or none",
    ):
        write_shards(labelled, tmp_path / "o")  # fmt: skip
    rows = [{"image": image}, {"image": image}, {"image": image, "label": 0}]
    with pytest.raises(ValueError, match=r"sample 2 has label=0, but sample 0 has none"):
        write_shards(rows, tmp_path / "o")
    assert not (tmp_path / "o").exists()  # refused before anything was made


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_list_file_with_a_bom_and_the_other_jpeg_extensions_converts(
    tmp_path: Path, format: str
) -> None:
    fd.synthetic.make_images(tmp_path / "imgs", 3, classes=1, **SMALL)
    images = sorted((tmp_path / "imgs").rglob("*.jpg"))
    shutil.copy(images[1], tmp_path / "photo.jfif")
    shutil.copy(images[2], tmp_path / "photo.JPE")
    listing = tmp_path / "list.txt"
    listing.write_text(f"{images[0]}\t0\nphoto.jfif\t1\nphoto.JPE\t2\n", encoding="utf-8-sig")
    out = tmp_path / "out"
    assert main(["convert", str(listing), str(out), "--format", format, "--quiet"]) == 0
    if format == "tar":
        stream = fd.ImageStream.from_tar(out, size=16, crop="center", batch_size=None)
    else:
        stream = fd.ImageStream.from_parquet(out, size=16, crop="center", batch_size=None)
    assert [int(label) for _, label in stream] == [0, 1, 2]
