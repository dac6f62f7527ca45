"""fastdata.synthetic: determinism, file layouts, schemas and the shape of the generated data."""

from __future__ import annotations

import math
import random
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from fastdata import synthetic

SMALL: dict[str, Any] = {
    "min_short": 32,
    "max_short": 48,
}  # tiny images where their size does not matter
VALID_COMBOS = [
    ("jpeg", "rgb", 3, np.uint8),
    ("jpeg", "gray", 1, np.uint8),
    ("png", "rgb", 3, np.uint8),
    ("png", "gray", 1, np.uint8),
    ("png", "rgba", 4, np.uint8),
    ("png", "gray16", 1, np.uint16),
    ("webp", "rgb", 3, np.uint8),
    ("webp", "rgba", 4, np.uint8),
]


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under ``root``, by relative path."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def parquet_ids(paths: list[Path]) -> list[int]:
    return [i for p in paths for i in pq.read_table(p, columns=["id"])["id"].to_pylist()]


def decode(data: bytes, flags: int = cv2.IMREAD_UNCHANGED) -> np.ndarray:
    image = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    assert image is not None, "OpenCV could not decode the bytes"
    return image


WRITERS: dict[str, Callable[[Path, int], object]] = {
    "images-jpeg-rgb": lambda root, seed: synthetic.make_images(root, 5, seed=seed, **SMALL),
    "images-png-gray16": lambda root, seed: synthetic.make_images(
        root, 3, seed=seed, fmt="png", mode="gray16", **SMALL
    ),
    "images-webp-rgba": lambda root, seed: synthetic.make_images(
        root, 3, seed=seed, fmt="webp", mode="rgba", **SMALL
    ),
    "parquet": lambda root, seed: synthetic.make_parquet(
        root, 3000, files=3, row_group_size=500, seed=seed, null_fraction=0.1
    ),
    "image-parquet": lambda root, seed: synthetic.make_image_parquet(
        root, 6, files=2, row_group_size=2, seed=seed, **SMALL
    ),
    "tar": lambda root, seed: synthetic.make_tar_shards(root, 6, shards=2, seed=seed, **SMALL),
}


@pytest.mark.parametrize("writer", WRITERS.values(), ids=list(WRITERS))
def test_same_seed_same_bytes_other_seed_other_bytes(
    writer: Callable[[Path, int], object], tmp_path: Path
) -> None:
    writer(tmp_path / "a", 7)
    random.seed(1)
    np.random.seed(1)  # the global RNGs must not matter
    writer(tmp_path / "b", 7)
    writer(tmp_path / "c", 8)
    a, b, c = (tree_bytes(tmp_path / name) for name in "abc")
    assert a
    assert a == b
    assert a.keys() == c.keys()
    assert all(a[name] != c[name] for name in a)


def test_image_i_depends_on_seed_and_index_only() -> None:
    five = synthetic.make_image_bytes(5, seed=3, classes=2, **SMALL)
    assert synthetic.make_image_bytes(3, seed=3, classes=2, **SMALL) == five[:3]
    assert [label for _, label in five] == [0, 1, 0, 1, 0]
    assert len({data for data, _ in five}) == 5


# --- synth_image / encode_image -------------------------------------------------------------


@pytest.mark.parametrize("channels", [1, 3, 4])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_synth_image_shape_dtype_and_determinism(channels: int, dtype: type) -> None:
    image = synthetic.synth_image(np.random.default_rng(5), 40, 70, channels=channels, dtype=dtype)
    again = synthetic.synth_image(np.random.default_rng(5), 40, 70, channels=channels, dtype=dtype)
    other = synthetic.synth_image(np.random.default_rng(6), 40, 70, channels=channels, dtype=dtype)
    assert image.shape == (40, 70, channels)
    assert image.dtype == dtype
    np.testing.assert_array_equal(image, again)
    assert not np.array_equal(image, other)
    assert image.std() > 0
    if dtype == np.uint16:
        assert image.max() > 255  # the whole 16-bit range is used, not 8-bit values


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"channels": 2}, "expected 1, 3 or 4"),
        ({"dtype": np.float32}, "uint8 or uint16"),
        ({"height": 0}, "height=0"),
    ],
)
def test_synth_image_rejects_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    args = {"height": 8, "width": 8, **kwargs}
    with pytest.raises(ValueError, match=match):
        synthetic.synth_image(np.random.default_rng(0), **args)


