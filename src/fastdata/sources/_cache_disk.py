"""The files of the shard cache on disk (:mod:`fastdata.sources._cache`): an entry's files,
checking that an entry holds the remote's version intact, downloading one, entry locks, the
scan that eviction sorts, checksums and atomic writes; and :func:`on_disk`, which turns an
OS error of the cache's own files into a :class:`~fastdata.errors.CacheError` (the remote
file is not at fault), where the readers would take it for a bad file."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import uuid
import zlib
from collections.abc import Iterator
from typing import NamedTuple

import pyarrow.fs as pafs

from fastdata.errors import CacheError, SourceError
from fastdata.sources.filesystem import CHUNK, unlink

try:
    import fcntl
except ImportError:  # Windows: no cache (the streams import this module all the same)
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "Entry",
    "Lock",
    "Remote",
    "check",
    "crc32_file",
    "discard",
    "download",
    "entry_of",
    "on_disk",
    "open_here",
    "scan",
    "temporary",
    "write_atomically",
]


class Remote(NamedTuple):
    """What the remote says about a file: its size and modification time (None: unknown),
    and where it gives no modification time, what its fsspec info says of the version
    (:func:`~fastdata.sources._cache_versions.fsspec_tag`; None: nothing)."""

    size: int | None
    mtime_ns: int | None
    tag: str | None = None


class Entry(NamedTuple):
    """The files of one cache entry: data, metadata (JSON) and lock."""

    key: str
    data: str
    meta: str
    lock: str

    @property
    def cache_dir(self) -> str:
        """The cache folder the entry is in."""
        return os.path.dirname(os.path.dirname(self.data))


def entry_of(cache_dir: str, remote_type: str, path: str) -> Entry:
    """The entry of the file ``path`` of a remote filesystem of type ``remote_type``."""
    name = f"{remote_type}\0{path}".encode()
    key = hashlib.sha256(name).hexdigest()[:32]
    base = os.path.join(cache_dir, key[:2], key)
    return Entry(key, base + ".data", base + ".json", base + ".lock")


def check(entry: Entry, path: str, remote: Remote, stat: os.stat_result) -> tuple[bool, str | None]:
    """Whether the entry holds ``remote``'s version of ``path`` intact, and if not, what
    is damaged (None: it holds another version, fetched again without a warning)."""
    try:
        with open(entry.meta, "rb") as f:
            meta = json.loads(f.read())
    except FileNotFoundError:
        return False, None
    except (OSError, ValueError):
        return False, "its metadata is unreadable"
    if (meta.get("path"), meta.get("mtime_ns"), meta.get("tag")) != (
        path,
        remote.mtime_ns,
        remote.tag,
    ) or (remote.size is not None and meta.get("size") != remote.size):
        return False, None
    if stat.st_size != meta["size"]:
        return False, f"{stat.st_size} bytes, not {meta['size']}"
    changed = [stat.st_ino, stat.st_mtime_ns] != meta.get("written")
    if changed and crc32_file(entry.data) != meta["crc32"]:
        return False, "its checksum does not match"  # changed since it was downloaded
    return True, None


def download(fs: pafs.FileSystem, entry: Entry, path: str, remote: Remote) -> int:
    """Copy ``path`` of ``fs`` into the entry (temporary file, then rename); returns its size.

    Raises:
        CacheError: writing the entry failed (a full disk); an error reading ``fs`` is raised
            as it came, and the temporary file is removed either way.
    """
    staged = temporary(entry.data)
    crc, size = 0, 0
    with on_disk(entry.cache_dir, path, entry.data):
        _sweep(entry)
    try:
        with fs.open_input_stream(path) as source:
            with on_disk(entry.cache_dir, path, entry.data):
                out = open(staged, "wb")  # noqa: SIM115 - closed below, its errors the cache's
            try:
                while chunk := source.read_buffer(CHUNK):
                    crc, size = zlib.crc32(chunk, crc), size + chunk.size
                    with on_disk(entry.cache_dir, path, entry.data):
                        out.write(chunk)
            finally:
                with on_disk(entry.cache_dir, path, entry.data):
                    out.close()
        if remote.size is not None and size != remote.size:
            raise SourceError(
                f"read {size} bytes but the remote listed {remote.size}: the file changed "
                "while streaming; build the stream again",
                path=path,
            )
        with on_disk(entry.cache_dir, path, entry.data):
            os.replace(staged, entry.data)
            stat = os.stat(entry.data)
    finally:
        with contextlib.suppress(OSError):
            unlink(staged)
    meta = {"path": path, "size": size, "mtime_ns": remote.mtime_ns, "crc32": crc}
    if remote.tag is not None:
        meta["tag"] = remote.tag
    meta["written"] = [stat.st_ino, stat.st_mtime_ns]
    with on_disk(entry.cache_dir, path, entry.meta):
        write_atomically(entry.meta, json.dumps(meta).encode())
    return size


def _sweep(entry: Entry) -> None:
    """Delete what a download of the entry killed outright left (its temporary files): the
    caller holds the entry's lock, so none of its downloads runs."""
    folder = os.path.dirname(entry.data)
    for name in os.listdir(folder):
        if name.startswith(f"{entry.key}.") and ".tmp-" in name:
            unlink(os.path.join(folder, name))


