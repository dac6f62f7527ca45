"""Files as users bring them (issue 33): each either reads right or fails with an error that
names it, and none kills the process. Every file is made here, small, with the property of a
public test file that broke fastdata (apache/parquet-testing, Pillow's test images,
WebDataset shards): encrypted Parquet, nanosecond statistics, nulls inside nested lists,
values outside Python's datetime range, a footer that overstates its rows, TIFFs of every
depth, stray bytes in JPEG headers, compressed tar shards, EXIF orientations, bad images
handed to the writer; and each sample's origin carried in the batch."""

from __future__ import annotations

import bz2
import decimal
import gzip
import json
import lzma
import os
import subprocess
import sys
import tarfile
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import fastdata
from fastdata import (
    DataLoader,
    DecodeError,
    ImageStream,
    ParquetStream,
    SchemaError,
    SourceError,
)
from fastdata.cli import main as cli
from fastdata.decode import ImageTransform, decode_for, decode_image, sample_rng
from fastdata.decode import _device as _device_decode
from fastdata.synthetic import make_image_parquet, make_images, make_tar_shards
from fastdata.writer import Sample, write_shards
from real_world_files import (
    CMYK,
    FLIPPED_FOOTERS,
    FLOAT,
    GRAY,
    INT,
    RGB,
    UINT,
    oriented,
    overstate_rows,
    rotate,
    tiff,
    waves,
    with_junk,
    write_encrypted,
    write_flipped,
    write_short_statistic,
)

TESTS = Path(__file__).parent


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (a process that may abort, or lacks pandas)."""
    path = [str(Path(fastdata.__file__).parents[1]), str(TESTS)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*path, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=300
    )


# --------------------------------------------------------------------------- Parquet
TABLE = pa.table({"a": [1, 2, 3], "b": ["x", "y", "z"], "c": [1.5, 2.5, 3.5]})

TRY_STREAMS = """
import json, sys
import pyarrow.compute as pc
import fastdata
out = []
for path, options in json.loads(sys.argv[1]):
    if "filter" in options:
        options["filter"] = pc.field(options["filter"]) > 1
    try:
        stream = fastdata.ParquetStream(path, batch_size=8, **options)
        out.append({"rows": [v for b in stream for v in b[options["columns"][0]].tolist()]})
    except fastdata.SourceError as err:
        out.append({"error": type(err).__name__, "column": err.column, "path": err.path,
                    "row_group": err.row_group, "reason": err.reason})
