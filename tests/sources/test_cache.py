"""The local shard cache (fastdata.sources._cache) against a real S3-protocol server (moto):
a second epoch reads local disk, writes are atomic under processes racing on one file,
eviction keeps a limit (and every row exactly once), and a damaged entry is fetched again."""

from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

import fastdata as fd
from fastdata.sources import _cache
from fastdata.sources._cache import CachingHandler, cache_stats

from .test_cache_disk import full_disk  # noqa: F401 - a fixture

ROWS = 6_000


@pytest.fixture
def bucket(s3fs_pyarrow: pafs.S3FileSystem) -> str:
    name = f"cache-{uuid.uuid4().hex[:12]}"
    s3fs_pyarrow.create_dir(name)
    return name


def upload(s3: pafs.S3FileSystem, local: Path, remote: str) -> None:
    pafs.copy_files(str(local), remote, destination_filesystem=s3)


@pytest.fixture(scope="module")
def parquet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cache-parquet")
    fd.synthetic.make_parquet(root, ROWS, files=6, row_group_size=500)
    return root


def data_files(cache: Path) -> list[Path]:
    return sorted(cache.rglob("*.data"))


def ids(loader: Any) -> list[int]:
    return sorted(i for batch in loader for i in batch["id"].tolist())


def delta(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: after[k] - before[k] for k in ("hits", "misses", "fetched_bytes", "invalid")}


