"""What every synthetic writer shares (fastdata.synthetic._common): a random stream per kind
of data, file ranges, names that sort, and an output folder holding one call's files."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from synthetic_helpers import SMALL, tree_bytes

from fastdata import synthetic
from fastdata.synthetic._common import digits, file_ranges, make_root

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


@settings(max_examples=100, deadline=None)
@given(rows=st.integers(0, 10_000), files=st.integers(1, 50))
def test_rows_split_into_contiguous_ranges_differing_by_at_most_one(rows: int, files: int) -> None:
    ranges = file_ranges(rows, files, None)
    assert len(ranges) == files
    assert [i for r in ranges for i in r] == list(range(rows))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


@settings(max_examples=100, deadline=None)
@given(counts=st.lists(st.integers(0, 100), min_size=1, max_size=10))
def test_rows_per_file_are_the_ranges_lengths_and_must_agree(counts: list[int]) -> None:
    ranges = file_ranges(10_000, 4, counts)  # rows and files at their defaults: not given
    assert [len(r) for r in ranges] == counts
    assert [i for r in ranges for i in r] == list(range(sum(counts)))
    assert file_ranges(sum(counts), len(counts), counts) == ranges
    with pytest.raises(ValueError, match="disagree with rows_per_file"):
        file_ranges(sum(counts) + 1, len(counts), counts)


def test_bad_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="names no file"):
        file_ranges(0, 1, [])
    with pytest.raises(ValueError, match=r"rows_per_file\[1\]"):
        file_ranges(10_000, 4, [1, -1])
    with pytest.raises(ValueError, match="files"):
        file_ranges(5, 0, None)


@settings(max_examples=100, deadline=None)
@given(count=st.integers(1, 200_000), minimum=st.integers(1, 8))
def test_zero_padded_names_sort_in_index_order(count: int, minimum: int) -> None:
    width = digits(count, minimum)
    assert width >= minimum
    indices = sorted({0, count // 3, count // 2, count - 2, count - 1} - {-1})
    names = [f"{i:0{width}d}" for i in indices]
    assert sorted(names) == names and all(len(n) == width for n in names)
    assert width == minimum or len(str(count - 1)) == width  # no wider than needed


def test_make_root_removes_only_its_own_earlier_outputs(tmp_path: Path) -> None:
    root = tmp_path / "out"
    (root / "class_00").mkdir(parents=True)
    (root / "class_01").mkdir()
    (root / "class_00" / "a.jpg").write_bytes(b"old")
    (root / "class_01" / "b.jpg").write_bytes(b"old")
    (root / "class_01" / "notes.txt").write_text("mine")
    (root / "top.jpg").write_bytes(b"old")
    assert make_root(root, "class_*/*.jpg") == root
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "class_01",
        "class_01/notes.txt",
        "top.jpg",
    ]
    assert make_root(tmp_path / "new" / "deep", "*.tar").is_dir()
