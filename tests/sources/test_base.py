"""fastdata.sources.base: the Reader/Decoder contract's optional capabilities, declared as
protocols. Per capability: the built-in part that has it is seen to have it, a misspelt one is
not (and where the typo changes which rows come when, the stream refuses it when built), and
one declared by halves or with a member of the wrong type is refused when the stream is built."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import fastdata as fd
from fastdata.sources import (
    FileBacked,
    PerEpochReader,
    SchemaReader,
    SkipCounting,
    SourceCounting,
    VaryingDecoder,
)
from fastdata.sources.base import declares, varies


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    fd.synthetic.make_parquet(root / "pq", 60, files=2, row_group_size=10)
    fd.synthetic.make_tokens(root / "tokens", 40, files=1)
    fd.synthetic.make_tar_shards(root / "tar", 6, shards=2, min_short=16, max_short=20)
    return root


class Rows:
    """A minimal reader: one unit of ``n`` rows ``{"id": i}``; subclasses add (mis)declared
    capabilities."""

    n = 10

    def unit_rows(self) -> list[int]:
        return [self.n]

    def read(self, unit: int, start: int, stop: int) -> pa.Table:
        return pa.table({"id": list(range(start, stop))})

    def location(self, unit: int, row: int) -> dict[str, Any]:
        return {"row": row}

    def identity(self) -> dict[str, Any]:
        return {"rows": self.n}


def refused(reader: Any = None, decoder: Any = None, match: str = "") -> None:
    with pytest.raises(TypeError, match=match):
        fd.PlannedStream(reader if reader is not None else Rows(), decoder=decoder)


# --------------------------------------------------------------------------- PerEpochReader
def test_the_mix_reader_is_per_epoch_and_a_parquet_reader_is_not(data: Path) -> None:
    a = fd.ParquetStream(data / "pq", columns=["id"])
    mixed = fd.mix({"a": a, "b": fd.ParquetStream(data / "pq", columns=["id"])}, batch_size=5)
    assert declares(mixed.reader, PerEpochReader)
    assert isinstance(mixed.reader, PerEpochReader)
    assert not declares(a.reader, PerEpochReader)


def test_a_misspelt_for_epoch_is_refused_naming_the_right_name() -> None:
    class Typo(Rows):
        def for_epochs(self, epoch: int) -> Rows:
            return self

    assert not isinstance(Typo(), PerEpochReader)
    refused(Typo(), match=r"'for_epochs', not 'for_epoch'")


def test_a_for_epoch_that_is_not_a_method_is_refused() -> None:
    class NotCallable(Rows):
        for_epoch = 3

    refused(NotCallable(), match=r"for_epoch is 3: .*PerEpochReader needs it a method")


def test_a_per_epoch_reader_is_read_through_its_epochs_reader() -> None:
    class Growing(Rows):
        def for_epoch(self, epoch: int) -> Rows:
            reader = Rows()
            reader.n = 10 + epoch
            return reader

    stream = fd.PlannedStream(Growing(), batch_size=100)
    stream.set_epoch(3)
    assert next(iter(stream))["id"].tolist() == list(range(13))


# --------------------------------------------------------------------------- VaryingDecoder
def test_packing_varies_and_raising_images_declare_it_without_varying(data: Path) -> None:
    packed = fd.pack(fd.ParquetStream(data / "tokens", columns=["tokens"]), seq_len=16, rows=2)
    assert declares(packed.decoder, VaryingDecoder) and varies(packed.decoder)
    images = fd.ImageStream.from_tar(data / "tar", size=8, crop="center", batch_size=2)
    assert declares(images.decoder, VaryingDecoder) and not varies(images.decoder)
    skipping = fd.ImageStream.from_tar(data / "tar", size=8, on_error="skip", batch_size=2)
    assert varies(skipping.decoder) and skipping.varying
    assert not declares(fd.sources.ArrowDecoder(), VaryingDecoder)


class Plain(fd.sources.ArrowDecoder):
    """The default decoder, subclassed to (mis)declare a capability."""


class WithItems(Plain):
    def items(self, tables: Any, context: Any, offset: int) -> Any:
        return iter(())


@pytest.mark.parametrize(
    ("base", "member", "match"),
    [
        (Plain, "varying", r"by halves: it has \['varying'\] but not \['items'\]"),
        (WithItems, "varing", r"has \['items'\] but not \['varying'\]"),  # a typo
        (Plain, "variyng", r"'variyng', not 'varying'"),  # a typo, and no items
    ],
)
def test_varying_declared_by_halves_or_misspelt_is_refused(base, member, match) -> None:
    decoder = type("Half", (base,), {member: True})()
    assert not isinstance(decoder, VaryingDecoder)
    refused(decoder=decoder, match=match)


def test_varying_of_the_wrong_type_is_refused() -> None:
    decoder = type("Text", (WithItems,), {"varying": "yes"})()
    refused(decoder=decoder, match=r"varying is 'yes'.*<class 'bool'>")


# --------------------------------------------------------------------------- FileBacked
def test_parquet_readers_and_image_decoders_are_file_backed(data: Path) -> None:
    assert declares(fd.ParquetStream(data / "pq").reader, FileBacked)
    images = fd.ImageStream.from_tar(data / "tar", size=8)
    assert declares(images.reader, FileBacked)
    assert not declares(fd.sources.ArrowDecoder(), FileBacked)


def test_a_file_system_that_is_a_string_is_refused() -> None:
    class Url(Rows):
        fs = "s3://bucket"

    refused(Url(), match=r"fs is 's3://bucket': fastdata.sources.FileBacked needs it of type")


def test_a_misspelt_fs_is_not_file_backed() -> None:
    from fastdata.sources._cache import handlers

    class Typo(Rows):
        filesystem = None

    assert not declares(Typo(), FileBacked)
    assert handlers(fd.PlannedStream(Typo())) == []


# --------------------------------------------------------------------------- SkipCounting
def test_tar_readers_and_image_decoders_count_skips(data: Path) -> None:
    images = fd.ImageStream.from_tar(data / "tar", size=8, on_error="skip")
    assert declares(images.reader, SkipCounting) and declares(images.decoder, SkipCounting)
    assert images.skipped == 0
    assert not declares(fd.ParquetStream(data / "pq").reader, SkipCounting)


def test_skipped_of_the_wrong_type_is_refused_and_a_misspelt_one_is_not_counted() -> None:
    class Text(Rows):
        skipped = "3"

    class Typo(Rows):
        skiped = 3

    refused(Text(), match=r"skipped is '3'")
    assert not declares(Typo(), SkipCounting)


# --------------------------------------------------------------------------- SchemaReader
def test_parquet_readers_have_a_schema_that_pack_checks_early(data: Path) -> None:
    reader = fd.ParquetStream(data / "pq").reader
    assert declares(reader, SchemaReader) and isinstance(reader.schema, pa.Schema)
    with pytest.raises(fd.SchemaError, match="expected a list of integers"):
        fd.pack(fd.ParquetStream(data / "pq", columns=["id"]), column="id", seq_len=8)


def test_a_schema_of_the_wrong_type_is_refused_and_a_misspelt_one_is_not_a_schema() -> None:
    class Mapping(Rows):
        schema = {"id": "int64"}  # noqa: RUF012

    class Typo(Rows):
        shema = pa.schema([("id", pa.int64())])

    refused(Mapping(), match=r"schema is \{'id': 'int64'\}: .*SchemaReader")
    assert not declares(Typo(), SchemaReader)


# --------------------------------------------------------------------------- SourceCounting
def test_a_mix_counts_its_sources_in_the_loaders_stats(data: Path) -> None:
    streams = {n: fd.ParquetStream(data / "pq", columns=["id"]) for n in ("a", "b")}
    mixed = fd.mix(streams, batch_size=10)
    assert declares(mixed, SourceCounting)
    assert not declares(streams["a"], SourceCounting)
    loader = fd.DataLoader(mixed, batch_size=None, stats=True)
    for _ in loader:
        pass
    assert loader.stats()["sources"] == {"a": 60, "b": 60}


def test_source_counts_that_is_not_a_method_fails_loudly_in_stats(data: Path) -> None:
    class Counted(fd.PlannedStream):
        source_counts = {"a": 1}  # noqa: RUF012

    class Typo(fd.PlannedStream):
        def source_count(self) -> dict[str, int]:
            return {"a": 1}

    assert not declares(Typo(Rows()), SourceCounting)
    loader = fd.DataLoader(Counted(Rows(), batch_size=5), batch_size=None, stats=True)
    list(loader)
    with pytest.raises(TypeError, match=r"source_counts is \{'a': 1\}"):
        loader.stats()
    typo = fd.DataLoader(Typo(Rows(), batch_size=5), batch_size=None, stats=True)
    list(typo)
    assert "sources" not in typo.stats()


def test_a_readers_own_items_or_vary_is_not_taken_for_a_decoders_capability() -> None:
    class Listed(Rows):
        items = [1, 2]  # noqa: RUF012 (a reader's own data, not VaryingDecoder.items)
        vary = True

    stream = fd.PlannedStream(Listed(), batch_size=4)
    assert not stream.varying and len(list(stream)) == 3
