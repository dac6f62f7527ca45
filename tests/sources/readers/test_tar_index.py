"""fastdata.sources.readers._tar_index: a shard's samples from its member headers, and where
a truncated shard stops."""

from __future__ import annotations

import bz2
import io
import lzma
import tarfile
import zlib
from pathlib import Path

import pyarrow.fs as pafs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastdata.errors import SourceError
from fastdata.sources.readers._tar_index import ShardIndex, index_shard, split_key

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


# A shard's samples by kind: the suffixes of each sample's members, in order, and the
# index_shard options that read them.
KINDS = {
    "labelled": (("jpg", "cls"), {}),
    "unlabelled": (("jpg",), {"label_suffixes": ()}),
    "multimodal": (("jpg", "cls", "txt"), {"extra_suffixes": ["txt"]}),
}


def _shard(tmp_path: Path, kind: str, sizes: list[int], mode: str = "w") -> tuple[Path, list[int]]:
    """A shard of ``len(sizes)`` samples of ``kind`` (image ``i`` of ``sizes[i]`` bytes), and
    the byte at which each sample's last member's data ends (in the tar, uncompressed)."""
    suffixes, _ = KINDS[kind]
    payload = {"jpg": lambda i: bytes([i]) * sizes[i], "cls": lambda i: str(i).encode()}
    members = [
        (f"s{i:02d}.{suffix}", payload.get(suffix, lambda i: b"text %d" % i)(i))
        for i in range(len(sizes))
        for suffix in suffixes
    ]
    shard = write_tar(tmp_path / f"{kind}.tar{mode[2:] and '.' + mode[2:]}", members, mode)
    plain = write_tar(tmp_path / "plain.tar", members)
    with tarfile.open(plain) as tar:
        ends = {m.name: m.offset_data + m.size for m in tar.getmembers()}
    return shard, [ends[f"s{i:02d}.{suffixes[-1]}"] for i in range(len(sizes))]


def _keys(index: ShardIndex) -> list[str]:
    return [s.key for s in index.samples]


@given(
    kind=st.sampled_from(sorted(KINDS)),
    sizes=st.lists(st.integers(0, 1500), min_size=1, max_size=5),
    data=st.data(),
)
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_cut_shard_keeps_exactly_its_complete_samples(
    tmp_path: Path, kind: str, sizes: list[int], data: st.DataObject
) -> None:
    # cut anywhere: the samples kept are those whose members all lie before the cut, in
    # order, and the error counts them; a cut inside the end-of-archive marker loses nothing
    shard, ends = _shard(tmp_path, kind, sizes)
    whole = shard.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(whole[: data.draw(st.integers(0, len(whole) - 1), label="cut")])
    index = index_shard(LOCAL, str(cut), **KINDS[kind][1])
    complete = [f"s{i:02d}" for i, end in enumerate(ends) if end <= cut.stat().st_size]
    assert _keys(index) == complete
    if index.truncated is None:
        assert len(complete) == len(sizes)
    else:
        assert f"after {len(complete)} complete sample(s)" in index.truncated.reason
        assert index.truncated.path == str(cut)


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
@given(sizes=st.lists(st.integers(0, 3000), min_size=1, max_size=6), data=st.data())
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_a_cut_compressed_shard_keeps_exactly_its_complete_samples(
    tmp_path: Path, mode: str, sizes: list[int], data: st.DataObject
) -> None:
    # pyarrow's gzip and bzip2 codecs drop what they hold at the cut; the shard is then
    # decompressed again by Python's, which hands over every byte before it
    shard, ends = _shard(tmp_path, "labelled", sizes, mode)
    whole = shard.read_bytes()
    cut = tmp_path / f"cut{''.join(shard.suffixes)}"  # (pyarrow guesses by the name)
    cut.write_bytes(whole[: data.draw(st.integers(10, len(whole) - 1), label="cut")])
    index = index_shard(LOCAL, str(cut))
    decompressed = len(_salvage(cut.read_bytes(), mode))
    assert _keys(index) == [f"s{i:02d}" for i, end in enumerate(ends) if end <= decompressed]
    if index.truncated is not None:
        assert f"after {len(index.samples)} complete sample(s)" in index.truncated.reason


