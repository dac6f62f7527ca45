"""Multimodal samples: an image with its caption, tokens and metadata, from Parquet columns
and from tar members, batched in the stream's own types, exactly once and resumable."""

from __future__ import annotations

import io
import json
import tarfile
import warnings
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import fastdata as fd
from fastdata import DataLoader, ImageStream, Ragged, SourceError
from fastdata.writer import Sample

from resume_helper import check_resume

N = 23


def _png(i: int) -> bytes:
    """A 12x16 image whose pixels say ``i``."""
    return cv2.imencode(".png", np.full((12, 16, 3), i, np.uint8))[1].tobytes()


def _sample(i: int) -> dict:
    return {
        "caption": f"a photo number {i} é",
        "meta": {"id": i, "tags": ["x"] * (i % 3)},
        "tokens": list(range(i % 5 + 1)),
    }


def write_tars(root: Path, shards: int = 3, broken: frozenset[int] = frozenset()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for shard in range(shards):
        with tarfile.open(root / f"shard-{shard}.tar", "w") as tar:
            for i in range(shard, N, shards):
                sample = _sample(i)
                members = {
                    "jpg": b"broken" if i in broken else _png(i),
                    "cls": str(i % 4).encode(),
                    "txt": sample["caption"].encode(),
                    "json": json.dumps(sample["meta"]).encode(),
                }
                for suffix, data in members.items():
                    info = tarfile.TarInfo(f"s{i:05d}.{suffix}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
    return root


def write_parquet(root: Path, broken: frozenset[int] = frozenset()) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    samples = [_sample(i) for i in range(N)]
    table = pa.table(
        {
            "image": [b"broken" if i in broken else _png(i) for i in range(N)],
            "label": pa.array([i % 4 for i in range(N)], pa.int32()),
            "caption": [s["caption"] for s in samples],
            "tokens": pa.array([s["tokens"] for s in samples], pa.list_(pa.int32())),
            "unused": list(range(N)),
        }
    )
    pq.write_table(table, root / "part-0.parquet", row_group_size=5)
    return root


def tar_stream(root: Path, **options) -> ImageStream:
    return ImageStream.from_tar(root, members=["txt", "json"], **options)


def parquet_stream(root: Path, **options) -> ImageStream:
    return ImageStream.from_parquet(root, columns=["caption", "tokens"], **options)


def ids(item: dict) -> list[int]:
    """The sample numbers of a batch, read off its pixels."""
    return item["image"][:, 0, 0, 0].tolist()


def test_tar_batches_carry_caption_and_parsed_json(tmp_path: Path) -> None:
    stream = tar_stream(write_tars(tmp_path / "tar"), batch_size=4)
    seen = []
    for batch in stream:
        assert set(batch) == {"image", "label", "txt", "json"}
        assert batch["image"].dtype == torch.uint8 and batch["label"].dtype == torch.int64
        for k, i in enumerate(ids(batch)):
            assert batch["txt"].tolist()[k] == _sample(i)["caption"]
            assert batch["json"][k] == _sample(i)["meta"]
            assert batch["label"][k] == i % 4
        seen += ids(batch)
    assert sorted(seen) == list(range(N))


def test_parquet_batches_carry_text_and_ragged_tokens(tmp_path: Path) -> None:
    stream = parquet_stream(write_parquet(tmp_path / "pq"), batch_size=4, shuffle=True)
    seen = []
    for batch in stream:
        assert set(batch) == {"image", "label", "caption", "tokens"}
        assert isinstance(batch["tokens"], Ragged) and batch["label"].dtype == torch.int64
        for k, i in enumerate(ids(batch)):
            assert batch["caption"].tolist()[k] == _sample(i)["caption"]
            assert batch["tokens"][k].tolist() == _sample(i)["tokens"]
        seen += ids(batch)
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_rows_carry_the_sample_values(tmp_path: Path, kind: str) -> None:
    if kind == "tar":
        rows = list(tar_stream(write_tars(tmp_path / "tar")))
        key, expected = "json", lambda i: _sample(i)["meta"]
    else:
        rows = list(parquet_stream(write_parquet(tmp_path / "pq")))
        key, expected = "caption", lambda i: _sample(i)["caption"]
    assert len(rows) == N
    for row in rows:
        i = int(row["image"][0, 0, 0])
        assert row[key] == expected(i) and row["label"] == i % 4 and isinstance(row["label"], int)


@pytest.mark.parametrize("kind", ["tar", "parquet"])
def test_skipped_images_drop_their_text_too(tmp_path: Path, kind: str) -> None:
    broken = frozenset({1, 2, 9})
    if kind == "tar":
        stream = tar_stream(
            write_tars(tmp_path / "t", broken=broken), batch_size=4, on_error="skip"
        )
        text = "txt"
    else:
        root = write_parquet(tmp_path / "p", broken=broken)
        stream = parquet_stream(root, batch_size=4, on_error="skip")
        text = "caption"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(stream)
    assert [len(b["label"]) for b in batches] == [4, 4, 4, 4, 4]
    for batch in batches:
        assert [_sample(i)["caption"] for i in ids(batch)] == batch[text].tolist()
    assert sorted(i for b in batches for i in ids(b)) == sorted(set(range(N)) - broken)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_multimodal_resume_is_exact(tmp_path: Path, num_workers: int) -> None:
    root = write_tars(tmp_path / "tar", broken=frozenset({4}))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_resume(
            lambda: DataLoader(
                tar_stream(root, batch_size=3, shuffle=True, on_error="skip"),
                batch_size=None,
                num_workers=num_workers,
            ),
            key=lambda batch: list(zip(ids(batch), batch["txt"].tolist(), strict=True)),
        )


def test_through_workers_with_the_collate_of_ragged_columns(tmp_path: Path) -> None:
    stream = parquet_stream(write_parquet(tmp_path / "pq"), batch_size=5)
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    batches = list(loader)
    assert sorted(i for b in batches for i in ids(b)) == list(range(N))
    padded = fd.pad_collate(batches[0])  # the tokens padded, the other columns as they are
    lengths = [len(_sample(i)["tokens"]) for i in ids(batches[0])]
    assert padded["tokens_lengths"].tolist() == lengths
    assert padded["tokens"].shape == (5, max(lengths))
    assert padded["image"] is batches[0]["image"]


def test_a_sample_missing_a_member_is_named(tmp_path: Path) -> None:
    root = tmp_path / "tar"
    root.mkdir()
    with tarfile.open(root / "shard.tar", "w") as tar:
        for name, data in [("a.jpg", _png(1)), ("a.txt", b"one"), ("b.jpg", _png(2))]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(SourceError, match=r"sample 'b' has no \.txt member") as err:
        ImageStream.from_tar(root, members=["txt"])
    assert err.value.member == "b.jpg" and err.value.path.endswith("shard.tar")


def test_extra_columns_are_checked(tmp_path: Path) -> None:
    root = write_parquet(tmp_path / "pq")
    with pytest.raises(TypeError, match=r"columns=\['caption'\]"):
        ImageStream.from_parquet(root, columns="caption")
    with pytest.raises(ValueError, match="is the image or the label"):
        ImageStream.from_parquet(root, columns=["label"])
    with pytest.raises(SourceError, match="nope"):
        ImageStream.from_parquet(root, columns=["nope"])
    with pytest.raises(ValueError, match="reserved"):
        ImageStream.from_tar(write_tars(tmp_path / "tar"), members=["jpg"])


@pytest.mark.parametrize("format", ["tar", "parquet"])
def test_the_writer_round_trips_image_caption_json_and_tokens(tmp_path: Path, format: str) -> None:
    """fd.write_shards(Sample(..., extras=...)) -> the stream: every sample once, with its
    caption, JSON metadata and tokens as written."""
    samples = [
        Sample(
            _png(i),
            label=i % 4,
            key=f"s{i:03d}",
            extras={"txt": s["caption"], "json": s["meta"], "tokens": s["tokens"]},
        )
        for i, s in enumerate(_sample(i) for i in range(N))
    ]
    fd.write_shards(samples, tmp_path / "out", format=format, target_shard_bytes=2_000, workers=0)
    if format == "tar":
        stream = ImageStream.from_tar(tmp_path / "out", members=["txt", "json", "tokens"])
    else:
        stream = ImageStream.from_parquet(tmp_path / "out", columns=["txt", "json", "tokens"])
    rows = list(stream)
    assert sorted(int(row["image"][0, 0, 0]) for row in rows) == list(range(N))
    for row in rows:
        i = int(row["image"][0, 0, 0])
        assert row["label"] == i % 4 and row["txt"] == _sample(i)["caption"]
        meta = row["json"] if format == "tar" else json.loads(row["json"])
        tokens = json.loads(row["tokens"]) if format == "tar" else row["tokens"].tolist()
        assert meta == _sample(i)["meta"] and tokens == _sample(i)["tokens"]


def test_the_writer_refuses_extras_that_do_not_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sample 1: extras"):
        fd.write_shards(
            [Sample(_png(0), extras={"txt": "a"}), Sample(_png(1), extras={"json": {}})],
            tmp_path / "a",
            format="tar",
        )
    with pytest.raises(ValueError, match="taken by the parquet"):
        fd.write_shards([Sample(_png(0), extras={"label": "a"})], tmp_path / "b")
    with pytest.raises(ValueError, match=r"without '\.'"):
        fd.write_shards([Sample(_png(0), extras={"a.txt": "a"})], tmp_path / "c", format="tar")
    with pytest.raises(ValueError, match="'n': its values make no one Arrow column"):
        fd.write_shards(
            [Sample(_png(0), extras={"n": 1}), Sample(_png(1), extras={"n": "one"})],
            tmp_path / "d",
        )


def test_the_writer_takes_extras_in_any_order_and_numpy_or_bytes_like_values(
    tmp_path: Path,
) -> None:
    samples = [
        Sample(_png(0), extras={"txt": "a", "tokens": np.arange(3), "raw": bytearray(b"x")}),
        Sample(_png(1), extras={"raw": memoryview(b"y"), "tokens": [7], "txt": "b"}),
    ]
    result = fd.write_shards(samples, tmp_path / "pq", workers=0)
    table = pq.read_table(result.paths)
    assert table.column_names == ["key", "image", "txt", "tokens", "raw"]
    assert table.column("tokens").to_pylist() == [[0, 1, 2], [7]]
    assert table.column("raw").to_pylist() == [b"x", b"y"]


def test_the_writer_refuses_what_it_could_not_read_back(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"sample 1: extras\['txt'\] is None"):
        fd.write_shards(
            [Sample(_png(0), extras={"txt": "a"}), Sample(_png(1), extras={"txt": None})],
            tmp_path / "a",
            format="tar",
        )
    with pytest.raises(ValueError, match=r"'txt': .*every value is None"):
        fd.write_shards([Sample(_png(0), extras={"txt": None})], tmp_path / "b")
    with pytest.raises(ValueError, match="'big': its values make no one Arrow column"):
        fd.write_shards([Sample(_png(0), extras={"big": 2**64})], tmp_path / "c")


def test_extras_of_another_type_are_another_conversion(tmp_path: Path) -> None:
    """Resuming a conversion whose extras changed type (same bytes in a tar member, another
    Parquet column type) is refused rather than mixing schemas."""
    fd.write_shards([Sample(_png(0), extras={"n": "1"})], tmp_path / "out", workers=0)
    with pytest.raises(ValueError, match="another conversion"):
        fd.write_shards([Sample(_png(0), extras={"n": 1})], tmp_path / "out", workers=0)


def test_what_the_readers_give_back_of_each_extra_is_what_the_guide_says(tmp_path: Path) -> None:
    """A str extra under a name such as 'question' came back from tar as bytes, tokens and
    dicts as JSON bytes, where Parquet gave str, a tensor and JSON text, while the guide said
    both readers "read them back". Its table now says what comes back per format and name:
    every example there is checked here, and every value here is an example there."""
    extras = {"caption": "a dog", "question": "wer bellt?", "raw": b"\x00\x01", "n": 3,
              "flag": True, "tokens": [5, 6], "words": ["a", "b"], "json": {"lang": "en"},
              "meta": {"lang": "de"}}  # fmt: skip
    shown = {  # name: (tar's item, Parquet's item) as the guide's table shows them
        "question": ('b"wer bellt?"', None),
        "n": ('b"3"', "np.int64(3)"),
        "flag": ('b"true"', "np.True_"),
        "tokens": ('b"[5,6]"', "tensor([5, 6])"),
    }
    expected = {  # name: (tar's item, Parquet's item)
        "caption": ("a dog", "a dog"),
        "question": (b"wer bellt?", "wer bellt?"),
        "raw": (b"\x00\x01", b"\x00\x01"),
        "n": (b"3", 3),
        "flag": (b"true", True),
        "tokens": (b"[5,6]", [5, 6]),
        "words": (b'["a","b"]', ["a", "b"]),
        "json": ({"lang": "en"}, '{"lang":"en"}'),
        "meta": (b'{"lang":"de"}', '{"lang":"de"}'),
    }
    samples = [Sample(_png(0), 0, extras=extras)]
    fd.write_shards(samples, tmp_path / "tar", format="tar", workers=0)
    fd.write_shards(samples, tmp_path / "pq", format="parquet", workers=0)
    tar = next(iter(ImageStream.from_tar(tmp_path / "tar", members=list(extras))))
    parquet = next(iter(ImageStream.from_parquet(tmp_path / "pq", columns=list(extras))))
    for name, (from_tar, from_parquet) in expected.items():
        assert type(tar[name]) is type(from_tar) and tar[name] == from_tar, name
        value = parquet[name]
        plain = value.tolist() if isinstance(value, torch.Tensor | np.generic) else value
        assert plain == from_parquet and type(plain) is type(from_parquet), name
    assert isinstance(parquet["tokens"], torch.Tensor) and isinstance(parquet["n"], np.int64)
    guide = (Path(__file__).parents[1] / "docs/guides/preparing-a-dataset.md").read_text()
    for name, (tar_shown, parquet_shown) in shown.items():
        assert repr(tar[name]).replace("'", '"') == tar_shown and f"`{tar_shown}`" in guide
        if parquet_shown is not None:
            assert repr(parquet[name]) == parquet_shown and f"`{parquet_shown}`" in guide
