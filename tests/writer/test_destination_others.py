"""What a conversion makes of the files in its destination that are not its shards
(fastdata.writer._destination): the write side agrees with what the streams read of the
folder. Only names shaped like the writer's shards are ever deleted; files the streams
would not read with the shards (below a conversion of their own, or beside the shards of a
folder that has a manifest) are no reason to refuse; the folder is listed as the streams
list it (each real folder once, on any filesystem's spelling of the path)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastdata as fd
from fastdata.writer import folder_samples, write_shards
from fastdata.writer._destination import MANIFEST

from .writer_helpers import SMALL

OPTIONS: dict[str, Any] = {"size": 16, "crop": "center", "batch_size": None}


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    root = tmp_path_factory.mktemp("others") / "train"
    fd.synthetic.make_images(root, 6, classes=2, **SMALL)
    return folder_samples(root)[0]


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_export_named_with_the_prefix_is_refused_and_never_deleted(
    samples: list[Any], overwrite: bool, tmp_path: Path
) -> None:
    """Hugging Face names a split's export ``train-00000-of-00001.parquet``; with the prefix
    ``train`` it passed for a shard, and ``overwrite`` deleted it (old code)."""
    export = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3]}), export)
    with pytest.raises(ValueError, match=r"1 Parquet file that no conversion wrote \(train-0"):
        write_shards(samples, tmp_path, format="parquet", prefix="train", overwrite=overwrite)
    assert sorted(p.name for p in tmp_path.iterdir()) == [export.name]
    assert pq.read_table(export).num_rows == 3


def test_overwrite_deletes_only_names_shaped_like_the_shards(
    samples: list[Any], tmp_path: Path
) -> None:
    write_shards(samples, tmp_path, format="tar", prefix="train", workers=0)
    (tmp_path / "train-000007.tar").write_bytes(b"an old shard")  # shaped like one: ours
    (tmp_path / "train-notes.txt").write_text("the user's")  # old code: deleted
    with pytest.raises(ValueError, match="named like this conversion's shards"):
        write_shards(samples, tmp_path, format="tar", prefix="train", workers=0)
    result = write_shards(samples, tmp_path, format="tar", prefix="train", overwrite=True)
    assert result.written == 1
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [MANIFEST, "train-000000.tar", "train-notes.txt"]


@pytest.mark.parametrize("dest", ["ds/out", "/ds/abs", "local"])
def test_a_rerun_on_an_fsspec_filesystem_keeps_its_shards(
    samples: list[Any], dest: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fsspec lists ``ds/out`` as ``/ds/out/...`` (memory) and a relative local path as an
    absolute one: the conversion's own shards were taken for another's files (old code:
    the rerun was refused, and a stream over ``ds/out`` refused the folder as unfinished)."""
    monkeypatch.chdir(tmp_path)
    fs = fsspec.filesystem("file" if dest == "local" else "memory")
    try:
        first = write_shards(samples, dest, format="parquet", filesystem=fs, workers=0,
                             target_shard_bytes="4kB")  # fmt: skip
        again = write_shards(samples, dest, format="parquet", filesystem=fs, workers=0,
                             target_shard_bytes="4kB")  # fmt: skip
        assert first.written >= 2 and (again.skipped, again.written) == (first.written, 0)
        stream = fd.ImageStream.from_parquet(dest, filesystem=fs, **OPTIONS)
        assert sum(1 for _ in stream) == 6
    finally:
        if dest != "local":
            fs.rm("/ds", recursive=True)


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_a_conversion_beside_or_below_another_is_not_foreign(
    samples: list[Any], format: str, tmp_path: Path
) -> None:
    """Old code: writing ``data/val`` and then ``data`` was refused (``val``'s shard "no
    conversion wrote"); and a file copied into a finished conversion's folder made every
    rerun refused, with ``overwrite`` too, though the streams leave it out."""
    data = tmp_path / "data"
    write_shards(samples[:2], data / "val", format=format, workers=0)
    assert write_shards(samples[2:], data, format=format, workers=0).written == 1
    copy = data / f"copy.{format}"
    shutil.copy(data / f"shard-000000.{format}", copy)
    kind = "tar" if format == "tar" else "Parquet"
    warned = rf"1 {kind} file that its {MANIFEST} does not list \(copy.{format}\): streams"
    for overwrite in (False, True):
        with pytest.warns(UserWarning, match=warned):
            write_shards(samples[2:], data, format=format, overwrite=overwrite, workers=0)
    assert copy.exists() and (data / "val" / f"shard-000000.{format}").exists()
    with pytest.warns(UserWarning, match="left out"):
        opened = getattr(fd.ImageStream, f"from_{format}")(data, **OPTIONS)
    assert sum(1 for _ in opened) == 4


@pytest.mark.skipif(os.name == "nt", reason="symbolic links")
def test_a_link_loop_in_the_destination_is_listed_once(samples: list[Any], tmp_path: Path) -> None:
    """``out/loop -> out``: old code listed ``loop/loop/...`` 40 deep and refused the rerun."""
    write_shards(samples, tmp_path / "out", format="parquet", workers=0)
    (tmp_path / "out" / "loop").symlink_to(tmp_path / "out")
    again = write_shards(samples, tmp_path / "out", format="parquet", workers=0)
    assert (again.skipped, again.written) == (1, 0)
