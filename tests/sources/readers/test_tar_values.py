"""fastdata.sources.readers._tar_values: what a tar sample's members hold — a label, text or
bytes — with an error naming the shard and member when one holds something else."""

from __future__ import annotations

import pyarrow as pa
import pytest

from fastdata.errors import SourceError
from fastdata.sources.readers._tar_values import member_column, parse_label


@pytest.mark.parametrize(
    ("member", "text", "label"),
    [
        ("s.cls", b" 7\n", 7),
        ("s.json", b"3", 3),
        ("s.json", b'{"label": 12, "other": 1}', 12),
        ("dir.v1/s.JSON", b'{"label": 0}', 0),
    ],
)
def test_a_label_member_holds_an_integer(member: str, text: bytes, label: int) -> None:
    assert parse_label(text, member, "shard.tar") == label


def test_a_json_label_may_sit_under_another_key() -> None:
    assert parse_label(b'{"cls": 4}', "s.json", "shard.tar", label_field="cls") == 4


@pytest.mark.parametrize(
    ("member", "text", "words"),
    [
        ("s.cls", b"cat", "not an integer class index"),
        ("s.cls", str(2**63).encode(), "too large for an int64"),
        ("s.json", b"{", "not valid JSON"),
        ("s.json", b"true", "expected an integer"),
        ("s.json", b'{"name": 1}', "'label' is an integer"),
    ],
)
def test_anything_else_is_an_error_naming_the_member(member: str, text: bytes, words: str) -> None:
    with pytest.raises(SourceError, match=words) as caught:
        parse_label(text, member, "shard.tar")
    assert (caught.value.path, caught.value.member) == ("shard.tar", member)


def test_text_members_become_strings_and_others_bytes() -> None:
    texts = member_column("txt", [b"caf\xc3\xa9", b""], ["a.txt", "b.txt"], "s.tar")
    assert texts.type == pa.string() and texts.to_pylist() == ["café", ""]
    raw = member_column("npy", [b"\x00\x01"], ["a.npy"], "s.tar")
    assert raw.type == pa.binary() and raw.to_pylist() == [b"\x00\x01"]
    with pytest.raises(SourceError, match="UTF-8") as caught:
        member_column("txt", [b"ok", b"\xff"], ["a.txt", "b.txt"], "s.tar")
    assert caught.value.member == "b.txt"


def test_json_metadata_without_a_label_points_at_reading_unlabelled() -> None:
    laion = b'{"caption": "a cat", "url": "http://x", "width": 640}'
    with pytest.raises(SourceError, match=r"label_suffixes=\(\)"):
        parse_label(laion, "s.json", "shard.tar")
    with pytest.raises(SourceError) as caught:  # a label of the wrong kind: no such advice
        parse_label(b'{"label": "cat"}', "s.json", "shard.tar")
    assert "label_suffixes" not in caught.value.reason
