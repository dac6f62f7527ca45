"""Writing one shard (fastdata.writer._shard_files): extra fields as members and columns, the
plan of a sample, and a shard whose images are checked as the streams check them (and whose
left-out images are recorded before it is published)."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastdata as fd
from fastdata.errors import DecodeError
from fastdata.writer._destination import LEFT_OUT, Destination
from fastdata.writer._shard_files import (
    BadImage,
    Item,
    ShardTask,
    column_value,
    member,
    write_shard,
)

from .writer_helpers import SMALL

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


@given(text=st.text(), data=st.binary(), value=JSON)
def test_members_are_utf8_text_bytes_as_they_are_or_json(text: str, data: bytes, value) -> None:
    assert member(text) == text.encode()
    assert member(data) == data
    if not isinstance(value, str):
        assert json.loads(member(value)) == value
    assert column_value(data) == data and column_value(text) == text


@given(value=st.dictionaries(st.text(max_size=4), st.integers(), max_size=5))
def test_dicts_give_the_same_bytes_whatever_their_order(value: dict[str, int]) -> None:
    reordered = dict(reversed(list(value.items())))
    assert member(value) == member(reordered)
    assert column_value(value) == column_value(reordered) == member(value).decode()


def test_the_plan_changes_with_anything_that_changes_the_shards() -> None:
    base = Item("k", b"image", 5, 1, "jpg", (("txt", "1"),))
    others = [
        base._replace(key="j"),
        base._replace(image=b"other"),
        base._replace(label=2),
        base._replace(suffix="png"),
        base._replace(extras=(("txt", 1),)),  # the same member, another Parquet column
        base._replace(image="/path/k.jpg"),
        base._replace(bad="no such image file"),
    ]
    plans = [json.dumps(item.plan()) for item in [base, *others]]
    assert len(set(plans)) == len(plans)
    assert base.plan() == Item("k", b"image", 5, 1, "jpg", (("txt", "1"),)).plan()


def images(n: int) -> list[bytes]:
    return [data for data, _ in fd.synthetic.make_image_bytes(n, fmt="png", **SMALL)]


def task(tmp_path: Path, items: list[Item], format: str, **options: Any) -> ShardTask:
    return ShardTask(
        name=f"shard-000000.{format}",
        items=items,
        format=format,
        row_groups=[range(0, 2), range(2, len(items))],
        source=pafs.LocalFileSystem(),
        destination=Destination.open(tmp_path, None, "shard"),
        **options,
    )


def test_a_tar_shard_holds_each_samples_members_in_order(tmp_path: Path) -> None:
    data = images(3)
    items = [
        Item(f"s{i}", image, len(image), i, "png", (("txt", f"caption {i}"),))
        for i, image in enumerate(data)
    ]
    samples, size, bad = write_shard(task(tmp_path, items, "tar"))
    path = tmp_path / "shard-000000.tar"
    assert (samples, size, bad) == (3, path.stat().st_size, [])
    with tarfile.open(path) as tar:
        names = tar.getnames()
        contents = [tar.extractfile(name).read() for name in names]  # type: ignore[union-attr]
    assert names == [f"s{i}.{ext}" for i in range(3) for ext in ("png", "cls", "txt")]
    assert contents[0::3] == data
    assert contents[1::3] == [b"0", b"1", b"2"]
    assert contents[2::3] == [f"caption {i}".encode() for i in range(3)]


def test_a_parquet_shard_has_its_row_groups_and_extra_columns(tmp_path: Path) -> None:
    data = images(3)
    items = [
        Item(f"s{i}", image, len(image), None, "png", (("meta", {"i": i}),))
        for i, image in enumerate(data)
    ]
    field = pa.field("meta", pa.string())
    write_shard(task(tmp_path, items, "parquet", extra_fields=(field,)))
    file = pq.ParquetFile(tmp_path / "shard-000000.parquet")
    assert [file.metadata.row_group(g).num_rows for g in range(2)] == [2, 1]
    table = file.read()
    assert table.column_names == ["key", "image", "meta"]  # no labels: no label column
    assert table["image"].to_pylist() == data
    assert table["meta"].to_pylist() == [f'{{"i":{i}}}' for i in range(3)]


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_images_the_decode_check_refuses_are_skipped_and_listed_or_raised(
    tmp_path: Path, format: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = images(3)
    broken = good[1][: len(good[1]) // 2]  # a truncated PNG
    items = [
        Item(f"s{i}", image, len(image), 0, "png")
        for i, image in enumerate([good[0], broken, good[2]])
    ]
    published: list[str] = []
    publish = Destination.publish
    monkeypatch.setattr(Destination, "publish",
                        lambda self, staged, name: [published.append(name),
                                                    publish(self, staged, name)])  # fmt: skip
    samples, _, bad = write_shard(task(tmp_path, items, format, on_error="skip", digest="d1"))
    assert samples == 2 and [(b.key, b.image) for b in bad] == [("s1", "sample 's1'")]
    assert str(bad[0]).startswith("sample 's1': ")
    # what the shard left out is published first: a finished shard always has its record
    record = f"_shard-000000.{format}{LEFT_OUT}"
    assert published == [record, f"shard-000000.{format}"]
    assert json.loads((tmp_path / record).read_text()) == {
        "shard": f"shard-000000.{format}", "digest": "d1", "left_out": [list(bad[0])]
    }  # fmt: skip
    with pytest.raises(DecodeError, match="on_error='skip'") as info:
        write_shard(task(tmp_path / "raise", items, format))
    assert "sample 's1'" in str(info.value)
    assert not list((tmp_path / "raise").glob("*.tmp-*"))  # nothing half-written stays
    assert not list((tmp_path / "raise").iterdir())


def test_an_image_file_that_changed_since_the_plan_is_refused(tmp_path: Path) -> None:
    image = tmp_path / "a.png"
    image.write_bytes(images(1)[0])
    item = Item("a", str(image), image.stat().st_size + 1, 0, "png")
    with pytest.raises(fd.SourceError, match="changed during the conversion"):
        write_shard(task(tmp_path / "out", [item], "tar"))
    gone = item._replace(image=str(tmp_path / "gone.png"))
    with pytest.raises(fd.SourceError, match=r"cannot read the image.*on_error='skip'"):
        write_shard(task(tmp_path / "out", [gone], "tar"))


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_unreadable_files_and_samples_planned_bad_are_skipped_and_listed(
    tmp_path: Path, format: str
) -> None:
    good = images(2)
    (tmp_path / "link.png").symlink_to(tmp_path / "nowhere.png")  # a dangling link
    items = [
        Item("s0", good[0], len(good[0]), 0, "png"),
        Item("s1", str(tmp_path / "link.png"), 0, 0, "png"),
        Item("s2", b"<html>", 0, 0, "", bad="the bytes are not an image"),
        Item("s3", good[1], len(good[1]), 0, "png"),
    ]
    samples, _, bad = write_shard(task(tmp_path / "out", items, format, on_error="skip"))
    assert samples == 2 and [(b.key, b.image) for b in bad] == [
        ("s1", str(tmp_path / "link.png")),
        ("s2", "sample 's2'"),
    ]
    assert bad[0].reason.startswith("cannot read the image") and "No such file" in bad[0].reason
    assert bad[1].reason == "the bytes are not an image"


def test_a_bad_image_reads_as_its_place_and_reason() -> None:
    assert str(BadImage("k", "/x/k.jpg", "truncated")) == "/x/k.jpg: truncated"
