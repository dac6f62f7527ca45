"""ParquetRowGroups as the reader of ``ImageStream.from_parquet`` (encoded images in a binary
column): the reader contract (fastdata.check_reader). Parquet rows: see
tests/sources/test_parquet.py."""

from __future__ import annotations

from pathlib import Path

import fastdata as fd
from fastdata import check_reader

SMALL = {"min_short": 16, "max_short": 24}


def test_the_reader_of_images_in_parquet_keeps_the_contract(tmp_path: Path) -> None:
    fd.synthetic.make_image_parquet(tmp_path / "a", 30, files=2, row_group_size=4, **SMALL)
    fd.synthetic.make_image_parquet(tmp_path / "b", 30, files=2, row_group_size=4, seed=1, **SMALL)
    reader = fd.ImageStream.from_parquet(tmp_path / "a").reader
    changed = fd.ImageStream.from_parquet(tmp_path / "b").reader
    check_reader(reader, changed=changed, batch_size=3, shuffle=True, shuffle_buffer=8)