@pytest.mark.parametrize("channels", [1, 3, 4])
def test_png_round_trip_is_exact_and_in_rgb_order(channels: int) -> None:
    image = synthetic.synth_image(np.random.default_rng(0), 20, 30, channels=channels)
    decoded = decode(synthetic.encode_image(image, fmt="png"))
    if channels == 3:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGR2RGB)
    elif channels == 4:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGBA)
    np.testing.assert_array_equal(decoded.reshape(image.shape), image)
    gray16 = synthetic.synth_image(np.random.default_rng(0), 20, 30, channels=1, dtype=np.uint16)
    np.testing.assert_array_equal(decode(synthetic.encode_image(gray16, fmt="png")), gray16[..., 0])


@pytest.mark.parametrize("fmt", ["jpeg", "webp"])
def test_lossy_formats_keep_rgb_order(fmt: str) -> None:
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 0] = 255
    data = synthetic.encode_image(red, fmt=fmt, quality=95)
    rgb = decode(data, cv2.IMREAD_COLOR_RGB)
    assert rgb[..., 0].mean() > 240
    assert rgb[..., 1:].mean() < 15


@pytest.mark.parametrize(
    ("image", "kwargs", "match"),
    [
        (np.zeros((8, 8, 3), np.uint8), {"fmt": "gif"}, "expected one of"),
        (np.zeros((8, 8, 3), np.uint8), {"quality": 0}, r"in \[1, 100\]"),
        (np.zeros((8, 8, 3), np.uint8), {"quality": 101}, r"in \[1, 100\]"),
        (np.zeros((8, 8, 4), np.uint8), {"fmt": "jpeg"}, "4 channel"),
        (np.zeros((8, 8), np.uint8), {"fmt": "webp"}, "1 channel"),
        (np.zeros((8, 8), np.uint16), {"fmt": "jpeg"}, "uint16"),
        (np.zeros((8, 8, 3), np.float32), {"fmt": "png"}, "float32"),
        (np.zeros((2, 8, 8, 3), np.uint8), {}, "expected"),
    ],
)
def test_encode_image_rejects_what_the_format_cannot_hold(
    image: np.ndarray, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic.encode_image(image, **kwargs)


@pytest.mark.parametrize(("texture", "below_noise"), [("photo", 1.5), ("smooth", 3)])
def test_images_compress_like_photos_not_like_noise_or_flat_color(
    texture: str, below_noise: float
) -> None:
    rng = np.random.default_rng(0)
    photo = synthetic.synth_image(rng, 400, 400, texture=texture)
    noise = rng.integers(0, 256, photo.shape, dtype=np.uint8)
    flat = np.full_like(photo, 128)
    photo_size, noise_size, flat_size = (
        len(synthetic.encode_image(image, quality=90)) for image in (photo, noise, flat)
    )
    assert photo_size < noise_size / below_noise
    assert photo_size > 3 * flat_size


def bytes_per_pixel(images: list[tuple[bytes, int]]) -> float:
    pixels = sum(math.prod(decode(data).shape[:2]) for data, _ in images)
    return sum(len(data) for data, _ in images) / pixels


def test_default_images_have_the_entropy_of_imagenet_photos() -> None:
    """The documented target: about 0.55 bytes per pixel as JPEG at quality 90 (ImageNet's
    train set: about 110 KB at about 470x390, 0.6), about 100 KB at ImageNet's sizes; the
    smooth texture is several times smaller."""
    photos = synthetic.make_image_bytes(24, seed=1)
    smooth = synthetic.make_image_bytes(24, seed=1, texture="smooth")
    assert 0.5 <= bytes_per_pixel(photos) <= 0.62
    assert 80_000 <= np.mean([len(data) for data, _ in photos]) <= 130_000
    assert bytes_per_pixel(smooth) < bytes_per_pixel(photos) / 3
    assert synthetic.make_image_bytes(24, seed=1, texture="photo") == photos  # the default
    assert [label for _, label in smooth] == [label for _, label in photos]


@pytest.mark.parametrize("texture", ["photo", "smooth"])
def test_textures_keep_shape_range_and_channels(texture: str) -> None:
    for channels, dtype in [(1, np.uint8), (3, np.uint8), (4, np.uint8), (1, np.uint16)]:
        image = synthetic.synth_image(
            np.random.default_rng(2), 33, 47, channels=channels, dtype=dtype, texture=texture
        )
        assert image.shape == (33, 47, channels) and image.dtype == dtype
        assert image.std() > 0
    rgb = synthetic.synth_image(np.random.default_rng(2), 64, 64, texture=texture)
    assert not np.array_equal(rgb[..., 0], rgb[..., 1])  # colour, not gray


# --- make_images ----------------------------------------------------------------------------


def test_make_images_is_an_imagefolder_with_balanced_labels(tmp_path: Path) -> None:
    from torchvision.datasets import ImageFolder

    paths = synthetic.make_images(tmp_path, 10, classes=3, **SMALL)
    assert paths == sorted(paths)
    dataset = ImageFolder(str(tmp_path))
    assert dataset.class_to_idx == {"class_00": 0, "class_01": 1, "class_02": 2}
    assert sorted(Path(p) for p, _ in dataset.samples) == paths
    for path, target in dataset.samples:
        assert target == int(Path(path).stem.removeprefix("img_")) % 3
    assert np.bincount(dataset.targets).tolist() == [4, 3, 3]
    image, _ = dataset[0]
    assert image.mode == "RGB"


def test_class_folders_sort_in_label_order_beyond_100_classes(tmp_path: Path) -> None:
    paths = synthetic.make_images(tmp_path, 12, classes=150, min_short=16, max_short=16)
    folders = sorted({p.parent.name for p in paths})
    assert folders == [f"class_{k:03d}" for k in range(12)]


def test_make_images_sizes_spread_like_imagenet(tmp_path: Path) -> None:
    paths = synthetic.make_images(tmp_path, 24, classes=2, min_short=300, max_short=500)
    sizes = [Image.open(p).size for p in paths]
    shorts = [min(s) for s in sizes]
    assert all(300 <= s <= 500 for s in shorts)
    assert all(3 * max(s) <= 4 * min(s) for s in sizes)  # aspect within 3:4..4:3
    assert len(set(shorts)) > 12
    assert any(w > h for w, h in sizes)
    assert any(w < h for w, h in sizes)


def test_large_images_come_first_and_are_large(tmp_path: Path) -> None:
    paths = synthetic.make_images(tmp_path, 3, classes=1, large=2, **SMALL)
    sizes = [Image.open(p).size for p in paths]  # one class: sorted paths are in index order
    assert all(max(s) >= 2000 and 3 * max(s) <= 4 * min(s) for s in sizes[:2])
    assert max(sizes[2]) <= 4 * 48 // 3


@pytest.mark.parametrize(("fmt", "mode", "channels", "dtype"), VALID_COMBOS)
def test_each_mode_decodes_to_its_channels_and_dtype(
    fmt: str, mode: str, channels: int, dtype: type, tmp_path: Path
) -> None:
    paths = synthetic.make_images(tmp_path, 2, fmt=fmt, mode=mode, **SMALL)
    assert {p.suffix for p in paths} == {{"jpeg": ".jpg"}.get(fmt, f".{fmt}")}
    for path in paths:
        image = decode(path.read_bytes())
        assert image.dtype == dtype
        assert (1 if image.ndim == 2 else image.shape[2]) == channels


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"fmt": "jpeg", "mode": "rgba"}, r"expected one of \['rgb', 'gray'\]"),
        ({"fmt": "jpeg", "mode": "gray16"}, "gray16 needs png"),
        ({"fmt": "webp", "mode": "gray"}, r"expected one of \['rgb', 'rgba'\]"),
        ({"fmt": "gif"}, r"expected one of \['jpeg', 'png', 'webp'\]"),
        ({"mode": "cmyk"}, r"modes are \['rgb', 'gray', 'rgba', 'gray16'\]"),
        ({"n": -1}, "n=-1"),
        ({"classes": 0}, "classes=0"),
        ({"large": 5}, "large=5 exceeds n=4"),
        ({"min_short": 200, "max_short": 100}, "max_short=100"),
        ({"min_short": 8}, "min_short=8"),
        ({"quality": 0}, "quality=0"),
        ({"seed": -1}, "seed=-1"),
        ({"texture": "noise"}, r"texture='noise': expected one of .*'photo', 'smooth'"),
    ],
)
def test_image_options_are_validated_with_the_valid_values(
    kwargs: dict[str, Any], match: str, tmp_path: Path
) -> None:
    args = {"n": 4, **kwargs}
    n: int = args.pop("n")
    for call in (
        lambda: synthetic.make_images(tmp_path, n, **args),
        lambda: synthetic.make_image_bytes(n, **args),
        lambda: synthetic.make_image_parquet(tmp_path, n, **args),
        lambda: synthetic.make_tar_shards(tmp_path, n, **args),
    ):
        with pytest.raises(ValueError, match=match):
            call()
    assert not list(tmp_path.iterdir())  # validated before anything is written


