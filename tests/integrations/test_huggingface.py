"""Hugging Face ``datasets`` files streamed by ParquetStream: ``Dataset.to_parquet`` output,
``save_to_disk`` output (Arrow, not Parquet: refused clearly, and the supported route), and
the hub's Parquet layout through an fsspec filesystem (a local stand-in for HfFileSystem)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from fsspec.implementations.dirfs import DirFileSystem
from huggingface_hub import HfFileSystem
from PIL import Image

import fastdata as fd

N = 300


@pytest.fixture(scope="module")
def dataset() -> datasets.Dataset:
    rng = np.random.default_rng(0)
    features = datasets.Features(
        {
            "id": datasets.Value("int64"),
            "score": datasets.Value("float32"),
            "text": datasets.Value("string"),
            "tokens": datasets.List(datasets.Value("int32")),  # ragged
            "embedding": datasets.List(datasets.Value("float32"), length=3),  # fixed
        }
    )
    return datasets.Dataset.from_dict(
        {
            "id": list(range(N)),
            "score": rng.standard_normal(N).astype(np.float32).tolist(),
            "text": [f"row {i}" for i in range(N)],
            "tokens": [list(range(i % 7 + 1)) for i in range(N)],
            "embedding": rng.standard_normal((N, 3)).astype(np.float32).tolist(),
        },
        features=features,
    )


def write_hub_layout(ds: datasets.Dataset, data_dir: Path, shards: int = 2) -> list[Path]:
    """Parquet shards named as ``push_to_hub`` names them, row groups of 64 rows."""
    data_dir.mkdir(parents=True)
    paths = []
    for i in range(shards):
        path = data_dir / f"train-{i:05d}-of-{shards:05d}.parquet"
        ds.shard(shards, i, contiguous=True).to_parquet(str(path), batch_size=64)
        paths.append(path)
    return paths


def test_to_parquet_output_streams_with_the_datasets_values(
    dataset: datasets.Dataset, tmp_path: Path
) -> None:
    write_hub_layout(dataset, tmp_path / "data")
    stream = fd.ParquetStream(tmp_path / "data", batch_size=50)
    batches = list(fd.DataLoader(stream, batch_size=None))
    assert stream.num_rows == N and len(batches) == N // 50

    ids = torch.cat([b["id"] for b in batches])
    assert ids.dtype == torch.int64 and ids.tolist() == list(range(N))
    score = torch.cat([b["score"] for b in batches])
    assert score.dtype == torch.float32
    assert torch.equal(score, torch.tensor(dataset["score"], dtype=torch.float32))
    assert [t for b in batches for t in b["text"].tolist()] == dataset["text"]  # a Ragged
    tokens = [t for b in batches for t in b["tokens"].tolist()]  # values + offsets
    assert tokens == dataset["tokens"]
    embedding = torch.cat([b["embedding"] for b in batches])  # fixed length: one 2-D tensor
    assert embedding.shape == (N, 3)
    assert torch.equal(embedding, torch.tensor(dataset["embedding"], dtype=torch.float32))


def test_save_to_disk_output_is_arrow_and_is_refused_clearly(
    dataset: datasets.Dataset, tmp_path: Path
) -> None:
    saved = tmp_path / "saved"
    dataset.save_to_disk(str(saved), num_shards=2)
    arrow_files = sorted(saved.glob("*.arrow"))
    assert len(arrow_files) == 2 and not list(saved.glob("*.parquet"))
    with pytest.raises(fd.SourceError, match=r"no \.parquet") as no_parquet:
        fd.ParquetStream(saved)
    assert no_parquet.value.path == str(saved)
    with pytest.raises(fd.SourceError, match="not Parquet") as not_parquet:
        fd.ParquetStream(arrow_files[0])
    assert not_parquet.value.path == str(arrow_files[0])

    # The supported route: load it back and write Parquet once.
    datasets.load_from_disk(str(saved)).to_parquet(str(tmp_path / "train.parquet"))
    ids = torch.cat([b["id"] for b in fd.ParquetStream(tmp_path / "train.parquet", batch_size=64)])
    assert sorted(ids.tolist()) == list(range(N))


def test_the_local_stand_in_has_the_hub_filesystems_paths() -> None:
    # HfFileSystem lists "datasets/owner/name/..." with no leading "/" (root_marker ""), as
    # DirFileSystem does over a local folder: the next test's stand-in takes the same path.
    assert HfFileSystem.root_marker == DirFileSystem.root_marker == ""
    assert HfFileSystem.protocol == "hf"


@pytest.mark.parametrize("world", [1, 2])
def test_hub_layout_through_an_fsspec_filesystem(
    dataset: datasets.Dataset, tmp_path: Path, world: int
) -> None:
    write_hub_layout(dataset, tmp_path / "hub" / "datasets" / "owner" / "name" / "data")
    hub = DirFileSystem(str(tmp_path / "hub"))  # HfFileSystem() on the real hub
    seen: Counter[int] = Counter()
    for rank in range(world):
        stream = fd.ParquetStream(
            "datasets/owner/name/data/*.parquet",
            filesystem=hub,
            columns=["id", "tokens"],
            batch_size=32,
            shuffle=True,
            rank=rank,
            world_size=world,
        )
        assert stream.files == [
            f"datasets/owner/name/data/train-0000{i}-of-00002.parquet" for i in range(2)
        ]
        for batch in fd.DataLoader(stream, batch_size=None):
            seen.update(batch["id"].tolist())
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}


def test_relative_glob_on_an_fsspec_filesystem_with_a_root_marker(
    dataset: datasets.Dataset, tmp_path: Path
) -> None:
    import fsspec

    paths = write_hub_layout(dataset, tmp_path / "data")
    memory = fsspec.filesystem("memory")
    for path in paths:
        memory.pipe(f"/datasets/owner/name/data/{path.name}", path.read_bytes())
    pattern = "datasets/owner/name/data/*.parquet"
    assert len(memory.glob(pattern)) == 2  # the filesystem itself finds them
    assert fd.ParquetStream(pattern, filesystem=memory).num_rows == N


def _jpeg(value: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (24, 24), (value, value, value)).save(out, format="JPEG")
    return out.getvalue()


def test_hub_image_parquet_streams_as_images(tmp_path: Path) -> None:
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    table = pa.table(
        {
            "image": pa.array([{"bytes": _jpeg(v), "path": None} for v in range(8)], image),
            "label": pa.array(list(range(8)), pa.int64()),
        }
    )
    pq.write_table(table, tmp_path / "train-00000-of-00001.parquet")
    stream = fd.ImageStream.from_parquet(tmp_path, size=16, batch_size=4)
    assert sum(len(batch[1]) for batch in fd.DataLoader(stream, batch_size=None)) == 8


def test_a_hub_image_that_holds_only_its_path_is_named_with_what_to_do(tmp_path: Path) -> None:
    """datasets.Image stores {bytes: null, path: ...} for an image it did not embed."""
    image = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    rows = [{"bytes": _jpeg(1), "path": None}, {"bytes": None, "path": "/data/cat.jpg"}]
    table = pa.table({"image": pa.array(rows, image), "label": pa.array([0, 1], pa.int64())})
    pq.write_table(table, tmp_path / "train-00000-of-00001.parquet")
    stream = fd.ImageStream.from_parquet(tmp_path, size=16)
    with pytest.raises(fd.SourceError, match=r"its path is '/data/cat\.jpg'.*from_files") as caught:
        list(stream)
    assert (caught.value.row_group, caught.value.row) == (0, 1)
