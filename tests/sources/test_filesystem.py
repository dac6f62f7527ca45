"""fastdata.sources.filesystem: the file helpers the sources share with the dataset writer."""

from __future__ import annotations

from pathlib import Path

import fsspec
import pyarrow.fs as pafs
import pytest

from fastdata.sources.filesystem import as_filesystem, digest, unlink


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