# --------------------------------------------------------------------------- epochs
def test_the_second_epoch_reads_only_the_cache(
    parquet_dir: Path, s3fs_pyarrow: pafs.S3FileSystem, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    cache = tmp_path / "cache"
    stream = fd.ParquetStream(
        f"{bucket}/rows", filesystem=s3fs_pyarrow, columns=["id"], batch_size=256,
        shuffle=True, cache_dir=cache,
    )  # fmt: skip
    assert data_files(cache) == []  # planning read the footers through, not into, the cache
    assert stream.reader.fs.handler.counts.totals()["remote_opens"] >= 6  # read through
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    assert ids(loader) == list(range(ROWS))
    first = loader.stats()["cache"]
    sizes = sum(p.stat().st_size for p in parquet_dir.glob("*.parquet"))
    assert (first["misses"], first["fetched_bytes"], first["invalid"]) == (6, sizes, 0)
    assert sorted(p.stat().st_size for p in data_files(cache)) == sorted(
        p.stat().st_size for p in parquet_dir.glob("*.parquet")
    )
    stream.set_epoch(1)
    assert ids(loader) == list(range(ROWS))
    second = delta(loader.stats()["cache"], first)
    assert second["misses"] == second["fetched_bytes"] == 0
    assert second["hits"] >= 6 * 2  # every row group opened its file from the cache


def test_counts_are_summed_over_workers_and_per_open(
    parquet_dir: Path, s3fs_pyarrow: pafs.S3FileSystem, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    stream = fd.ParquetStream(
        f"{bucket}/rows", filesystem=s3fs_pyarrow, batch_size=500, cache_dir=tmp_path / "c"
    )
    assert cache_stats(stream)["cache"]["hit_rate"] == 0.0
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    list(loader)
    counts = loader.stats()["cache"]
    # 12 row groups read, each an open; the files' first opens fetched, the rest hit
    assert counts["misses"] == 6
    assert counts["hits"] + counts["misses"] >= 12
    assert counts["hit_rate"] == pytest.approx(counts["hits"] / (counts["hits"] + 6))
    assert fd.DataLoader(fd.ParquetStream(parquet_dir), stats=True).stats().get("cache") is None


@pytest.fixture(scope="module")
def image_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cache-images")
    options = {"texture": "smooth", "min_short": 32, "max_short": 48}
    fd.synthetic.make_tar_shards(root / "tar", 24, shards=3, **options)
    fd.synthetic.make_image_parquet(root / "pq", 24, files=2, row_group_size=6, **options)
    fd.synthetic.make_images(root / "files", 12, **options)
    return {kind: root / kind for kind in ("tar", "pq", "files")}


def image_stream(kind: str, remote: str, fs: pafs.FileSystem, cache: Path) -> fd.ImageStream:
    options: dict[str, Any] = {"size": 16, "crop": "center", "batch_size": 4, "cache_dir": cache}
    if kind == "tar":
        return fd.ImageStream.from_tar(remote, filesystem=fs, **options)
    if kind == "pq":
        return fd.ImageStream.from_parquet(remote, filesystem=fs, **options)
    if kind == "folder":
        return fd.ImageStream.from_folder(remote, filesystem=fs, **options)
    infos = fs.get_file_info(pafs.FileSelector(remote, recursive=True))
    paths = sorted(info.path for info in infos if info.type == pafs.FileType.File)
    return fd.ImageStream.from_files(paths, list(range(len(paths))), filesystem=fs, **options)


@pytest.mark.parametrize("kind", ["tar", "pq", "files", "folder"])
def test_image_streams_read_through_the_cache(
    kind: str, image_dirs: dict[str, Path], s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    image_dirs = {**image_dirs, "folder": image_dirs["files"]}
    upload(s3fs_pyarrow, image_dirs[kind], f"{bucket}/{kind}")
    stream = image_stream(kind, f"{bucket}/{kind}", s3fs_pyarrow, tmp_path / "cache")
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    files = sum(1 for p in image_dirs[kind].rglob("*") if p.is_file())
    # tar shards are fetched to be indexed; the others only when read
    assert len(data_files(tmp_path / "cache")) == (files if kind == "tar" else 0)
    epochs = []
    for epoch in range(2):
        stream.set_epoch(epoch)
        epochs.append([(image.sum().item(), label) for images, labels in loader
                       for image, label in zip(images, labels.tolist(), strict=True)])  # fmt: skip
    assert sorted(epochs[0]) == sorted(epochs[1])
    assert len(epochs[0]) == (24 if kind in ("tar", "pq") else 12)
    counts = loader.stats()["cache"]
    assert counts["misses"] == files == len(data_files(tmp_path / "cache"))
    assert counts["hits"] >= files  # the second epoch


class OwnImages:
    """A reader of one's own: image files on any filesystem, one unit each, read through
    ``fs`` (:class:`fastdata.sources.FileBacked`)."""

    def __init__(self, paths: list[str], fs: pafs.FileSystem) -> None:
        self.paths, self.fs = paths, fs

    def unit_rows(self) -> list[int]:
        return [1] * len(self.paths)

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        with self.fs.open_input_file(self.paths[unit]) as f:
            return pa.table({"image": pa.array([f.read()], pa.binary())})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"path": self.paths[unit]}

    def identity(self) -> dict[str, Any]:
        return {"paths": self.paths}


def test_a_reader_of_ones_own_gets_the_cache_counts_of_its_image_files(
    image_dirs: dict[str, Path], s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, image_dirs["files"], f"{bucket}/own")
    infos = s3fs_pyarrow.get_file_info(pafs.FileSelector(f"{bucket}/own", recursive=True))
    paths = sorted(info.path for info in infos if info.type == pafs.FileType.File)
    paths, fs = fd.sources.with_cache(paths, s3fs_pyarrow, tmp_path / "cache", None)
    stream = fd.ImageStream(
        OwnImages(paths, fs), image_column="image", label_column=None, size=16, crop="center",
        batch_size=4,
    )  # fmt: skip
    assert not hasattr(stream.decoder, "fs")  # the reader reads: the cache is its filesystem's
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    assert sum(len(images) for images in loader) == len(paths) == 12
    first = loader.stats()["cache"]
    assert (first["misses"], first["hits"]) == (12, 0)
    stream.set_epoch(1)
    assert sum(len(images) for images in loader) == 12
    second = delta(loader.stats()["cache"], first)
    assert (second["misses"], second["hits"]) == (0, 12)


def test_the_stream_pickles_with_its_cache(
    parquet_dir: Path, s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    stream = fd.ParquetStream(
        f"{bucket}/rows", filesystem=s3fs_pyarrow, batch_size=1000, cache_dir=tmp_path / "c"
    )
    copy = pickle.loads(pickle.dumps(stream))
    handler = copy.reader.fs.handler
    assert isinstance(handler, CachingHandler) and handler.fetch  # planning is over
    with pytest.raises(OSError, match="read-only"):
        copy.reader.fs.delete_file(copy.files[0])
    assert ids(copy) == list(range(ROWS))
    assert len(data_files(tmp_path / "c")) == 6


# --------------------------------------------------------------------------- damage
@pytest.mark.parametrize("damage", ["truncate", "flip", "metadata"])
def test_a_damaged_entry_is_fetched_again_never_read(
    damage: str, parquet_dir: Path, s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    cache = tmp_path / "cache"

    def epoch() -> tuple[list[int], dict[str, float]]:
        stream = fd.ParquetStream(
            f"{bucket}/rows", filesystem=s3fs_pyarrow, columns=["id", "x"], batch_size=500,
            cache_dir=cache,
        )  # fmt: skip
        got = [pair for b in stream for pair in zip(b["id"].tolist(), b["x"].tolist(), strict=True)]
        return sorted(got), cache_stats(stream)["cache"]

    clean, _ = epoch()
    victim = data_files(cache)[0]
    original = victim.read_bytes()
    if damage == "truncate":
        victim.write_bytes(original[: len(original) // 2])
    elif damage == "flip":
        victim.write_bytes(
            original[:100] + bytes(b ^ 0xFF for b in original[100:200]) + original[200:]
        )
        stat = victim.stat()  # a rewrite in the same clock tick as the download keeps mtime
        os.utime(victim, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    else:
        victim.with_suffix(".json").write_text("{not json")
    again, second = epoch()
    assert again == clean
    assert (second["invalid"], second["misses"], second["fetched_bytes"]) == (
        1, 1, len(original),
    )  # fmt: skip
    assert victim.read_bytes() == original


def test_an_entry_of_another_remote_version_is_fetched_again(
    parquet_dir: Path, s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    options = {"filesystem": s3fs_pyarrow, "batch_size": 1000, "cache_dir": tmp_path / "c"}
    assert ids(fd.ParquetStream(f"{bucket}/rows", **options)) == list(range(ROWS))
    time.sleep(1.1)  # S3 modification times have a resolution of a second
    first = sorted(parquet_dir.glob("*.parquet"))[0]
    with s3fs_pyarrow.open_output_stream(f"{bucket}/rows/{first.name}") as out:
        out.write(first.read_bytes())  # the same bytes, a new version
    stream = fd.ParquetStream(f"{bucket}/rows", **options)
    assert ids(stream) == list(range(ROWS))
    counts = cache_stats(stream)["cache"]
    assert (counts["misses"], counts["invalid"]) == (1, 0)


# --------------------------------------------------------------------------- eviction
def test_eviction_keeps_the_limit_and_every_row_exactly_once(
    parquet_dir: Path, s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    sizes = [p.stat().st_size for p in parquet_dir.glob("*.parquet")]
    limit = int(3.5 * max(sizes))
    cache = tmp_path / "cache"
    stream = fd.ParquetStream(
        f"{bucket}/rows", filesystem=s3fs_pyarrow, columns=["id"], batch_size=300,
        shuffle=True, shuffle_buffer=1000, cache_dir=cache, cache_limit=limit,
    )  # fmt: skip
    for epoch in range(3):
        stream.set_epoch(epoch)
        assert ids(stream) == list(range(ROWS))
        assert sum(p.stat().st_size for p in data_files(cache)) <= limit
    counts = cache_stats(stream)["cache"]
    assert counts["evicted"] >= 3 and counts["misses"] > 6
    leftovers = [
        p for p in cache.rglob("*") if p.is_file() and p.suffix not in (".data", ".json", ".lock")
    ]
    assert leftovers == [p for p in leftovers if p.name == "evict.lock"]


def test_cache_limit_is_parsed_and_cache_options_are_refused_for_local_files(
    parquet_dir: Path, s3fs_pyarrow, bucket: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="local disk"):
        fd.ParquetStream(parquet_dir, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="local disk"):
        fd.ImageStream.from_folder(parquet_dir, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="needs cache_dir"):
        fd.ParquetStream(parquet_dir, cache_limit="1GB")
    upload(s3fs_pyarrow, parquet_dir, f"{bucket}/rows")
    with pytest.raises(ValueError, match="cache_limit='lots'"):
        fd.ParquetStream(f"{bucket}/rows", filesystem=s3fs_pyarrow, cache_dir=tmp_path,
                         cache_limit="lots")  # fmt: skip
    stream = fd.ParquetStream(
        f"{bucket}/rows", filesystem=s3fs_pyarrow, cache_dir=tmp_path, cache_limit="2 MiB"
    )
    assert stream.reader.fs.handler.limit == 2 * 1024 * 1024


# --------------------------------------------------------------------------- processes
class SlowLocal(pafs.FileSystemHandler):
    """A 'remote' that is the local disk, with a pause before each read: a download then
    takes long enough for other processes to arrive while it runs."""

    def __init__(self, pause: float) -> None:
        self.pause = pause
        self.local = pafs.LocalFileSystem()

    def get_type_name(self) -> str:
        return "slow"

    def normalize_path(self, path: str) -> str:
        return path

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self.local.get_file_info(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self.local.get_file_info(selector)

    def open_input_stream(self, path: str) -> pa.NativeFile:
        return pa.PythonFile(_SlowFile(path, self.pause), "r")

    open_input_file = open_input_stream

    def _unsupported(self, *args: Any, **kwargs: Any) -> None:
        raise NotImplementedError

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _unsupported
    delete_file = move = copy_file = open_output_stream = open_append_stream = _unsupported


class _SlowFile:
    def __init__(self, path: str, pause: float) -> None:
        self.f = open(path, "rb")  # noqa: SIM115 - closed by close()
        self.pause, self.closed = pause, False

    def read(self, n: int = -1) -> bytes:
        time.sleep(self.pause)
        return self.f.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.f.seek(offset, whence)

    def tell(self) -> int:
        return self.f.tell()

    def close(self) -> None:
        self.f.close()
        self.closed = True


def slow_cache(cache: Path, pause: float, limit: int | None = None) -> pafs.FileSystem:
    handler = CachingHandler(pafs.PyFileSystem(SlowLocal(pause)), str(cache), limit)
    handler.fetch = True
    return pafs.PyFileSystem(handler)


def _read_racing(cache: str, path: str, barrier: Any, out: Any) -> None:
    fs = slow_cache(Path(cache), pause=0.3)
    barrier.wait()
    with fs.open_input_file(path) as f:
        data = f.read()
    out.put((hashlib.sha256(data).hexdigest(), fs.handler.counts.totals()))


def test_processes_racing_on_one_file_download_it_once_and_read_it_whole(
    tmp_path: Path,
) -> None:
    source = tmp_path / "remote.bin"
    source.write_bytes(os.urandom(3 << 20))
    context = multiprocessing.get_context("fork")
    barrier, out = context.Barrier(3), context.Queue()
    racers = [
        context.Process(target=_read_racing, args=(str(tmp_path / "c"), str(source), barrier, out))
        for _ in range(3)
    ]
    for racer in racers:
        racer.start()
    results = [out.get(timeout=60) for _ in racers]
    for racer in racers:
        racer.join(timeout=60)
        assert racer.exitcode == 0
    expected = hashlib.sha256(source.read_bytes()).hexdigest()
    assert [digest for digest, _ in results] == [expected] * 3
    assert sorted(counts["misses"] for _, counts in results) == [0, 0, 1]
    assert sum(counts["hits"] for _, counts in results) == 2
    assert [p.name.split(".", 1)[1] for p in sorted((tmp_path / "c").rglob("*.*"))] == [
        "data", "json", "lock",
    ]  # fmt: skip


def _download_forever(cache: str, path: str) -> None:
    fs = slow_cache(Path(cache), pause=60)
    fs.open_input_file(path)


def test_a_killed_download_leaves_only_a_temporary_file_which_is_removed(
    tmp_path: Path,
) -> None:
    source = tmp_path / "remote.bin"
    source.write_bytes(os.urandom(1 << 20))
    cache = tmp_path / "c"
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_download_forever, args=(str(cache), str(source)))
    child.start()
    deadline = time.monotonic() + 30
    while not list(cache.rglob("*.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    assert len(list(cache.rglob("*.tmp-*"))) == 1 and data_files(cache) == []
    fs = slow_cache(cache, pause=0, limit=1)  # a limit: the download's eviction scan runs
    with fs.open_input_file(str(source)) as f:
        assert f.read() == source.read_bytes()
    assert list(cache.rglob("*.tmp-*")) == []
    assert fs.handler.counts.totals()["misses"] == 1


def test_an_open_file_is_never_evicted_by_its_process(tmp_path: Path) -> None:
    files = []
    for i in range(3):
        files.append(tmp_path / f"f{i}.bin")
        files[-1].write_bytes(os.urandom(1 << 20))
    cache = tmp_path / "c"
    fs = slow_cache(cache, pause=0, limit=1 << 20)  # room for one file
    opened = fs.open_input_file(str(files[0]))
    for path in files[1:]:
        with fs.open_input_file(str(path)) as f:
            assert f.read() == path.read_bytes()
    assert opened.read() == files[0].read_bytes()
    kept = {p.read_bytes() for p in data_files(cache)}
    assert files[0].read_bytes() in kept  # open all along: never evicted
    opened.close()
    with fs.open_input_file(str(files[1])) as f:
        f.read()
    assert files[0].read_bytes() not in {p.read_bytes() for p in data_files(cache)}
    assert fs.handler.counts.totals()["evicted"] >= 2


def test_a_download_counted_while_another_thread_evicts_still_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The read-ahead threads of one stream download at once: a download that one thread
    counts while another scans the cache to evict must not vanish from the count, or later
    downloads take the cache past its limit unseen (a rare flake of the test above)."""
    sizes = {"a": 300, "b": 300, "c": 500, "d": 100, "e": 150}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(os.urandom(size))
    cache = tmp_path / "cache"
    fs = slow_cache(cache, pause=0, limit=1000)

    def read(name: str) -> None:
        with fs.open_input_file(str(tmp_path / name)) as f:
            assert f.read() == (tmp_path / name).read_bytes()

    for name in "ab":
        read(name)
        time.sleep(0.01)  # distinct access times: a is the least recently used
    scanned, counted = threading.Event(), threading.Event()
    real_scan = _cache.scan

    def scan_then_let_d_be_counted(cache_dir: str) -> Any:
        found = list(real_scan(cache_dir))
        if not scanned.is_set():
            scanned.set()
            counted.wait(timeout=0.5)  # fixed: d's count waits for this eviction instead
        return iter(found)

    monkeypatch.setattr(_cache, "scan", scan_then_let_d_be_counted)

    def read_d_during_the_scan() -> None:
        scanned.wait(timeout=10)
        read("d")
        counted.set()

    racer = threading.Thread(target=read_d_during_the_scan)
    racer.start()
    read("c")  # 1100 bytes: evicts a while d downloads
    racer.join()
    read("e")
    assert sum(p.stat().st_size for p in data_files(cache)) <= 1000
    assert fs.handler.counts.totals()["evicted"] >= 2


# --------------------------------------------------------------------------- any reader
class Lines:
    """A file-backed reader of one's own (as the writing-a-source guide writes them): a unit
    per file, a row per line, every file opened through ``fs``."""

    def __init__(self, paths: list[str], fs: pafs.FileSystem) -> None:
        self.paths, self.fs = paths, fs
        self.rows = [len(self.lines(path)) for path in paths]

    def lines(self, path: str) -> list[str]:
        with self.fs.open_input_stream(path) as f:
            return f.read().decode().splitlines()

    def unit_rows(self) -> list[int]:
        return self.rows

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return pa.table({"line": self.lines(self.paths[unit])[start:stop]})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"file": self.paths[unit], "row": row}

    def identity(self) -> dict[str, Any]:
        return {"files": self.paths, "rows": self.rows}


def test_a_reader_of_ones_own_gets_the_cache_through_with_cache(tmp_path: Path) -> None:
    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"part-{i}.txt"))
        Path(paths[-1]).write_text("".join(f"{i}-{row}\n" for row in range(40)))
    remote = pafs.PyFileSystem(SlowLocal(pause=0))  # a filesystem that is not the local disk
    source, fs = fd.sources.with_cache(paths, remote, tmp_path / "cache", None)
    reader = Lines(source, fs)
    assert data_files(tmp_path / "cache") == []  # counting the lines read through the cache
    stream = fd.PlannedStream(reader, batch_size=16, shuffle=True)
    assert fs.handler.fetch  # planned: opening a file now fetches it whole
    loader = fd.DataLoader(stream, batch_size=None, num_workers=2, stats=True)
    lines = sorted(line for batch in loader for line in batch["line"].tolist())
    assert lines == sorted(f"{i}-{row}" for i in range(3) for row in range(40))
    assert len(data_files(tmp_path / "cache")) == 3
    first = loader.stats()["cache"]
    assert (first["misses"], first["invalid"]) == (3, 0)
    stream.set_epoch(1)
    assert sum(len(batch["line"]) for batch in loader) == 120
    second = delta(loader.stats()["cache"], first)
    assert second["misses"] == second["fetched_bytes"] == 0
    assert second["hits"] >= 3


# --------------------------------------------------------------------------- a failing cache disk
def local_stream(kind: str, source: Path, cache: Path) -> Any:
    """A stream of ``source`` on the local disk as a remote filesystem, cached in ``cache``."""
    remote = pafs.PyFileSystem(SlowLocal(pause=0))
    if kind == "parquet":
        return fd.ParquetStream(str(source), filesystem=remote, batch_size=500, cache_dir=cache)
    return fd.ImageStream.from_tar(
        str(source), filesystem=remote, size=16, crop="center", batch_size=4, cache_dir=cache
    )


def assert_blames_the_cache(error: fd.CacheError, cache: Path, source: Path, why: str) -> None:
    message = str(error)
    assert f"cache_dir={os.path.realpath(cache)!r}" in message and why in message
    assert "The file itself is not at fault" in message
    assert error.path is not None and error.path.startswith(str(source))  # the remote file
    for advice in ("rewrite or remove", "not a tar file", "corrupt"):  # a bad file's
        assert advice not in message


@pytest.mark.parametrize("kind", ["parquet", "tar"])
def test_a_cache_dir_under_a_regular_file_is_a_cache_error_not_a_bad_file(
    kind: str, parquet_dir: Path, image_dirs: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("x")
    cache = tmp_path / "afile" / "cache"
    source = parquet_dir if kind == "parquet" else image_dirs["tar"]
    with pytest.raises(fd.CacheError) as caught:  # planning: footers, shard indexes
        local_stream(kind, source, cache)
    assert_blames_the_cache(caught.value, cache, source, "[Errno 20] Not a directory")
    assert "regular file, not a folder" in str(caught.value)
    assert (tmp_path / "afile").read_text() == "x"


@pytest.mark.usefixtures("full_disk")
@pytest.mark.parametrize(("kind", "workers"), [("parquet", 0), ("parquet", 2), ("tar", 0)])
def test_a_full_cache_disk_is_a_cache_error_and_a_later_run_finds_the_cache_clean(
    kind: str,
    workers: int,
    parquet_dir: Path,
    image_dirs: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cache = tmp_path / "cache"
    source = parquet_dir if kind == "parquet" else image_dirs["tar"]
    with pytest.raises(fd.CacheError) as caught:  # tar: indexing fetches; Parquet: reading
        list(fd.DataLoader(local_stream(kind, source, cache), batch_size=None,
                           num_workers=workers))  # fmt: skip
    assert_blames_the_cache(caught.value, cache, source, "[Errno 28] No space left on device")
    assert "its disk is full" in str(caught.value) and "cache_limit=" in str(caught.value)
    if workers:  # re-raised from a worker: the reason and the file intact
        assert "in DataLoader worker" in str(caught.value)
        assert caught.value.reason.startswith("the local cache in cache_dir=")
    monkeypatch.undo()  # room on the disk again (full_disk's patch)
    # a download cut short by the workers' shutdown may have left its temporary and lock
    # files: fetching its file again deletes the one and makes the other its entry's
    assert sum(1 for _ in local_stream(kind, source, cache)) > 0
    names = sorted(p.name for p in cache.rglob("*") if p.is_file())
    entries = sorted({name.split(".")[0] for name in names})
    assert len(entries) == len(list(source.rglob("*.*")))
    assert names == sorted(
        f"{key}.{suffix}" for key in entries for suffix in ("data", "json", "lock")
    )


@pytest.mark.usefixtures("full_disk")
def test_a_failed_fetch_leaves_no_file_of_its_entry(tmp_path: Path) -> None:
    source = tmp_path / "remote.bin"
    source.write_bytes(os.urandom(1 << 16))
    fs = slow_cache(tmp_path / "c", pause=0)
    with pytest.raises(fd.CacheError, match="its disk is full"):
        fs.open_input_file(str(source))
    assert [p for p in (tmp_path / "c").rglob("*") if p.is_file()] == []  # lock file too


@pytest.mark.usefixtures("full_disk")
def test_a_full_cache_disk_is_not_a_bad_image_to_skip(
    image_dirs: dict[str, Path], tmp_path: Path
) -> None:
    paths = sorted(str(p) for p in image_dirs["files"].rglob("*") if p.is_file())
    stream = fd.ImageStream.from_files(
        paths, list(range(len(paths))), filesystem=pafs.PyFileSystem(SlowLocal(pause=0)),
        size=16, crop="center", batch_size=4, cache_dir=tmp_path / "cache", on_error="skip",
    )  # fmt: skip
    with pytest.raises(fd.CacheError, match="its disk is full"):
        list(stream)  # every good image skipped, before
    assert stream.skipped == 0
