"""Tar shards compressed whole (``.tar.gz`` / ``.tgz``, ``.tar.bz2``, ``.tar.zst``, ``.tar.xz``),
read as files: recognised by their first bytes, decompressed as they are read, seekable
forward by decompressing; and the decompressors a reader keeps open between the pieces of a
shard it reads in order."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import threading
from collections.abc import Callable
from typing import IO, Any

import pyarrow as pa
import pyarrow.fs as pafs

__all__ = ["Streams", "open_shard", "shard_compression"]

# Whole-shard compressions by their first bytes: pyarrow's codec, or "xz" (Python's lzma).
_COMPRESSIONS = {
    b"\x1f\x8b": "gzip",
    b"BZh": "bz2",
    b"\x28\xb5\x2f\xfd": "zstd",
    b"\xfd7zXZ\x00": "xz",
}
# Python's decompressors, as files: xz's always, the others' for a truncated shard (_take).
_PYTHONS: dict[str, Callable[[Any], Any]] = {
    "xz": lzma.LZMAFile,
    "gzip": lambda raw: gzip.GzipFile(fileobj=raw),
    "bz2": bz2.BZ2File,
}
_TRUNCATED = "Truncated compressed stream"  # pyarrow's words
_SKIP_CHUNK = 1 << 20  # bytes decompressed at a time to seek forward
_OPEN_STREAMS = 4  # decompressors a reader keeps open, positioned after what it read last


def shard_compression(fs: pafs.FileSystem, path: str) -> str | None:
    """The whole-shard compression of ``path``, by its first bytes (None: a plain tar)."""
    with fs.open_input_file(path) as raw:
        head = raw.read(8)
    return next((name for magic, name in _COMPRESSIONS.items() if head.startswith(magic)), None)


class _Decompressed(io.RawIOBase):
    """A compressed shard's bytes, decompressed as they are read (pyarrow's codecs, which
    release the GIL; Python's lzma for xz): seekable forward by decompressing and skipping,
    and backward by starting again, which is what ``tarfile`` and the reads of consecutive
    samples need."""

    def __init__(self, fs: pafs.FileSystem, path: str, compression: str) -> None:
        self._fs, self._path, self._compression = fs, path, compression
        self._raw: Any = None
        self._stream: Any = None
        self._pos = 0
        self._salvaging = False  # reading with Python's decompressor (see _take)
        self._start()

    def _start(self) -> None:
        self._release()
        if self._compression in _PYTHONS and (self._compression == "xz" or self._salvaging):
            self._raw = self._fs.open_input_stream(self._path, compression=None)
            self._stream = _PYTHONS[self._compression](self._raw)
        else:
            self._stream = self._fs.open_input_stream(self._path, compression=self._compression)
        self._pos = 0

    def _take(self, size: int) -> bytes:
        """Up to ``size`` bytes decompressed from the position. pyarrow's codecs drop the
        bytes they hold when the compressed stream ends early: then the shard is read again
        from its start with Python's decompressor (gzip, bzip2), which hands over every byte
        before the cut, so a truncated shard keeps every sample it holds whole (``read1``:
        ``read`` of Python's files reads on until ``size`` bytes, dropping them at a cut)."""
        try:
            data: bytes = self._stream.read1(size)  # (read1: what one read decompresses)
        except (OSError, pa.ArrowException) as exc:
            if self._salvaging or self._compression not in _PYTHONS or _TRUNCATED not in str(exc):
                raise
            position, self._salvaging = self._pos, True
            self._start()
            self.seek(position)
            data = self._stream.read1(size)
        return data

    def _release(self) -> None:
        for stream in (self._stream, self._raw):
            if stream is not None:
                stream.close()
        self._stream = self._raw = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def readinto(self, buffer: Any) -> int:
        data = self._take(len(buffer))
        buffer[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset + (self._pos if whence == io.SEEK_CUR else 0)
        if whence == io.SEEK_END or target < 0:
            raise OSError("a compressed shard seeks from its start or its position only")
        if target < self._pos:
            self._start()
        while self._pos < target:
            data = self._take(min(target - self._pos, _SKIP_CHUNK))
            if not data:
                break  # past the end: reading there gives nothing, as in a file
            self._pos += len(data)
        return self._pos

    def close(self) -> None:
        self._release()
        super().close()


def open_shard(fs: pafs.FileSystem, path: str, compression: str | None) -> IO[bytes]:
    """The shard's bytes as a file: seekable at random when plain; decompressed, and
    seekable forward cheaply only, when compressed."""
    if compression is None:
        return fs.open_input_file(path)  # type: ignore[no-any-return]
    return io.BufferedReader(_Decompressed(fs, path, compression))


class Streams:
    """The decompressors of compressed shards a reader has open, each positioned after what
    was read from it last (at most :data:`_OPEN_STREAMS`, the least recently used closed):
    a reader taking a shard's samples in order, piece after piece, decompresses it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[tuple[str, IO[bytes]]] = []

    def take(self, fs: pafs.FileSystem, path: str, compression: str, offset: int) -> IO[bytes]:
        """A decompressor of ``path`` at or before ``offset`` (the furthest one open), or a
        new one at the start."""
        with self._lock:
            ahead = [(f.tell(), i) for i, (p, f) in enumerate(self._open) if p == path]
            usable = [(at, i) for at, i in ahead if at <= offset]
            if usable:
                return self._open.pop(max(usable)[1])[1]
        return open_shard(fs, path, compression)

    def give(self, path: str, stream: IO[bytes]) -> None:
        """Keep ``stream`` open for a later :meth:`take`."""
        with self._lock:
            self._open.append((path, stream))
            while len(self._open) > _OPEN_STREAMS:
                self._open.pop(0)[1].close()
