"""Corrupt JPEGs: whatever libjpeg warns about is a DecodeError naming the file, on every path.

The corpus (:func:`corrupt_jpegs`) is made here from clean JPEGs: baseline 4:2:0, baseline
with restart markers, progressive, gray. PIL's verdict (``Image.open(...).load()`` raising) is
the outside reference: fastdata refuses everything PIL refuses, and more, since Pillow ignores
libjpeg's warnings (a scan with a stray marker, bytes lost in transit) and decodes such files
into partly grey images.
"""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest
from decode_helpers import (
    CLEAN,
    CORPUS,
    HARMLESS,
    _jpeg,
    jpeg,
    needs_extension,
    photo,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fastdata.decode import ImageTransform, decode_for, decode_image, sample_rng
from fastdata.decode import _libjpeg as _libjpeg
from fastdata.errors import DecodeError
from fastdata.sources.images import ImageStream

RRC_64 = ImageTransform(size=64, crop="random-resized", flip=True)
# decode_for with the box drawn from this sample index lies inside the image, not on it whole
INDEX = 3


def pil_refuses(data: bytes) -> bool:
    try:
        Image.open(io.BytesIO(data)).load()
    except Exception:
        return True
    return False


def refuses(decode, data: bytes) -> bool:
    """Whether ``decode`` raises a DecodeError naming the file."""
    try:
        decode(data)
    except DecodeError as error:
        return error.path == "shard-7.tar/x.jpg"
    return False


PATHS = {
    "whole": lambda d: decode_image(d, source="shard-7.tar/x.jpg"),
    "reduced": lambda d: decode_image(d, size=30, source="shard-7.tar/x.jpg"),
    "region": lambda d: decode_for(d, RRC_64, sample_rng(0, 0, INDEX), source="shard-7.tar/x.jpg"),
    "region-reduced": lambda d: decode_for(
        d, ImageTransform(size=16, crop="center"), source="shard-7.tar/x.jpg"
    ),
    "whole-for": lambda d: decode_for(
        d, RRC_64, sample_rng(0, 0, INDEX), region=False, source="shard-7.tar/x.jpg"
    ),
}


@needs_extension
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_path_gives_the_same_verdict_as_libjpeg(name: str) -> None:
    """Whole, reduced, region and whole-for-transform decodes all raise (naming the file)
    exactly when libjpeg reads the file with a warning or cannot read it at all, and decode
    when it reads it cleanly; the harmless changes decode to the clean file's pixels."""
    data = CORPUS[name]
    verdicts = {path: refuses(decode, data) for path, decode in PATHS.items()}
    assert len(set(verdicts.values())) == 1, verdicts
    refused = verdicts["whole"]
    verdict = _jpeg.check(data)
    if isinstance(verdict, str):  # a warning: refused with libjpeg's message
        assert refused
        with pytest.raises(DecodeError, match="corrupt or truncated JPEG") as info:
            decode_image(data)
        assert verdict in str(info.value)
    elif verdict:
        assert not refused
    if name.split("/")[1] in HARMLESS:
        assert verdict is True
        clean = CLEAN[name.split("/")[0]]
        np.testing.assert_array_equal(decode_image(data), decode_image(clean))


@needs_extension
def test_refusals_include_pils_and_what_libjpeg_warns_about() -> None:
    """Every file PIL refuses is refused; so is every cut, every stray marker in a scan and
    every lost end-of-image marker, which OpenCV alone decodes (printing a warning) in part;
    and no harmless file. The agreement table is printed (pytest -s) for the record."""
    table: Counter[tuple[str, str, str]] = Counter()
    for name, data in CORPUS.items():
        case = name.split("/")[1].rstrip("-0123456789")
        ours = refuses(PATHS["whole"], data)
        pil = pil_refuses(data)
        table[case, "pil refuses" if pil else "pil decodes", "refused" if ours else "decoded"] += 1
        if pil:
            assert ours, name
        if case in ("cut-in-scan", "cut-in-header", "no-end-marker", "marker-in-scan"):
            assert ours, name
        if case in HARMLESS:
            assert not ours, name
    print("\ncase, PIL, fastdata: files")
    for key, count in sorted(table.items()):
        print(*key, count, sep=", ")
    opencv_decodes = [
        name
        for name, data in CORPUS.items()
        if refuses(PATHS["whole"], data)
        and cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) is not None
    ]
    assert any("marker-in-scan" in name for name in opencv_decodes)  # why the extension


