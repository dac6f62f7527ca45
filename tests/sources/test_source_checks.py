"""The checks of the streams mix() and pack() take apart: the sources of a mix read one schema
(cast where only the form differs, refused naming both sources where the columns or types
differ, when the mix is built), and a source's stream options, which they ignore, are found
(a warning from mix(), an error from pack())."""

from __future__ import annotations

import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import fastdata as fd


def write(path: Path, table: pa.Table, **options) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path / "part.parquet", row_group_size=10, **options)
    return path


def tokens(n: int, first: int = 0, kind: pa.DataType | None = None, **columns) -> pa.Table:
    docs = [[first + i] * (1 + i % 3) for i in range(n)]
    return pa.table({"tokens": pa.array(docs, pa.list_(kind or pa.int32())), **columns})


# ------------------------------------------------------------------------------- schemas
def test_a_column_of_another_type_is_refused_when_the_mix_is_built(tmp_path: Path) -> None:
    web = fd.ParquetStream(write(tmp_path / "web", tokens(30)))
    code = fd.ParquetStream(write(tmp_path / "code", tokens(20, kind=pa.int64())))
    with pytest.raises(
        fd.SchemaError,
        match=r"'tokens' is list<.*int64> in source 'code' but "
        r"list<.*int32> in source 'web'",
    ) as caught:
        fd.mix({"web": web, "code": code}, batch_size=8)
    assert caught.value.column == "tokens"


def test_a_source_column_of_the_data_is_refused_when_the_mix_is_built(tmp_path: Path) -> None:
    """Corpora often carry a 'source' field: the mix adds its own, and the first batch
    failed with pyarrow's "Field "source" exists 2 times in schema" (found by review)."""
    source = pa.array(["crawl"] * 30)
    web = fd.ParquetStream(write(tmp_path / "web", tokens(30, source=source)))
    code = fd.ParquetStream(write(tmp_path / "code", tokens(20, source=source[:20])))
    with pytest.raises(fd.SchemaError, match=r"source 'web' reads a column 'source'") as caught:
        fd.mix({"web": web, "code": code}, batch_size=8)
    assert caught.value.column == "source"
    columns = ["tokens"]  # left out, the mix reads
    mixed = fd.mix(
        {
            "web": fd.ParquetStream(tmp_path / "web", columns=columns),
            "code": fd.ParquetStream(tmp_path / "code", columns=columns),
        },
        batch_size=8,
    )
    assert sum(len(batch["source"]) for batch in mixed) == 50


def test_a_column_one_source_lacks_is_refused_naming_both(tmp_path: Path) -> None:
    web = fd.ParquetStream(write(tmp_path / "web", tokens(30, doc=list(range(30)))))
    code = fd.ParquetStream(write(tmp_path / "code", tokens(20)))
    with pytest.raises(
        fd.SchemaError,
        match=r"source 'code' lacks column 'doc', unlike "
        r"source 'web'",
    ):
        fd.mix({"web": web, "code": code}, batch_size=8)
    with pytest.raises(
        fd.SchemaError,
        match=r"source 'web' has column 'doc', unlike "
        r"source 'code'",
    ):
        fd.mix({"code": code, "web": web}, batch_size=8)


def test_sources_differing_only_in_form_are_cast_to_one_schema(tmp_path: Path) -> None:
    """What pa.concat_tables refuses but holds the same values: nullability (top level and
    nested), string against large_string, the columns' order, a dictionary-encoded column and
    Hugging Face's metadata and list field names. Batches mixing them all come out whole."""
    n = 30
    required = pa.schema(
        [
            pa.field("tokens", pa.list_(pa.field("item", pa.int32(), nullable=False)), False),
            pa.field("text", pa.string(), nullable=False),
        ]
    )
    a = tokens(n, text=[f"a{i}" for i in range(n)]).cast(required)
    b = tokens(n, 100, text=pa.array([f"b{i}" for i in range(n)], pa.large_string()))
    c = tokens(n, 200, text=pa.array([f"c{i}" for i in range(n)]).dictionary_encode())
    c = c.select(["text", "tokens"]).replace_schema_metadata({"huggingface": "{}"})
    streams = {
        "a": fd.ParquetStream(write(tmp_path / "a", a)),
        "b": fd.ParquetStream(write(tmp_path / "b", b)),
        "c": fd.ParquetStream(write(tmp_path / "c", c, use_compliant_nested_type=True)),
    }
    mixed = fd.mix(streams, batch_size=16, shuffle=True)
    rows = [
        (text, doc)  # a string column: a Ragged of uint8, whose tolist() gives strings
        for batch in mixed
        for text, doc in zip(batch["text"].tolist(), batch["tokens"].tolist(), strict=True)
    ]
    assert len(rows) == 3 * n
    assert {text[0] for text, _ in rows} == {"a", "b", "c"}
    for text, doc in rows:
        first = {"a": 0, "b": 100, "c": 200}[text[0]] + int(text[1:])
        assert doc == [first] * (1 + int(text[1:]) % 3)


def test_sources_of_one_schema_are_read_as_they_are(tmp_path: Path) -> None:
    from fastdata.sources._source_checks import CastReader

    web = fd.ParquetStream(write(tmp_path / "web", tokens(30)))
    code = fd.ParquetStream(write(tmp_path / "code", tokens(20, 50)))
    mixed = fd.mix({"web": web, "code": code}, batch_size=8)
    assert not any(isinstance(r, CastReader) for r in mixed.reader.readers)


# ------------------------------------------------------------------------- stream options
def test_stream_options_of_a_source_are_warned_about_once(tmp_path: Path) -> None:
    web_path = write(tmp_path / "web", tokens(30))
    web = fd.ParquetStream(web_path, shuffle=True, batch_size=8)
    code = fd.ParquetStream(write(tmp_path / "code", tokens(20)), seed=3)
    with pytest.warns(
        UserWarning,
        match=r"ignores the stream options of its sources \('web': "
        r"batch_size=8, shuffle=True; 'code': seed=3\).*pass them to mix\(\)",
    ) as w:
        fd.mix({"web": web, "code": code}, batch_size=4)
    assert len(w) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fd.mix({"web": fd.ParquetStream(web_path), "code": fd.ParquetStream(web_path)})


def test_image_streams_built_with_their_defaults_are_not_warned_about(tmp_path: Path) -> None:
    fd.synthetic.make_images(tmp_path / "img", 4, min_short=20, max_short=24)
    make = lambda: fd.ImageStream.from_folder(tmp_path / "img", size=8, crop="center")  # noqa: E731
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mixed = fd.mix({"a": make(), "b": make()}, batch_size=2)
    assert sum(len(labels) for _, labels in mixed) == 8
    with pytest.warns(UserWarning, match=r"'b': shuffle_buffer=64"):
        fd.mix(
            {
                "a": make(),
                "b": fd.ImageStream.from_folder(
                    tmp_path / "img", size=8, crop="center", shuffle_buffer=64
                ),
            }
        )
