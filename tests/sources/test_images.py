"""ImageStream: sources agree, exactly-once, determinism, resume, threads, bad input."""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
import torch
import torchvision
import torchvision.transforms.v2.functional as tvf2
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

import fastdata.sources.stream as stream_module
import fastdata.workers as segments
from fastdata import DataLoader, DecodeError, ResumeError, SourceError
from fastdata.decode import ImageTransform, decode_image, sample_rng
from fastdata.sources.images import ImageStream
from fastdata.synthetic import make_image_parquet, make_images, make_tar_shards

from resume_helper import check_resume

N = 24
SMALL = {"min_short": 48, "max_short": 80}


@pytest.fixture(scope="module")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("images")
    make_images(root / "folder", N, classes=3, **SMALL)
    make_image_parquet(root / "parquet", N, files=2, row_group_size=5, classes=3, **SMALL)
    make_tar_shards(root / "tar", N, shards=3, classes=3, **SMALL)
    return root


def digest(image: torch.Tensor) -> str:
    return hashlib.sha1(image.contiguous().numpy().tobytes()).hexdigest()[:12]


def keys(items) -> list[str]:
    return [digest(img) for img, _ in items]


def build(layouts: Path, kind: str, **options) -> ImageStream:
    if kind == "folder":
        return ImageStream.from_folder(layouts / "folder", **options)
    if kind == "parquet":
        return ImageStream.from_parquet(layouts / "parquet", **options)
    return ImageStream.from_tar(layouts / "tar", **options)


KINDS = ["folder", "parquet", "tar"]


def test_folder_matches_torchvision_classes_labels_and_pixels(layouts: Path) -> None:
    stream = ImageStream.from_folder(layouts / "folder")
    reference = torchvision.datasets.ImageFolder(str(layouts / "folder"))
    assert stream.classes == reference.classes
    items = list(stream)
    assert [label for _, label in items] == reference.targets
    for (image, _), (path, _) in zip(items, reference.samples, strict=True):
        pil = np.asarray(Image.open(path).convert("RGB"))
        assert image.dtype == torch.uint8
        assert image.shape == (3, *pil.shape[:2])
        diff = np.abs(image.permute(1, 2, 0).numpy().astype(int) - pil.astype(int)).max()
        assert diff <= 2  # both libjpeg(-turbo); IDCT rounding may differ by a level or two


def test_every_source_yields_the_same_samples(layouts: Path) -> None:
    results = {kind: list(build(layouts, kind, size=32, crop="center")) for kind in KINDS}
    labels = {kind: [label for _, label in items] for kind, items in results.items()}
    # The folder lists images class by class; Parquet and tar keep generation order.
    assert sorted(keys(results["folder"])) == sorted(keys(results["parquet"]))
    assert keys(results["parquet"]) == keys(results["tar"])
    assert labels["parquet"] == labels["tar"]
    assert Counter(labels["folder"]) == Counter(labels["tar"])


@pytest.mark.parametrize("kind", KINDS)
def test_batches_stack_fixed_sizes_and_list_variable_ones(layouts: Path, kind: str) -> None:
    fixed = next(iter(build(layouts, kind, size=40, crop="center", batch_size=5)))
    images, labels = fixed
    assert images.shape == (5, 3, 40, 40)
    assert images.is_contiguous(memory_format=torch.channels_last)
    assert labels.dtype == torch.int64
    variable, _ = next(iter(build(layouts, kind, batch_size=5)))
    assert isinstance(variable, list)
    assert len({img.shape for img in variable}) > 1


def _with_sharing(item: tuple[torch.Tensor, torch.Tensor]) -> tuple:
    """A worker-side collate_fn: the batch, whether it already lives in shared memory, and
    how many segments the worker keeps."""
    return item, item[0].is_shared(), len(segments._pool)


def test_worker_batches_are_built_in_reused_shared_memory_and_equal_in_process_ones(
    layouts: Path,
) -> None:
    options = {"size": 32, "crop": "random-resized", "flip": True, "batch_size": 2, "seed": 3}
    local = list(build(layouts, "folder", **options))
    assert not any(images.is_shared() for images, _ in local)
    loader = DataLoader(
        build(layouts, "folder", **options),
        batch_size=None,
        num_workers=1,
        collate_fn=_with_sharing,
    )
    seen, pools = [], []
    for batch, shared, pool in loader:  # each batch dropped before the next
        assert shared and batch[0].is_shared()  # handed over without a copy
        seen += samples([batch])
        pools.append(pool)
    assert samples(local) == sorted(seen)
    if segments._SUPPORTED:
        assert max(pools) < len(pools)  # segments were reused


def test_held_batches_never_change_while_the_worker_goes_on(layouts: Path) -> None:
    """More batches than a worker keeps segments, all held: none is overwritten."""
    options = {"size": 32, "crop": "random-resized", "batch_size": 2, "seed": 4}
    local = list(build(layouts, "folder", **options))
    loader = DataLoader(build(layouts, "folder", **options), batch_size=None, num_workers=1)
    held = [(images, labels, images.clone()) for images, labels in loader]
    assert len(held) > segments.SEGMENTS_PER_WORKER
    assert all(torch.equal(images, copy) for images, _, copy in held)
    assert samples(local) == samples((images, labels) for images, labels, _ in held)