def discard(entry: Entry) -> None:
    """Delete the entry's files, its lock file too (by the lock's holder: whoever waits on
    it then locks the file created anew, :class:`Lock`)."""
    for name in (entry.data, entry.meta, entry.lock):
        with contextlib.suppress(OSError):
            os.unlink(name)


# What an OS error of the cache's own files means for the cache folder.
_FULL = {errno.ENOSPC: "its disk is full", errno.EDQUOT: "its disk quota is used up"}
_CAUSES = {
    **_FULL,
    errno.ENOTDIR: "a part of its path is a regular file, not a folder",
    errno.EROFS: "it is on a read-only filesystem",
    errno.EACCES: "this process may not write there",
    errno.EPERM: "this process may not write there",
}


@contextlib.contextmanager
def on_disk(cache_dir: str, path: str, local: str) -> Iterator[None]:
    """Turn an ``OSError`` of the cache's own file ``local`` (in ``cache_dir``, caching the
    remote ``path``) into a :class:`~fastdata.errors.CacheError` naming the three and the
    way out: a reader would take the ``OSError`` for a bad remote file and advise removing
    it. Only around the cache's own disk work, never around reading the remote."""
    try:
        yield
    except OSError as exc:
        cause = _CAUSES.get(exc.errno or 0)
        if exc.errno in _FULL:
            fix = (
                "free space on that disk, set cache_limit= below the room it has (the files "
                "read at once must fit in it), or pass another cache_dir="
            )
        else:
            fix = (
                "pass a cache_dir= this process can create and write, on a local disk, or "
                "leave out cache_dir= to read the remote directly"
            )
        what = str(exc) if exc.filename else f"{exc}: {local!r}"  # write errors name no file
        raise CacheError(
            f"the local cache in cache_dir={cache_dir!r} failed on its copy of this file "
            f"({what}){f': {cause}' if cause else ''}. The file itself "
            f"is not at fault: {fix}",
            path=path,
        ) from exc


def scan(cache_dir: str) -> Iterator[tuple[int, int, str]]:
    """``(last use, size, entry base path)`` of each entry; deletes the temporary files
    whose download is not running (its entry is not locked), and the lock files of no entry
    that no process holds (a download killed outright leaves both)."""
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
            elif ".tmp-" in suffix or suffix == "lock":
                with Lock(base + ".lock", wait=False) as free:
                    if free and ".tmp-" in suffix:
                        unlink(item.path)
                    if free and not os.path.exists(base + ".data"):
                        unlink(base + ".lock")  # by its holder: see Lock


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
    try:
        with open(staged, "wb") as f:
            f.write(data)
        os.replace(staged, path)
    finally:
        with contextlib.suppress(OSError):
            unlink(staged)


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
