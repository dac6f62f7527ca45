"""Turn a user's ``source`` into a filesystem and an ordered list of file paths.

One resolver for every source type (Parquet files, image lists, tar shards), local or remote:
a path, a directory (walked recursively, sorted), a glob, a list of any of these, a URI
(``s3://bucket/prefix/*.parquet``, ``file:///...``), a ``pyarrow.fs.FileSystem`` or an fsspec
filesystem passed as ``filesystem``, or a ``pyarrow.dataset.FileSystemDataset``.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, NamedTuple, TypeVar
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pafs

from fastdata._validate import check_int
from fastdata.errors import SourceError, warn_user
from fastdata.sources.filesystem import MANIFEST, _suffixed, as_filesystem, below, digest, walk

Source = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]

T = TypeVar("T")
_GLOB_CHARS = set("*?[")


class Listing(NamedTuple):
    """The files of a source: their filesystem, paths (in reading order) and sizes in bytes."""

    fs: pafs.FileSystem
    paths: list[str]
    sizes: list[int]


def resolve_files(
    source: Any,
    *,
    filesystem: Any = None,
    suffixes: tuple[str, ...] = (),
    repeats: bool = False,
    warn_others: bool = False,
) -> Listing:
    """The filesystem, files and file sizes ``source`` names, in a deterministic order.

    Directories and globs expand to the files below them, sorted, keeping only names ending
    in ``suffixes`` (all when empty) and skipping hidden/underscore names; a directory a glob
    matches expands like a directory path. With ``warn_others``, a file a glob matches is
    read whatever its suffix (the user named it), and the files a directory holds without
    one are left out with a warning naming them (none is lost unseen). Local directories
    are walked following symbolic links, each directory once (a link loop is not followed
    round). Explicit file paths are kept as given, in the given order.

    Raises:
        SourceError: a path that does not exist, a directory/glob that matches no file, or
            a file reached twice (listed twice, or by two items that overlap: every row
            would be read twice), unless ``repeats`` (a list of samples that may name a file
            more than once on purpose).
    """
    if hasattr(source, "files") and hasattr(source, "filesystem"):  # pyarrow FileSystemDataset
        files = list(source.files)  # read through filesystem= where given (a cache of its own)
        dataset_fs = as_filesystem(filesystem) or source.filesystem
        infos = _reached(files[0] if files else "", dataset_fs.get_file_info, files)
        return Listing(dataset_fs, files, [int(i.size or 0) for i in infos])
    given = as_filesystem(filesystem)
    items = [source] if isinstance(source, str | os.PathLike) else list(source)
    if not items:
        raise SourceError("source is an empty list: pass at least one path, directory or glob")
    found: list[tuple[str, int]] = []
    reached_by: dict[str, str] = {}
    others: list[str] | None = [] if warn_others else None
    fs, first = given, ""
    known: dict[str, pafs.FileSystem] = {}
    for item in items:
        name = os.fspath(item)
        item_fs, path = _reached(name, _located, name, given, known)
        entries = _reached(name, _expand, name, item_fs, path, suffixes, others)
        if fs is None:
            fs, first = item_fs, name
        elif item_fs is not fs and not _same(item_fs, fs):
            raise SourceError(
                f"all paths of one source must be on one filesystem; {first!r} and {name!r} "
                f"resolve to different ones ({type(fs).__name__} and {type(item_fs).__name__}"
                ", or the same kind with other options: endpoint, region, scheme); give "
                "both the same URI options, or pass filesystem= and paths",
                path=name,
            )
        for path, size in entries:
            if path in reached_by and not repeats:
                raise SourceError(
                    f"the file is reached twice (by {reached_by[path]!r} and {name!r}),"
                    " so its rows would be read twice; list each file once",
                    path=path,
                )
            reached_by[path] = name
            found.append((path, size))
    assert fs is not None  # items is non-empty
    if others:
        warn_user(
            f"{_files(len(others))} without a {_kinds(suffixes)} suffix left out of a folder: "
            f"{', '.join(others[:3])}{' ...' if len(others) > 3 else ''}; to read them too, "
            "name them or pass a glob such as 'folder/*' (a glob reads every file it matches, "
            "except names starting with . or _)"
        )
    return Listing(fs, [p for p, _ in found], [s for _, s in found])


def _same(a: pafs.FileSystem, b: pafs.FileSystem) -> bool:
    """Whether two filesystems resolved from URIs are one (same kind and options)."""
    try:
        return type(a) is type(b) and bool(a.equals(b))
    except (TypeError, pa.ArrowException):
        return False


def _files(count: int) -> str:
    return f"{count} file" if count == 1 else f"{count} files"


def _reached(item: str, listing: Callable[..., T], *args: Any) -> T:
    """``listing(*args)``, with a storage that cannot be reached (an endpoint nothing answers on,
    refused credentials, a malformed URI) as a SourceError naming ``item``."""
    try:
        return listing(*args)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(
            f"cannot list or reach the storage ({exc}); check the URI or path, the endpoint "
            "(endpoint_override, scheme), the credentials and the network",
            path=item,
        ) from exc


def _located(
    item: str, given: pafs.FileSystem | None, known: dict[str, pafs.FileSystem]
) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path ``item`` names: on ``given`` (filesystem=) as written; else
    a path on the local disk, or a URI as ``FileSystem.from_uri`` reads it (its ?region=...
    or ?endpoint_override=... is its filesystem's, not part of its path), parsed once per
    bucket and options (``known``: a list of many URIs asks a bucket's region once)."""
    if given is not None:
        return given, item.split("://", 1)[1] if "://" in item else item
    if "://" not in item:
        return pafs.LocalFileSystem(), os.path.abspath(item)
    scheme, rest = item.split("://", 1)
    plain, _, query = rest.partition("?")
    key = f"{scheme}://{plain.split('/', 1)[0]}?{query}"
    if key in known:  # its path percent-decoded (c%20d.parquet is 'c d.parquet'), as from_uri
        return known[key], unquote(plain)
    fs, path = pafs.FileSystem.from_uri(item)
    if path == unquote(plain):  # the path is the URI's own: later items of the key need no parse
        known[key] = fs
    return fs, path