print(json.dumps(out))
"""


def test_encrypted_parquet_is_a_named_error_never_an_abort(tmp_path: Path) -> None:
    """A plaintext footer over encrypted columns made ParquetStream abort the interpreter
    (a C++ exception from pyarrow's column metadata); an encrypted footer was "not Parquet".
    The columns that are not encrypted read as pyarrow reads them."""
    plain = write_encrypted(tmp_path / "plain.parquet", TABLE, ["a"], plaintext_footer=True)
    hidden = write_encrypted(tmp_path / "hidden.parquet", TABLE, ["a"], plaintext_footer=False)
    cases = [
        (str(plain), {}),  # every column, "a" among them
        (str(plain), {"columns": ["a"]}),
        (str(plain), {"columns": ["c"], "filter": "a"}),  # a filter reads "a" too
        (str(hidden), {"columns": ["c"]}),
        (str(plain), {"columns": ["c"]}),
    ]
    result = run_python(TRY_STREAMS, json.dumps(cases))
    assert result.returncode == 0, result.stderr[-2000:]  # not -6: SIGABRT
    every, only_a, filtered, footer, readable = json.loads(result.stdout)
    for outcome in (every, only_a, filtered):
        assert outcome["error"] == "SourceError" and outcome["column"] == "a"
        assert outcome["path"] == str(plain) and "encrypted" in outcome["reason"]
    assert footer["path"] == str(hidden) and "footer is encrypted" in footer["reason"]
    assert readable["rows"] == pq.read_table(plain, columns=["c"])["c"].to_pylist()


def test_a_corrupt_footer_is_a_named_error_never_an_abort(tmp_path: Path) -> None:
    """One byte flipped in a footer (found by a fuzz: a column chunk's type, a level histogram
    that no longer fits the schema), or a statistic too short for its type, made
    ParquetStream abort the interpreter: pyarrow parses the footer, but its column metadata
    and statistics accessors throw a C++ exception no Python code can catch (its own reads
    raise an OSError). The footer's Thrift is checked before any of them is asked, with or
    without a filter (which pyarrow tests against the statistics)."""
    cases, expected = [], []
    for case, row_group, column in [("chunk type", 0, "id"), ("repetition histogram", 1, "st"),
                                    ("definition histogram", 0, "d"),
                                    ("lists as declared", 2, "f")]:  # fmt: skip
        path = str(write_flipped(tmp_path / f"{column}.parquet", case))
        cases += [(path, {}), (path, {"columns": ["id"], "filter": "id"})]
        expected += [(path, row_group, column)] * 2
    short = str(write_short_statistic(tmp_path / "short.parquet"))  # a 3-byte int64 minimum
    cases += [(short, {"columns": ["id"]})]
    expected += [(short, 0, "id")]
    result = run_python(TRY_STREAMS, json.dumps(cases))
    assert result.returncode == 0, result.stderr[-2000:]  # not -6: SIGABRT
    for outcome, (path, row_group, column) in zip(json.loads(result.stdout), expected, strict=True):
        assert outcome["error"] == "SourceError", outcome
        where = (outcome["path"], outcome["row_group"], outcome["column"])
        assert where == (path, row_group, column)
        assert "corrupt Parquet footer" in outcome["reason"]
    assert len(FLIPPED_FOOTERS) == 4


NANOS = pa.table(
    {
        "t": pa.array([1, 86_399_999_999_999], pa.time64("ns")),
        "ts": pa.array([1, 7], pa.timestamp("ns")),
        "ts_utc": pa.array([5, 1_000_000_001], pa.timestamp("ns", tz="UTC")),
    }
)


def test_nanosecond_statistics_need_no_pandas(tmp_path: Path) -> None:
    pq.write_table(NANOS, tmp_path / "ns.parquet")
    code = f"""
import sys
class NoPandas:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "pandas":
            raise ModuleNotFoundError("No module named 'pandas'")
sys.meta_path.insert(0, NoPandas())
import fastdata
stream = fastdata.ParquetStream({str(tmp_path / "ns.parquet")!r}, batch_size=2)
print(next(iter(stream))["ts"].tolist())
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["[1,", "7]"]


def test_the_content_fingerprint_sees_nanoseconds(tmp_path: Path) -> None:
    """Two files whose statistics differ by a nanosecond are other data to a resume."""
    pq.write_table(NANOS, tmp_path / "a.parquet")
    changed = NANOS.set_column(0, "t", pa.array([2, 86_399_999_999_999], pa.time64("ns")))
    pq.write_table(changed, tmp_path / "b.parquet")
    content = [ParquetStream(tmp_path / f"{f}.parquet").reader.identity()["content"] for f in "ab"]
    assert content[0] != content[1]


NESTED = pa.table(
    {
        "utf8_list": pa.array([["a", None], None, ["c"]], pa.list_(pa.string())),
        "nested": pa.array([[[1, None], None], [[2]], []], pa.list_(pa.list_(pa.int32()))),
        "decimals": pa.array(
            [[decimal.Decimal("1.5"), None], [], None], pa.list_(pa.decimal128(5, 2))
        ),
        "structs": pa.array(
            [[{"x": 1}, None], [{"x": None}], None], pa.list_(pa.struct([("x", pa.int64())]))
        ),
    }
)


@pytest.mark.parametrize("batch_size", [3, None])
def test_nulls_inside_lists_of_python_objects_are_kept(
    tmp_path: Path, batch_size: int | None
) -> None:
    """The guide documents them: values that become Python objects hold a null as None."""
    pq.write_table(NESTED, tmp_path / "nested.parquet")
    items = list(ParquetStream(tmp_path, batch_size=batch_size))
    if batch_size is None:
        got = {name: [row[name] for row in items] for name in NESTED.column_names}
    else:
        got = items[0]
    assert got == NESTED.to_pydict()


OUT_OF_RANGE = 2**62  # microseconds: year ~146,000, beyond Python's datetime


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("batch_size", [4, None])
def test_values_python_cannot_hold_name_file_row_group_row_and_column(
    tmp_path: Path, num_workers: int, batch_size: int | None
) -> None:
    """A struct of timestamps outside Python's datetime range: an OverflowError escaped
    (raised by the fingerprint at construction, then by to_pylist)."""
    when = pa.array([{"t": 0}] * 9 + [{"t": OUT_OF_RANGE}], pa.struct([("t", pa.timestamp("us"))]))
    pq.write_table(pa.table({"id": range(10), "s": when}), tmp_path / "s.parquet", row_group_size=4)
    stream = ParquetStream(tmp_path, batch_size=batch_size)
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
    with pytest.raises(SourceError, match="OverflowError") as err:
        list(loader)
    assert err.value.path == str(tmp_path / "s.parquet")
    assert (err.value.row_group, err.value.row, err.value.column) == (2, 1, "s")


def test_a_fill_value_of_another_type_is_refused_when_the_stream_is_made(tmp_path: Path) -> None:
    """It was a raw ArrowInvalid from pc.fill_null, mid-epoch, naming nothing."""
    pq.write_table(pa.table({"x": pa.array([1.0, None])}), tmp_path / "x.parquet")
    with pytest.raises(SchemaError, match="does not fit the column's type double") as err:
        ParquetStream(tmp_path, batch_size=2, fill_null={"x": "zero"})
    assert err.value.column == "x"
    assert next(iter(ParquetStream(tmp_path, batch_size=2, fill_null={"x": 0})))["x"].tolist() == [
        1.0,
        0.0,
    ]


def test_a_footer_that_overstates_its_rows_is_named_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), path)
    overstate_rows(path)
    with pytest.raises(SourceError, match="fewer rows than its footer says") as err:
        list(ParquetStream(path, batch_size=4))
    assert "changed while streaming" not in str(err.value)
    assert (err.value.path, err.value.row_group) == (str(path), 0)


