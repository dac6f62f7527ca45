"""Every public constructor checks its arguments up front: the wrong type or range raises at
construction (not at the first batch, not in a worker), naming the argument and what is
accepted."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import fastdata as fd
from fastdata.loader._arguments import as_is


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("args")
    fd.synthetic.make_parquet(root / "pq", 200, files=1)
    fd.synthetic.make_images(root / "img", 4, min_short=20, max_short=24, texture="smooth")
    return root


STREAM_CASES = [
    ({"batch_size": "64"}, TypeError, r"batch_size='64': expected an integer >= 1"),
    ({"batch_size": 64.0}, TypeError, r"batch_size=64\.0: expected an integer"),
    ({"batch_size": 0}, ValueError, r"batch_size=0: expected an integer >= 1"),
    ({"shuffle": "yes"}, TypeError, r"shuffle='yes': expected True or False"),
    ({"seed": -1}, ValueError, r"seed=-1"),
    ({"shuffle_buffer": -5}, ValueError, r"shuffle_buffer=-5"),
    ({"drop_last": True}, ValueError, r"drop_last=True needs batch_size"),
    ({"even_batches": "yes"}, ValueError, r"even_batches='yes': expected one of None"),
    ({"rank": 2, "world_size": 2}, ValueError, r"rank=2, world_size=2"),
    ({"rank": 0}, ValueError, r"pass both or neither"),
    ({"read_ahead": 1.5}, TypeError, r"read_ahead=1\.5"),
]


@pytest.mark.parametrize(("options", "error", "message"), STREAM_CASES)
def test_stream_options(data: Path, options, error, message) -> None:
    with pytest.raises(error, match=message):
        fd.ParquetStream(data / "pq", **options)
    with pytest.raises(error, match=message):
        fd.ImageStream.from_folder(data / "img", **options)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"columns": "label"}, TypeError, r"for one column write columns=\['label'\]"),
        ({"columns": []}, ValueError, r"columns=\[\]: expected at least one name"),
        ({"columns": ["id", "id"]}, ValueError, r"'id' given twice"),
        ({"filter": "label < 3"}, TypeError, r"pyarrow\.compute\.Expression"),
        ({"fill_null": 0}, TypeError, r"fill_null=0: expected a dict"),
    ],
)
def test_parquet_options(data: Path, options, error, message) -> None:
    with pytest.raises(error, match=message):
        fd.ParquetStream(data / "pq", **options)


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"size": "224"}, TypeError, r"size='224': expected an integer >= 1"),
        ({"size": (0, 4)}, ValueError, r"size=\(0, 4\)"),
        ({"crop": "middle", "size": 8}, ValueError, r"crop='middle': expected one of None"),
        ({"flip": 1}, TypeError, r"flip=1: expected True or False"),
        ({"decode_threads": 0}, ValueError, r"decode_threads=0"),
        ({"on_error": "ignore"}, ValueError, r"on_error='ignore': expected one of 'raise'"),
        ({"max_pixels": 0}, ValueError, r"max_pixels=0"),
        ({"keep_alpha": "no"}, TypeError, r"keep_alpha='no'"),
        ({"files_per_unit": 0}, ValueError, r"files_per_unit=0"),
        ({"decode_device": "gpu"}, (ValueError, RuntimeError), r"decode_device='gpu'"),
    ],
)
def test_image_options(data: Path, options, error, message) -> None:
    with pytest.raises(error, match=message):
        fd.ImageStream.from_folder(data / "img", **options)


def test_loader_extras(data: Path) -> None:
    stream = fd.ParquetStream(data / "pq", batch_size=10)
    with pytest.raises(ValueError, match=r"device='gpu': not a device"):
        fd.DataLoader(stream, batch_size=None, device="gpu")
    with pytest.raises(TypeError, match=r"stats='on': expected True or False"):
        fd.DataLoader(stream, batch_size=None, stats="on")
    with pytest.raises(ValueError, match="normalize= needs device="):
        fd.DataLoader(stream, batch_size=None, normalize=fd.IMAGENET)
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match=r"device='cuda': no cuda device"):
            fd.DataLoader(stream, batch_size=None, device="cuda")


def test_a_streams_batches_are_handed_over_as_they_are(data: Path) -> None:
    stream = fd.ParquetStream(data / "pq", columns=["id", "tokens"], batch_size=10)
    loader = fd.DataLoader(stream, batch_size=None)
    assert loader.collate_fn is as_is  # no per-element default_convert walk
    assert isinstance(next(iter(loader))["tokens"], fd.Ragged)
    rows = fd.DataLoader(fd.ParquetStream(data / "pq", columns=["id"]), batch_size=None)
    assert rows.collate_fn is not as_is  # rows: torch's conversion, as torch


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda s: fd.pack(s, seq_len=0), ValueError, r"seq_len=0"),
        (lambda s: fd.pack(s, seq_len=8, rows="8"), TypeError, r"rows='8'"),
        (lambda s: fd.pack(s, seq_len=8, overlong="wrap"), ValueError, r"overlong='wrap'"),
        (lambda s: fd.mix({"a": s}, weights={"a": -1}), ValueError, r"weights\['a'\]=-1"),
        (lambda s: fd.mix({"a": s}, epoch_rows=0), ValueError, r"epoch_rows=0"),
    ],
)
def test_pack_and_mix(data: Path, call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(fd.ParquetStream(data / "pq", columns=["tokens"]))
