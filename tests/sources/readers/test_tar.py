"""fastdata.sources.readers.tar: TarShards, the reader of ``ImageStream.from_tar`` — the reader
contract (fastdata.check_reader), reading a sample's members, and a truncated shard."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

import fastdata as fd
from fastdata import check_reader
from fastdata.errors import SourceError
from fastdata.sources._files import resolve_files
from fastdata.sources.readers._tar_index import index_shard
from fastdata.sources.readers.tar import TarShards, read_samples

from .tar_files import write_tar

LOCAL = pafs.LocalFileSystem()

SMALL = {"min_short": 16, "max_short": 24}


@pytest.mark.parametrize("shards", [1, 4])
def test_the_tar_reader_keeps_the_contract(tmp_path: Path, shards: int) -> None:
    fd.synthetic.make_tar_shards(tmp_path / "a", 30, shards=shards, **SMALL)
    fd.synthetic.make_tar_shards(tmp_path / "b", 30, shards=shards, seed=1, **SMALL)
    reader = fd.ImageStream.from_tar(tmp_path / "a").reader
    changed = fd.ImageStream.from_tar(tmp_path / "b").reader
    check_reader(reader, changed=changed, batch_size=4, shuffle=True)


def test_read_samples_reads_images_labels_and_extra_members(tmp_path: Path) -> None:
    shard = write_tar(
        tmp_path / "s.tar",
        [("a.jpg", b"A"), ("a.cls", b"1"), ("a.txt", b"one"), ("b.jpg", b"BB"), ("b.cls", b"2"),
         ("b.txt", b"two")],
    )  # fmt: skip
    index = index_shard(LOCAL, str(shard), extra_suffixes=["txt"])
    table = read_samples(LOCAL, str(shard), index.samples, extra_suffixes=["txt"])
    assert table.to_pydict() == {"data": [b"A", b"BB"], "label": [1, 2], "txt": ["one", "two"]}


def test_a_truncated_shard_is_refused_or_skipped_and_counted(tmp_path: Path) -> None:
    members = [(f"s{i}.jpg", bytes([i]) * 700) for i in range(6)]
    whole = write_tar(tmp_path / "a.tar", members)
    cut = tmp_path / "b.tar"
    cut.write_bytes(whole.read_bytes()[:5000])  # 3 members of 512 + 1,024 bytes, then a cut
    listing = resolve_files([str(whole), str(cut)])
    with pytest.raises(SourceError, match="truncated"):
        TarShards(listing)
    reader = TarShards(listing, on_error="skip")
    assert reader.skipped == 1
    # s3 is cut, s2 was being read (more members may have followed), s1 is dropped as the
    # module says: the last sample before the cut may have lost a member
    assert reader.unit_rows() == [6, 1]
    assert reader.read(0, 2, 4).column_names == ["data"]  # no label members: no label column
    assert reader.location(1, 0) == {"path": str(cut), "member": "s0.jpg"}


def test_samples_labelled_by_halves_are_refused(tmp_path: Path) -> None:
    shard = write_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B")])
    with pytest.raises(SourceError, match="label all or none") as caught:
        TarShards(resolve_files(str(shard)))
    assert caught.value.member == "b.jpg"
