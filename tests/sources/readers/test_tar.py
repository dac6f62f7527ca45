"""TarShards, the reader of ``ImageStream.from_tar``: the reader contract
(fastdata.check_reader)."""

from __future__ import annotations

from pathlib import Path

import pytest

import fastdata as fd
from fastdata import check_reader

SMALL = {"min_short": 16, "max_short": 24}


@pytest.mark.parametrize("shards", [1, 4])
def test_the_tar_reader_keeps_the_contract(tmp_path: Path, shards: int) -> None:
    fd.synthetic.make_tar_shards(tmp_path / "a", 30, shards=shards, **SMALL)
    fd.synthetic.make_tar_shards(tmp_path / "b", 30, shards=shards, seed=1, **SMALL)
    reader = fd.ImageStream.from_tar(tmp_path / "a").reader
    changed = fd.ImageStream.from_tar(tmp_path / "b").reader
    check_reader(reader, changed=changed, batch_size=4, shuffle=True)