def test_a_file_rewritten_while_streaming_says_what_changed(tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"x": list(range(6))}), path)
    stream = ParquetStream(path, batch_size=6)
    pq.write_table(pa.table({"x": [0, 1]}), path)
    with pytest.raises(SourceError, match=r"has \d+ bytes where it had \d+") as err:
        list(stream)
    assert "changed while streaming" in str(err.value)


# --------------------------------------------------------------------------- tar shards
@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return make_tar_shards(tmp_path_factory.mktemp("tar"), 12, shards=2, seed=3)


def _compressed(plain: list[Path], root: Path, suffix: str) -> list[Path]:
    compress = {
        ".tar.gz": gzip.compress,
        ".tgz": gzip.compress,
        ".tar.bz2": bz2.compress,
        ".tar.xz": lzma.compress,
        ".tar.zst": lambda data: pa.compress(data, "zstd", asbytes=True),
    }[suffix]
    out = []
    for path in plain:
        out.append(root / (path.name.removesuffix(".tar") + suffix))
        data = compress(path.read_bytes())
        if suffix == ".tar.zst":  # a zstd frame, as the zstd tool writes it
            with pa.output_stream(str(out[-1]), compression="zstd") as stream:
                stream.write(path.read_bytes())
        else:
            out[-1].write_bytes(data)
    return out


def _labels(stream: ImageStream, num_workers: int = 0) -> list[int]:
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
    return sorted(int(label) for _, labels in loader for label in labels)


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst"])
def test_compressed_shards_read_as_their_tar(
    tmp_path: Path, shards: list[Path], suffix: str
) -> None:
    """WebDataset reads gzip-compressed shards; fastdata said "truncated after 0 samples"."""
    _compressed(shards, tmp_path, suffix)
    options = {"size": 16, "crop": "center", "batch_size": 5}
    expected = _labels(ImageStream.from_tar(shards, **options))
    shuffled = ImageStream.from_tar(tmp_path, shuffle=True, shuffle_buffer=4, **options)
    assert len(shuffled.reader.shards) == 2  # the folder's shards found by their suffix
    assert _labels(shuffled, num_workers=2) == expected


