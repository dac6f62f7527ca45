"""A local disk cache of a remote filesystem's files, so that later epochs read local disk.

:func:`with_cache` wraps the remote filesystem of a stream in a ``pyarrow.fs.PyFileSystem``
over :class:`CachingHandler`; the readers are unchanged. While a Parquet stream plans
(footers, filter counts), files are read from the remote (or from the cache where it
already holds them); once it has planned (:func:`start_fetching`), opening a file first
makes sure a verified local copy of the whole file exists, so the read-ahead thread that
reads a unit fetches its file, and every later unit of that file (the other row groups of
a Parquet file, the rest of a shard) reads local disk. Tar shards are fetched whole while
planning already: indexing a shard reads the headers spread all through it.

The contract, for every process sharing one ``cache_dir`` (ranks and workers of a node):

- **Atomic.** A file is downloaded to a temporary name and renamed into place, under an
  exclusive lock (``flock``) on its entry, so one process downloads it while the others
  wait, and no process ever opens a partial file.
- **Verified.** An entry is reused only when the size and version (mtime; an fsspec
  info's ETag, ...) recorded at download match what the remote listed, and its size on
  disk is the recorded one; a file whose inode or mtime changed on disk, or whose read
  failed, must match its download's CRC-32 (:mod:`~fastdata.sources._cache_versions`).
  A damaged entry found so is logged, counted (``invalid``) and fetched again.
- **Bounded.** With ``cache_limit``, after a download takes the cache over the limit, the
  least recently opened entries are deleted until it is under 90% of the limit; never a
  file this process has open (on Linux, where ``/proc/self/fd`` lists them), nor one
  another process is downloading. Another process may delete a file this one has open:
  reading it goes on (POSIX keeps a deleted file's data while it is open) and the next
  open fetches it again. The limit is a target: the files in use at once must fit in it,
  and downloads in flight in other processes are counted once those processes check.
- **Counted.** :data:`fastdata._stats.CACHE_COUNTS` per process, in
  ``fastdata.DataLoader(stats=True).stats()["cache"]``.
- **Its own errors.** An OS error of the cache's disk (creating, locking, writing, renaming,
  checking or opening its files: a full disk, a path through a regular file) is a
  :class:`~fastdata.errors.CacheError` naming the cache, never the readers' advice for a bad
  remote file (:func:`~fastdata.sources._cache_disk.on_disk`); a failed download deletes
  the entry's files, its lock file included. Errors reading the remote are raised as they come.

The remote files must not change while a stream caches them (as while a stream reads them).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from typing import Any, cast

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._stats import CACHE_COUNTS, CacheCounts
from fastdata._validate import check_bytes
from fastdata.errors import SourceError, warn_user
from fastdata.sources._cache_disk import (
    Entry,
    Lock,
    Remote,
    check,
    discard,
    download,
    entry_of,
    on_disk,
    open_here,
    scan,
)
from fastdata.sources._cache_versions import Opened, copy_of, drop_damaged, unversioned, versioned
from fastdata.sources.base import FileBacked, declares
from fastdata.sources.filesystem import as_filesystem, unlink

__all__ = ["CachingHandler", "handlers", "refetched", "start_fetching", "with_cache"]

log = logging.getLogger("fastdata")

_LOW_WATER = 0.9  # eviction empties the cache down to this share of the limit
_LOCAL = pafs.LocalFileSystem()


class CachingHandler(pafs.FileSystemHandler):
    """A ``pyarrow.fs`` handler that reads ``remote``'s files through a local cache in
    ``cache_dir`` holding at most about ``limit`` bytes (None: no limit). See the module
    docstring for the contract. Listings go to ``remote``; writes are refused."""

    def __init__(self, remote: pafs.FileSystem, cache_dir: str, limit: int | None) -> None:
        self.remote = remote
        self.cache_dir = os.path.realpath(cache_dir)  # as /proc/self/fd names open files
        self.limit = limit
        self.fetch = False  # False while planning: read through (start_fetching)
        self.counts = CacheCounts()
        self.unversioned = False  # warned that the remote gives no file versions
        self._listed: dict[str, Remote] = {}  # as the remote listed them, sent to workers
        self._process_state()

    def _process_state(self) -> None:
        self._mutex = threading.Lock()
        self._checked: dict[str, tuple[int, int, int]] = {}  # key -> (inode, mtime, size)
        self._estimate: int | None = None  # bytes in the cache, as this process last saw
        self._opened = Opened()  # the copies this process read: which failed reads to redo

    def __getstate__(self) -> dict[str, Any]:
        local = ("_mutex", "_checked", "_estimate", "_opened")
        return {k: v for k, v in self.__dict__.items() if k not in local}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._process_state()

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, CachingHandler)
            and other.cache_dir == self.cache_dir
            and other.remote.equals(self.remote)
        )

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    # ----------------------------------------------------------------- delegated
    def get_type_name(self) -> str:
        return f"fastdata-cache+{self.remote.type_name}"

    def normalize_path(self, path: str) -> str:
        return self.remote.normalize_path(path)

    def get_file_info(self, paths: list[str]) -> list[pafs.FileInfo]:
        return self._remember(paths)

    def get_file_info_selector(self, selector: pafs.FileSelector) -> list[pafs.FileInfo]:
        return self._remember(selector)

    def _remember(self, what: list[str] | pafs.FileSelector) -> list[pafs.FileInfo]:
        found = versioned(self.remote, what)
        for info, tag in found:
            if info.type == pafs.FileType.File:
                self._listed[info.path] = self._version(info, tag)
        return [info for info, _ in found]

    def _version(self, info: pafs.FileInfo, tag: str | None) -> Remote:
        """The file as listed (a store with no versions is warned of once per stream)."""
        if info.mtime_ns is None and tag is None and not self.unversioned:
            self.unversioned = True  # pickled to the workers: they need not warn again
            warn_user(unversioned(self.cache_dir, self.remote, info.path))
        return Remote(info.size, info.mtime_ns, tag)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise OSError(
            "a stream's cache filesystem is read-only: change the files through the remote "
            "filesystem itself (and build the stream again)"
        )

    create_dir = delete_dir = delete_dir_contents = delete_root_dir_contents = _read_only
    delete_file = move = copy_file = open_output_stream = open_append_stream = _read_only

    # ----------------------------------------------------------------- reading
    def open_input_stream(self, path: str) -> pa.NativeFile:
        return self.open_input_file(path)

    def open_input_file(self, path: str) -> pa.NativeFile:
        entry = entry_of(self.cache_dir, self.remote.type_name, path)
        remote = self._remote(path)
        with on_disk(self.cache_dir, path, entry.data):
            opened, _ = self._open_cached(entry, path, remote)
        if opened is not None:
            self.counts.add("hits")
            return opened
        if not self.fetch:
            self.counts.add("remote_opens")
            return self.remote.open_input_file(path)
        with contextlib.ExitStack() as locked:
            with on_disk(self.cache_dir, path, entry.lock):
                os.makedirs(os.path.dirname(entry.data), exist_ok=True)
                locked.enter_context(Lock(entry.lock))
            opened, size = self._fetch(entry, path, remote)
        if size is None:
            self.counts.add("hits")
            return opened
        self.counts.add("misses")
        self.counts.add("fetched_bytes", size)
        try:
            with on_disk(self.cache_dir, path, self.cache_dir):
                self._account(size)
        except BaseException:
            opened.close()
            raise
        return opened

    def _fetch(self, entry: Entry, path: str, remote: Remote) -> tuple[pa.NativeFile, int | None]:
        """Under the entry's lock: the entry opened, and the bytes downloaded into it (None:
        another process had fetched it meanwhile). A failed download (CacheError: the cache's
        disk; or the remote's error) leaves no file of the entry, its lock file included."""
        with on_disk(self.cache_dir, path, entry.data):
            opened, damage = self._open_cached(entry, path, remote)  # fetched while waiting?
        if opened is not None:
            return opened, None
        if damage is not None:
            log.warning("fastdata: the cache entry %s of %s is corrupt (%s): fetching it "
                        "again", entry.data, path, damage)  # fmt: skip
            self.counts.add("invalid")
        try:
            size = download(self.remote, entry, path, remote)
            with on_disk(self.cache_dir, path, entry.data):
                self._opened.add(entry.key, copy_of(entry.data))  # under its lock: this copy
                return _LOCAL.open_input_file(entry.data), size
        except BaseException:
            discard(entry)
            raise

    def _remote(self, path: str) -> Remote:
        known = self._listed.get(path)
        if known is None:
            ((info, tag),) = versioned(self.remote, [path])
            if info.type != pafs.FileType.File:
                raise FileNotFoundError(f"no such file: {path}")
            known = self._listed[path] = self._version(info, tag)
        return known

    def _open_cached(
        self, entry: Entry, path: str, remote: Remote
    ) -> tuple[pa.NativeFile | None, str | None]:
        """``(the entry opened, None)`` if it holds ``remote``'s version of ``path`` intact,
        else ``(None, what is wrong)`` (``(None, None)``: no such entry); checked once per
        process while its file stays the same (inode, mtime, size): later opens cost a stat."""
        try:
            stat = os.stat(entry.data)
        except FileNotFoundError:
            return None, None
        seen = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if self._checked.get(entry.key) != seen:
            intact, damage = check(entry, path, remote, stat)
            if not intact:
                return None, damage
            self._checked[entry.key] = seen
        self._opened.add(entry.key, seen)
        try:
            opened = _LOCAL.open_input_file(entry.data)
        except FileNotFoundError:
            return None, None  # evicted meanwhile
        with contextlib.suppress(OSError):  # the access time orders eviction
            os.utime(entry.data, ns=(time.time_ns(), stat.st_mtime_ns))
        return opened, None

    def drop_damaged(self, path: str) -> bool:
        """After a read of ``path`` failed: whether to read it again (:func:`drop_damaged`)."""
        entry = entry_of(self.cache_dir, self.remote.type_name, path)
        again, damaged = drop_damaged(entry, path, self._opened.of(entry.key))
        if damaged:
            self.counts.add("invalid")
        return again

    # ----------------------------------------------------------------- eviction
    def _account(self, size: int) -> None:
        """Count a download; over the limit (as this process knows it), evict. The count
        and the eviction are one step for this process's threads: a download counted while
        another thread scans would be lost when the scan's total replaced the count, and
        later downloads would take the cache past its limit unseen."""
        if self.limit is None:
            return
        with self._mutex:
            if self._estimate is not None and self._estimate + size <= self.limit:
                self._estimate += size
                return
            self._estimate = self._evict()

    def _evict(self) -> int | None:
        """Delete least recently opened entries until the cache is under the low-water
        mark; removes the temporary files of downloads that died. Returns the bytes left
        (None: another process is evicting now)."""
        assert self.limit is not None
        with Lock(os.path.join(self.cache_dir, "evict.lock"), wait=False) as held:
            if not held:
                return None
            entries, total = [], 0
            for used_ns, size, base in scan(self.cache_dir):
                entries.append((used_ns, size, base))
                total += size
            if total <= self.limit:
                return total
            in_use = open_here()
            for _, size, base in sorted(entries):
                if total <= self.limit * _LOW_WATER:
                    break
                if base + ".data" in in_use:
                    continue
                with Lock(base + ".lock", wait=False) as free:
                    if free:
                        for suffix in (".data", ".json", ".lock"):
                            unlink(base + suffix)
                        total -= size
                        self.counts.add("evicted")
            return total


# --------------------------------------------------------------------------- the streams' side
def with_cache(
    source: Any,
    filesystem: Any,
    cache_dir: str | os.PathLike[str] | None,
    cache_limit: Any,
    *,
    whole_to_plan: bool = False,
) -> tuple[Any, Any]:
    """``(source, filesystem)`` with the source's remote filesystem wrapped in the local file
    cache (a :class:`CachingHandler`; URIs turned into that filesystem's paths); unchanged
    without ``cache_dir``. What ``cache_dir=`` and ``cache_limit=`` of the built-in streams
    do, for any reader: give the filesystem returned to a reader that opens its files through
    it and names it ``fs`` (:class:`~fastdata.sources.FileBacked`), and the
    :class:`~fastdata.PlannedStream` over it fetches whole files into the cache once it has
    planned, and counts hits and misses in ``DataLoader(stats=True).stats()["cache"]``.
    ``whole_to_plan``: planning fetches whole files too, for sources whose planning reads all
    of each file (tar shards: their member headers are spread through them, so one request
    for the file beats one per header).

    Raises:
        ValueError: ``cache_limit`` without ``cache_dir``, or a source on the local disk
            (which is read directly: there is nothing to cache).
    """
    if cache_dir is None:
        if cache_limit is not None:
            raise ValueError("cache_limit= needs cache_dir= (the folder of the cache)")
        return source, filesystem
    limit = check_bytes("cache_limit", cache_limit, none="None for no limit")
    if hasattr(source, "files") and hasattr(source, "filesystem"):  # a pyarrow dataset
        fs = source.filesystem  # kept whole (filter, schema...): read through a cache of fs
    else:
        fs = as_filesystem(filesystem)
    if fs is None:
        fs, source = _from_uris(source)
    if _is_local(fs):
        raise ValueError(
            f"cache_dir= keeps local copies of remote files, but {source!r} is on the local "
            "disk, which is read directly: leave out cache_dir= and cache_limit="
        )
    if isinstance(fs, pafs.PyFileSystem) and isinstance(fs.handler, CachingHandler):
        return source, fs
    handler = CachingHandler(fs, os.fspath(cache_dir), limit)
    handler.fetch = whole_to_plan
    return source, pafs.PyFileSystem(handler)


def _from_uris(source: Any) -> tuple[pafs.FileSystem, Any]:
    single = isinstance(source, str | os.PathLike)
    items = [os.fspath(item) for item in ([source] if single else source)]
    if not items or not all("://" in item for item in items):
        return _LOCAL, source
    resolved = [pafs.FileSystem.from_uri(item) for item in items]
    kinds = {fs.type_name for fs, _ in resolved}
    if len(kinds) > 1:
        raise SourceError(f"all paths of one source must be on one filesystem, not {kinds}")
    paths = [path for _, path in resolved]
    return resolved[0][0], paths[0] if single else paths


def _is_local(fs: pafs.FileSystem) -> bool:
    if isinstance(fs, pafs.SubTreeFileSystem):
        return _is_local(fs.base_fs)
    if isinstance(fs, pafs.PyFileSystem) and isinstance(fs.handler, pafs.FSSpecHandler):
        protocol = fs.handler.fs.protocol
        return bool({"file", "local"} & set([protocol] if isinstance(protocol, str) else protocol))
    return isinstance(fs, pafs.LocalFileSystem)


def refetched(fs: pafs.FileSystem, path: str) -> bool:
    """After a read of ``path`` through ``fs`` failed: whether ``fs`` is a cache whose copy
    of it was damaged (deleted now) or replaced since: read it again, once, not blaming it."""
    handler = fs.handler if isinstance(fs, pafs.PyFileSystem) else None
    return isinstance(handler, CachingHandler) and handler.drop_damaged(path)


def handlers(stream: Any) -> list[CachingHandler]:
    """The cache a stream reads through (its reader's filesystem, :class:`FileBacked`):
    every file is opened by a reader, none by a decoder."""
    reader = getattr(stream, "reader", None)
    fs = cast(FileBacked, reader).fs if declares(reader, FileBacked) else None
    handler = fs.handler if isinstance(fs, pafs.PyFileSystem) else None
    return [handler] if isinstance(handler, CachingHandler) else []


def cache_stats(stream: Any) -> dict[str, Any]:
    """``{"cache": counts}`` summed over the shard caches ``stream`` reads through, with
    ``hit_rate`` = hits / (hits + misses); ``{}`` for a stream without a cache."""
    totals = [cache.counts.totals() for cache in handlers(stream)]
    if not totals:
        return {}
    summed: dict[str, float] = {name: sum(t[name] for t in totals) for name in CACHE_COUNTS}
    opened = summed["hits"] + summed["misses"]
    summed["hit_rate"] = summed["hits"] / opened if opened else 0.0
    return {"cache": summed}


def start_fetching(stream: Any) -> None:
    """End a stream's planning: count its units now (a filter's counts read through the
    cache, not into it), then let opens fetch whole files into the cache."""
    caches = handlers(stream)
    if caches:
        stream.unit_rows()
    for handler in caches:
        handler.fetch = True