def test_non_integer_counts_are_a_type_error(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match=r"rows=1000000\.0: expected an integer >= 0, got float"):
        synthetic.make_parquet(tmp_path, 1e6)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="n=True"):
        synthetic.make_image_bytes(True)


# --- make_parquet ---------------------------------------------------------------------------


def test_make_parquet_layout_schema_and_row_groups(tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path / "new" / "dir", 3000, files=4, row_group_size=256)
    assert [p.name for p in paths] == [f"part-{k:05d}.parquet" for k in range(4)]
    assert parquet_ids(paths) == list(range(3000))
    for path in paths:
        meta = pq.ParquetFile(path).metadata
        assert meta.num_rows == 750
        groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
        assert groups == [256, 256, 238]
    table = pq.read_table(paths[0])
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("label").type == pa.int32()
    assert table.schema.field("x").type == pa.float32()
    assert table.schema.field("text").type == pa.string()
    assert table.schema.field("tokens").type.value_type == pa.int32()
    assert pa.types.is_list(table.schema.field("tokens").type)
    assert set(table["label"].to_pylist()) <= set(range(10))
    assert all(name.null_count == 0 for name in table.columns)
    words = {w for text in table["text"].to_pylist() for w in text.split(" ")}
    assert 1 < len(words) < 100
    assert all(w.isalpha() for w in words)