@needs_extension
@settings(max_examples=60, deadline=None)
@given(
    sampling=st.sampled_from(["gray", "444", "420", "411"]),
    restart=st.sampled_from([0, 2]),
    at=st.floats(0.0, 0.999),
    bit=st.integers(0, 7),
    left=st.floats(0.0, 0.9),
)
def test_a_narrow_region_reads_the_columns_beside_it_as_the_whole_decode(
    sampling: str, restart: int, at: float, bit: int, left: float
) -> None:
    """A region a few iMCUs wide reads the MCUs beside it without keeping their coefficients
    (the extension's cheaper path): a flipped bit anywhere in the scan, beside the box
    included, gets the whole decode's verdict, and a clean region has its pixels."""
    img = photo(200, 320, seed=bit)
    gray = sampling == "gray"
    data = bytearray(
        jpeg(img[:, :, 1] if gray else img, "444" if gray else sampling, False, restart)
    )
    scan = data.index(b"\xff\xda") + 14
    data[scan + int(at * (len(data) - 2 - scan))] ^= 1 << bit
    x = int(left * 300)
    whole = np.empty((200, 320, 3), np.uint8)
    region = np.empty((200, 320, 3), np.uint8)
    verdict = _jpeg.decode_rgb(bytes(data), 1, 60, x, 80, 20, region, 200, 320)
    reference = _jpeg.decode_rgb(bytes(data), 1, 0, 0, 200, 320, whole, 200, 320)
    if reference is None or isinstance(reference, str):  # unreadable, or corrupt
        assert verdict == reference == _jpeg.check(bytes(data)) or verdict is reference is None
    else:
        row, col, rows, cols = verdict[:4]
        np.testing.assert_array_equal(
            region[:rows, :cols][row : row + 80, col : col + 20], whole[60:140, x : x + 20]
        )


@needs_extension
def test_a_jpeg_missing_only_its_end_marker_is_refused() -> None:
    """Issue 24: a JPEG whose only fault is a missing end-of-image marker is refused, as
    libjpeg warns (premature end of file): the same symptom as a download cut at a scan
    boundary, whose later scans are lost without a trace. (Some Pillow versions decode it;
    the one here refuses it too.) Appending the marker is the documented fix."""
    data = CLEAN["progressive"]
    starts = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    cut_at_scan = data[: starts[3]]  # three scans of a progressive JPEG, nothing damaged
    for damaged in (CLEAN["baseline"][:-2], data[:-2], cut_at_scan):
        with pytest.raises(DecodeError, match="Premature end of JPEG file"):
            decode_image(damaged, source="x.jpg")
    assert decode_image(data[:-2] + b"\xff\xd9").shape == (120, 160, 3)


@needs_extension
def test_opencv_decodes_are_checked_too() -> None:
    """A JPEG the extension does not decode (CMYK, which OpenCV converts its own way) is
    decoded by OpenCV and then read through by the extension: its corruption is found too."""
    cmyk = io.BytesIO()
    Image.fromarray(photo(64, 96)).convert("CMYK").save(cmyk, "JPEG")
    data = cmyk.getvalue()
    assert _jpeg.decode_rgb(data, 1, 0, 0, 64, 96, np.empty((64, 96, 3), np.uint8), 64, 96) is None
    assert decode_image(data).shape == (64, 96, 3)
    middle = len(data) * 2 // 3
    with pytest.raises(DecodeError, match="corrupt or truncated JPEG"):
        decode_image(data[:middle] + b"\xff\xd3" + data[middle:])


def test_without_the_extension_opencv_decodes_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented fallback: no extension, no detection (OpenCV prints the warning)."""
    monkeypatch.setattr(_libjpeg, "_jpeg", None)
    data = CORPUS["baseline/marker-in-scan"]
    assert decode_image(data).shape == (120, 160, 3)
    with pytest.raises(DecodeError, match="truncated"):  # what OpenCV refuses stays refused
        decode_image(CORPUS["baseline/cut-in-header"])


@needs_extension
@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_the_stream_raises_or_skips_and_counts_corrupt_files(tmp_path: Path, on_error: str) -> None:
    paths = []
    for i, name in enumerate(["baseline/clean", "baseline/marker-in-scan", "gray/cut-in-scan"]):
        path = tmp_path / f"{i}.jpg"
        path.write_bytes(CLEAN["baseline"] if name.endswith("clean") else CORPUS[name])
        paths.append(path)
    stream = ImageStream.from_files(paths, on_error=on_error, size=32, crop="center")
    if on_error == "raise":
        with pytest.raises(DecodeError, match="corrupt or truncated JPEG") as info:
            list(stream)
        assert info.value.path == str(paths[1])
    else:
        with pytest.warns(UserWarning, match="skipped a bad image"):
            assert len(list(stream)) == 1
        assert stream.skipped == 2
