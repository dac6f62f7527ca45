"""The device prefetcher (fastdata.device._prefetch): what moves and what is normalized,
the read-ahead queue, and on CUDA the copies on a side stream under memory reuse."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import OrderedDict, namedtuple
from collections.abc import Iterator

import pytest
import torch
from device_helpers import cuda, random_images

from fastdata.device import IMAGENET, DeviceNormalize, DevicePrefetcher, to_device
from fastdata.device._prefetch import _ahead

Pair = namedtuple("Pair", ["image", "label"])


# --- the prefetcher on the CPU -----------------------------------------------------------------


def padded_batch(seed: int) -> dict:
    """What a padding collate makes: padded uint8 images, their mask and sizes, labels."""
    generator = torch.Generator().manual_seed(seed)
    sizes = torch.randint(2, 9, (4, 2), generator=generator)
    image = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    mask = torch.zeros(4, 8, 8, dtype=torch.bool)
    for i, (h, w) in enumerate(sizes.tolist()):
        image[i, :, :h, :w] = torch.randint(0, 256, (3, h, w), dtype=torch.uint8)
        mask[i, :h, :w] = True
    return {"image": image, "mask": mask, "sizes": sizes, "label": torch.arange(4) + seed}


def test_nested_structures_move_together_and_non_tensors_pass_through() -> None:
    meta = object()
    batch = OrderedDict(
        image=random_images(0),
        extra=(torch.ones(2), [torch.zeros(1), "text"], Pair(torch.ones(1), 7)),
        meta={"source": "shard-0001.tar", "object": meta},
        weight=None,
    )
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert type(out) is OrderedDict
    assert list(out) == list(batch)
    assert torch.equal(out["image"], DeviceNormalize(*IMAGENET)(batch["image"]))
    ones, (zeros, text), pair = out["extra"]
    assert isinstance(out["extra"], tuple)
    assert isinstance(out["extra"][1], list)
    assert torch.equal(ones, torch.ones(2))
    assert torch.equal(zeros, torch.zeros(1))
    assert text == "text"
    assert out["meta"]["object"] is meta
    assert out["weight"] is None
    assert type(pair) is Pair
    assert pair.label == 7


def test_padded_batches_move_and_only_the_images_are_normalized() -> None:
    batch = padded_batch(0)
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert out["mask"].dtype == torch.bool
    assert torch.equal(out["mask"], batch["mask"])
    assert torch.equal(out["sizes"], batch["sizes"])
    assert torch.equal(out["label"], batch["label"])
    assert torch.equal(out["image"], DeviceNormalize(*IMAGENET)(batch["image"]))
    padding = out["image"].permute(0, 2, 3, 1)[~batch["mask"]]
    expected = torch.tensor([-m / s for m, s in zip(*IMAGENET, strict=True)])
    torch.testing.assert_close(padding, expected.expand_as(padding))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_tensors_move_but_are_not_normalized() -> None:
    jagged = torch.nested.nested_tensor([random_images(0)[0], random_images(1)[0, :, :5]])
    batch = {"jagged": jagged, "image": random_images(2)}
    (out,) = to_device([batch], "cpu", normalize=IMAGENET)
    assert out["jagged"].is_nested
    assert out["jagged"].dtype == torch.uint8
    assert out["image"].dtype == torch.float32
    with pytest.raises(TypeError, match=r"batch\['jagged'\] is a nested tensor"):
        list(to_device([batch], "cpu", normalize=IMAGENET, keys="jagged"))


def test_default_normalizes_the_first_uint8_batch_of_images() -> None:
    images, labels = random_images(0), torch.tensor([1, 2, 3, 4], dtype=torch.uint8)
    ((out_images, out_labels),) = to_device([(images, labels)], "cpu", normalize=IMAGENET)
    assert out_images.dtype == torch.float32
    assert out_labels.dtype == torch.uint8  # 1-D: not an image batch
    (bare,) = to_device([images], "cpu", normalize=IMAGENET)
    assert torch.equal(bare, out_images)


@pytest.mark.parametrize(
    ("batch", "keys", "normalized"),
    [
        ({"crop": random_images(0), "image": random_images(1)}, "image", {"image"}),
        (
            {"crop": random_images(0), "image": random_images(1)},
            ["crop", "image"],
            {"crop", "image"},
        ),
        ((random_images(0), random_images(1)), [1], {1}),
        (Pair(random_images(0), random_images(1)), "label", {1}),
        ({"crop": random_images(0)[0], "image": random_images(1)}, "crop", {"crop"}),
    ],
)
def test_keys_choose_what_is_normalized(batch: object, keys: object, normalized: set) -> None:
    (out,) = to_device([batch], "cpu", normalize=IMAGENET, keys=keys)
    items = list(out.items()) if isinstance(out, dict) else list(enumerate(out))
    for key, value in items:
        assert (value.dtype == torch.float32) == (key in normalized), key


def test_missing_or_unfit_tensors_to_normalize_are_errors() -> None:
    floats = {"image": torch.rand(2, 3, 4, 4), "label": torch.arange(2)}
    with pytest.raises(
        ValueError, match=r"no uint8 \(B, C, H, W\).*batch\['image'\]: torch.float32"
    ):
        list(to_device([floats], "cpu", normalize=IMAGENET))
    with pytest.raises(ValueError, match="no tensor at 'img'"):
        list(to_device([padded_batch(0)], "cpu", normalize=IMAGENET, keys="img"))
    with pytest.raises(TypeError, match=r"batch\['mask'\] is torch.bool"):
        list(to_device([padded_batch(0)], "cpu", normalize=IMAGENET, keys=["image", "mask"]))


def test_bad_settings_of_the_prefetcher_are_rejected() -> None:
    with pytest.raises(ValueError, match="prefetch=-1"):
        to_device([], "cpu", prefetch=-1)
    with pytest.raises(ValueError, match="pass normalize= too"):
        to_device([], "cpu", keys="image")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            to_device([], "cuda")


def test_cpu_path_equals_the_synchronous_path_over_many_batches() -> None:
    batches = [padded_batch(seed) for seed in range(40)]
    normalize = DeviceNormalize(*IMAGENET, dtype=torch.bfloat16, channels_last=True)
    prefetcher = to_device(batches, "cpu", normalize=normalize, prefetch=3)
    for _epoch in range(2):  # re-iterable: each pass iterates the loader again
        outputs = list(prefetcher)
        assert len(outputs) == len(batches)
        for batch, out in zip(batches, outputs, strict=True):
            assert torch.equal(out["image"], normalize(batch["image"]))
            for key in ("mask", "sizes", "label"):
                assert torch.equal(out[key], batch[key])


def test_any_callable_normalizes() -> None:
    (out,) = to_device([padded_batch(0)], "cpu", normalize=lambda t: t.float() / 255)
    assert out["image"].max() <= 1


def test_len_passes_through() -> None:
    assert len(to_device([1, 2, 3], "cpu")) == 3
    assert isinstance(to_device([1], "cpu"), DevicePrefetcher)
    with pytest.raises(TypeError, match="has no len"):
        len(to_device(iter([1]), "cpu"))
    assert list(to_device(iter([1, "a"]), "cpu")) == [1, "a"]


# --- the prefetch queue --------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 3])
def test_ahead_keeps_depth_items_pulled_and_keeps_order(depth: int) -> None:
    pulled: list[int] = []

    def items() -> Iterator[int]:
        for i in range(6):
            pulled.append(i)
            yield i

    seen = []
    for item in _ahead(items(), depth):
        assert pulled == list(range(min(item + depth + 1, 6)))
        seen.append(item)
    assert seen == list(range(6))


def test_ahead_raises_an_error_after_the_items_before_it() -> None:
    def items() -> Iterator[int]:
        yield 0
        yield 1
        raise OSError("bad shard")

    queue = _ahead(items(), 2)
    assert [next(queue), next(queue)] == [0, 1]
    with pytest.raises(OSError, match="bad shard"):
        next(queue)


# --- CUDA ------------------------------------------------------------------------------------


def consume(batches: object, device: torch.device) -> list[dict]:
    """A training loop that is slower on the GPU than the copies and edits batches in place.

    It drops each batch as soon as its work is queued, so the caching allocator may reuse the
    memory at once: a missing wait or ``record_stream`` shows up as wrong results.
    """
    results = []
    for batch in batches:
        torch.cuda._sleep(2_000_000)  # the step: keeps the GPU busy while copies go ahead
        batch["image"].mul_(2)
        batch["label"].add_(1)
        results.append({k: batch[k].clone() for k in ("image", "mask", "label")})
        del batch
    torch.cuda.synchronize(device)
    return results


def expected_results(
    batches: list[dict], normalize: DeviceNormalize, device: torch.device
) -> list[dict]:
    out = []
    for batch in batches:
        moved = {k: v.to(device) for k, v in batch.items()}
        out.append(
            {
                "image": normalize(moved["image"]) * 2,
                "mask": moved["mask"],
                "label": moved["label"] + 1,
            }
        )
    return out


def assert_same(results: list[dict], expected: list[dict]) -> None:
    assert len(results) == len(expected)
    for got, want in zip(results, expected, strict=True):
        for key in want:
            assert torch.equal(got[key], want[key]), key


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_prefetcher_matches_sync_under_memory_reuse(prefetch: int) -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    batches = [padded_batch(seed) for seed in range(60)]
    normalize = DeviceNormalize(*IMAGENET, dtype=torch.float16, channels_last=True)
    results = consume(to_device(batches, device, normalize=normalize, prefetch=prefetch), device)
    assert_same(results, expected_results(batches, normalize, device))


@pytest.mark.cuda
@cuda
def test_prefetcher_follows_the_consumers_stream_and_pinned_input() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    batches = [padded_batch(seed) for seed in range(30)]
    pinned = [{k: v.pin_memory() for k, v in b.items()} for b in batches]
    normalize = DeviceNormalize(*IMAGENET)
    with torch.cuda.stream(torch.cuda.Stream(device)):
        results = consume(to_device(pinned, "cuda", normalize=normalize, prefetch=2), device)
    assert_same(results, expected_results(batches, normalize, device))


@pytest.mark.cuda
@cuda
def test_no_use_after_free_without_the_caching_allocator() -> None:
    """The reuse test again with PYTORCH_NO_CUDA_MEMORY_CACHING=1, in a fresh process."""
    env = {**os.environ, "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
    test = f"{__file__}::test_prefetcher_matches_sync_under_memory_reuse"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "3 passed" in run.stdout
