"""fastdata.writer: folder -> shards -> stream round trips (each sample exactly once),
deterministic bytes, resuming (also after a killed run), object storage, and the
``fastdata convert`` command line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from hypothesis import given
from hypothesis import strategies as st

import fastdata as fd
from fastdata.cli import main
from fastdata.writer import (
    Sample,
    WriteProgress,
    folder_samples,
    split_by_bytes,
    write_shards,
)

from .writer_helpers import SMALL, tree_bytes


def decoded(stream: fd.ImageStream) -> Counter[tuple[str, int]]:
    """(pixel hash, label) of every sample a stream yields, through 2 DataLoader workers."""
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2)
    return Counter(
        (hashlib.sha1(image.numpy().tobytes()).hexdigest(), label)
        for images, labels in loader
        for image, label in zip(images, labels.tolist(), strict=True)
    )


# --------------------------------------------------------------------------- planning
@given(st.lists(st.integers(0, 100), max_size=60), st.integers(1, 250))
def test_split_by_bytes_is_a_greedy_partition_in_order(sizes: list[int], target: int) -> None:
    ranges = split_by_bytes(sizes, target)
    assert [i for r in ranges for i in r] == list(range(len(sizes)))
    for k, r in enumerate(ranges):
        total = sum(sizes[i] for i in r)
        assert len(r) >= 1 and (total <= target or len(r) == 1)
        if k + 1 < len(ranges):  # the next range starts where this one would overflow
            assert total + sizes[r.stop] > target


# --------------------------------------------------------------------------- round trips
@pytest.mark.parametrize("format", ["parquet", "tar"])
def test_folder_to_shards_to_stream_gives_each_sample_once(
    format: str, folder: Path, tmp_path: Path
) -> None:
    samples, classes = folder_samples(folder)
    assert classes == ["class_00", "class_01", "class_02"] and len(samples) == 64
    progress: list[WriteProgress] = []
    result = write_shards(
        samples, tmp_path / "out", format=format, target_shard_bytes="40kB",
        row_group_bytes="10kB", classes=classes, workers=2, on_progress=progress.append,
    )  # fmt: skip
    assert result.written == len(result.paths) >= 3 and result.skipped == 0
    assert [p.shards_done for p in progress] == list(range(1, result.written + 1))
    assert progress[-1].samples_done == result.samples == 64
    options = {"size": 24, "crop": "center", "batch_size": 8, "shuffle": True}
    if format == "tar":
        shards = fd.ImageStream.from_tar(tmp_path / "out", **options)
    else:
        shards = fd.ImageStream.from_parquet(tmp_path / "out", **options)
        groups = [len(p.metadata.row_group(0).to_dict()["columns"]) for p in _parquet(result.paths)]
        assert groups == [3] * len(result.paths)  # key, image, label
    assert decoded(shards) == decoded(fd.ImageStream.from_folder(folder, **options))
    manifest = json.loads((tmp_path / "out" / "_fastdata_shards.json").read_text())
    assert manifest["classes"] == classes and manifest["samples"] == 64
    assert [s["name"] for s in manifest["shards"]] == [Path(p).name for p in result.paths]


def _parquet(paths: list[str]) -> list[Any]:
    import pyarrow.parquet as pq

    return [pq.ParquetFile(p) for p in paths]


def test_parquet_shards_hold_the_files_bytes_in_row_groups_of_the_target(
    folder: Path, tmp_path: Path
) -> None:
    samples, _ = folder_samples(folder)
    result = write_shards(samples, tmp_path, target_shard_bytes="60kB", row_group_bytes="8kB")
    rows = list(fd.ParquetStream(result.paths, columns=["key", "image", "label"]))
    files = {p: p.read_bytes() for p in sorted(folder.rglob("*.*"))}
    assert [(r["image"], int(r["label"])) for r in rows] == [
        (s.image and files[Path(s.image)], s.label) for s in samples
    ]
    assert [r["key"] for r in rows] == [f"{i:09d}" for i in range(64)]
    for shard in _parquet(result.paths):
        groups = [shard.metadata.row_group(g) for g in range(shard.num_row_groups)]
        assert len(groups) >= 2
        # 8 kB of images per row group (and a little Parquet overhead), or one larger image
        assert all(g.total_byte_size <= 9_000 or g.num_rows == 1 for g in groups)


def test_tar_shards_are_webdataset_samples_in_order(folder: Path, tmp_path: Path) -> None:
    samples, _ = folder_samples(folder)
    result = write_shards(samples, tmp_path, format="tar", target_shard_bytes="50kB")
    members = []
    for path in result.paths:
        with tarfile.open(path) as tar:
            members += [(m.name, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]
            assert 40_000 <= Path(path).stat().st_size <= 70_000 or path == result.paths[-1]
    expected = []
    for i, s in enumerate(samples):
        suffix = Path(str(s.image)).suffix[1:]
        expected += [(f"{i:09d}.{suffix}", Path(str(s.image)).read_bytes()),
                     (f"{i:09d}.cls", str(s.label).encode())]  # fmt: skip
    assert members == expected


def test_bytes_samples_keys_and_unlabelled_data(tmp_path: Path) -> None:
    images = fd.synthetic.make_image_bytes(5, fmt="png", **SMALL)
    samples = [{"image": data, "key": f"dir/img-{i}"} for i, (data, _) in enumerate(images)]
    result = write_shards(samples, tmp_path, format="tar", target_shard_bytes="1GB")
    with tarfile.open(result.paths[0]) as tar:
        assert tar.getnames() == [f"dir/img-{i}.png" for i in range(5)]
    stream = fd.ImageStream.from_tar(result.paths, label_suffixes=())
    assert [image.shape[0] for image in stream] == [3] * 5


def test_bad_samples_are_refused_with_the_reason(folder: Path, tmp_path: Path) -> None:
    image = next(folder.rglob("*.jpg"))
    with pytest.raises(ValueError, match="samples is empty"):
        write_shards([], tmp_path)
    with pytest.raises(ValueError, match="some samples have a label"):
        write_shards([Sample(str(image), 1), Sample(str(image))], tmp_path)
    with pytest.raises(ValueError, match="keys must be unique"):
        write_shards([Sample(str(image), key="a"), Sample(str(image), key="a")], tmp_path)
    with pytest.raises(ValueError, match=r"key='a\.b'"):
        write_shards([Sample(str(image), key="a.b")], tmp_path)
    with pytest.raises(ValueError, match="not a jpeg, png"):
        write_shards([Sample(b"not an image")], tmp_path)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="extension 'txt'"):
        write_shards([Sample(str(tmp_path / "notes.txt"))], tmp_path / "o")
    with pytest.raises(fd.SourceError, match="no such image file"):
        write_shards([Sample(str(tmp_path / "gone.jpg"))], tmp_path / "o")
    with pytest.raises(ValueError, match="format='zip'"):
        write_shards([Sample(str(image))], tmp_path, format="zip")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- determinism, resume
def test_the_same_samples_give_byte_identical_shards(folder: Path, tmp_path: Path) -> None:
    samples, _ = folder_samples(folder)
    for format in ("parquet", "tar"):
        a = write_shards(samples, tmp_path / f"a-{format}", format=format,
                         target_shard_bytes="30kB", workers=0)  # fmt: skip
        b = write_shards(samples, tmp_path / f"b-{format}", format=format,
                         target_shard_bytes="30kB", workers=2)  # fmt: skip
        assert tree_bytes(tmp_path / f"a-{format}") == tree_bytes(tmp_path / f"b-{format}")
        assert len(a.paths) == len(b.paths) >= 4


def test_a_second_run_writes_only_the_missing_shards(folder: Path, tmp_path: Path) -> None:
    samples, _ = folder_samples(folder)
    first = write_shards(samples, tmp_path, format="tar", target_shard_bytes="30kB")
    before = tree_bytes(tmp_path)
    Path(first.paths[1]).unlink()
    stale = tmp_path / f".{Path(first.paths[2]).name}.tmp-99999-deadbeef"
    stale.write_bytes(b"half a shard")  # what a killed run leaves
    again = write_shards(samples, tmp_path, format="tar", target_shard_bytes="30kB")
    assert (again.written, again.skipped) == (1, len(first.paths) - 1)
    assert tree_bytes(tmp_path) == before and not stale.exists()
    with pytest.raises(ValueError, match="holds the shards of another conversion"):
        write_shards(samples[1:], tmp_path, format="tar", target_shard_bytes="30kB")


def test_a_failing_shard_publishes_nothing(folder: Path, tmp_path: Path) -> None:
    samples, _ = folder_samples(folder)
    source = tmp_path / "src.jpg"
    source.write_bytes(Path(str(samples[0].image)).read_bytes())
    changed = Sample(str(source), 0, size=source.stat().st_size + 1)  # the file "changed"
    planned = [*samples[:10], changed, *samples[10:20]]
    with pytest.raises(fd.SourceError, match="changed during the conversion"):
        write_shards(planned, tmp_path / "out", format="tar", target_shard_bytes=1, workers=2)
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "shard-000010.tar" not in written and not [n for n in written if ".tmp-" in n]
    assert "_fastdata_shards.json" in written


def test_a_killed_conversion_resumes_to_the_same_shards(folder: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    fd.synthetic.make_images(big, 300, classes=2, **SMALL)
    command = [sys.executable, "-m", "fastdata", "convert", str(big), str(tmp_path / "out"),
               "--format", "tar", "--shard-size", "1", "--workers", "0", "--quiet"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(fd.__file__).parents[1])}
    run = subprocess.Popen(command, env=env)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "out").glob("shard-*.tar")) and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()
    finished = len(list((tmp_path / "out").glob("shard-*.tar")))
    assert 1 <= finished < 300
    assert subprocess.run(command, env=env).returncode == 0
    assert not [p for p in (tmp_path / "out").iterdir() if ".tmp-" in p.name]
    samples, _ = folder_samples(big)
    write_shards(samples, tmp_path / "clean", format="tar", target_shard_bytes=1, classes=None)
    resumed = tree_bytes(tmp_path / "out")
    clean = tree_bytes(tmp_path / "clean")
    resumed.pop("_fastdata_shards.json"), clean.pop("_fastdata_shards.json")
    assert resumed == clean and len(clean) == 300


# --------------------------------------------------------------------------- object storage
def test_shards_written_to_s3_stream_back_once(
    folder: Path, s3fs_pyarrow, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = f"writer-{uuid.uuid4().hex[:12]}"
    samples, classes = folder_samples(folder)
    staging = tmp_path / "tmp"  # where shards for a remote destination are written first
    staging.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(staging))
    result = write_shards(samples, f"{bucket}/out", filesystem=s3fs_pyarrow, format="tar",
                          target_shard_bytes="40kB", classes=classes)  # fmt: skip
    assert list(staging.iterdir()) == []  # nothing left behind
    assert result.paths[0] == f"{bucket}/out/shard-000000.tar"
    infos = s3fs_pyarrow.get_file_info(pafs.FileSelector(f"{bucket}/out"))
    assert sorted(i.base_name for i in infos) == sorted(
        ["_fastdata_shards.json", *(Path(p).name for p in result.paths)]
    )
    options = {"size": 24, "crop": "center", "batch_size": 8}
    stream = fd.ImageStream.from_tar(f"{bucket}/out", filesystem=s3fs_pyarrow, **options)
    assert decoded(stream) == decoded(fd.ImageStream.from_folder(folder, **options))
    again = write_shards(samples, f"{bucket}/out", filesystem=s3fs_pyarrow, format="tar",
                         target_shard_bytes="40kB", classes=classes)  # fmt: skip
    assert (again.written, again.skipped) == (0, len(result.paths))
    fewer = write_shards(samples[:-1], f"{bucket}/out", filesystem=s3fs_pyarrow, format="tar",
                         target_shard_bytes="40kB", classes=classes)  # fmt: skip
    assert (fewer.skipped, fewer.removed) == (len(result.paths) - 1, 1)  # the last one changed
    infos = s3fs_pyarrow.get_file_info(pafs.FileSelector(f"{bucket}/out"))
    assert sorted(i.base_name for i in infos) == sorted(
        ["_fastdata_shards.json", *(Path(p).name for p in fewer.paths)]
    )


# --------------------------------------------------------------------------- command line
def test_convert_writes_shards_and_reports_on_stderr(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["convert", str(folder), str(out), "--shard-size", "40kB", "--workers", "0"]) == 0
    err = capsys.readouterr().err
    shards = sorted(out.glob("shard-*.parquet"))
    assert f"{len(shards)}/{len(shards)} shards, 64 samples" in err
    assert f"{len(shards)} shards in {out}: {len(shards)} written (64 samples" in err
    assert sum(1 for _ in fd.ImageStream.from_parquet(out)) == 64
    listing = tmp_path / "list.txt"
    listing.write_text(
        "".join(f"{p}\t{i % 2}\n" for i, p in enumerate(sorted(folder.rglob("*.jpg"))))
    )
    assert main(["convert", str(listing), str(tmp_path / "l"), "--format", "tar", "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    labels = [int(label) for _, label in fd.ImageStream.from_tar(tmp_path / "l")]
    assert labels == [i % 2 for i in range(60)]


def test_convert_errors_exit_with_a_line_not_a_traceback(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as bad:
        main(["convert", str(folder), str(tmp_path), "--shard-size", "big"])
    assert bad.value.code == 2 and "--shard-size='big'" in capsys.readouterr().err
    assert main(["convert", str(tmp_path / "missing"), str(tmp_path / "o")]) == 1
    assert "fastdata convert: error: no such directory" in capsys.readouterr().err


def test_convert_reruns_report_kept_removed_and_left_out_images(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fd.synthetic.make_images(tmp_path / "train", 20, classes=2, **SMALL)
    page = tmp_path / "train" / "class_00" / "aa_page.jpg"
    page.write_text("<html>404</html>")
    out = tmp_path / "out"
    convert = ["convert", str(tmp_path / "train"), str(out), "--format", "tar",
               "--shard-size", "8kB", "--workers", "0", "--on-error", "skip"]  # fmt: skip
    assert main(convert) == 0
    shards = len(list(out.glob("shard-*.tar")))
    capsys.readouterr()
    assert main(convert) == 0  # all finished: the image left out is still named
    err = capsys.readouterr().err
    assert f"left out {page}: not an image" in err
    assert f"0 written (0 samples, 0.0 MB), {shards} already there; 1 image left out" in err
    last = sorted((tmp_path / "train" / "class_01").glob("*.jpg"))[-1]
    last.write_bytes(last.read_bytes() + b"\0" * 10)  # changed: its shard is written again
    assert main(convert) == 0
    assert f"{shards - 1} already there (1 of an earlier plan removed)" in capsys.readouterr().err
    fd.synthetic.make_images(tmp_path / "other", 10, classes=2, seed=3, **SMALL)
    convert[1] = str(tmp_path / "other")
    assert main(convert) == 1
    assert "another conversion" in capsys.readouterr().err
    assert main([*convert, "--overwrite"]) == 0
    assert sum(1 for _ in fd.ImageStream.from_tar(out, label_suffixes=("cls",))) == 10
