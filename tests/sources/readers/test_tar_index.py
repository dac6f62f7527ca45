"""fastdata.sources.readers._tar_index: a shard's samples from its member headers, and where
a truncated shard stops."""

from __future__ import annotations

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fastdata.errors import SourceError
from fastdata.sources.readers._tar_index import index_shard, split_key

from .tar_files import write_tar

LOCAL = pafs.LocalFileSystem()


def test_a_key_is_the_name_up_to_the_first_dot_of_its_base_name() -> None:
    assert split_key("dir.v2/sample-1.seg.JPG") == ("dir.v2/sample-1", "seg.jpg")
    assert split_key("a.cls") == ("a", "cls")


def test_adjacent_members_sharing_a_key_are_one_sample(tmp_path: Path) -> None:
    shard = write_tar(
        tmp_path / "s.tar",
        [("a.jpg", b"A" * 5), ("a.cls", b"1"), ("a.txt", b"hi"), ("b.png", b"BB"), ("b.cls", b"2")],
    )
    index = index_shard(LOCAL, str(shard))
    assert index.truncated is None and index.compression is None
    assert [s.key for s in index.samples] == ["a", "b"]
    first = index.samples[0]
    assert (first.image.name, first.image.size, first.label.name) == ("a.jpg", 5, "a.cls")
    with open(shard, "rb") as f:  # the offsets are where the members' bytes are
        f.seek(first.image.offset)
        assert f.read(first.image.size) == b"A" * 5
    with_text = index_shard(LOCAL, str(shard), image_suffixes=["png", "jpg"], extra_suffixes=[])
    assert with_text.samples[1].image.name == "b.png"


def test_extra_members_every_sample_needs_are_checked(tmp_path: Path) -> None:
    both = write_tar(tmp_path / "both.tar", [("a.jpg", b"A"), ("a.txt", b"t")])
    extras = index_shard(LOCAL, str(both), extra_suffixes=["txt"]).samples[0].extras
    assert [(m.name, m.size) for m in extras] == [("a.txt", 1)]
    shard = write_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.txt", b"t"), ("b.jpg", b"B")])
    with pytest.raises(SourceError, match=r"no \.txt member") as caught:
        index_shard(LOCAL, str(shard), extra_suffixes=["txt"])
    assert caught.value.member == "b.jpg"
    with pytest.raises(SourceError, match="no image member"):
        index_shard(LOCAL, str(write_tar(tmp_path / "t.tar", [("c.cls", b"1")])))


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_a_truncated_shard_keeps_the_samples_before_the_cut(tmp_path: Path, mode: str) -> None:
    members = [(f"s{i}.jpg", bytes([i]) * 700) for i in range(6)]
    whole = write_tar(tmp_path / "whole.tar", members, mode).read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: len(whole) // 2])
    index = index_shard(LOCAL, str(cut))
    assert isinstance(index.truncated, SourceError)
    assert "truncated" in index.truncated.reason and index.truncated.path == str(cut)
    kept = [s.key for s in index.samples]
    assert kept == [f"s{i}" for i in range(len(kept))] and len(kept) < 5
    if mode == "w":  # cut after s3's header (3 x 1,536 bytes + 512): s2 was being read when
        assert kept == ["s0"]  # the cut came, and s1, the last before it, may lack a member


def test_a_file_that_is_no_tar_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.tar").write_bytes(b"no tar at all, " * 100)
    with pytest.raises(SourceError, match="not a tar file"):
        index_shard(LOCAL, str(tmp_path / "x.tar"))