@pytest.mark.parametrize(
    ("rows", "files", "expected"), [(10, 4, [3, 3, 2, 2]), (2, 4, [1, 1, 0, 0]), (0, 1, [0])]
)
def test_rows_are_split_as_evenly_as_possible(
    rows: int, files: int, expected: list[int], tmp_path: Path
) -> None:
    paths = synthetic.make_parquet(tmp_path, rows, files=files)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == expected
    assert parquet_ids(paths) == list(range(rows))


def test_rows_per_file_gives_exact_counts_including_empty_files(tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path, rows_per_file=[5, 0, 7], row_group_size=4)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [5, 0, 7]
    assert parquet_ids(paths) == list(range(12))
    empty = pq.read_table(paths[1])
    assert empty.num_rows == 0
    assert empty.schema.names == ["id", "label", "x", "text", "tokens"]
    # rows and files may be given too when they agree; the files are the same
    synthetic.make_parquet(tmp_path / "b", 12, files=3, row_group_size=4, rows_per_file=[5, 0, 7])
    assert tree_bytes(tmp_path / "b") == {p.name: p.read_bytes() for p in paths}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rows": 11, "rows_per_file": [5, 7]}, "rows=11, files=4 disagree"),
        ({"files": 3, "rows_per_file": [5, 7]}, "2 files"),
        ({"rows_per_file": []}, "names no file"),
        ({"rows_per_file": [3, -1]}, r"rows_per_file\[1\]=-1"),
        ({"rows": -1}, "rows=-1"),
        ({"files": 0}, "files=0"),
        ({"row_group_size": 0}, "row_group_size=0"),
        ({"max_tokens": 0}, "max_tokens=0"),
        ({"null_fraction": 1.5}, r"expected a number in \[0, 1\]"),
        ({"null_fraction": -0.1}, r"expected a number in \[0, 1\]"),
        ({"null_fraction": float("nan")}, r"expected a number in \[0, 1\]"),
        ({"seed": -3}, "seed=-3"),
    ],
)
def test_make_parquet_validates_its_options(
    kwargs: dict[str, Any], match: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=match):
        synthetic.make_parquet(tmp_path, **kwargs)
    assert not list(tmp_path.iterdir())


