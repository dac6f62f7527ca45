"""Synthetic image datasets (fastdata.synthetic._images): an ImageFolder, image Parquet and tar
shards, each the same samples as make_image_bytes."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image
from synthetic_helpers import SMALL, VALID_COMBOS, decode

from fastdata import synthetic


def test_image_i_depends_on_seed_and_index_only() -> None:
    five = synthetic.make_image_bytes(5, seed=3, classes=2, **SMALL)
    assert synthetic.make_image_bytes(3, seed=3, classes=2, **SMALL) == five[:3]
    assert [label for _, label in five] == [0, 1, 0, 1, 0]
    assert len({data for data, _ in five}) == 5


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