def _consume(queue: torch.multiprocessing.Queue, result: torch.multiprocessing.Queue) -> None:
    """Another process: receive every batch, hold them all, then report their samples."""
    held = []
    while (item := queue.get()) is not None:
        held.append(item)
    result.put(samples(held))


def test_batches_passed_on_to_another_process_stay_intact(layouts: Path) -> None:
    """The main process forwards each batch (after taking a numpy view of it) and drops it:
    the worker must not reuse a segment the other process still holds."""
    options = {"size": 32, "crop": "random-resized", "batch_size": 2, "seed": 5}
    local = list(build(layouts, "folder", **options))
    context = torch.multiprocessing.get_context("fork")
    queue, result = context.Queue(), context.Queue()
    consumer = context.Process(target=_consume, args=(queue, result))
    consumer.start()
    loader = DataLoader(build(layouts, "folder", **options), batch_size=None, num_workers=1)
    sent = []
    for images, labels in loader:
        view = images.numpy()
        queue.put((images, labels))
        sent += samples([(torch.from_numpy(view.copy()), labels)])
    queue.put(None)
    assert result.get(timeout=120) == sorted(sent) == samples(local)
    consumer.join(timeout=60)
    assert consumer.exitcode == 0


def test_a_file_system_receiver_with_spawned_workers_gets_fresh_segments(
    layouts: Path,
) -> None:
    """Under file_system, re-sharing a received batch moves it and lets go of its segment,
    yet torch's cache keeps it under that segment's inode: a reused segment would come back
    as the old batch. Spawned workers do not inherit the strategy; the stream tells them."""
    options = {"size": 32, "crop": "random-resized", "batch_size": 2, "seed": 6}
    local = list(build(layouts, "folder", **options))
    before = torch.multiprocessing.get_sharing_strategy()
    torch.multiprocessing.set_sharing_strategy("file_system")
    try:
        loader = DataLoader(
            build(layouts, "folder", **options),
            batch_size=None,
            num_workers=1,
            multiprocessing_context="spawn",
        )
        held = []
        for images, labels in loader:
            images.share_memory_()  # moved: its segment is let go of
            held.append((images, labels))
    finally:
        torch.multiprocessing.set_sharing_strategy(before)
    assert len(held) > segments.SEGMENTS_PER_WORKER
    assert samples(held) == samples(local)


def test_a_failing_batch_returns_once_every_decode_thread_is_done(layouts: Path) -> None:
    """No decode thread may still write into a batch (and its segment) that an error drops."""
    stream = build(layouts, "folder", size=32, crop="center", decode_threads=3)
    done = []

    def load(i: int) -> int:
        if i == 0:
            raise DecodeError("bad", path="item 0")
        time.sleep(0.2)
        done.append(i)
        return i

    with pytest.raises(DecodeError):
        stream.decoder._map(load, range(6))
    assert sorted(done) == [1, 2, 3, 4, 5]
    assert stream.decoder._map(lambda i: i * 2, range(5)) == [0, 2, 4, 6, 8]


def samples(batches) -> list[tuple[str, int]]:
    """Every ``(image digest, label)`` of some ``(images, labels)`` batches, sorted."""
    pairs = (zip(images, labels, strict=True) for images, labels in batches)
    return sorted((digest(img), int(label)) for batch in pairs for img, label in batch)


@pytest.mark.parametrize("kind", KINDS)
def test_exactly_once_over_ranks_and_workers(layouts: Path, kind: str, monkeypatch) -> None:
    everything = Counter(keys(build(layouts, kind, size=24, crop="center")))
    seen: Counter[str] = Counter()
    for rank in range(2):
        stream = build(layouts, kind, size=24, crop="center", shuffle=True, rank=rank, world_size=2)
        for worker in range(3):
            with monkeypatch.context() as m:
                m.setattr(stream_module, "worker_slot", lambda w=worker: (w, 3))
                seen.update(keys(stream))
    assert seen == everything


def test_random_augmentation_is_per_sample_and_independent_of_workers(layouts: Path) -> None:
    def run(num_workers: int, epoch: int) -> list[str]:
        stream = build(layouts, "tar", size=32, crop="random-resized", flip=True, seed=5)
        stream.set_epoch(epoch)
        return keys(DataLoader(stream, batch_size=None, num_workers=num_workers))

    first = run(0, 0)
    assert run(0, 0) == first
    assert sorted(run(2, 0)) == sorted(first)  # same crops, whoever decodes them
    torch.manual_seed(1)
    np.random.seed(1)
    assert run(0, 0) == first  # the global RNG plays no part
    assert run(0, 1) != first