def test_nulls_only_in_x_text_and_tokens(tmp_path: Path) -> None:
    table = pq.read_table(synthetic.make_parquet(tmp_path / "some", 4000, null_fraction=0.3))
    for name in ("x", "text", "tokens"):
        assert 0.25 < table[name].null_count / 4000 < 0.35
    assert table["id"].null_count == table["label"].null_count == 0
    assert not table.schema.field("id").nullable
    assert not table.schema.field("label").nullable
    assert not (table["x"].is_null().to_numpy() == table["text"].is_null().to_numpy()).all()
    every = pq.read_table(synthetic.make_parquet(tmp_path / "all", 50, null_fraction=1.0))
    assert [every[name].null_count for name in every.column_names] == [0, 0, 50, 50, 50]


@pytest.mark.parametrize("max_tokens", [512, 16])
def test_token_lengths_are_long_tailed_and_clipped(max_tokens: int, tmp_path: Path) -> None:
    paths = synthetic.make_parquet(tmp_path, 5000, files=2, max_tokens=max_tokens)
    lengths = pc.list_value_length(pq.read_table(paths)["tokens"]).to_numpy()
    assert lengths.min() >= 1
    assert lengths.max() <= max_tokens
    if max_tokens == 512:
        assert lengths.max() >= 8 * np.median(lengths)
        assert np.mean(lengths) > np.median(lengths)  # skewed to the right
    else:
        assert (lengths == max_tokens).mean() > 0.1


@settings(max_examples=30, deadline=None)
@given(
    counts=st.one_of(
        st.tuples(st.integers(0, 300), st.integers(1, 5)),
        st.lists(st.integers(0, 80), min_size=1, max_size=5),
    ),
    row_group_size=st.integers(1, 64),
)
def test_any_layout_has_every_id_once_and_bounded_row_groups(
    counts: tuple[int, int] | list[int], row_group_size: int
) -> None:
    if isinstance(counts, tuple):
        rows, files = counts
        kwargs: dict[str, Any] = {"rows": rows, "files": files}
    else:
        rows, files = sum(counts), len(counts)
        kwargs = {"rows_per_file": counts}
    with tempfile.TemporaryDirectory() as root:
        paths = synthetic.make_parquet(root, row_group_size=row_group_size, **kwargs)
        assert len(paths) == files
        assert parquet_ids(paths) == list(range(rows))
        for path in paths:
            meta = pq.ParquetFile(path).metadata
            groups = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            assert all(g <= row_group_size for g in groups)
            assert sum(groups) == meta.num_rows


