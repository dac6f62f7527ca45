"""fastdata.sources.readers.tar: TarShards, the reader of ``ImageStream.from_tar`` — the reader
contract (fastdata.check_reader), reading a sample's members, and a truncated shard."""

from __future__ import annotations

import tarfile
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


def test_a_truncated_shard_is_refused_or_skipped_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    members = [(f"s{i}.jpg", bytes([i]) * 700) for i in range(6)]
    whole = write_tar(tmp_path / "a.tar", members)
    cut = tmp_path / "b.tar"
    cut.write_bytes(whole.read_bytes()[:5000])  # 3 members of 512 + 1,024 bytes, then a cut
    listing = resolve_files([str(whole), str(cut)])
    with pytest.raises(SourceError, match=r"truncated .* after 3 complete.*on_error='skip'"):
        TarShards(listing)
    reader = TarShards(listing, on_error="skip")
    assert reader.skipped == 1
    assert reader.unit_rows() == [6, 3]  # s0-s2 lie before the cut, s3's header is cut
    assert reader.read(0, 2, 4).column_names == ["data"]  # no label members: no label column
    assert reader.location(1, 2) == {"path": str(cut), "member": "s2.jpg"}
    (warning,) = [r.getMessage() for r in caplog.records if "truncated" in r.getMessage()]
    assert "after 3 complete sample(s)" in warning and "pass on_error" not in warning


def _stream_labels(stream: fd.ImageStream, num_workers: int) -> list[int]:
    loader = fd.DataLoader(stream, batch_size=None, num_workers=num_workers)
    return sorted(int(label) for _, labels in loader for label in labels)


def _cut_half(shard: Path) -> list[int]:
    """Cut ``shard`` (of make_tar_shards) in half; the labels of its samples whose members
    all lie before the cut."""
    data = shard.read_bytes()
    with tarfile.open(shard) as tar:
        ends = {m.name: m.offset_data + m.size for m in tar.getmembers()}
    shard.write_bytes(data[: len(data) // 2])
    complete = [
        name for name, end in ends.items() if name.endswith(".cls") and end <= len(data) // 2
    ]
    return [int(name[len("sample-") : -len(".cls")]) for name in complete]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_skip_reads_every_complete_sample_of_a_cut_shard(tmp_path: Path, num_workers: int) -> None:
    shards = fd.synthetic.make_tar_shards(tmp_path, 30, shards=3, classes=30, **SMALL)
    kept = _cut_half(shards[1])
    options = {"size": 8, "crop": "center", "batch_size": 4, "on_error": "skip"}
    stream = fd.ImageStream.from_tar(tmp_path, **options)
    assert _stream_labels(stream, num_workers) == [*range(10), *kept, *range(20, 30)]
    assert stream.skipped == 1


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.filterwarnings("ignore:skipped a bad image")
def test_a_shard_cut_after_indexing_is_skipped_from_the_cut_and_counted(
    tmp_path: Path, num_workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    shards = fd.synthetic.make_tar_shards(tmp_path, 30, shards=3, classes=30, **SMALL)
    options = {"size": 8, "crop": "center", "batch_size": 4}
    refusing = fd.ImageStream.from_tar(tmp_path, **options)
    stream = fd.ImageStream.from_tar(tmp_path, on_error="skip", **options)
    kept = _cut_half(shards[1])
    labels = _stream_labels(stream, num_workers)
    assert labels == [*range(10), *kept, *range(20, 30)]
    assert stream.skipped == 10 - len(kept)  # each sample from the cut on
    if num_workers == 0:  # (a worker process logs in its own process)
        lost = f"sample-{10 + len(kept):06d}.jpg"
        assert f"its samples from {lost} on are skipped" in caplog.text
    with pytest.raises(SourceError, match=r"cut short.*since it was indexed") as caught:
        _stream_labels(refusing, 0)
    assert caught.value.path == str(shards[1])
    assert caught.value.member.startswith(f"sample-{10 + len(kept):06d}.")


def test_samples_labelled_by_halves_are_refused(tmp_path: Path) -> None:
    shard = write_tar(tmp_path / "s.tar", [("a.jpg", b"A"), ("a.cls", b"1"), ("b.jpg", b"B")])
    with pytest.raises(SourceError, match="label all or none") as caught:
        TarShards(resolve_files(str(shard)))
    assert caught.value.member == "b.jpg"
