"""What the members of a tar sample hold: a label (``.cls`` or ``.json``), text, or bytes."""

from __future__ import annotations

import json
import posixpath

import pyarrow as pa

from fastdata.errors import SourceError

__all__ = ["TEXT_SUFFIXES", "member_column", "parse_label"]

TEXT_SUFFIXES = ("txt", "text", "caption", "json")
"""Other members read as UTF-8 text (a column of strings); any other suffix is bytes."""


def member_column(suffix: str, values: list[bytes], names: list[str], path: str) -> pa.Array:
    """The bytes of members (named ``names``) as a column: strings for
    :data:`TEXT_SUFFIXES`, else binary.

    Raises:
        SourceError: a text member that is not UTF-8, naming it.
    """
    if suffix not in TEXT_SUFFIXES:
        return pa.array(values, pa.binary())
    texts = []
    for value, name in zip(values, names, strict=True):
        try:
            texts.append(value.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SourceError(
                f"the member is not UTF-8 text ({exc})", path=path, member=name
            ) from None
    return pa.array(texts, pa.string())


def parse_label(text: bytes, member: str, path: str, label_field: str = "label") -> int:
    """The integer class index a label member holds.

    A ``.cls`` member holds ASCII decimal; a ``.json`` member a bare integer or an object
    whose ``label_field`` is one (WebDataset writes either).

    Raises:
        SourceError: naming the shard and member, when it holds anything else.
    """
    if posixpath.basename(member).partition(".")[2].lower() != "json":
        try:
            return _int64(int(text.strip()), text, member, path)
        except ValueError:
            raise SourceError(
                f"label member holds {text[:40]!r}, not an integer class index",
                path=path,
                member=member,
            ) from None
    try:
        value = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SourceError(
            f"label member is not valid JSON ({exc})", path=path, member=member
        ) from exc
    unlabelled = isinstance(value, dict) and label_field not in value
    if isinstance(value, dict):
        value = value.get(label_field)
    if isinstance(value, int) and not isinstance(value, bool):
        return _int64(value, text, member, path)
    raise SourceError(
        f"JSON label member holds {text[:60]!r}: expected an integer, or an object whose "
        f"{label_field!r} is an integer class index (label_field= names another key"
        + (
            "; metadata without a label, as LAION's, is read unlabelled with label_suffixes=())"
            if unlabelled
            else ")"
        ),
        path=path,
        member=member,
    )


def _int64(value: int, text: bytes, member: str, path: str) -> int:
    """``value``, which labels become an int64 tensor of; an error naming the member if it
    does not fit."""
    if not -(2**63) <= value < 2**63:
        raise SourceError(
            f"label member holds {text[:40]!r}, too large for an int64 class index",
            path=path,
            member=member,
        )
    return value
