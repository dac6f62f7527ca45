"""The samples a conversion writes: :class:`Sample`, and the listings that make them from an
ImageFolder tree (:func:`folder_samples`) or a list file (:func:`list_samples`).
"""

from __future__ import annotations

import codecs
import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SKIP_HINT",
    "Sample",
    "check_labelled",
    "folder_samples",
    "image_suffix",
    "list_samples",
    "suffix_of",
]

SKIP_HINT = (
    "or pass on_error='skip' (fastdata convert --on-error skip) to leave such samples out, "
    "listed in the result"
)
"""The end of the message of a sample that stops a conversion under ``on_error="raise"``."""

_FORMATS = {"jpeg": "jpg", "png": "png", "webp": "webp", "bmp": "bmp", "tiff": "tiff"}
_ALIASES = {"jfif": "jpg", "jpe": "jpg"}  # other JPEG extensions: written as from_tar reads


@dataclass(frozen=True)
class Sample:
    """One sample to write: an encoded image and, optionally, its label, key and other
    fields (a caption, tokens, JSON metadata: the multimodal samples that
    ``ImageStream.from_tar(members=...)`` and ``from_parquet(columns=...)`` read).

    Args:
        image: the path of an image file (on ``source_filesystem`` of :func:`write_shards`,
            local by default), or the encoded bytes themselves.
        label: an integer label, or None (then every sample must have none).
        key: the sample's name in the shard (the tar member stem, the Parquet ``key``
            column); default: its index, zero-padded. Unique, without ``.``.
        size: the image file's size in bytes, when already known (saves a ``stat``).
        extras: other fields by name, the same names for every sample: in a tar shard the
            member ``{key}.{name}`` (``"txt"``, ``"json"``...: text as UTF-8, bytes as they
            are, anything else as JSON text), in Parquet the column ``name`` (text, bytes,
            numbers and lists of numbers in Arrow's types, a dict as JSON text). What the
            readers give back differs by format and name: in tar, text under ``txt``,
            ``text``, ``caption``, a parsed ``json``, bytes under any other name; in
            Parquet, the column's type (the "Preparing a dataset" guide has the table).
    """

    image: str | bytes
    label: int | None = None
    key: str | None = None
    size: int | None = None
    extras: Mapping[str, Any] | None = None


def check_labelled(samples: list[Sample]) -> None:
    """Refuse samples of which some have a label and some do not, naming the first sample
    whose label differs from the first sample's in that.

    Raises:
        ValueError: a sample has a label where the first has none, or the reverse.
    """
    first = samples[0].label is not None
    differs = next((i for i, s in enumerate(samples) if (s.label is not None) != first), None)
    if differs is None:
        return
    sample = samples[differs]
    named = "".join(
        f", {what} {value!r}"
        for what, value in (("key", sample.key), ("image", sample.image))
        if isinstance(value, str)
    )
    has = f"label={sample.label!r}" if sample.label is not None else "no label"
    first_has = f"label={samples[0].label!r}" if first else "none"
    raise ValueError(
        f"sample {differs}{named} has {has}, but sample 0 has {first_has}: some samples have a "
        "label and some do not; give every sample a label, or none"
    )


def folder_samples(
    root: str | os.PathLike[str], /, *, filesystem: Any = None, **options: Any
) -> tuple[list[Sample], list[str]]:
    """The samples of an ImageFolder tree ``root/<class>/**/<image>`` and its class names,
    found exactly as :meth:`fastdata.ImageStream.from_folder` (and torchvision) finds them;
    ``options`` are that method's (``class_to_idx``, ``extensions``, ``is_valid_file``,
    ``allow_empty``)."""
    from fastdata.sources.images import ImageStream
    from fastdata.sources.readers.files import ImageFiles

    stream = ImageStream.from_folder(root, filesystem=filesystem, **options)
    reader = stream.reader
    assert isinstance(reader, ImageFiles) and reader.labels is not None
    samples = [
        Sample(path, label, size=size)
        for path, label, size in zip(reader.paths, reader.labels, reader.sizes, strict=True)
    ]
    return samples, list(stream.classes or [])


def suffix_of(image: str | bytes) -> tuple[str, str]:
    """``(suffix, "")``: an image's tar member suffix, one ``ImageStream.from_tar`` reads
    (its file's extension, ``jpg`` for the JPEG extensions ``.jfif`` and ``.jpe``, or its
    bytes' format); or ``("", reason)`` where it is none."""
    from fastdata.sources.readers.tar import IMAGE_SUFFIXES

    if isinstance(image, str):
        suffix = os.path.splitext(image)[1].lower().lstrip(".")
        if suffix in IMAGE_SUFFIXES or suffix in _ALIASES:
            return _ALIASES.get(suffix, suffix), ""
        kinds = ", ".join([*IMAGE_SUFFIXES, *_ALIASES])
        return "", f"the extension {suffix!r} is not an image's ({kinds})"
    from fastdata.decode import image_header

    header = image_header(image)
    found = _FORMATS.get(header.format) if header is not None else None
    if found is None:
        what = header.format if header else f"no known header: {image[:16]!r}"
        return "", f"the bytes are not a {', '.join(_FORMATS)} image (found {what})"
    return found, ""


def image_suffix(image: str | bytes, key: str) -> str:
    """The tar member suffix of an image (:func:`suffix_of`).

    Raises:
        ValueError: not an image suffix or format ``ImageStream.from_tar`` reads.
    """
    suffix, reason = suffix_of(image)
    if not reason:
        return suffix
    if isinstance(image, str):
        raise ValueError(f"{image}: {reason}: rename the file, or pass its bytes; {SKIP_HINT}")
    raise ValueError(f"sample {key!r}: {reason}; {SKIP_HINT}")