def _expand(
    item: str, fs: pafs.FileSystem, path: str, suffixes: tuple[str, ...], others: list[str] | None
) -> list[tuple[str, int]]:
    """The files ``item`` (``path`` on ``fs``) names; with ``others`` (a list), the files a
    directory holds without ``suffixes`` are added to it, and a glob's own matches are kept
    whatever their suffix."""
    if _has_glob(path):
        return _glob(fs, path, suffixes, item, others)
    info = fs.get_file_info(path)
    if info.type == pafs.FileType.File:
        return [(path, int(info.size or 0))]
    if info.type == pafs.FileType.Directory:
        found = walk(fs, path, () if others is not None else suffixes)
        if others is not None:
            unsuffixed = [p for p, _ in found if not _suffixed(p, suffixes)]
            found = [(p, n) for p, n in found if _suffixed(p, suffixes)]
            if not found and unsuffixed:
                names = ", ".join(PurePath(p).name for p in unsuffixed[:3])
                raise SourceError(
                    f"directory holds no {_kinds(suffixes)} files: check the path; it holds "
                    f"{_files(len(unsuffixed))} with other names ({names}"
                    f"{' ...' if len(unsuffixed) > 3 else ''}), which a glob such as "
                    "'folder/*' reads if they are Parquet (a glob reads every file it matches)",
                    path=item,
                )
            others += unsuffixed
        if not found:
            raise SourceError(
                f"directory holds no {_kinds(suffixes)} files: check the path or the suffixes",
                path=item,
            )
        listed = _check_finished(fs, path, found, item)
        return found if listed is None else _listed_only(found, path, listed, item)
    raise SourceError("no such file or directory", path=item)


def _check_finished(
    fs: pafs.FileSystem, directory: str, found: list[tuple[str, int]], item: str
) -> list[str] | None:
    """The shards a folder's shard writer's :data:`MANIFEST` lists (None without one, or
    with one that does not read as one: left to the files); a folder where some of them are
    not there is refused: a conversion that failed or was stopped part-way, which would
    otherwise be read as the whole dataset."""
    record = f"{directory.rstrip('/')}/{MANIFEST}"
    if fs.get_file_info(record).type != pafs.FileType.File:
        return None
    try:
        with fs.open_input_stream(record) as f:
            planned = [str(shard["name"]) for shard in json.loads(f.read())["shards"]]
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError):
        return None
    present = {name for p, _ in found if len(PurePath(name := below(directory, p)).parts) == 1}
    missing = [name for name in planned if name not in present]
    if missing:
        raise SourceError(
            f"the folder holds an unfinished conversion: its {MANIFEST} lists {len(planned)} "
            f"shards and {len(missing)} {'is' if len(missing) == 1 else 'are'} missing "
            f"({', '.join(missing[:3])}"
            f"{', ...' if len(missing) > 3 else ''}); run the same fastdata convert (or "
            "write_shards) again to finish it, or name the files to read (a glob or a list) "
            "to read only those there",
            path=item,
        )
    return planned