def test_a_truncated_compressed_shard_is_truncated(tmp_path: Path, shards: list[Path]) -> None:
    data = gzip.compress(shards[0].read_bytes())
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(SourceError, match="gzip-compressed tar shard is truncated") as err:
        ImageStream.from_tar(cut)
    assert err.value.member is not None
    stream = ImageStream.from_tar(cut, on_error="skip")
    assert 0 < len(list(stream)) < 6 and stream.skipped == 1


def test_a_shard_gone_since_indexing_is_named(tmp_path: Path, shards: list[Path]) -> None:
    copy = tmp_path / "copy.tar.gz"
    copy.write_bytes(gzip.compress(shards[0].read_bytes()))
    stream = ImageStream.from_tar(copy, size=8, crop="center")
    copy.unlink()
    with pytest.raises(SourceError, match="went away since it was indexed") as err:
        list(stream)
    assert err.value.path == str(copy) and err.value.member is not None


def test_skipping_never_silently_yields_nothing(tmp_path: Path, shards: list[Path]) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(np.random.default_rng(0).bytes(5000))
    for on_error in ("raise", "skip"):
        with pytest.raises(SourceError, match="not a tar file") as err:
            ImageStream.from_tar([shards[0], junk], on_error=on_error)
        assert err.value.path == str(junk)
    cut = tmp_path / "cut.tar"
    cut.write_bytes(shards[0].read_bytes()[:700])  # inside the first sample
    with pytest.raises(SourceError, match="no sample"):
        ImageStream.from_tar(cut, on_error="skip")


# --------------------------------------------------------------------------- image depths
RNG = np.random.default_rng(33)


def _gray(high: int, dtype: str = "int64") -> np.ndarray:
    return RNG.integers(0, high, (6, 7, 1)).astype(dtype)


def _scaled(values: np.ndarray, top: float) -> np.ndarray:
    """The documented rule: 0..top to 0..255, negatives to 0, rounded."""
    return np.rint(np.clip(values.astype(np.float64), 0, top) * 255 / top).astype(np.uint8)


