"""Where :func:`~fastdata.writer.write_shards` writes: the destination folder, its manifest
(:data:`MANIFEST`), the records of what a shard left out (``_{shard}.left-out.json``), and how
a conversion takes over what an earlier one left there (:meth:`Destination.claim`).

What a destination holds is always consistent, however a conversion ends: every shard that
the manifest lists and that exists holds what the manifest's digest for it says (the digest
of that shard's plan: its name, format, row groups and samples). A shard file is published
whole, after the record of what it left out; a conversion with a changed plan deletes the
shards whose digest changed *before* it publishes the manifest that no longer vouches for
them; and files named like the shards that the manifest does not list are refused, never
taken for finished shards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, NamedTuple, NoReturn

import pyarrow.fs as pafs

from fastdata.errors import warn_user
from fastdata.sources.filesystem import (
    CHUNK,
    MANIFEST,
    as_filesystem,
    below,
    digest,
    unlink,
    walk,
)
from fastdata.sources.readers.parquet import SUFFIXES as PARQUET_SUFFIXES
from fastdata.sources.readers.tar import SHARD_SUFFIXES

__all__ = ["LEFT_OUT", "MANIFEST", "BadImage", "Claim", "Destination"]


_READ = {"parquet": PARQUET_SUFFIXES, "tar": SHARD_SUFFIXES}  # what the streams read of a folder

LEFT_OUT = ".left-out.json"
"""The suffix of ``_{shard}.left-out.json``, the images a shard left out (``on_error="skip"``)."""


class BadImage(NamedTuple):
    """A sample left out by ``on_error="skip"``: its key, its image (path, or ``sample
    'key'`` for bytes) and why: the decode check refused it, or it is no image file at all
    (missing, unreadable, not an image's extension or bytes)."""

    key: str
    image: str
    reason: str

    def __str__(self) -> str:
        return f"{self.image}: {self.reason}"


class Claim(NamedTuple):
    """What :meth:`Destination.claim` found: the finished shards this conversion keeps, the
    shards of an earlier plan it deleted, and the images the kept shards left out."""

    finished: frozenset[str]
    removed: int
    bad: dict[str, list[BadImage]]


@dataclass(frozen=True)
class Destination:
    """Where the shards go: ``root`` on ``fs``; shards are written in ``staging`` (a local
    folder: ``root`` itself when it is local) under hidden temporary names first."""

    fs: pafs.FileSystem
    root: str
    staging: str
    prefix: str

    @classmethod
    def open(cls, dest: Any, filesystem: Any, prefix: str) -> Destination:
        """The destination ``dest`` names, created if missing, with the temporary files a
        killed conversion left removed (one conversion per destination at a time)."""
        fs, path = as_filesystem(filesystem), os.fspath(dest)
        if fs is None:
            if "://" in path:
                fs, path = pafs.FileSystem.from_uri(path)
            else:
                fs, path = pafs.LocalFileSystem(), os.path.abspath(path)
        elif "://" in path:
            path = path.split("://", 1)[1]
        path = path.rstrip("/")
        fs.create_dir(path, recursive=True)
        local = isinstance(fs, pafs.LocalFileSystem)
        staging = path if local else os.path.join(
            tempfile.gettempdir(), f"fastdata-shards-{digest([fs.type_name, path])}"
        )  # fmt: skip
        os.makedirs(staging, exist_ok=True)
        for name in os.listdir(staging):  # a shard's or a left-out record's
            if name.startswith((f".{prefix}-", f"._{prefix}-")) and ".tmp-" in name:
                unlink(os.path.join(staging, name))
        return cls(fs, path, staging, prefix)

    def final(self, name: str) -> str:
        return f"{self.root}/{name}"

    def done(self) -> None:
        """The conversion finished: a local staging folder of a remote destination goes
        (its temporary files were each moved to the destination)."""
        if self.staging != self.root:
            with contextlib.suppress(OSError):  # not empty: another conversion is writing
                os.rmdir(self.staging)

    def staged(self, name: str) -> str:
        return os.path.join(self.staging, f".{name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def ours(self, name: str) -> bool:
        """Whether ``name`` is one the writer gives a shard (``{prefix}-`` and six digits or
        more, ``.parquet`` or ``.tar``): a Hugging Face export's ``train-00000-of-00001.parquet``
        is not, even with the prefix ``train``."""
        shaped = rf"{re.escape(self.prefix)}-\d{{6,}}\.(parquet|tar)"
        return re.fullmatch(shaped, name) is not None

    def files(self) -> set[str]:
        """The names of the files directly in the destination."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.root, allow_not_found=True))
        return {info.base_name for info in infos if info.type == pafs.FileType.File}

    def claim(self, manifest: dict[str, Any], *, overwrite: bool = False) -> Claim:
        """Take the destination for the conversion ``manifest`` describes (its ``plan`` and
        ``shards``, each with a ``name`` and ``digest``), and publish that manifest.

        The shards an earlier run of the same plan finished are kept. So are, when the plan
        changed (a bad image removed, a file that changed), the shards of the earlier plan
        whose digest did not change; its other shards are deleted. ``overwrite`` deletes
        the manifest, the shards it lists, every file named as the writer names shards
        (``{prefix}-000000.parquet``, ``.tar``: :meth:`ours`) and the left-out records
        first; nothing else.

        Raises:
            ValueError: the destination holds files named like the shards that no manifest
                lists (another tool's, or a conversion whose manifest was removed), the
                shards of another conversion (none of them is one of this plan's), or, even
                with ``overwrite``, other files of the format (a Hugging Face export) that
                streams reading the folder would read with the shards.
        """
        files = self.files()
        found = self._manifest(lenient=overwrite) if MANIFEST in files else None
        self._refuse_others(manifest["format"], found)
        if overwrite:
            for name in self._theirs(found, files):
                self._delete(name)
            files, found = self.files(), None
        listed = {s["name"]: s.get("digest") for s in (found or {}).get("shards", [])}
        foreign = sorted(n for n in files if self.ours(n) and n not in listed)
        if foreign:
            self._refuse(
                f"holds {_count(foreign, 'file')} named like this conversion's shards "
                f"({_some(foreign)}) that "
                + (f"its {MANIFEST} does not list" if found else f"no {MANIFEST} lists")
                + ": another tool's (WebDataset's ShardWriter), or a conversion's whose "
                "manifest was removed or replaced; streams would read them with the new shards"
            )
        planned = {shard["name"]: shard["digest"] for shard in manifest["shards"]}
        same = found is not None and found.get("plan") == manifest["plan"]
        existing = [name for name in listed if name in files]
        kept = {
            name for name in existing if name in planned and (same or listed[name] == planned[name])
        }
        if existing and not kept:
            self._refuse(
                f"holds the shards of another conversion: of the {_count(existing, 'shard')} "
                f"its {MANIFEST} lists, none is one this conversion would write (other "
                "samples, or another format, shard size, row group size or prefix)"
            )
        stale = [name for name in existing if name not in kept]
        for name in stale:  # before the manifest that no longer vouches for them
            self._delete(name)
        for name in files:  # records of shards not kept (a shard lost with its writer too)
            if name.startswith("_") and name.endswith(LEFT_OUT):
                shard = name[1 : -len(LEFT_OUT)]
                if shard not in kept and (shard in listed or self.ours(shard)):
                    self._delete(name)
        text = json.dumps(manifest, indent=1)
        if found != json.loads(text):  # new, or another plan (or classes) than recorded
            self._write(MANIFEST, text)
        bad = {name: self._left_out(name) for name in sorted(kept) if f"_{name}{LEFT_OUT}" in files}
        return Claim(frozenset(kept), len(stale), bad)

    def record(self, name: str, shard_digest: str, bad: list[BadImage]) -> None:
        """Publish what shard ``name`` left out; called before the shard is published, so
        that a finished shard always has its record."""
        record = {"shard": name, "digest": shard_digest, "left_out": [list(b) for b in bad]}
        self._write(f"_{name}{LEFT_OUT}", json.dumps(record, indent=1))

    def publish(self, staged: str, name: str) -> None:
        """Move a finished file into place: a rename, or an upload whose object is deleted
        again if the upload fails (an interrupted process never completes one)."""
        final = self.final(name)
        if isinstance(self.fs, pafs.LocalFileSystem):
            os.replace(staged, final)
            return
        try:
            with open(staged, "rb") as source, self.fs.open_output_stream(final) as out:
                while chunk := source.read(CHUNK):
                    out.write(chunk)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.delete_file(final)
            raise
        finally:
            unlink(staged)

    def _write(self, name: str, text: str) -> None:
        staged = self.staged(name)
        try:
            with open(staged, "w", encoding="utf-8") as f:
                f.write(text)
            self.publish(staged, name)
        finally:
            unlink(staged)

    def _read(self, name: str) -> Any:
        with self.fs.open_input_stream(self.final(name)) as f:
            return json.loads(f.read())

    def _manifest(self, *, lenient: bool) -> dict[str, Any] | None:
        """The destination's manifest; one that is not a fastdata manifest is refused (or,
        ``lenient``, taken as none)."""
        try:
            found = self._read(MANIFEST)
        except ValueError:
            found = None
        if isinstance(found, dict) and isinstance(found.get("shards"), list):
            return found
        if lenient:
            return None
        self._refuse(f"holds a {MANIFEST} that is not a fastdata shard manifest")

    def _left_out(self, name: str) -> list[BadImage]:
        return [BadImage(*image) for image in self._read(f"_{name}{LEFT_OUT}")["left_out"]]

    def _theirs(self, found: dict[str, Any] | None, files: set[str]) -> list[str]:
        """What ``overwrite`` deletes: shards first, then their records, the manifest last
        (until it goes, a rerun without ``overwrite`` still knows the files)."""
        listed = {str(s.get("name")) for s in (found or {}).get("shards", [])}
        shards = sorted(n for n in files if n in listed or self.ours(n))
        records = sorted(
            n
            for n in files
            if n.startswith("_") and n.endswith(LEFT_OUT) and n[1 : -len(LEFT_OUT)] in shards
        )
        return shards + records + ([MANIFEST] if MANIFEST in files else [])

    def _refuse_others(self, format: str, found: dict[str, Any] | None) -> None:
        """Refuse a destination holding files that a stream reading the folder would read
        with the shards, which are no conversion's: a Hugging Face export, say.
        ``overwrite`` never deletes those. The files are listed as the streams list them
        (``format``'s suffixes at any depth, names not starting with ``.`` or ``_``, each
        real folder once). The files of a subfolder with a manifest of its own (a
        conversion written there) are no export; and a folder that has a manifest
        ``found`` is read as its shards only, so there the others are named in a warning."""
        listed = {str(s.get("name")) for s in (found or {}).get("shards", [])}
        paths = walk(self.fs, self.root, (*_READ[format], MANIFEST), hidden=True)
        names = [PurePosixPath(below(self.root, path).replace(os.sep, "/")) for path, _ in paths]
        nested = {name.parent for name in names if name.name == MANIFEST and name.parent.parts}
        others = [
            str(name)
            for name in names
            if not any(part.startswith((".", "_")) for part in name.parts)
            and str(name) not in listed
            and not (len(name.parts) == 1 and self.ours(name.name))  # refused, or listed
            and not nested.intersection(name.parents)
        ]
        if not others:
            return
        kind = f"{'Parquet' if format == 'parquet' else 'tar'} file"
        if found is not None:
            warn_user(
                f"{self.root} holds {_count(others, kind)} that its {MANIFEST} does not list "
                f"({_some(others)}): streams reading the folder leave "
                f"{'it' if len(others) == 1 else 'them'} out and read the shards only; a "
                "glob such as 'folder/*' reads every file"
            )
            return
        raise ValueError(
            f"{self.root} holds {_count(others, kind)} that no conversion wrote "
            f"({_some(others)}): a stream reading the folder would read "
            f"{'it' if len(others) == 1 else 'them'} as part of the dataset. Write the "
            "shards to a folder of their own, or move those files out first "
            "(overwrite=True deletes only what a conversion wrote)"
        )

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.final(name))

    def _refuse(self, what: str) -> NoReturn:
        raise ValueError(
            f"{self.root} {what}. Write to a new folder, or pass overwrite=True (fastdata "
            f"convert --overwrite) to delete the {self.prefix}-NNNNNN files, the left-out "
            f"records and the {MANIFEST} first"
        )


def _count(names: list[str], what: str) -> str:
    return f"{len(names)} {what}{'' if len(names) == 1 else 's'}"


def _some(names: list[str]) -> str:
    return ", ".join(names[:2]) + (f" and {len(names) - 2} more" if len(names) > 2 else "")