def list_samples(list_file: str | os.PathLike[str], /) -> list[Sample]:
    """The samples of a text file with one image per line: ``path`` or ``path<TAB>label``
    (UTF-8, with or without a byte order mark; relative paths are relative to the list's
    folder; blank lines are skipped).

    Raises:
        ValueError: a line whose label is not an integer, a line that is not UTF-8, or a
            file that is no text at all (a Parquet or Arrow file: the message says how to
            read it instead).
    """
    base = os.path.dirname(os.path.abspath(list_file))
    samples = []
    try:
        with open(list_file, "rb") as raw:
            head = raw.read(_PEEK)
            _check_text(list_file, head)
            # read on from the bytes looked at: a pipe (/dev/stdin, a FIFO) is read once
            replay = io.BufferedReader(_Replay(head, raw))
            f = io.TextIOWrapper(replay, encoding="utf-8-sig")  # a BOM is no part of a path
            for number, line in enumerate(f, start=1):
                path, tab, label = line.rstrip("\r\n").partition("\t")
                if not path.strip():
                    continue
                try:
                    value = int(label) if tab else None
                except ValueError:
                    raise ValueError(
                        f"{list_file}, line {number}: label {label!r} is not an integer "
                        "(expected 'path' or 'path<TAB>label')"
                    ) from None
                samples.append(Sample(os.path.normpath(os.path.join(base, path)), value))
    except UnicodeDecodeError:
        raise ValueError(_not_utf8(list_file)) from None
    return samples


_PEEK = 4096  # the bytes of a list file looked at for a binary file's signature
_LIST = (
    "a list of images is a UTF-8 text file with one image per line ('path' or "
    "'path<TAB>label'); fastdata convert also takes an image folder (root/<class>/<image>)"
)
_SIGNATURES = (  # (a binary file's first bytes, what it is, what to do with it)
    (b"PAR1", "a Parquet file", "the data is Parquet already: read it with "
     "fastdata.ImageStream.from_parquet(path) (an image column of bytes or of Hugging Face "
     "Image dicts) or fastdata.ParquetStream(path)"),
    (b"ARROW1", "an Arrow IPC file", "write it as Parquet (pyarrow.parquet.write_table) and "
     "read that with fastdata.ImageStream.from_parquet"),
    (b"\xff\xff\xff\xff", "an Arrow IPC stream file (datasets' save_to_disk writes these)",
     "write the dataset as Parquet (datasets.load_from_disk(folder).to_parquet('train.parquet')) "
     "and read that with fastdata.ImageStream.from_parquet"),
)  # fmt: skip


class _Replay(io.RawIOBase):
    """The bytes of ``rest``, whose first bytes ``head`` were read from it already."""

    def __init__(self, head: bytes, rest: io.BufferedReader) -> None:
        self._head, self._rest = memoryview(head), rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._head:
            return self._rest.readinto(buffer)
        count = min(len(buffer), len(self._head))
        buffer[:count], self._head = self._head[:count], self._head[count:]
        return count


def _check_text(list_file: str | os.PathLike[str], head: bytes) -> None:
    """Refuse a list file whose first bytes show it is no UTF-8 text: UTF-16 text (with
    how to re-save it), a Parquet or Arrow file (with how to read it instead), or any file
    with a NUL byte. A signature counts only in bytes that are no text: a list whose first
    path starts with ``PAR1`` is a list."""
    pairs = [head[i : i + 4 : 2] for i in (0, 1)] if len(head) >= 4 else []
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or sorted(
        (0 in pair, pair == bytes(2)) for pair in pairs
    ) == [(False, False), (True, True)]:  # the BOM, or ASCII as UTF-16 (LE or BE) without
        raise ValueError(
            f"{list_file}: UTF-16 text (what Windows PowerShell 5.1's '>' writes), not UTF-8: "
            f"{_LIST}; re-save the list as UTF-8 (iconv -f utf-16 -t utf-8 list.txt > "
            "list-utf8.txt, or in PowerShell: Get-Content list.txt | Set-Content -Encoding "
            "utf8 list-utf8.txt)"
        )
    try:  # a character cut at the end of the head is no error
        codecs.getincrementaldecoder("utf-8")().decode(head)
        text = b"\0" not in head
    except UnicodeDecodeError:
        text = False
    for signature, what, advice in _SIGNATURES:
        if head.startswith(signature) and not text:
            raise ValueError(f"{list_file}: {what}, not a list of images: {_LIST}; {advice}")
    if b"\0" in head:
        nul = head.index(b"\0")
        raise ValueError(
            f"{list_file}: a binary file (a NUL byte at byte {nul}), not a list of images: {_LIST}"
        )


def _not_utf8(list_file: str | os.PathLike[str]) -> str:
    """The message of a list file that is not UTF-8: its first such line and byte, found by
    reading a regular file again (a pipe cannot be: opening a FIFO again would wait for a
    writer for ever)."""
    if not os.path.isfile(list_file):
        return f"{list_file}: not UTF-8 text: {_LIST}"
    with open(list_file, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return (
                    f"{list_file}, line {number}: not UTF-8 (byte 0x{raw[exc.start]:02x} at "
                    f"position {exc.start + 1} of the line): {_LIST}; re-save the list as UTF-8 "
                    "(for a Latin-1 file: iconv -f latin1 -t utf-8 list.txt > list-utf8.txt)"
                )
    return f"{list_file}: not UTF-8 text: {_LIST}"  # pragma: no cover - found by the reader