SIGNED = RNG.integers(-(2**15), 2**15, (6, 7, 1))
INT32 = RNG.integers(-(2**31), 2**31, (6, 7, 1))
FLOATS = np.concatenate([RNG.random((6, 6, 1)), [[[-0.5]], [[1.5]]] * 3], 1)  # clipped too
DEPTHS = {  # name: (samples, bits, photometric, sample format, expected RGB, tolerance)
    "12-bit gray": (_gray(4096), 12, GRAY, UINT, lambda s: _scaled(s, 4095), 1),
    "10-bit gray": (_gray(1024), 10, GRAY, UINT, lambda s: _scaled(s, 1023), 1),
    "16-bit gray": (_gray(65536), 16, GRAY, UINT, lambda s: (s + 128) // 257, 0),
    "16-bit RGB": (RNG.integers(0, 65536, (6, 7, 3)), 16, RGB, UINT, lambda s: (s + 128) // 257, 0),
    "16-bit signed": (SIGNED, 16, GRAY, INT, lambda s: _scaled(s, 32767), 0),
    "32-bit unsigned": (_gray(2**32), 32, GRAY, UINT, lambda s: _scaled(s, 2**32 - 1), 0),
    "32-bit signed": (INT32, 32, GRAY, INT, lambda s: _scaled(s, 2**31 - 1), 0),
    "32-bit float": (FLOATS, 32, GRAY, FLOAT, lambda s: _scaled(s, 1.0), 0),
    "64-bit float": (FLOATS, 64, GRAY, FLOAT, lambda s: _scaled(s, 1.0), 0),
    "32-bit float RGB": (RNG.random((6, 7, 3)), 32, RGB, FLOAT, lambda s: _scaled(s, 1.0), 0),
}


@pytest.mark.parametrize("name", list(DEPTHS))
def test_tiffs_of_every_depth_decode_scaled_to_8_bits(name: str) -> None:
    """12- and 32-bit TIFFs were "corrupt or truncated"; 16-bit ones lost their low byte."""
    samples, bits, photometric, sample_format, expected, tolerance = DEPTHS[name]
    data = tiff(samples, bits, photometric, sample_format)
    image = decode_image(data)
    want = expected(samples.astype(np.float64) if sample_format == FLOAT else samples)
    want = np.repeat(want, 3, 2) if want.shape[2] == 1 else want
    assert image.shape == (6, 7, 3) and image.dtype == np.uint8
    assert np.abs(image.astype(int) - want.astype(int)).max() <= tolerance


STRAIGHT = RNG.integers(0, 256, (6, 7, 4)).astype(np.uint8)  # colours beside a random alpha


def test_unassociated_alpha_tiffs_decode_their_stored_colours(tmp_path: Path) -> None:
    """An 8-bit RGBA TIFF with unassociated alpha (as Pillow writes one) came back with its
    colours multiplied by alpha / 255 (OpenCV reads 8-bit TIFFs through libtiff's RGBA
    interface): half as bright on average, silently, in decode_image and the streams."""
    data = tiff(STRAIGHT, 8, RGB, extra_samples=2)
    np.testing.assert_array_equal(decode_image(data), STRAIGHT[..., :3])
    np.testing.assert_array_equal(decode_image(data, keep_alpha=True), STRAIGHT)
    rgb16 = STRAIGHT.astype(np.uint16) * 257  # 16-bit samples OpenCV always read as stored
    np.testing.assert_array_equal(
        decode_image(tiff(rgb16, 16, RGB, extra_samples=2)), rgb16[..., :3] // 257
    )
    (tmp_path / "cutout.tif").write_bytes(data)
    image = next(iter(ImageStream.from_files([tmp_path / "cutout.tif"])))
    assert torch.equal(image, torch.from_numpy(STRAIGHT[..., :3]).permute(2, 0, 1))


def test_associated_alpha_tiffs_decode_their_stored_colours() -> None:
    """Premultiplied colours (ExtraSamples 1) come as stored, which is the image over black;
    Pillow divides them by alpha instead (losing colour where alpha is small)."""
    data = tiff(STRAIGHT, 8, RGB, extra_samples=1)
    np.testing.assert_array_equal(decode_image(data, keep_alpha=True), STRAIGHT)


def test_a_tiff_opencv_cannot_read_says_what_it_is() -> None:
    data = tiff(RNG.integers(0, 65536, (6, 7, 4)), 16, CMYK)
    with pytest.raises(DecodeError, match="16-bit CMYK TIFF") as err:
        decode_image(data, source="scan.tif")
    assert err.value.path == "scan.tif" and "corrupt or truncated TIFF" not in str(err.value)


# --------------------------------------------------------------------------- JPEG warnings
PHOTO = cv2.imencode(".jpg", waves(96, 128, 40), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
RESTARTS = cv2.imencode(".jpg", waves(96, 128, 40), [cv2.IMWRITE_JPEG_RST_INTERVAL, 2])[1]


@pytest.mark.parametrize(
    "marker", [b"\xff\xdb", b"\xff\xc4", b"\xff\xda"], ids=["DQT", "DHT", "SOS"]
)
def test_stray_bytes_between_header_segments_are_harmless(marker: bytes) -> None:
    """libjpeg's "N extraneous bytes before marker 0xdb": the header's segments are read
    past them, the pixels are those of the clean file (and Pillow's)."""
    data = with_junk(PHOTO, marker, b"\x00\x12\x34\x56")
    np.testing.assert_array_equal(decode_image(data), decode_image(PHOTO))
    crop = ImageTransform(size=32, crop="center")  # the region path
    np.testing.assert_array_equal(
        crop.apply(*decode_for(data, crop)), crop.apply(*decode_for(PHOTO, crop))
    )


@pytest.mark.parametrize(
    "place",
    ["before a restart marker", "after the scan"],
)
def test_stray_bytes_in_or_after_a_scan_are_corruption(place: str) -> None:
    """Bytes a scan's data runs on past its MCUs are what a decoder that lost step leaves."""
    junk = bytes(range(1, 101))
    if place == "after the scan":
        data = PHOTO[:-2] + junk + PHOTO[-2:]
    else:
        clean = RESTARTS.tobytes()
        at = clean.index(b"\xff\xd1", clean.index(b"\xff\xda"))
        data = clean[:at] + junk + clean[at:]
    with pytest.raises(DecodeError, match="extraneous bytes"):
        decode_image(data)


# --------------------------------------------------------------------------- EXIF orientation
CROP_32 = ImageTransform(size=32, crop="random-resized", flip=True)
SAMPLES = 16


def _median_psnr(data: bytes, rotated: np.ndarray, **options: bool) -> float:
    """The median PSNR of decode_for's samples of ``data`` against the same samples cut from
    ``rotated`` (the image, rotated before anything is decoded reduced or cropped)."""
    values = []
    for index in range(SAMPLES):
        got = CROP_32.apply(*decode_for(data, CROP_32, sample_rng(0, 0, index), **options))
        want = CROP_32(rotated, sample_rng(0, 0, index)).astype(np.float64)
        mse = np.mean((got - want) ** 2)
        values.append(np.inf if mse == 0 else 10 * np.log10(255**2 / mse))
    return float(np.median(values))


def _stored(h: int, w: int) -> tuple[bytes, np.ndarray]:
    jpeg = cv2.imencode(".jpg", waves(h, w), [cv2.IMWRITE_JPEG_QUALITY, 95])[1].tobytes()
    return jpeg, decode_image(jpeg)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_reduced_crops_of_oriented_photos_are_the_rotated_photos_crops(orientation: int) -> None:
    """Sizes one past a multiple of 8: libjpeg's 1/8 grid then ends 7 pixels past the image,
    which a flip or rotation turns to the side the crop is measured from. Flipped and rotated
    crops were 4-10 dB worse than upright ones (the box a reduced pixel off); now all alike."""
    data, stored = _stored(1001, 1401)
    tagged = oriented(data, orientation)
    assert _median_psnr(tagged, rotate(stored, orientation)) >= 35


UNALIGNED = st.builds(lambda k, r: 8 * k + r, st.integers(37, 137), st.integers(1, 7))


@settings(max_examples=12, deadline=None)
@given(h=UNALIGNED, w=UNALIGNED, orientation=st.integers(1, 8))
def test_every_path_crops_the_rotated_image(h: int, w: int, orientation: int) -> None:
    """Against rotating the pixels first: the full decode exactly, the region decode exactly
    the reduced whole decode, the reduced decode within its usual error. Sizes are never a
    multiple of 8, where libjpeg's reduced grids would line up whichever way round."""
    data, stored = _stored(h, w)
    tagged, rotated = oriented(data, orientation), rotate(stored, orientation)
    for index in range(4):
        full = decode_for(tagged, CROP_32, sample_rng(1, 0, index), reduce=False)
        np.testing.assert_array_equal(
            CROP_32.apply(*full), CROP_32(rotated, sample_rng(1, 0, index))
        )
        region = decode_for(tagged, CROP_32, sample_rng(1, 0, index))
        whole = decode_for(tagged, CROP_32, sample_rng(1, 0, index), region=False)
        np.testing.assert_array_equal(CROP_32.apply(*region), CROP_32.apply(*whole))
    # the reduced decode's own error: 35.7-43 dB medians over 60 random sizes and
    # orientations (flipped ones were down to 21-27 dB before their grid was placed)
    assert _median_psnr(tagged, rotated) >= 33


@pytest.mark.parametrize("orientation", range(1, 9))
def test_the_device_path_crops_the_rotated_image(orientation: int) -> None:
    """``decode_device`` (run here with torchvision's CPU decoder) against the same decoder's
    pixels rotated first and cropped by the device path's own transform."""
    data, _ = _stored(203, 311)
    crop = ImageTransform(size=48, crop="random-resized", flip=True)
    rngs = [sample_rng(0, 0, i) for i in range(3)]
    got = _device_decode.decode_on_device(
        [oriented(data, orientation)] * 3,
        torch.device("cpu"),
        transform=crop,
        rngs=rngs,
        max_pixels=None,
        on_error=lambda i, error: pytest.fail(str(error)),
    )
    stored = _device_decode._nvjpeg([data], torch.device("cpu"))[0]
    assert stored is not None
    rotated = torch.from_numpy(rotate(stored.permute(1, 2, 0).numpy(), orientation))
    for i, image in enumerate(got):
        want = _device_decode._transform(rotated.permute(2, 0, 1), crop, sample_rng(0, 0, i))
        assert image is not None and torch.equal(image, want)


# --------------------------------------------------------------------------- the writer
@pytest.fixture
def folder_with_bad_images(tmp_path: Path) -> Path:
    """An ImageFolder with 6 good JPEGs, a ".jpg" that is HTML and a truncated JPEG."""
    root = tmp_path / "src"
    make_images(root, 6, classes=2, min_short=40, max_short=60)
    (root / "class_00" / "page.jpg").write_text("<html>404 Not Found</html>")
    good = next((root / "class_01").glob("*.jpg")).read_bytes()
    (root / "class_01" / "cut.jpg").write_bytes(good[: len(good) // 2])
    return root


def test_convert_refuses_a_bad_image_naming_it(
    folder_with_bad_images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A non-image .jpg and a truncated JPEG were packed without complaint; the error came
    at training time."""
    status = cli(["convert", str(folder_with_bad_images), str(tmp_path / "out"), "--quiet"])
    assert status == 1
    assert "page.jpg" in capsys.readouterr().err
    with pytest.raises(DecodeError, match="truncated JPEG") as err:
        write_shards([Sample(str(folder_with_bad_images / "class_01" / "cut.jpg"), 1)], tmp_path)
    assert err.value.path.endswith("cut.jpg")


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_write_shards_skips_bad_images_and_lists_them(
    folder_with_bad_images: Path, tmp_path: Path, format: str
) -> None:
    files = sorted(folder_with_bad_images.rglob("*.jpg"))
    samples = [Sample(str(path), int(path.parent.name[-1])) for path in files]
    result = write_shards(
        samples, tmp_path / "out", format=format, on_error="skip", target_shard_bytes="8kB"
    )
    assert sorted(Path(bad.image).name for bad in result.bad_images) == ["cut.jpg", "page.jpg"]
    assert all(bad.reason for bad in result.bad_images)
    assert result.samples == len(files) - 2
    read = (
        ImageStream.from_tar(tmp_path / "out", size=8, crop="center")
        if format == "tar"
        else ImageStream.from_parquet(tmp_path / "out", size=8, crop="center")
    )
    good = [s.label for s in samples if Path(s.image).name not in ("cut.jpg", "page.jpg")]
    assert sorted(label for _, label in read) == sorted(good)


def test_convert_skips_bad_images_and_names_them(
    folder_with_bad_images: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    status = cli(["convert", str(folder_with_bad_images), str(out), "--on-error", "skip"])
    assert status == 0
    err = capsys.readouterr().err
    assert "left out" in err and "page.jpg" in err and "cut.jpg" in err
    assert len(list(ImageStream.from_parquet(out))) == 6


# --------------------------------------------------------------------------- origin
@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("origin")
    for f in range(3):
        ids = pa.array(range(f * 40, (f + 1) * 40), pa.int64())
        pq.write_table(pa.table({"id": ids}), root / f"part-{f}.parquet", row_group_size=15)
    return root


def _id_at(where: dict[str, object]) -> int:
    """The ``id`` stored at an origin, read with pyarrow alone."""
    group = pq.ParquetFile(str(where["path"])).read_row_group(int(where["row_group"]))  # type: ignore[call-overload]
    return int(group["id"][int(where["row"])].as_py())  # type: ignore[call-overload]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_origin_names_each_row_read_exactly_once(parquet_dir: Path, num_workers: int) -> None:
    stream = ParquetStream(parquet_dir, batch_size=7, shuffle=True, origin=True)
    loader = DataLoader(stream, batch_size=None, num_workers=num_workers)
    pairs = [(int(i), where) for b in loader for i, where in zip(b["id"], b["origin"], strict=True)]
    keys = Counter((w["path"], w["row_group"], w["row"]) for _, w in pairs)
    assert len(keys) == 120 and set(keys.values()) == {1}  # every row once
    assert all(_id_at(where) == i for i, where in pairs)


def test_origin_changes_neither_order_nor_resume(parquet_dir: Path) -> None:
    def loader(origin: bool) -> DataLoader:
        stream = ParquetStream(parquet_dir, batch_size=8, shuffle=True, seed=3, origin=origin)
        return DataLoader(stream, batch_size=None, num_workers=2)

    plain, traced = loader(False), loader(True)
    assert [b["id"].tolist() for b in plain] == [b["id"].tolist() for b in traced]
    first = loader(True)
    it = iter(first)
    head = [next(it) for _ in range(5)]
    state = first.state_dict()
    other = _state_after(loader(False), 5)
    run_specific = ("rng", "base_seed")  # the process's generators and the workers' seed
    assert {k: v for k, v in state.items() if k not in run_specific} == {
        k: v for k, v in other.items() if k not in run_specific
    }
    resumed = loader(True)
    resumed.load_state_dict(state)
    rest = list(resumed)
    seen = Counter((w["path"], w["row_group"], w["row"]) for b in head + rest for w in b["origin"])
    assert len(seen) == 120 and set(seen.values()) == {1}


def _state_after(loader: DataLoader, batches: int) -> dict[str, object]:
    it = iter(loader)
    for _ in range(batches):
        next(it)
    return loader.state_dict()


@pytest.mark.parametrize("batch_size", [None, 2])
def test_unlabelled_image_items_carry_their_origin(tmp_path: Path, batch_size: int | None) -> None:
    """With no label and no other column, an item is its image and origin (rows failed
    with a zip() length error)."""
    files = make_images(tmp_path / "folder", 5, classes=1, min_short=40, max_short=60)
    stream = ImageStream.from_files(
        files, size=8, crop="center", origin=True, batch_size=batch_size
    )
    items = list(stream)
    origins = (
        [o for b in items for o in b["origin"]] if batch_size else [i["origin"] for i in items]
    )
    assert sorted(o["path"] for o in origins) == sorted(map(str, files))
    assert all(set(item) == {"image", "origin"} for item in items)


def test_image_items_carry_their_origin(tmp_path: Path, shards: list[Path]) -> None:
    files = make_images(tmp_path / "folder", 5, classes=2, min_short=40, max_short=60)
    (tmp_path / "folder" / "class_00" / "bad.jpg").write_text("not an image")
    folder = ImageStream.from_folder(
        tmp_path / "folder", size=8, crop="center", origin=True, on_error="skip"
    )
    with pytest.warns(UserWarning, match="skipped a bad image"):
        items = list(folder)
    assert sorted(item["origin"]["path"] for item in items) == sorted(map(str, files))
    assert all(item["label"] == int(Path(item["origin"]["path"]).parent.name[-1]) for item in items)
    tar = ImageStream.from_tar(shards, size=8, crop="center", batch_size=5, origin=True)
    members = [where["member"] for batch in tar for where in batch["origin"]]
    images = []
    for shard in shards:
        with tarfile.open(shard) as archive:
            images += [m.name for m in archive if m.name.endswith(".jpg")]
    assert sorted(members) == sorted(images)
    make_image_parquet(tmp_path / "pq", 9, files=2, row_group_size=2)
    rows = ImageStream.from_parquet(tmp_path / "pq", size=8, crop="center", origin=True)
    got = Counter((w["path"], w["row_group"], w["row"]) for w in (item["origin"] for item in rows))
    assert len(got) == 9 and set(got.values()) == {1}