def _listed_only(
    found: list[tuple[str, int]], directory: str, listed: list[str], item: str
) -> list[tuple[str, int]]:
    """The files of a folder a conversion wrote that are its shards (those its manifest
    ``listed``); the others (another export put beside them) are left out with a warning
    naming them, not read as part of its dataset."""
    names = set(listed)
    shards = [(p, n) for p, n in found if below(directory, p) in names]
    others = [p for p, _ in found if below(directory, p) not in names]
    if others:
        warn_user(
            f"{item}: {_files(len(others))} beside the {len(shards)} shards that its {MANIFEST} "
            f"lists left out ({', '.join(others[:3])}{' ...' if len(others) > 3 else ''}): a "
            "folder a fastdata conversion wrote is read as that conversion's shards; to read "
            "the other files too, name them (a glob such as 'folder/*' or a list)"
        )
    return shards


def _has_glob(path: str) -> bool:
    return any(c in _GLOB_CHARS for c in path)


def _kinds(suffixes: tuple[str, ...]) -> str:
    return "/".join(suffixes) if suffixes else "matching"


def _glob(
    fs: pafs.FileSystem,
    pattern: str,
    suffixes: tuple[str, ...],
    shown: str,
    others: list[str] | None,
) -> list[tuple[str, int]]:
    parts = pattern.split("/")
    fixed = next(i for i, part in enumerate(parts) if _has_glob(part))
    base = "/".join(parts[:fixed]) or "/"
    tail = "/".join(parts[fixed:])
    # Like glob: "*" stays within one directory level unless the pattern says "**".
    depth = None if "**" in pattern else tail.count("/") + 1
    found = []
    for path, size in walk(fs, base, () if others is not None else suffixes):
        # Matched below the base, as the filesystem lists it (an fsspec filesystem may put
        # a root "/" before a relative base: "/datasets/x" for "datasets").
        parts = path.lstrip("/")[len(base.strip("/")) :].lstrip("/").split("/")
        if not _matches(parts, tail, depth):
            continue
        named = depth in (None, len(parts)) and fnmatch.fnmatchcase("/".join(parts), tail)
        if others is None or _suffixed(path, suffixes) or named:
            found.append((path, size))  # with others: a match itself, whatever its suffix
        else:
            others.append(path)  # in a directory the glob matches: as a directory path
    if not found:
        raise SourceError("glob matched no files: check the pattern and the directory", path=shown)
    return found


def _matches(parts: list[str], tail: str, depth: int | None) -> bool:
    """Whether the pattern ``tail`` names the file (``parts`` of its path below the glob's
    base) or a directory above it: a matched directory is read whole, as a directory path
    is (Spark writes ``out.parquet/`` as a directory of part files). ``depth``: the number
    of parts the pattern spans (None when "**" spans any)."""
    ends = range(1, len(parts) + 1) if depth is None else [depth] if depth <= len(parts) else []
    return any(fnmatch.fnmatchcase("/".join(parts[:end]), tail) for end in ends)


def paths_digest(paths: Sequence[str]) -> str:
    """A short hash of ``paths`` relative to their common directory: the same files moved
    together to another place (another mount point, another node's copy) hash the same."""
    if not paths:
        return digest([])
    prefix = os.path.commonpath(paths) if len(paths) > 1 else os.path.dirname(paths[0])
    return digest([p[len(prefix) :] for p in paths])


def class_folders(
    fs: pafs.FileSystem, base: str, class_to_idx: Mapping[str, int] | None
) -> dict[str, int]:
    """The classes of an ImageFolder tree: sorted subfolders, or the given mapping (whose
    folders must exist)."""
    folders = sorted(
        i.base_name
        for i in fs.get_file_info(pafs.FileSelector(base))
        if i.type == pafs.FileType.Directory
    )
    if class_to_idx is None:
        if not folders:
            raise SourceError(
                "no class folders: expected root/<class>/<image> like torchvision's ImageFolder",
                path=base,
            )
        return {name: index for index, name in enumerate(folders)}
    missing = sorted(set(class_to_idx) - set(folders))
    if missing:
        raise SourceError(f"class_to_idx names folders that do not exist: {missing}", path=base)
    return {name: check_int(f"class_to_idx[{name!r}]", i) for name, i in class_to_idx.items()}