@pytest.mark.parametrize("interpolation", ["auto", "antialias"])
def test_thread_pool_decode_equals_single_thread(layouts: Path, interpolation: str) -> None:
    options = {"size": 32, "crop": "random-resized", "interpolation": interpolation}
    one = build(layouts, "parquet", batch_size=7, **options)
    many = build(layouts, "parquet", batch_size=7, decode_threads=3, **options)
    for (a, la), (b, lb) in zip(one, many, strict=True):
        assert torch.equal(a, b)
        assert torch.equal(la, lb)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_continues_exactly(layouts: Path, kind: str, num_workers: int) -> None:
    def make():
        stream = build(
            layouts, kind, size=24, crop="random-resized", batch_size=4, shuffle=True, seed=2
        )
        return DataLoader(stream, batch_size=None, num_workers=num_workers)

    check_resume(make, key=lambda batch: [digest(img) for img in batch[0]], stops=[0, 3, 6])


def test_files_with_labels_and_reduced_decode(tmp_path: Path) -> None:
    paths = make_images(tmp_path, 3, large=3, seed=4)
    stream = ImageStream.from_files(paths, [7, 8, 9], size=224, crop="center")
    items = list(stream)
    assert [label for _, label in items] == [7, 8, 9]
    assert all(img.shape == (3, 224, 224) for img, _ in items)
    with pytest.raises(ValueError, match="2 labels for 3 files"):
        ImageStream.from_files(paths, [1, 2])
    with pytest.raises(ValueError, match="4 labels for 3 files"):
        ImageStream.from_files(paths, [1, 2, 3, 4])


def test_file_labels_are_integers_and_a_bad_one_is_named_with_its_file(tmp_path: Path) -> None:
    paths = make_images(tmp_path, 4, seed=4)
    numeric = [np.int64(1), 2.0, "3", np.float32(4.0)]  # numpy, pandas with gaps, CSV
    stream = ImageStream.from_files(paths, numeric, size=8, crop="center")
    assert [label for _, label in stream] == [1, 2, 3, 4]
    for bad in ("cat", 2.5, None):
        with pytest.raises(SourceError, match=f"label {bad!r} is not an integer") as caught:
            ImageStream.from_files(paths, [0, 1, bad, 3], size=8, crop="center")
        assert caught.value.path == str(paths[2])
    with pytest.raises(SourceError, match="from_files takes a list of files; the list is empty"):
        ImageStream.from_files([])


def test_without_reduced_decode_large_photos_get_torchvisions_pixels(tmp_path: Path) -> None:
    """reduced_decode=False + interpolation="antialias": torchvision's RandomResizedCrop and
    flip on the fully decoded photo, bit for bit; the default reduced decode is only close."""
    paths = make_images(tmp_path, 2, large=2, seed=5)
    options = {"size": 64, "crop": "random-resized", "flip": True, "interpolation": "antialias"}
    exact = ImageStream.from_files(paths, reduced_decode=False, seed=1, **options)
    reduced = ImageStream.from_files(paths, seed=1, **options)
    for index, (path, image, fast) in enumerate(zip(paths, exact, reduced, strict=True)):
        original = torch.from_numpy(decode_image(path.read_bytes())).permute(2, 0, 1)
        box, _, flip, _ = exact.transform.geometry(original.shape[1:], sample_rng(1, 0, index))
        expected = tvf2.resized_crop(original, *box, [64, 64], antialias=True)
        assert torch.equal(image, tvf2.horizontal_flip(expected) if flip else expected)
        assert not torch.equal(fast, image)