# --- make_image_parquet / make_tar_shards ---------------------------------------------------


def test_image_parquet_holds_the_same_images_and_labels(tmp_path: Path) -> None:
    expected = synthetic.make_image_bytes(10, seed=3, classes=3, **SMALL)
    paths = synthetic.make_image_parquet(
        tmp_path, 10, files=3, row_group_size=2, seed=3, classes=3, **SMALL
    )
    table = pq.read_table(paths)
    assert [pq.ParquetFile(p).metadata.num_rows for p in paths] == [4, 3, 3]
    assert table["id"].to_pylist() == list(range(10))
    assert table["image"].to_pylist() == [data for data, _ in expected]
    assert table["label"].to_pylist() == [label for _, label in expected]
    assert table.schema.field("image").type == pa.binary()
    assert table.schema.field("label").type == pa.int32()
    meta = pq.ParquetFile(paths[0]).metadata
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [2, 2]


def test_tar_shards_hold_the_same_samples_in_adjacent_members(tmp_path: Path) -> None:
    expected = synthetic.make_image_bytes(10, seed=3, classes=3, **SMALL)
    paths = synthetic.make_tar_shards(tmp_path, 10, shards=3, seed=3, classes=3, **SMALL)
    assert [p.name for p in paths] == ["shard-00000.tar", "shard-00001.tar", "shard-00002.tar"]
    members: list[tuple[tarfile.TarInfo, bytes]] = []
    per_shard = []
    for path in paths:
        with tarfile.open(path) as tar:
            shard = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
        per_shard.append(len(shard) // 2)
        members += shard
    assert per_shard == [4, 3, 3]
    names = [m.name for m, _ in members]
    assert names == [f"sample-{i:06d}{ext}" for i in range(10) for ext in (".jpg", ".cls")]
    for i, (data, label) in enumerate(expected):
        assert members[2 * i][1] == data
        assert members[2 * i + 1][1] == str(label).encode("ascii")
    for info, _ in members:
        assert info.isfile()
        assert (info.mtime, info.uid, info.gid, info.uname, info.gname) == (0, 0, 0, "", "")
        assert info.mode == 0o644


def test_tar_shards_fewer_samples_than_shards_and_png(tmp_path: Path) -> None:
    paths = synthetic.make_tar_shards(tmp_path, 1, shards=3, fmt="png", mode="gray", **SMALL)
    counts = []
    for path in paths:
        with tarfile.open(path) as tar:
            counts.append(tar.getnames())
    assert counts == [["sample-000000.png", "sample-000000.cls"], [], []]


def test_a_writer_replaces_its_earlier_output_and_leaves_other_files(tmp_path: Path) -> None:
    from fastdata.synthetic import make_images, make_parquet, make_tar_shards

    (tmp_path / "notes.txt").write_text("mine")
    make_parquet(tmp_path, 100, files=5)
    make_parquet(tmp_path, 100, files=4)
    assert len(list(tmp_path.glob("*.parquet"))) == 4  # part-00004 of the first call is gone
    assert (tmp_path / "notes.txt").read_text() == "mine"
    make_images(tmp_path / "img", 8, classes=4, min_short=20, max_short=24, texture="smooth")
    make_images(tmp_path / "img", 4, classes=2, min_short=20, max_short=24, texture="smooth")
    assert len(list((tmp_path / "img").rglob("*.jpg"))) == 4
    assert sorted(p.name for p in (tmp_path / "img").iterdir()) == ["class_00", "class_01"]
    make_tar_shards(tmp_path / "tar", 8, shards=4, min_short=20, max_short=24, texture="smooth")
    make_tar_shards(tmp_path / "tar", 8, shards=2, min_short=20, max_short=24, texture="smooth")
    assert len(list((tmp_path / "tar").glob("*.tar"))) == 2
