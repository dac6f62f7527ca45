"""The files of the shard cache on disk (:mod:`fastdata.sources._cache`): entry locks,
the scan that eviction sorts, checksums and atomic writes."""

from __future__ import annotations

import contextlib
import os
import uuid
import zlib
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # Windows: no cache (the streams import this module all the same)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "CHUNK",
    "Lock",
    "crc32_file",
    "open_here",
    "scan",
    "temporary",
    "unlink",
    "write_atomically",
]

CHUNK = 8 << 20  # bytes per read while copying or checksumming


def scan(cache_dir: str) -> Iterator[tuple[int, int, str]]:
    """``(last use, size, entry base path)`` of each entry; deletes the temporary files
    whose download is not running (its entry is not locked)."""
    for folder in os.scandir(cache_dir):
        if not folder.is_dir():
            continue
        for item in os.scandir(folder.path):
            key, _, suffix = item.name.partition(".")
            base = os.path.join(folder.path, key)
            if suffix == "data":
                try:
                    stat = item.stat()
                except FileNotFoundError:
                    continue
                yield stat.st_atime_ns, stat.st_size, base
            elif ".tmp-" in suffix:
                with Lock(base + ".lock", wait=False) as free:
                    if free:
                        unlink(item.path)


class Lock:
    """An exclusive ``flock`` on ``path`` (created if missing) for a ``with`` block, whose
    value says whether it is held (always, when ``wait``). A lock file deleted by whoever
    held it before (eviction) is not a lock any more: taking it retries on the new file."""

    def __init__(self, path: str, *, wait: bool = True) -> None:
        self.path, self.wait, self.fd = path, wait, -1

    def __enter__(self) -> bool:
        if fcntl is None:
            raise OSError("cache_dir= needs POSIX file locks (fcntl): Linux or macOS")
        mode = fcntl.LOCK_EX if self.wait else fcntl.LOCK_EX | fcntl.LOCK_NB
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, mode)
            except BlockingIOError:
                os.close(fd)
                return False
            try:
                current = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                current = False
            if current:
                self.fd = fd
                return True
            os.close(fd)  # its holder deleted it: lock the file now at the path

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def crc32_file(path: str) -> int:
    """The CRC-32 of a file's bytes."""
    crc = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def temporary(path: str) -> str:
    """A name next to ``path`` for writing it before renaming it into place; unique to the
    process and call, and found by :func:`scan` (``.tmp-`` after the first dot)."""
    return f"{path}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def write_atomically(path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all (a temporary file renamed into place)."""
    staged = temporary(path)
    with open(staged, "wb") as f:
        f.write(data)
    os.replace(staged, path)


def unlink(path: str) -> None:
    """Delete ``path`` if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def open_here() -> set[str]:
    """The paths of the files this process has open (Linux: ``/proc/self/fd``; elsewhere
    none are known)."""
    try:
        descriptors = os.listdir("/proc/self/fd")
    except OSError:
        return set()
    paths = set()
    for fd in descriptors:
        with contextlib.suppress(OSError):  # closed meanwhile
            paths.add(os.readlink(f"/proc/self/fd/{fd}"))
    return paths
