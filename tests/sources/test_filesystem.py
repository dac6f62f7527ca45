"""fastdata.sources.filesystem: the file helpers the sources share with the dataset writer."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pyarrow.fs as pafs
import pytest

from fastdata.sources.filesystem import as_filesystem, below, digest, unlink


def test_a_filesystem_argument_becomes_a_pyarrow_filesystem(tmp_path: Path) -> None:
    local = pafs.LocalFileSystem()
    assert as_filesystem(None) is None
    assert as_filesystem(local) is local
    wrapped = as_filesystem(fsspec.filesystem("memory"))
    assert isinstance(wrapped, pafs.PyFileSystem)
    assert isinstance(wrapped.handler, pafs.FSSpecHandler)
    with pytest.raises(TypeError, match="fsspec filesystem"):
        as_filesystem(str(tmp_path))


def test_the_digest_is_of_the_value_not_its_key_order() -> None:
    assert digest({"a": 1, "b": [2, 3]}) == digest({"b": [2, 3], "a": 1})
    assert digest({"a": 1}) != digest({"a": 2})
    assert len(digest([])) == 16 and int(digest([]), 16) >= 0


def test_unlink_deletes_a_file_and_accepts_one_that_is_gone(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x")
    unlink(str(path))
    assert not path.exists()
    unlink(str(path))  # gone already: nothing to do


def test_below_reads_every_spelling_of_the_folder(tmp_path: Path, monkeypatch) -> None:
    """A listed path relative to its folder, however fsspec spells the folder: as given, with
    a root "/" (memory), or absolute (local) — also where the folder's name is a prefix of
    the working directory's path (a relative "tmp" under /tmp/...)."""
    monkeypatch.chdir(tmp_path)
    assert below("ds/out", "ds/out/a/x.parquet") == "a/x.parquet"
    assert below("ds/out", "/ds/out/x.parquet") == "x.parquet"
    assert below("out", f"{tmp_path}/out/x.parquet") == "x.parquet"
    top = tmp_path.parts[1]  # "tmp" for /tmp/pytest-of-...: the relative name starts the cwd
    assert below(top, f"{tmp_path}/{top}/shard-000000.parquet") == "shard-000000.parquet"
