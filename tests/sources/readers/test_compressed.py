"""fastdata.sources.readers._compressed: shards compressed whole, recognised by their first
bytes, read through a decompressor that seeks, and kept open between a reader's pieces."""

from __future__ import annotations

import io
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from fastdata.sources.readers._compressed import Streams, open_shard, shard_compression

from .tar_files import write_tar

LOCAL = pafs.LocalFileSystem()
MEMBERS = [(f"s{i}.bin", bytes(range(i, i + 200)) * 40) for i in range(5)]


@pytest.mark.parametrize(
    ("mode", "compression"),
    [("w", None), ("w:gz", "gzip"), ("w:bz2", "bz2"), ("w:xz", "xz")],
)
def test_a_shard_is_recognised_by_its_first_bytes(
    tmp_path: Path, mode: str, compression: str | None
) -> None:
    shard = write_tar(tmp_path / "shard.bin", MEMBERS, mode)  # the name says nothing
    assert shard_compression(LOCAL, str(shard)) == compression


@pytest.mark.parametrize("mode", ["w:gz", "w:bz2", "w:xz"])
def test_a_compressed_shard_reads_as_its_tar_and_seeks_both_ways(tmp_path: Path, mode: str) -> None:
    plain = write_tar(tmp_path / "plain.tar", MEMBERS).read_bytes()
    shard = write_tar(tmp_path / "shard", MEMBERS, mode)
    with open_shard(LOCAL, str(shard), shard_compression(LOCAL, str(shard))) as f:
        assert f.read() == plain
        for offset in (5_000, 100, len(plain) - 10):  # back to the start, then forward again
            f.seek(offset)
            assert f.tell() == offset
            assert f.read(10) == plain[offset : offset + 10]
        f.seek(-10, io.SEEK_CUR)
        assert f.read() == plain[-10:]


def test_a_reader_keeps_the_decompressor_positioned_after_its_last_read(tmp_path: Path) -> None:
    shard = str(write_tar(tmp_path / "shard.tar.gz", MEMBERS, "w:gz"))
    streams = Streams()
    first = streams.take(LOCAL, shard, "gzip", 0)
    first.read(3_000)
    streams.give(shard, first)
    assert streams.take(LOCAL, shard, "gzip", 2_000) is not first  # it is past 2,000 already
    streams.give(shard, first)
    again = streams.take(LOCAL, shard, "gzip", 4_000)
    assert again is first and again.tell() == 3_000
    streams.give(shard, again)
    for _ in range(4):  # more than a reader keeps open: the least recently used is closed
        streams.give("other", streams.take(LOCAL, shard, "gzip", 0))
    assert first.closed