def _salvage(data: bytes, mode: str) -> bytes:
    """The bytes a cut compressed stream holds (what decompresses before its cut)."""
    make = {"w:gz": lambda: zlib.decompressobj(31), "w:bz2": bz2.BZ2Decompressor}
    decompressor = make.get(mode, lzma.LZMADecompressor)()
    return decompressor.decompress(data)


def test_a_cut_in_the_last_members_padding_loses_nothing(tmp_path: Path) -> None:
    shard, ends = _shard(tmp_path, "labelled", [700, 700, 700])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(shard.read_bytes()[: ends[-1] + 5])  # all bytes of s02.cls, not its padding
    index = index_shard(LOCAL, str(cut))
    assert _keys(index) == ["s00", "s01", "s02"]
    assert index.truncated is not None
    assert "after 3 complete sample(s): any member after 's02.cls' is lost" in (
        index.truncated.reason
    )


def test_one_complete_sample_before_the_cut_is_kept(tmp_path: Path) -> None:
    shard, ends = _shard(tmp_path, "labelled", [5000, 5000])
    cut = tmp_path / "cut.tar"
    cut.write_bytes(shard.read_bytes()[: ends[0] + 1024])  # s01.jpg's header, part of its data
    index = index_shard(LOCAL, str(cut))
    assert _keys(index) == ["s00"]
    assert index.truncated is not None and index.truncated.member == "s01.jpg"
    assert "after 1 complete sample(s): sample 's01' and any after it are lost" in (
        index.truncated.reason
    )


def test_a_sample_that_may_have_lost_a_member_at_the_cut_is_dropped(tmp_path: Path) -> None:
    # cut right after s01.jpg: whether s01 had a .cls member cannot be seen in the file,
    # and s00 shows that a sample has one
    shard, _ = _shard(tmp_path, "labelled", [700, 700, 700])
    with tarfile.open(shard) as tar:
        cls = tar.getmember("s01.cls")
    cut = tmp_path / "cut.tar"
    cut.write_bytes(shard.read_bytes()[: cls.offset])
    index = index_shard(LOCAL, str(cut))
    assert _keys(index) == ["s00"]
    assert "sample 's01' and any after it are lost" in str(index.truncated)


def test_members_without_a_key_or_suffix_are_left_out_as_webdataset_does(tmp_path: Path) -> None:
    shard = write_tar(
        tmp_path / "s.tar",
        [("README", b"hi"), ("a.jpg", b"A"), (".hidden", b"x"), ("a.cls", b"0"),
         ("dir/LICENSE", b"y"), ("b.jpg", b"B"), ("b.cls", b"1")],
    )  # fmt: skip
    index = index_shard(LOCAL, str(shard))
    assert [(s.key, s.label.name if s.label else None) for s in index.samples] == [
        ("a", "a.cls"),
        ("b", "b.cls"),
    ]


def test_a_link_member_is_named_in_the_error(tmp_path: Path) -> None:
    shard = write_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"0")])
    with tarfile.open(shard, "a") as tar:
        link = tarfile.TarInfo("b.jpg")
        link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
        tar.addfile(link)
        label = tarfile.TarInfo("b.cls")
        label.size = 1
        tar.addfile(label, io.BytesIO(b"1"))
    with pytest.raises(SourceError, match=r"b\.jpg is a link to 'a\.jpg'.*not followed") as caught:
        index_shard(LOCAL, str(shard))
    assert caught.value.member == "b.jpg"


def test_a_file_that_is_no_tar_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "x.tar").write_bytes(b"no tar at all, " * 100)
    with pytest.raises(SourceError, match="not a tar file"):
        index_shard(LOCAL, str(tmp_path / "x.tar"))