# --------------------------------------------------------------------------- bad input
def bad_files(root: Path) -> dict[str, Path]:
    good = make_images(root / "good", 1, **SMALL)[0].read_bytes()
    cmyk = io.BytesIO()
    Image.new("CMYK", (40, 30), (10, 200, 30, 5)).save(cmyk, "JPEG")
    bomb = bytearray(good)
    sof = next(i for i in range(2, len(bomb)) if bomb[i] == 0xFF and bomb[i + 1] == 0xC0)
    bomb[sof + 5 : sof + 9] = (60000).to_bytes(2, "big") + (60000).to_bytes(2, "big")
    contents = {
        "empty.jpg": b"",
        "truncated.jpg": good[: len(good) // 3],
        "text.jpg": b"this is not an image\n",
        "unsupported.jpg": b"GIF89a" + bytes(40),
        "bomb.jpg": bytes(bomb),
    }
    out = {}
    for name, data in contents.items():
        out[name] = root / name
        out[name].write_bytes(data)
    out["cmyk.jpg"] = root / "cmyk.jpg"
    out["cmyk.jpg"].write_bytes(cmyk.getvalue())
    return out


@pytest.mark.parametrize(
    "name", ["empty.jpg", "truncated.jpg", "text.jpg", "unsupported.jpg", "bomb.jpg"]
)
def test_bad_files_raise_with_their_path(tmp_path: Path, name: str) -> None:
    path = bad_files(tmp_path)[name]
    stream = ImageStream.from_files([path], max_pixels=10_000_000)
    with pytest.raises(DecodeError) as err:
        list(stream)
    assert err.value.path == str(path)
    assert str(path) in str(err.value)


def test_cmyk_jpeg_decodes_to_rgb(tmp_path: Path) -> None:
    path = bad_files(tmp_path)["cmyk.jpg"]
    [image] = list(ImageStream.from_files([path]))
    reference = np.asarray(Image.open(path).convert("RGB"))
    assert image.shape == (3, 30, 40)
    assert np.abs(image.permute(1, 2, 0).numpy().astype(int) - reference).max() <= 3


def test_skip_policy_counts_warns_once_and_keeps_the_rest(tmp_path: Path) -> None:
    bad = bad_files(tmp_path)
    good = make_images(tmp_path / "ok", 3, **SMALL)
    paths = [good[0], bad["truncated.jpg"], good[1], bad["empty.jpg"], good[2]]
    stream = ImageStream.from_files(paths, list(range(5)), on_error="skip", batch_size=5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [(images, labels)] = list(stream)
    assert labels.tolist() == [0, 2, 4]
    assert len(images) == 3
    assert stream.skipped == 2
    assert len([w for w in caught if "skipped a bad image" in str(w.message)]) == 1
    assert str(bad["truncated.jpg"]) in str(caught[0].message)


def test_skips_close_the_gaps_in_a_fixed_size_batch(tmp_path: Path) -> None:
    bad = bad_files(tmp_path)
    good = make_images(tmp_path / "ok", 3, **SMALL)
    options = {"size": 24, "crop": "center", "batch_size": 5}
    paths = [bad["text.jpg"], good[0], bad["truncated.jpg"], good[1], good[2]]
    stream = ImageStream.from_files(paths, list(range(5)), on_error="skip", **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        [(images, labels)] = list(stream)
    [(expected, _)] = list(ImageStream.from_files(good, [1, 3, 4], **options))
    assert labels.tolist() == [1, 3, 4]
    assert images.shape == (3, 3, 24, 24)
    assert torch.equal(images, expected)
    only_bad = ImageStream.from_files([bad["text.jpg"]], [0], on_error="skip", **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert list(only_bad) == []  # no empty batch
    assert only_bad.skipped == 1


SKIP_PATHS = {  # how each decode path assembles a batch
    "in-place": {"size": 24, "crop": "center"},
    "list": {"crop": None},
    "device": {"size": 24, "crop": "center", "decode_device": "cpu"},
}


@pytest.mark.parametrize("path", SKIP_PATHS)
def test_skipped_images_are_replaced_by_the_next_rows(tmp_path: Path, path: str) -> None:
    bad = bad_files(tmp_path)
    rng = np.random.default_rng(0)
    good = []
    for i in range(7):  # one size, so that crop=None stacks them too
        good.append(tmp_path / f"good-{i}.png")
        cv2.imwrite(str(good[-1]), rng.integers(0, 256, (24, 32, 3), dtype=np.uint8))
    broken = [bad["text.jpg"], bad["truncated.jpg"], bad["empty.jpg"]]
    # rows: g0 b g1 b b g2 g3 g4 b g5 g6 -> batches of 3 good images, the last one short
    order = [good[0], broken[0], good[1], broken[1], broken[2], good[2], good[3], good[4]]
    order += [broken[0], good[5], good[6]]
    stream = ImageStream.from_files(
        order, list(range(len(order))), on_error="skip", batch_size=3, **SKIP_PATHS[path]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(stream)
    assert [labels.tolist() for _, labels in batches] == [[0, 2, 5], [6, 7, 9], [10]]
    assert all(isinstance(images, torch.Tensor) for images, _ in batches)  # never a list
    assert stream.skipped == 4
    reference = ImageStream.from_files(
        [order[i] for i in (0, 2, 5, 6, 7, 9, 10)], batch_size=3, **SKIP_PATHS[path]
    )
    for (images, _), expected in zip(batches, reference, strict=True):
        assert torch.equal(images, expected)


def _skip_loader(root: Path, num_workers: int, **options) -> DataLoader:
    stream = ImageStream.from_folder(
        root, size=16, crop="random-resized", flip=True, on_error="skip", shuffle=True, **options
    )
    return DataLoader(stream, batch_size=None, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_resume_with_skipped_images_is_exact(tmp_path: Path, num_workers: int) -> None:
    make_images(tmp_path / "data", 30, classes=2, **SMALL)
    bad = bad_files(tmp_path / "bad")
    for i, name in enumerate(["text.jpg", "truncated.jpg", "empty.jpg", "text.jpg"] * 2):
        (tmp_path / "data" / f"class_{i % 2:02d}" / f"zz-bad-{i}.jpg").write_bytes(
            bad[name].read_bytes()
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_resume(
            lambda: _skip_loader(
                tmp_path / "data", num_workers, batch_size=4, files_per_unit=3, seed=3
            ),
            key=lambda batch: [digest(image) for image in batch[0]],
        )
        loader = _skip_loader(tmp_path / "data", num_workers, batch_size=4, files_per_unit=3)
        batches = list(loader)
    sizes = [len(labels) for _, labels in batches]
    assert sum(sizes) == 30 and min(sizes) >= 1
    assert sizes.count(4) >= len(sizes) - max(num_workers, 1)  # only a reader's last is short


def test_row_items_under_skip_resume_only_unbatched_by_the_loader(tmp_path: Path) -> None:
    make_images(tmp_path / "data", 8, **SMALL)
    bad = bad_files(tmp_path / "bad")
    (tmp_path / "data" / "class_00" / "zz-bad.jpg").write_bytes(bad["text.jpg"].read_bytes())
    stream = ImageStream.from_folder(tmp_path / "data", size=16, crop="center", on_error="skip")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_resume(
            lambda: DataLoader(
                ImageStream.from_folder(tmp_path / "data", size=16, crop="center", on_error="skip"),
                batch_size=None,
            ),
            key=lambda item: [digest(item[0])],
        )
        loader = DataLoader(stream, batch_size=4)
        next(iter(loader))
    with pytest.raises(ResumeError, match="batch in the stream instead"):
        loader.state_dict()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_file_gone_after_listing_is_named_or_skipped_with_an_exact_resume(
    tmp_path: Path, num_workers: int
) -> None:
    good = make_images(tmp_path / "ok", 9, **SMALL)
    options = {"size": 16, "crop": "center", "batch_size": 2, "files_per_unit": 3}
    raising = ImageStream.from_files(good, list(range(9)), **options)
    skipping = ImageStream.from_files(good, list(range(9)), on_error="skip", **options)
    good[4].unlink()  # listed, then gone: read by the reader, which names it
    with pytest.raises(SourceError, match="cannot read") as err:
        list(DataLoader(raising, batch_size=None, num_workers=num_workers))
    assert err.value.path == str(good[4])  # type: ignore[attr-defined]
    loader = DataLoader(skipping, batch_size=None, num_workers=num_workers)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        labels = sorted(label for _, batch in loader for label in batch.tolist())
        assert (labels, skipping.skipped) == ([0, 1, 2, 3, 5, 6, 7, 8], 1)
        check_resume(
            lambda: DataLoader(skipping, batch_size=None, num_workers=num_workers),
            key=lambda batch: batch[1].tolist(),
        )
    if num_workers == 0:  # a worker process warns in its own process
        assert any(str(good[4]) in str(w.message) for w in caught)


def test_skips_in_workers_are_counted(tmp_path: Path) -> None:
    bad = bad_files(tmp_path)
    good = make_images(tmp_path / "ok", 4, **SMALL)
    paths = [*good, bad["text.jpg"], bad["empty.jpg"]]
    stream = ImageStream.from_files(paths, on_error="skip", files_per_unit=1)
    loader = DataLoader(stream, batch_size=None, num_workers=2)
    assert len(list(loader)) == 4
    assert stream.skipped == 2


def test_corrupt_image_in_parquet_names_file_row_group_and_row(tmp_path: Path) -> None:
    images = [make_images(tmp_path / "src", 1, **SMALL)[0].read_bytes()] * 6
    images[4] = b"garbage"
    table = pa.table({"image": pa.array(images, pa.binary()), "label": list(range(6))})
    pq.write_table(table, tmp_path / "imgs.parquet", row_group_size=3)
    with pytest.raises(DecodeError) as err:
        list(ImageStream.from_parquet(tmp_path / "imgs.parquet"))
    assert (err.value.row_group, err.value.row) == (1, 1)
    assert err.value.path.endswith("imgs.parquet")


def test_image_parquet_pages_are_checked_against_their_crcs_when_asked(tmp_path: Path) -> None:
    """A bit flipped in an image's bytes: the checksums name the row group, where decoding
    might not notice at all (a JPEG's scan data decodes to other pixels)."""
    image = make_images(tmp_path / "src", 1, **SMALL)[0].read_bytes()
    table = pa.table({"image": pa.array([image] * 4, pa.binary()), "label": list(range(4))})
    path = tmp_path / "imgs.parquet"
    pq.write_table(table, path, row_group_size=2, compression="none", write_page_checksum=True)
    data = bytearray(path.read_bytes())
    data[data.rfind(image) + len(image) // 2] ^= 0x01  # inside row group 1's last image
    path.write_bytes(bytes(data))
    stream = ImageStream.from_parquet(path, size=8, crop="center", verify_checksums=True)
    with pytest.raises(SourceError, match="CRC checksum verification failed") as err:
        list(stream)
    assert (err.value.path, err.value.row_group) == (str(path), 1)


def write_tar(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_tar_errors_name_shard_and_member(tmp_path: Path) -> None:
    _, ok = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
    write_tar(
        tmp_path / "a.tar",
        {"s1.jpg": ok.tobytes(), "s1.cls": b"1", "s2.jpg": b"bad", "s2.cls": b"2"},
    )
    with pytest.raises(DecodeError) as err:
        list(ImageStream.from_tar(tmp_path / "a.tar"))
    assert err.value.member == "s2.jpg"
    assert err.value.path.endswith("a.tar")
    write_tar(tmp_path / "b.tar", {"s1.txt": b"no image here"})
    with pytest.raises(SourceError, match="no image member") as err:
        ImageStream.from_tar(tmp_path / "b.tar")
    assert err.value.member == "s1.txt"
    good = (tmp_path / "a.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(good[:700])
    with pytest.raises(SourceError, match="truncated") as err:
        list(ImageStream.from_tar(tmp_path / "cut.tar"))
    assert err.value.path.endswith("cut.tar")
    loader = DataLoader(ImageStream.from_tar(tmp_path / "a.tar"), num_workers=1)
    with pytest.raises(DecodeError, match="worker process 0") as err:
        list(loader)
    assert (err.value.member, err.value.path) == ("s2.jpg", str(tmp_path / "a.tar"))
    write_tar(tmp_path / "c.tar", {"x.jpg": ok.tobytes(), "x.cls": b"cat"})
    with pytest.raises(SourceError, match="not an integer") as err:
        list(ImageStream.from_tar(tmp_path / "c.tar"))
    assert err.value.member == "x.cls"
    write_tar(tmp_path / "d.tar", {"x.jpg": ok.tobytes(), "x.cls": b"9" * 30})
    with pytest.raises(SourceError, match="too large") as err:
        list(ImageStream.from_tar(tmp_path / "d.tar"))
    assert err.value.member == "x.cls"


def test_tar_json_labels(tmp_path: Path) -> None:
    _, ok = cv2.imencode(".jpg", np.zeros((8, 8, 3), np.uint8))
    jpg = ok.tobytes()
    write_tar(
        tmp_path / "j.tar",
        {
            "a.jpg": jpg,
            "a.json": b'{"label": 3, "caption": "x"}',
            "b.jpg": jpg,
            "b.json": b"7",
            "c.jpg": jpg,
            "c.cls": b"5",
            "c.json": b'{"label": 9}',  # .cls is preferred
        },
    )
    assert [label for _, label in ImageStream.from_tar(tmp_path / "j.tar")] == [3, 7, 5]
    only_json = ImageStream.from_tar(tmp_path / "j.tar", label_suffixes=("json",))
    assert [label for _, label in only_json] == [3, 7, 9]
    unlabelled = ImageStream.from_tar(tmp_path / "j.tar", label_suffixes=())
    assert all(isinstance(item, torch.Tensor) for item in unlabelled)
    write_tar(tmp_path / "k.tar", {"a.jpg": jpg, "a.json": b'{"cls": 4}'})
    keyed = ImageStream.from_tar(tmp_path / "k.tar", label_field="cls", batch_size=1)
    assert [labels.tolist() for _, labels in keyed] == [[4]]
    for name, text, match in [
        ("l", b'{"cls": 4}', "'label' is an integer"),
        ("m", b'{"label": "cat"}', "expected an integer"),
        ("n", b"true", "expected an integer"),
        ("o", b"{not json", "not valid JSON"),
        ("p", b'{"label": 99999999999999999999999}', "too large"),
    ]:
        write_tar(tmp_path / f"{name}.tar", {"s.jpg": jpg, "s.json": text})
        with pytest.raises(SourceError, match=match) as err:
            list(ImageStream.from_tar(tmp_path / f"{name}.tar"))
        assert err.value.member == "s.json"
        assert err.value.path.endswith(f"{name}.tar")


def test_tar_member_names_are_never_paths(tmp_path: Path) -> None:
    _, ok = cv2.imencode(".png", np.full((4, 4, 3), 9, np.uint8))
    write_tar(
        tmp_path / "evil.tar", {"../../etc/evil.png": ok.tobytes(), "/abs/x.png": ok.tobytes()}
    )
    images = list(ImageStream.from_tar(tmp_path / "evil.tar"))
    assert len(images) == 2
    assert not (tmp_path.parent.parent / "etc" / "evil.png").exists()


def test_missing_folder_and_empty_folder(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such directory"):
        ImageStream.from_folder(tmp_path / "nope")
    with pytest.raises(SourceError, match="no class folders"):
        ImageStream.from_folder(tmp_path)
    (tmp_path / "cls").mkdir()
    with pytest.raises(SourceError, match=r"no valid file in the class folder\(s\) cls"):
        ImageStream.from_folder(tmp_path)
    with pytest.raises(SourceError, match="no images in any class folder"):
        ImageStream.from_folder(tmp_path, allow_empty=True)


def test_folder_options_match_torchvisions_image_folder(tmp_path: Path) -> None:
    from torchvision.datasets import ImageFolder

    make_images(tmp_path, 12, classes=3, min_short=20, max_short=24)
    (tmp_path / "class_03").mkdir()  # an empty class
    (tmp_path / "class_00" / "notes.txt").write_text("not an image")
    with pytest.raises(SourceError, match="class_03"):
        ImageStream.from_folder(tmp_path)
    ours = ImageStream.from_folder(tmp_path, allow_empty=True)
    theirs = ImageFolder(tmp_path, allow_empty=True)
    assert ours.classes == theirs.classes and ours.class_to_idx == theirs.class_to_idx
    assert ours.reader.paths == [path for path, _ in theirs.samples]
    assert ours.reader.labels == theirs.targets

    def odd(path: str) -> bool:
        return path.endswith(".jpg") and int(path[-9:-4]) % 2 == 1

    ours = ImageStream.from_folder(tmp_path, extensions=None, is_valid_file=odd, allow_empty=True)
    theirs = ImageFolder(tmp_path, is_valid_file=odd, allow_empty=True)
    assert ours.reader.paths == [path for path, _ in theirs.samples]
    mapping = {"class_02": 0, "class_00": 1}
    ours = ImageStream.from_folder(tmp_path, class_to_idx=mapping)
    assert ours.classes == ["class_02", "class_00"]
    assert set(ours.reader.labels) == {0, 1}
    assert all(
        ("class_02" in p) == (label == 0)
        for p, label in zip(ours.reader.paths, ours.reader.labels, strict=True)
    )
    with pytest.raises(SourceError, match="do not exist"):
        ImageStream.from_folder(tmp_path, class_to_idx={"nope": 0})
    with pytest.raises(ValueError, match="not both"):
        ImageStream.from_folder(tmp_path, is_valid_file=odd)


# --------------------------------------------------------------------------- decode_device
# decode_device="cpu" runs the device path (torchvision's decoder, torch transforms) on the
# CPU, so it is tested everywhere; the CUDA test compares nvJPEG with it.


def mean_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.cpu().int() - b.cpu().int()).abs().float().mean().item()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("crop", ["center", "random-resized"])
def test_device_path_matches_the_opencv_path(layouts: Path, kind: str, crop: str) -> None:
    # size 48: no image is large enough for the CPU path's reduced decode (which shifts
    # boxes by up to a pixel on images this small), so both decode in full.
    options = {"size": 48, "crop": crop, "flip": True, "seed": 5, "batch_size": 7}
    cpu = list(build(layouts, kind, **options))
    dev = list(build(layouts, kind, decode_device="cpu", **options))
    assert [labels.tolist() for _, labels in dev] == [labels.tolist() for _, labels in cpu]
    for (a, _), (b, _) in zip(cpu, dev, strict=True):
        assert a.shape == b.shape and b.dtype == torch.uint8
        assert a.is_contiguous(memory_format=torch.channels_last)
        assert b.is_contiguous(memory_format=torch.channels_last)
        # Same boxes and flips; area averaging vs antialiased bilinear differ a little
        # (measured: mean 0.4-1.1 levels per pixel).
        assert mean_abs_diff(a, b) < 1.5


@pytest.mark.parametrize("crop", ["center", "random-resized"])
def test_device_path_and_opencv_path_resample_alike_with_antialias(
    layouts: Path, crop: str
) -> None:
    """With interpolation="antialias" both paths resample as torchvision does: they differ
    only where the device path's float32 rounds otherwise than the CPU's uint8 kernel."""
    transform = ImageTransform(size=48, crop=crop, flip=True, interpolation="antialias")
    options = {"transform": transform, "seed": 5, "batch_size": 7}
    cpu = list(build(layouts, "folder", **options))
    dev = list(build(layouts, "folder", decode_device="cpu", **options))
    assert len(cpu) == len(dev) > 1
    for (a, _), (b, _) in zip(cpu, dev, strict=True):
        assert (a.int() - b.int()).abs().max().item() <= 1
        # Measured 0.15-0.17 (a sixth of the values one level apart); "auto": 0.4-1.1.
        assert mean_abs_diff(a, b) < 0.3


def test_interpolation_option_builds_the_transform(layouts: Path) -> None:
    stream = build(layouts, "folder", size=32, crop="center", interpolation="antialias")
    assert stream.transform == ImageTransform(size=32, crop="center", interpolation="antialias")
    with pytest.raises(ValueError, match="not both"):
        build(layouts, "folder", transform=ImageTransform(size=32), interpolation="antialias")
    with pytest.raises(ValueError, match="interpolation='bicubic'"):
        build(layouts, "folder", size=32, interpolation="bicubic")


def test_device_path_applies_exif_and_falls_back_for_png_and_cmyk(tmp_path: Path) -> None:
    rgb = np.random.default_rng(0).integers(0, 256, (30, 50, 3), np.uint8)
    rgb = cv2.GaussianBlur(rgb, (5, 5), 0)
    paths = []
    for orientation in range(1, 9):
        exif = Image.Exif()
        exif[0x0112] = orientation
        paths.append(tmp_path / f"o{orientation}.jpg")
        Image.fromarray(rgb).save(paths[-1], "JPEG", quality=95, exif=exif.tobytes())
    paths.append(tmp_path / "x.png")
    Image.fromarray(rgb).save(paths[-1])
    paths.append(bad_files(tmp_path)["cmyk.jpg"])
    cpu = list(ImageStream.from_files(paths))
    dev = list(ImageStream.from_files(paths, decode_device="cpu"))
    for path, a, b in zip(paths, cpu, dev, strict=True):
        assert a.shape == b.shape, path.name
        assert (a.int() - b.int()).abs().max() <= 3, path.name


@pytest.mark.parametrize(
    "name", ["empty.jpg", "truncated.jpg", "text.jpg", "unsupported.jpg", "bomb.jpg"]
)
def test_device_path_bad_files_raise_with_their_path(tmp_path: Path, name: str) -> None:
    path = bad_files(tmp_path)[name]
    stream = ImageStream.from_files([path], max_pixels=10_000_000, decode_device="cpu")
    with pytest.raises(DecodeError) as err:
        list(stream)
    assert err.value.path == str(path)


def test_device_path_skips_and_counts(tmp_path: Path) -> None:
    bad = bad_files(tmp_path)
    good = make_images(tmp_path / "ok", 3, **SMALL)
    paths = [good[0], bad["truncated.jpg"], good[1], bad["text.jpg"], good[2]]
    stream = ImageStream.from_files(
        paths, on_error="skip", decode_device="cpu", size=16, crop="center", batch_size=5
    )
    with pytest.warns(UserWarning, match="truncated.jpg"):
        [images] = list(stream)
    assert images.shape == (3, 3, 16, 16) and stream.skipped == 2


def test_decode_device_is_checked_up_front(layouts: Path) -> None:
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            build(layouts, "folder", decode_device="cuda")
    with pytest.raises(ValueError, match="expected 'cuda'"):
        build(layouts, "folder", decode_device="meta")
    with pytest.raises(ValueError, match="no torch equivalent"):
        ImageStream.from_folder(
            layouts / "folder",
            transform=ImageTransform(size=16, interpolation="lanczos"),
            decode_device="cpu",
        )


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("kind", KINDS)
def test_nvjpeg_matches_the_cpu_device_path(layouts: Path, kind: str) -> None:
    options = {"size": 32, "crop": "random-resized", "flip": True, "batch_size": 8}
    on_gpu = list(build(layouts, kind, decode_device="cuda", **options))
    on_cpu = list(build(layouts, kind, decode_device="cpu", **options))
    for (a, la), (b, lb) in zip(on_gpu, on_cpu, strict=True):
        assert a.device.type == "cuda" and a.shape == b.shape and la.tolist() == lb.tolist()
        assert mean_abs_diff(a, b) < 2.0  # nvJPEG's IDCT and upsampling differ slightly


def test_a_stream_used_in_the_parent_still_decodes_in_forked_workers(layouts: Path) -> None:
    stream = build(layouts, "folder", size=24, crop="center", batch_size=4, decode_threads=2)
    in_parent = sum(len(labels) for _, labels in stream)  # starts this process's decode pool
    loader = DataLoader(stream, batch_size=None, num_workers=2, timeout=60)
    assert sum(len(labels) for _, labels in loader) == in_parent == N


_GOOD_BYTES = cv2.imencode(".png", np.full((8, 8, 3), 7, np.uint8))[1].tobytes()


def _bytes_stream(root: Path, mask: list[bool], **options) -> ImageStream:
    """Parquet of tiny images in row groups of 4, ``mask[i]`` saying row ``i`` is corrupt."""
    path = root / f"{len(list(root.iterdir()))}.parquet"
    images = [b"broken" if bad else _GOOD_BYTES for bad in mask]
    table = pa.table({"image": pa.array(images, pa.binary()), "label": list(range(len(mask)))})
    pq.write_table(table, path, row_group_size=4)
    return ImageStream.from_parquet(
        path, on_error="skip", size=8, crop="center", decode_threads=1, **options
    )


@settings(max_examples=40, deadline=None)
@given(
    mask=st.lists(st.booleans(), min_size=1, max_size=40),
    batch_size=st.integers(1, 6),
    world_size=st.integers(1, 3),
    shuffle=st.booleans(),
)
def test_skip_refill_delivers_every_good_image_once_in_full_batches(
    mask: list[bool], batch_size: int, world_size: int, shuffle: bool
) -> None:
    seen: list[int] = []
    with warnings.catch_warnings(), tempfile.TemporaryDirectory() as root:
        warnings.simplefilter("ignore")
        for rank in range(world_size):
            stream = _bytes_stream(
                Path(root),
                mask,
                batch_size=batch_size,
                shuffle=shuffle,
                rank=rank,
                world_size=world_size,
            )
            sizes = []
            for images, labels in stream:
                assert images.shape == (len(labels), 3, 8, 8)
                sizes.append(len(labels))
                seen += labels.tolist()
            assert all(size == batch_size for size in sizes[:-1]) and 0 not in sizes
    assert sorted(seen) == [i for i, bad in enumerate(mask) if not bad]


def test_a_mix_of_image_streams_refills_skipped_images(tmp_path: Path) -> None:
    import fastdata as fd

    mixed = fd.mix(
        {
            "a": _bytes_stream(tmp_path, [False, True, False, True]),
            "b": _bytes_stream(tmp_path, [True, False] * 3),
        },
        batch_size=2,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = list(mixed)
    assert [len(labels) for _, labels in batches] == [2, 2, 1]
    assert sum(mixed.source_counts().values()) == 10  # every row taken is counted


def test_local_image_files_are_read_in_line_unless_asked(layouts: Path) -> None:
    """A read-ahead thread per worker cost more than it hid for local files
    (docs/benchmarks.md); other sources and other filesystems read ahead."""
    assert build(layouts, "folder").read_ahead == 0
    assert build(layouts, "folder", read_ahead=2).read_ahead == 2
    assert build(layouts, "parquet").read_ahead == 2
    assert build(layouts, "tar").read_ahead == 2
    wrapped = pafs.SubTreeFileSystem(str(layouts), pafs.LocalFileSystem())
    assert ImageStream.from_folder("folder", filesystem=wrapped).read_ahead == 2
